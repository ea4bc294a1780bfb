package scenarios

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// The worst of the health-over-time defects, against the real apiserver
// through a proxy that spoils its watches.

func createConfigMaps(t *testing.T, client dynamic.Interface, names ...string) {
	t.Helper()
	for i, name := range names {
		if _, err := client.Resource(configmapsGVR).Namespace(ns).Create(t.Context(), object(configmapsGVR, name, i), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
}

func (p *probe) published(phase wgwatch.Phase) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, s := range p.states {
		if s.Phase == phase {
			n++
		}
	}
	return n
}

// A proxy that ends every watch at once, after the replay that delivered
// the snapshot: the LIST goes through, the WATCH after it does not. The
// replay never goes live, so the stream is never Streaming; it is Flapping
// by the third close and resumes from the snapshot's cursor rather than
// replaying again, so the apiserver sees one LIST, not hundreds.
func TestReplayLoopBehindProxy(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	createConfigMaps(t, dynamic.NewForConfigOrDie(c.Config()), "a", "b", "c")
	proxy := harness.NewFlapServer(t, c)
	p := newProbe()
	start := time.Now()
	_, stop := startStream(t, dynamic.NewForConfigOrDie(proxy.Config()), configmapsGVR, p, wgwatch.StreamOptions{DisableWatchList: true})
	p.waitFor(t, 30*time.Second, "Blocked Flapping", func() bool {
		s := p.state()
		return s.Phase == wgwatch.PhaseBlocked && s.Reason == wgwatch.ReasonFlapping
	})
	flappingAfter := time.Since(start)
	window := 30 * time.Second
	time.Sleep(window) // measuring the load over a fixed window
	elapsed := time.Since(start)
	stop()
	lists, watches := proxy.Lists(), proxy.Watches()
	p.mu.Lock()
	snapshots := len(p.snapshots)
	p.mu.Unlock()
	if n := p.published(wgwatch.PhaseStreaming); n != 0 {
		t.Errorf("Streaming published %d times, but no watch ever went live: %v", n, p.stateLog())
	}
	if bound := int64(3 + elapsed/wgwatch.DefaultMaxBackoff); lists > bound {
		t.Errorf("%d LISTs in %v, want at most %d (3, then one per MaxBackoff)", lists, elapsed.Round(time.Second), bound)
	}
	if snapshots < 1 {
		t.Errorf("no snapshot delivered, want the replay's")
	}
	fmt.Printf("e2e: replay-loop flapping_after=%.1fs seconds=%.0f lists=%d replays_per_minute=%.1f cursor_checks=%d watches=%d snapshots=%d streaming_published=%d\n",
		flappingAfter.Seconds(), elapsed.Seconds(), lists, float64(lists)/elapsed.Minutes(), proxy.Checks(), watches, snapshots, p.published(wgwatch.PhaseStreaming))
}

// Watch-list refused (as by a server with the feature off), and every
// WATCH after the LIST answered with a 410: a LIST+WATCH replay that can
// never go live. It used to loop without backoff and never escalate. Now
// the replays back off, the stream is never Streaming, and it needs a human
// at its progress deadline (30 s here), within a second.
func TestListWatchReplayWhoseWatchExpires(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	createConfigMaps(t, dynamic.NewForConfigOrDie(c.Config()), "a", "b")
	proxy := harness.NewFaultServer(t, c, harness.FlapOptions{Watch: harness.ExpireAtOnce, RefuseWatchList: true})
	p := newProbe()
	deadline := 30 * time.Second
	start := time.Now()
	_, stop := startStream(t, dynamic.NewForConfigOrDie(proxy.Config()), configmapsGVR, p,
		wgwatch.StreamOptions{Policy: wgwatch.Policy{ProgressDeadline: deadline}})
	p.waitFor(t, deadline+15*time.Second, "NeedsHuman", func() bool { return p.state().NeedsHuman })
	humanAfter := time.Since(start)
	stop()
	lists, refused := proxy.Lists(), proxy.RefusedWatchLists()
	if n := p.published(wgwatch.PhaseStreaming); n != 0 {
		t.Errorf("Streaming published %d times, but no watch ever went live: %v", n, p.stateLog())
	}
	if s := p.state(); s.Reason != wgwatch.ReasonProgressDeadlineExceeded {
		t.Errorf("state %s/%s, want Blocked/ProgressDeadlineExceeded", s.Phase, s.Reason)
	}
	// The server's answers take time on a loaded machine: allow 2 s more
	// than the stream's own second.
	if late := humanAfter - deadline; late > 3*time.Second {
		t.Errorf("NeedsHuman after %v, want within 3s of the %v deadline", humanAfter.Round(100*time.Millisecond), deadline)
	}
	if bound := int64(3 + humanAfter/wgwatch.DefaultMaxBackoff); lists > bound {
		t.Errorf("%d LISTs in %v, want at most %d", lists, humanAfter.Round(time.Second), bound)
	}
	fmt.Printf("e2e: list-watch-410 lists=%d cursor_checks=%d refused_watch_lists=%d watches=%d needs_human_after=%.1fs deadline=%v streaming_published=0 states=%v\n",
		lists, proxy.Checks(), refused, proxy.Watches(), humanAfter.Seconds(), deadline, p.stateLog())
}

// A stream started from resourceVersion "0" ("any", to the server) used to
// take the synthetic ADDED events the server sends for "0" as live events
// (no snapshot, so deletes were never signalled) and resume from the last
// of them, a cursor that goes backwards. It replays instead.
func TestStreamFromCursorZero(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	client := dynamic.NewForConfigOrDie(c.Config())
	createConfigMaps(t, client, "c", "b", "a")
	p := newProbe()
	s, stop := startStream(t, client, configmapsGVR, p, wgwatch.StreamOptions{Cursor: "0"})
	p.waitFor(t, 30*time.Second, "Streaming", func() bool { return p.state().Phase == wgwatch.PhaseStreaming })
	if err := client.Resource(configmapsGVR).Namespace(ns).Delete(t.Context(), "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p.waitFor(t, 30*time.Second, "DELETED b", func() bool { _, ok := p.viewCopy()["b"]; return !ok })
	cursor := s.Cursor()
	stop()
	p.mu.Lock()
	snapshots, events := slices.Clone(p.snapshots), slices.Clone(p.events)
	p.mu.Unlock()
	if len(snapshots) != 1 {
		t.Fatalf("%d snapshots, want the replay's one", len(snapshots))
	}
	if diff := cmp.Diff([]string{"a", "c"}, sortedKeys(p.viewCopy())); diff != "" {
		t.Errorf("consumer's view (-want +got):\n%s", diff)
	}
	if n := len(snapshots[0].Objects); n != 3 {
		t.Errorf("snapshot has %d objects, want 3", n)
	}
	snapRV, _ := strconv.ParseInt(snapshots[0].ResourceVersion, 10, 64)
	cursorRV, _ := strconv.ParseInt(cursor, 10, 64)
	if cursorRV < snapRV {
		t.Errorf("cursor %s went back from the snapshot's %s", cursor, snapshots[0].ResourceVersion)
	}
	fmt.Printf("e2e: cursor-zero snapshot_objects=%d events=%d cursor=%s snapshot_rv=%s cursor_back=%v\n",
		len(snapshots[0].Objects), len(events), cursor, snapshots[0].ResourceVersion, cursorRV < snapRV)
}
