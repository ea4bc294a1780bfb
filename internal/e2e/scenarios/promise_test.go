package scenarios

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// Three of the promise's defects that only a real kube-apiserver shows:
// a cursor it has not reached, a watch-list it refuses with an ERROR event,
// and a proxy that cuts every watch.

// serverNames lists the names of the ConfigMaps the apiserver holds.
func serverNames(t *testing.T, client dynamic.Interface) map[string]bool {
	t.Helper()
	list, err := client.Resource(configmapsGVR).Namespace(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	out := map[string]bool{}
	for _, item := range list.Items {
		out[item.GetName()] = true
	}
	return out
}

// viewMatches reports whether the probe's view holds exactly names.
func (p *probe) viewMatches(names map[string]bool) bool {
	view := p.viewCopy()
	if len(view) != len(names) {
		return false
	}
	for n := range view {
		if !names[n] {
			return false
		}
	}
	return true
}

// A stream started from a cursor the apiserver has not reached (an etcd
// restored without a revision bump, a cursor persisted from another
// cluster): the watch cache accepts such a watch and stays silent, so a
// stream used to go live on nothing and stay Streaming while every write
// was lost. The stream is in doubt about a cursor it did not get from this
// server: it asks (one LIST of one object at the cursor), the apiserver
// answers "too large resource version" after about 3 s, and the stream
// replays. It is never Streaming before the replay, and its view then
// follows the server's writes.
func TestCursorAheadOfTheServer(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	client := dynamic.NewForConfigOrDie(c.Config())
	createConfigMaps(t, client, "a", "b", "c")
	list, err := client.Resource(configmapsGVR).Namespace(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv, err := strconv.ParseInt(list.GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", list.GetResourceVersion(), err)
	}
	ahead := strconv.FormatInt(rv+100000, 10)

	p := newProbe()
	var mu sync.Mutex
	streamingBeforeSnapshot := 0
	p.onState = func(s wgwatch.State) {
		p.mu.Lock()
		snapshots := len(p.snapshots)
		p.mu.Unlock()
		if s.Phase == wgwatch.PhaseStreaming && snapshots == 0 {
			mu.Lock()
			streamingBeforeSnapshot++
			mu.Unlock()
		}
	}
	start := time.Now()
	_, stop := startStream(t, client, configmapsGVR, p, wgwatch.StreamOptions{Cursor: ahead})
	// Writes while the stream sits on the cursor: each must reach the
	// consumer, through the replay or after it.
	w := &writer{client: client, gvr: configmapsGVR, prefix: "w"}
	for range 5 {
		if err := w.step(t.Context()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // spacing the writes, not waiting for the stream
	}
	bound := wgwatch.DefaultCursorCheck + 5*time.Second
	p.waitFor(t, bound, "the replay's snapshot", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.snapshots) > 0
	})
	p.mu.Lock()
	replayedAfter := p.snapshotAt[0].Sub(start)
	var ahead410 int
	for _, e := range p.endings {
		if errors.Is(e.Err, wgwatch.ErrCursorAhead) && e.Verdict.Class == wgwatch.ClassExpired {
			ahead410++
		}
	}
	p.mu.Unlock()
	want := serverNames(t, client)
	p.waitFor(t, wgwatch.DefaultTransientGrace, "Streaming with the server's view", func() bool {
		return p.state().Phase == wgwatch.PhaseStreaming && p.viewMatches(want)
	})
	stop()
	mu.Lock()
	defer mu.Unlock()
	if streamingBeforeSnapshot != 0 {
		t.Errorf("Streaming published %d times before the replay, on a cursor the server has not reached: %v", streamingBeforeSnapshot, p.stateLog())
	}
	if ahead410 != 1 {
		t.Errorf("%d sessions ended with ErrCursorAhead (class expired), want 1; endings %v", ahead410, p.outcomes())
	}
	fmt.Printf("e2e: cursor-ahead ahead_by=100000 replayed_after=%.1fs bound=%v sessions_ahead=%d streaming_before_replay=%d view=%d server=%d\n",
		replayedAfter.Seconds(), bound, ahead410, streamingBeforeSnapshot, len(p.viewCopy()), len(want))
}

// A watch-list the apiserver accepts with a 200 and then refuses with an
// ERROR event (a 500, as a server whose etcd lacks watch-progress
// notifications answers). An informer falls back to a LIST at once; a
// stream used to grade it transient and retry the watch-list for ever (no
// snapshot, Blocked at 30 s). It lists too, at once, is Streaming without
// ever being Blocked, and an informer over Instrument on the same server
// reports the reflector's fallback as routine, not as an error ending.
func TestWatchListRefusedByAnErrorEvent(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	client := dynamic.NewForConfigOrDie(c.Config())
	createConfigMaps(t, client, "a", "b", "c")
	proxy := harness.NewFaultServer(t, c, harness.FlapOptions{Watch: harness.PassThrough, WatchListErrorEvent: true})
	proxied := dynamic.NewForConfigOrDie(proxy.Config())

	p := newProbe()
	start := time.Now()
	_, stop := startStream(t, proxied, configmapsGVR, p, wgwatch.StreamOptions{})
	want := serverNames(t, client)
	p.waitFor(t, 15*time.Second, "Streaming with the server's view", func() bool {
		return p.state().Phase == wgwatch.PhaseStreaming && p.viewMatches(want)
	})
	streamingAfter := time.Since(start)
	stop()
	blocked, _ := p.blocked()

	// An informer over Instrument through the same proxy.
	ip := newProbe()
	lw, err := wgwatch.Instrument(listWatchFor(proxied, configmapsGVR, ns), wgwatch.InstrumentOptions{
		Resource: configmapsGVR.GroupResource(), Observer: ip,
	})
	if err != nil {
		t.Fatal(err)
	}
	informer := toolscache.NewSharedIndexInformer(lw, object(configmapsGVR, "", 0), 0, toolscache.Indexers{})
	refusedStream := proxy.RefusedWatchLists()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	istart := time.Now()
	go func() { defer close(done); informer.RunWithContext(ctx) }()
	ip.waitFor(t, 15*time.Second, "the informer Streaming", func() bool {
		return informer.HasSynced() && ip.state().Phase == wgwatch.PhaseStreaming
	})
	informerAfter := time.Since(istart)
	cancel()
	<-done
	errorEndings := ip.outcomes()[wgwatch.OutcomeError]

	if blocked {
		t.Errorf("the stream was Blocked: %v", p.stateLog())
	}
	if n := p.outcomes()[wgwatch.OutcomeError]; n > 1 {
		t.Errorf("%d error endings, want at most the refused watch-list's: %v", n, p.outcomes())
	}
	if errorEndings != 0 {
		t.Errorf("the informer's fallback to a LIST was graded %d error endings, want routine: %v", errorEndings, ip.outcomes())
	}
	if refusedStream < 1 {
		t.Errorf("no watch-list refused: the stream did not ask for one")
	}
	fmt.Printf("e2e: watch-list-error-event stream_refused=%d stream_streaming_after=%.1fs stream_blocked=%t informer_refused=%d informer_streaming_after=%.1fs informer_error_endings=%d\n",
		refusedStream, streamingAfter.Seconds(), blocked, proxy.RefusedWatchLists()-refusedStream, informerAfter.Seconds(), errorEndings)
}

// A proxy that ends every watch 200 ms after it opens, with a write every
// 3 s: events slip through some of the cut sessions. The stream used to
// count such a session as live, go Streaming, and Flapping again two
// closes later: Flapping, Streaming, Flapping every 20 s or so, each a
// Ready flip, a status write and an Event in a controller. A fault that
// does not change gets a state that does not change: Blocked/Flapping
// until the cuts stop, never Streaming behind them, and Streaming again,
// with the server's view, once they stop (within two MaxBackoffs and one
// ShortSession, the doc's bound).
func TestSteadyCutsDoNotFlap(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	client := dynamic.NewForConfigOrDie(c.Config())
	createConfigMaps(t, client, "a", "b", "c")
	proxy := harness.NewFaultServer(t, c, harness.FlapOptions{Watch: harness.CutAfter, Cut: 200 * time.Millisecond})

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w := &writer{client: client, gvr: configmapsGVR, prefix: "w"}
	writes := make(chan error, 1)
	go func() {
		tick := time.NewTicker(3 * time.Second)
		defer tick.Stop()
		for {
			if err := w.step(ctx); err != nil {
				if ctx.Err() == nil {
					writes <- err
				}
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	p := newProbe()
	start := time.Now()
	_, stop := startStream(t, dynamic.NewForConfigOrDie(proxy.Config()), configmapsGVR, p, wgwatch.StreamOptions{})
	p.waitFor(t, 30*time.Second, "Blocked Flapping", func() bool {
		s := p.state()
		return s.Phase == wgwatch.PhaseBlocked && s.Reason == wgwatch.ReasonFlapping
	})
	flappingAfter := time.Since(start)
	p.mu.Lock()
	before := len(p.states)
	p.mu.Unlock()
	window := 60 * time.Second
	time.Sleep(window) // the fault holds steady for a fixed window; the state must too
	p.mu.Lock()
	during := slices.Clone(p.states[before:])
	listsDuring, checksDuring, measured := proxy.Lists(), proxy.Checks(), time.Since(start)
	p.mu.Unlock()
	changes := 0
	for _, s := range during {
		if s.Phase != wgwatch.PhaseBlocked || s.Reason != wgwatch.ReasonFlapping {
			changes++
		}
	}
	streamingBehindCuts := p.published(wgwatch.PhaseStreaming)

	proxy.Heal()
	healed := time.Now()
	bound := 2*wgwatch.DefaultMaxBackoff + wgwatch.DefaultShortSession
	p.waitFor(t, bound+10*time.Second, "Streaming once the cuts stop", func() bool {
		return p.state().Phase == wgwatch.PhaseStreaming
	})
	streamingAfterHeal := time.Since(healed)
	p.waitFor(t, wgwatch.DefaultTransientGrace, "the server's view", func() bool {
		want := w.live()
		for _, n := range []string{"a", "b", "c"} {
			want[n] = true
		}
		return p.viewMatches(want)
	})
	cancel()
	stop()
	select {
	case err := <-writes:
		t.Fatalf("writer: %v", err)
	default:
	}

	if streamingBehindCuts != 0 {
		t.Errorf("Streaming published %d times behind a proxy that cuts every watch: %v", streamingBehindCuts, p.stateLog())
	}
	if changes != 0 {
		t.Errorf("%d states other than Blocked/Flapping published in %v of a steady fault: %v", changes, window, during)
	}
	if streamingAfterHeal > bound {
		t.Errorf("Streaming %v after the cuts stopped, want within %v", streamingAfterHeal.Round(time.Second), bound)
	}
	fmt.Printf("e2e: steady-cuts cut=200ms write_every=3s flapping_after=%.1fs window=%v publications=%d streaming_behind_cuts=%d lists_per_minute=%.1f cursor_checks=%d streaming_after_heal=%.1fs bound=%v\n",
		flappingAfter.Seconds(), window, len(during), streamingBehindCuts, float64(listsDuring)/measured.Minutes(), checksDuring, streamingAfterHeal.Seconds(), bound)
}
