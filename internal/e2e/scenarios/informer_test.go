package scenarios

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// shortWatches asks the server to end every watch after 2 s, as
// --min-request-timeout=1 does (1 to 2 s) for clients that send no
// timeout: an informer always sends one (5–10 minutes), so this is how its
// sessions end routinely within a test. Each stays open past ShortSession
// (1 s), which makes it live.
func shortWatches(lw cache.ListerWatcher) cache.ListerWatcher {
	inner := cache.ToListerWatcherWithContext(lw)
	return &cache.ListWatch{
		ListWithContextFunc: inner.ListWithContext,
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
			o.TimeoutSeconds = ptr.To[int64](2)
			return inner.WatchWithContext(ctx, o)
		},
	}
}

// gatedWatches holds Watch calls while its gate is closed.
type gatedWatches struct {
	inner cache.ListerWatcherWithContext
	mu    sync.Mutex
	gate  chan struct{}
}

// hold closes the gate; the returned function opens it again.
func (g *gatedWatches) hold() (release func()) {
	ch := make(chan struct{})
	g.mu.Lock()
	g.gate = ch
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.gate = nil
		g.mu.Unlock()
		close(ch)
	}
}

func (g *gatedWatches) listWatch() cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: g.inner.ListWithContext,
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
			g.mu.Lock()
			ch := g.gate
			g.mu.Unlock()
			if ch != nil {
				select {
				case <-ch:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return g.inner.WatchWithContext(ctx, o)
		},
	}
}

