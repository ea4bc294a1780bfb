package scenarios

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// Scenario 3: with the watch cache on, an apiserver restart (a second
// apiserver on the same etcd, behind the proxy) leaves a cursor from
// before the restart older than anything the new watch cache holds. The
// stream grades it expired and replays; deletes during the gap are absent
// from the snapshot.
func TestExpiryAfterAPIServerRestart(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	client := dynamic.NewForConfigOrDie(c.Config())
	w := &writer{client: dynamic.NewForConfigOrDie(c.DirectConfig()), gvr: configmapsGVR, prefix: "restart"}
	for range 4 {
		if err := w.step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	p := newProbe()
	s, stop := startStream(t, client, configmapsGVR, p, wgwatch.StreamOptions{})
	p.waitFor(t, 30*time.Second, "Streaming", func() bool { return p.state().Phase == wgwatch.PhaseStreaming })
	stop()
	cursor := s.Cursor()
	for range 3 {
		if err := w.step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Compact(ctx); err != nil {
		t.Fatalf("compact: %v", err)
	}
	c.RestartAPIServer()

	p2 := newProbe()
	resumed, err := wgwatch.NewStream(listWatchFor(client, configmapsGVR, ns), p2, wgwatch.StreamOptions{
		Resource: configmapsGVR.GroupResource(), Observer: p2, Cursor: cursor,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- resumed.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	p2.waitFor(t, 60*time.Second, "a snapshot after the restart", func() bool {
		p2.mu.Lock()
		defer p2.mu.Unlock()
		return len(p2.snapshots) > 0 && p2.states[len(p2.states)-1].Phase == wgwatch.PhaseStreaming
	})
	if diff := cmp.Diff(sortedSet(w.live()), sortedKeys(p2.viewCopy())); diff != "" {
		t.Errorf("snapshot after the restart differs from what exists (-want +got):\n%s", diff)
	}
	if got := p2.outcomes()[wgwatch.OutcomeExpired]; got < 1 {
		t.Errorf("%d expired endings, want at least 1", got)
	}
	if _, human := p2.blocked(); human {
		t.Errorf("needs a human after a restart: %v", p2.stateLog())
	}
	fmt.Printf("e2e: expiry-after-restart cursor=%s expired=%d error=%d snapshot_objects=%d states=%v\n",
		cursor, p2.outcomes()[wgwatch.OutcomeExpired], p2.outcomes()[wgwatch.OutcomeError], len(p2.viewCopy()), p2.stateLog())
}

// Scenario 4: an apiserver outage. Shorter than the transient grace, it
// publishes nothing and Ready stays True; longer, the owner is Reconciling
// (never Stalled, no Warning) until the apiserver is back. Nothing written
// before or after is lost.
func TestAPIServerOutage(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	if err := c.InstallCRD(ctx, widgetCRD()); err != nil {
		t.Fatalf("install CRD: %v", err)
	}
	client := dynamic.NewForConfigOrDie(c.Config())
	for _, tt := range []struct {
		name     string
		down     time.Duration
		wantKeep bool // Ready stays True throughout
	}{
		{"short", 5 * time.Second, true},
		{"long", wgwatch.DefaultTransientGrace + 10*time.Second, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctl := startOwner(t, client, kubernetes.NewForConfigOrDie(c.Config()), "outage-"+tt.name, configmapsGVR.GroupResource().String())
			p := newProbe()
			startStream(t, client, configmapsGVR, p, wgwatch.StreamOptions{Observer: ctl.observer(), Name: configmapsGVR.GroupResource().String()})
			p.waitFor(t, 30*time.Second, "Streaming", func() bool { return p.state().Phase == wgwatch.PhaseStreaming })
			ctl.waitKstatus(t, 30*time.Second, status.CurrentStatus)
			w := &writer{client: client, gvr: configmapsGVR, prefix: "outage-" + tt.name}
			for range 3 {
				if err := w.step(ctx); err != nil {
					t.Fatal(err)
				}
			}
			p.waitFor(t, 30*time.Second, "the writes before the outage", func() bool { return seenRV(p, w.lastRV()) })

			c.StopAPIServer()
			stopped := time.Now()
			if !tt.wantKeep {
				// The object cannot be written while the apiserver is
				// down: check the verdict the controller would write.
				p.waitFor(t, tt.down+30*time.Second, "Blocked, transient", func() bool {
					s := p.state()
					return s.Phase == wgwatch.PhaseBlocked && !s.NeedsHuman
				})
				conds := wgreadiness.Rollup(ctl.acc.Gates(ctl.key), []metav1.Condition{{Type: wgreadiness.ConditionReady, Status: metav1.ConditionTrue}}, 1, wgreadiness.Options{})
				if c := meta.FindStatusCondition(conds, wgreadiness.ConditionReconciling); c == nil || c.Status != metav1.ConditionTrue {
					t.Errorf("verdict during a long outage %+v, want Reconciling=True", conds)
				}
				if meta.FindStatusCondition(conds, wgreadiness.ConditionStalled) != nil {
					t.Errorf("verdict during a long outage %+v, want no Stalled", conds)
				}
			}
			time.Sleep(max(tt.down-time.Since(stopped), 0)) // the outage itself: the time is the point
			c.StartAPIServer()

			p.waitFor(t, 120*time.Second, "Streaming again", func() bool { return p.state().Phase == wgwatch.PhaseStreaming })
			for range 3 {
				if err := w.step(ctx); err != nil {
					t.Fatal(err)
				}
			}
			p.waitFor(t, 60*time.Second, "the writes after the outage", func() bool {
				return cmp.Equal(sortedSet(w.live()), withPrefix(p.viewCopy(), w.prefix)) && seenRV(p, w.lastRV())
			})
			ctl.waitKstatus(t, 60*time.Second, status.CurrentStatus)

			if diff := cmp.Diff(sortedSet(w.live()), withPrefix(p.viewCopy(), w.prefix)); diff != "" {
				t.Errorf("view after the outage differs from what exists (-want +got):\n%s", diff)
			}
			_, human := p.blocked()
			if human {
				t.Errorf("needs a human after a %v outage: %v", tt.down, p.stateLog())
			}
			if n := ctl.events.count(corev1.EventTypeWarning); n != 0 {
				t.Errorf("%d Warning events for an outage, want 0: %v", n, ctl.events.logCopy())
			}
			if tt.wantKeep && ctl.readyLeftTrue() {
				t.Errorf("Ready left True during a %v outage: states %v", tt.down, p.stateLog())
			}
			o := p.outcomes()
			fmt.Printf("e2e: outage-%s down=%.0fs closed=%d error=%d expired=%d ready_left_true=%v warnings=%d states=%v\n",
				tt.name, tt.down.Seconds(), o[wgwatch.OutcomeClosed], o[wgwatch.OutcomeError], o[wgwatch.OutcomeExpired],
				ctl.readyLeftTrue(), ctl.events.count(corev1.EventTypeWarning), p.stateLog())
		})
	}
}

// seenRV reports whether the consumer has seen resourceVersion rv, as an
// event or in its view (a replay delivers writes in its snapshot).
func seenRV(p *probe, rv string) bool {
	for _, ev := range p.eventsCopy() {
		if ev.RV == rv {
			return true
		}
	}
	for _, v := range p.viewCopy() {
		if v == rv {
			return true
		}
	}
	return false
}

// Scenario 4b: the same outages in front of a client-go informer over
// Instrument, as most controllers watch. The reflector's own backoff
// doubles to 30 s and would keep it away from a server that is back:
// Instrument retries a refused call itself until the trouble is
// published, so an outage of 5, 10 or 17 s publishes nothing, and the
// informer's store has the write made after it. Each outage meets an
// informer of its own: the reflector also waits between its rounds (a
// relist after each watch that ends in an error or a 410), a delay that
// grows with every round until two minutes pass without one, and that
// Instrument cannot shorten (see the watch package's doc, Informers).
func TestInformerOutage(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	downs, published, failed := informerOutages(t, c, "informer-outage", c.StopAPIServer, 5*time.Second, 10*time.Second, 17*time.Second)
	fmt.Printf("e2e: informer-outage downs=%s published=%d error_endings=%d states=%v\n",
		strings.Join(downs, ","), len(published), failed, published)
	if len(published) != 0 {
		t.Errorf("outages of 5, 10 and 17 s published %v, want nothing", published)
	}
}

// informerOutages runs an informer through each outage: stop the
// apiserver with stop, wait the outage, start a new one (its watch cache
// empty). It returns each outage with how long the server was gone and
// how soon after it was back the informer had the write made then, the
// states published from each outage's start to TransientGrace past it,
// and the session endings that were errors.
func informerOutages(t *testing.T, c *harness.Cluster, prefix string, stop func(), outages ...time.Duration) (downs, published []string, failed int) {
	t.Helper()
	ctx := t.Context()
	client := dynamic.NewForConfigOrDie(c.Config())
	for _, down := range outages {
		p := newProbe()
		informer, _ := runInformer(t, listWatchFor(client, configmapsGVR, ns), p)
		p.waitFor(t, 30*time.Second, "Streaming", func() bool { return p.state().Phase == wgwatch.PhaseStreaming })
		w := &writer{client: client, gvr: configmapsGVR, prefix: fmt.Sprintf("%s-%d", prefix, down/time.Second)}
		caughtUp := func(what string) {
			t.Helper()
			if err := w.step(ctx); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprint(sortedSet(w.live()))
			p.waitFor(t, 60*time.Second, what, func() bool { return fmt.Sprint(storeNames(informer, w.prefix)) == want })
		}
		caughtUp("the write before the outage")
		before := len(p.stateLog())
		stop()
		stopped := time.Now()
		time.Sleep(down)   // the outage itself: the time is the point
		c.StartAPIServer() // a new apiserver: it takes a moment to start
		back := time.Now()
		caughtUp(fmt.Sprintf("the write after the %v outage", down))
		downs = append(downs, fmt.Sprintf("%.0fs(gone=%s,caught_up=%s)", down.Seconds(),
			back.Sub(stopped).Round(100*time.Millisecond), time.Since(back).Round(100*time.Millisecond)))
		// Past the transient grace from the outage's start, where a
		// Blocked for it would have been published.
		time.Sleep(max(wgwatch.DefaultTransientGrace+5*time.Second-time.Since(stopped), 0))
		for _, st := range p.stateLog()[before:] {
			published = append(published, fmt.Sprintf("%.0fs:%s", down.Seconds(), st))
		}
		failed += p.outcomes()[wgwatch.OutcomeError]
	}
	return downs, published, failed
}

// An apiserver restart behind a proxy or a load balancer: the proxy still
// accepts connections and resets each one (its backend gone) for the
// outage, then points at a new apiserver whose watch cache starts empty,
// so the informer's resume expires and it relists. Through outages of 10
// and 17 s (within the bound of the watch package doc) the informer
// publishes nothing and has the write made after the outage. client-go's
// REST client retries a GET reset this way itself (10 times, a second
// apart), and Instrument what it gives up on (the same test passes with
// the Instrument of f350cf6, which left resets to the reflector; the
// watch package's TestInformerQuietThroughResetsAndARestart plays a
// client without that retry).
func TestInformerThroughResetsAndARestart(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	resets := func() {
		c.StopAPIServer()
		// The proxy accepts again, and resets what it cannot forward.
		if err := c.Proxy.SetRefusing(false); err != nil {
			t.Fatal(err)
		}
	}
	downs, published, _ := informerOutages(t, c, "informer-resets", resets, 10*time.Second, 17*time.Second)
	fmt.Printf("e2e: informer-resets downs=%s published=%d states=%v\n", strings.Join(downs, ","), len(published), published)
	if len(published) != 0 {
		t.Errorf("outages of reset connections of 10 and 17 s, then a restart, published %v, want nothing", published)
	}
}
