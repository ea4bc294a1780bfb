package scenarios

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// slowConsumer is a probe whose events take delay each while slow is set.
type slowConsumer struct {
	*probe
	delay time.Duration
	slow  atomic.Bool
}

func (h *slowConsumer) Event(ctx context.Context, ev apiwatch.Event) error {
	if h.slow.Load() {
		select {
		case <-time.After(h.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return h.probe.Event(ctx, ev)
}

// A consumer 200 ms an event behind a burst of 1,000 small ConfigMaps: the
// kube-apiserver does not cut its watch (the connection's buffers hold the
// burst), so the session stays open while the consumer is minutes behind.
// Within the documented bound (TransientGrace, a sixth of it and 8 s) the
// stream is no longer Streaming; it is Streaming again once the consumer
// has caught up, needing no human (the backlog is shorter than
// ProgressDeadline), and its view is the server's.
func TestConsumerFarBehindIsNotStreaming(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	client := dynamic.NewForConfigOrDie(c.Config())
	createConfigMaps(t, client, "a")
	h := &slowConsumer{probe: newProbe(), delay: 200 * time.Millisecond}
	opts := wgwatch.StreamOptions{Resource: configmapsGVR.GroupResource()}
	opts.Observer = h.probe
	s, err := wgwatch.NewStream(listWatchFor(client, configmapsGVR, ns), h, opts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	h.waitFor(t, time.Minute, "Streaming", func() bool { return h.state().Phase == wgwatch.PhaseStreaming })

	const n = 1000
	h.slow.Store(true)
	burst := time.Now()
	for i := range n {
		if _, err := client.Resource(configmapsGVR).Namespace(ns).Create(ctx, object(configmapsGVR, fmt.Sprintf("burst%04d", i), 0), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create: %v", err)
		}
	}
	written := time.Since(burst)
	bound := wgwatch.DefaultTransientGrace + wgwatch.DefaultTransientGrace/6 + 8*time.Second
	var behindAt time.Duration
	h.waitFor(t, 2*bound, "not Streaming behind the burst", func() bool {
		if h.state().Phase == wgwatch.PhaseStreaming {
			return false
		}
		behindAt = time.Since(burst)
		return true
	})
	st := h.state()
	if behindAt > bound {
		t.Errorf("not Streaming %.1fs after the burst, over the bound %v", behindAt.Seconds(), bound)
	}
	// 1,000 events at 200 ms: about 200 s, then ShortSession.
	var backAt time.Duration
	h.waitFor(t, 6*time.Minute, "Streaming again once caught up", func() bool {
		if h.state().Phase != wgwatch.PhaseStreaming {
			return false
		}
		backAt = time.Since(burst)
		return true
	})
	h.mu.Lock()
	got := len(h.view)
	cut := 0
	for _, e := range h.endings {
		if e.Verdict.Outcome != wgwatch.OutcomeTeardown {
			cut++
		}
	}
	human := false
	for _, s := range h.states {
		human = human || s.NeedsHuman
	}
	h.mu.Unlock()
	log := fmt.Sprint(h.stateLog())
	if got != n+1 {
		t.Errorf("the consumer has %d objects once Streaming again, want %d", got, n+1)
	}
	if backAt < time.Duration(n)*h.delay {
		t.Errorf("Streaming again %.1fs after the burst, before the consumer could have taken it (%v)", backAt.Seconds(), time.Duration(n)*h.delay)
	}
	if human {
		t.Errorf("NeedsHuman for a backlog shorter than ProgressDeadline: %s", log)
	}
	fmt.Printf("e2e: consumer-behind events=%d per_event=%v written_in=%.1fs state=%s/%s not_streaming_after=%.1fs bound=%v streaming_again_after=%.1fs sessions_ended=%d needs_human=%v\n",
		n, h.delay, written.Seconds(), st.Phase, st.Reason, behindAt.Seconds(), bound, backAt.Seconds(), cut, human)
}