// runInformer runs a SharedIndexInformer over the instrumented lw until the
// test ends.
func runInformer(t *testing.T, lw cache.ListerWatcher, observer wgwatch.Observer) (cache.SharedIndexInformer, *wgwatch.InstrumentedListerWatcher) {
	t.Helper()
	ilw, err := wgwatch.Instrument(lw, wgwatch.InstrumentOptions{Resource: configmapsGVR.GroupResource(), Observer: observer})
	if err != nil {
		t.Fatal(err)
	}
	informer := cache.NewSharedIndexInformer(ilw, &unstructured.Unstructured{}, 0, cache.Indexers{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); informer.RunWithContext(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return informer, ilw
}

func storeNames(informer cache.SharedIndexInformer, prefix string) []string {
	names := map[string]string{}
	for _, o := range informer.GetStore().List() {
		if u, ok := o.(*unstructured.Unstructured); ok {
			names[u.GetName()] = ""
		}
	}
	return withPrefix(names, prefix)
}

// Scenario 9: a client-go SharedIndexInformer over the instrumented
// ListerWatcher gets the same verdicts as a stream: routine closes are
// "closed" and publish nothing; an expiry is "expired" and never a
// Warning; a denial outlasting the grace is Stalled (kstatus Failed) with
// one Warning, and recovers by itself.
func TestInformers(t *testing.T) {
	t.Run("routine closes", func(t *testing.T) {
		c := harness.Start(t, harness.Options{})
		ctx := t.Context()
		if err := c.InstallCRD(ctx, widgetCRD()); err != nil {
			t.Fatal(err)
		}
		client := dynamic.NewForConfigOrDie(c.Config())
		ctl := startOwner(t, client, kubernetes.NewForConfigOrDie(c.Config()), "informed", configmapsGVR.GroupResource().String())
		p := newProbe()
		informer, ilw := runInformer(t, shortWatches(listWatchFor(client, configmapsGVR, ns)), wgwatch.Observers(ctl.observer(), p))
		ctl.waitKstatus(t, 30*time.Second, status.CurrentStatus)
		w := &writer{client: client, gvr: configmapsGVR, prefix: "inf"}
		runWriters(t, ctx, 20*time.Second, 100*time.Millisecond, w)
		want := sortedSet(w.live())
		p.waitFor(t, 30*time.Second, "the informer's store to catch up", func() bool {
			got := storeNames(informer, "inf")
			return fmt.Sprint(got) == fmt.Sprint(want)
		})
		o := p.outcomes()
		if o[wgwatch.OutcomeClosed] < 5 || o[wgwatch.OutcomeError] != 0 || o[wgwatch.OutcomeExpired] != 0 {
			t.Errorf("outcomes %v, want at least 5 closed and no error or expired", o)
		}
		if ctl.readyLeftTrue() || ctl.events.count(corev1.EventTypeWarning) != 0 {
			t.Errorf("Ready left True or a Warning was recorded: states %v, events %v", p.stateLog(), ctl.events.logCopy())
		}
		if got := ilw.State().Phase; got != wgwatch.PhaseStreaming {
			t.Errorf("informer state %s, want Streaming", got)
		}
		fmt.Printf("e2e: informer-routine-closes closed=%d error=%d writes=%d warnings=%d ready_left_true=%v\n",
			o[wgwatch.OutcomeClosed], o[wgwatch.OutcomeError], len(w.writes()), ctl.events.count(corev1.EventTypeWarning), ctl.readyLeftTrue())
	})

	t.Run("expiry", func(t *testing.T) {
		c := harness.Start(t, harness.Options{Flags: []string{"--watch-cache=false"}})
		ctx := t.Context()
		client := dynamic.NewForConfigOrDie(c.Config())
		w := &writer{client: dynamic.NewForConfigOrDie(c.DirectConfig()), gvr: configmapsGVR, prefix: "infexp"}
		if err := w.step(ctx); err != nil {
			t.Fatal(err)
		}
		p := newProbe()
		// Cut the informer's watch and hold its next Watch call while
		// objects change and etcd compacts: that watch, from the old
		// resourceVersion, then gets the 410. (A refused reconnect would
		// look like a very short watch, which the reflector answers with a
		// relist of its own, and no 410 at all.)
		gate := &gatedWatches{inner: cache.ToListerWatcherWithContext(listWatchFor(client, configmapsGVR, ns))}
		informer, _ := runInformer(t, gate.listWatch(), p)
		p.waitFor(t, 30*time.Second, "Streaming", func() bool { return p.state().Phase == wgwatch.PhaseStreaming })
		time.Sleep(1500 * time.Millisecond) // so the cut watch is not a "very short watch" to the reflector
		release := gate.hold()
		c.Proxy.ResetAll()
		for range 4 {
			if err := w.step(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Compact(ctx); err != nil {
			t.Fatal(err)
		}
		release()
		want := sortedSet(w.live())
		p.waitFor(t, 90*time.Second, "an expired ending and the store to catch up", func() bool {
			return p.outcomes()[wgwatch.OutcomeExpired] > 0 && fmt.Sprint(storeNames(informer, "infexp")) == fmt.Sprint(want)
		})
		if _, human := p.blocked(); human {
			t.Errorf("needs a human after an expiry: %v", p.stateLog())
		}
		o := p.outcomes()
		fmt.Printf("e2e: informer-expiry expired=%d closed=%d error=%d states=%v\n",
			o[wgwatch.OutcomeExpired], o[wgwatch.OutcomeClosed], o[wgwatch.OutcomeError], p.stateLog())
	})

	t.Run("rbac denial", func(t *testing.T) {
		c := harness.Start(t, harness.Options{RBAC: true})
		ctx := t.Context()
		if err := c.InstallCRD(ctx, widgetCRD()); err != nil {
			t.Fatal(err)
		}
		admin := kubernetes.NewForConfigOrDie(c.Config())
		ctl := startOwner(t, dynamic.NewForConfigOrDie(c.Config()), admin, "informed-rbac", configmapsGVR.GroupResource().String())
		p := newProbe()
		start := time.Now()
		runInformer(t, listWatchFor(dynamic.NewForConfigOrDie(c.As("inf")), configmapsGVR, ns), wgwatch.Observers(ctl.observer(), p))
		p.waitFor(t, 90*time.Second, "Blocked Forbidden", func() bool {
			s := p.state()
			return s.Phase == wgwatch.PhaseBlocked && s.Reason == wgwatch.ReasonForbidden && s.NeedsHuman
		})
		blockedAfter := time.Since(start)
		ctl.waitKstatus(t, 30*time.Second, status.FailedStatus)
		grantConfigMaps(t, admin, "inf")
		ctl.waitKstatus(t, 120*time.Second, status.CurrentStatus)
		if n := ctl.events.count(corev1.EventTypeWarning); n != 1 {
			t.Errorf("%d Warning events, want exactly 1: %v", n, ctl.events.logCopy())
		}
		fmt.Printf("e2e: informer-rbac blocked_after=%.1fs recovered_after=%.1fs warnings=%d events=%v kstatus=Failed,Current\n",
			blockedAfter.Seconds(), time.Since(start).Seconds(), ctl.events.count(corev1.EventTypeWarning), ctl.events.logCopy())
	})
}
