package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/watchgrade/watchgrade/examples/clientgo"
	"github.com/watchgrade/watchgrade/examples/ctrlruntime"
	"github.com/watchgrade/watchgrade/examples/internal/sandbox"
	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// runController starts a controller as cfg's identity in namespace,
// reporting to observer, and returns the function that stops it and waits
// for it to return.
type runController func(t *testing.T, cfg *rest.Config, namespace string, observer wgwatch.Observer) (stop func())

func runClientGo(t *testing.T, cfg *rest.Config, namespace string, observer wgwatch.Observer) func() {
	ctl, err := clientgo.New(clientgo.Options{Config: cfg, Namespace: namespace, Observer: observer, MaxBackoff: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()
	return stopOnce(t, cancel, done)
}

func runCtrlRuntime(t *testing.T, cfg *rest.Config, namespace string, observer wgwatch.Observer) func() {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(shortWatches)
	mgr, _, err := ctrlruntime.NewManager(cfg, ctrlruntime.Options{Namespace: namespace, Observer: observer, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return stopOnce(t, cancel, done)
}

func stopOnce(t *testing.T, cancel context.CancelFunc, done <-chan error) func() {
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("controller: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// live follows the controller's sessions: which resources have had a
// live session end since a mark. A restart that publishes nothing is over
// once every stream has been live again.
type live struct {
	wgwatch.ObserverFuncs
	mu      sync.Mutex
	since   map[schema.GroupResource]bool
	changed chan struct{}
}

func newLive() *live {
	l := &live{since: map[schema.GroupResource]bool{}, changed: make(chan struct{})}
	l.SessionEndedFunc = func(e wgwatch.SessionEnd) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if e.Verdict.Healthy {
			l.since[e.Resource] = true
		}
		close(l.changed)
		l.changed = make(chan struct{})
	}
	return l
}

// mark forgets the sessions so far.
func (l *live) mark() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.since = map[schema.GroupResource]bool{}
}

// await waits until a live session of every resource in want has ended
// since the mark (routine closes come every second or two here).
func (l *live) await(ctx context.Context, timeout time.Duration, want ...schema.GroupResource) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		l.mu.Lock()
		changed := l.changed
		ok := true
		for _, gr := range want {
			ok = ok && l.since[gr]
		}
		l.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("no live session of each of %v within %v", want, timeout)
		}
	}
}

// TestRestartsAreQuiet stops and starts each example controller twice
// while a writer runs, and restarts the kube-apiserver under it, with a
// target Ready throughout. A restart that changed nothing publishes nothing:
// counted by watches on the target and its Events (never by polling),
// no status write, no Event, no Ready dip. The client-go controller also
// writes a streams condition (readiness.Options.StreamsCondition), which
// a restart must leave alone too.
func TestRestartsAreQuiet(t *testing.T) {
	for _, tc := range []struct {
		name    string
		run     runController
		streams string // the controller's streams condition, if it writes one
	}{{"clientgo", runClientGo, clientgo.StreamsCondition}, {"ctrlruntime", runCtrlRuntime, ""}} {
		t.Run(tc.name, func(t *testing.T) {
			c := harness.Start(t, harness.Options{RBAC: true, Flags: []string{"--min-request-timeout=1"}})
			ctx := t.Context()
			env, err := sandbox.New(c.Config(), "shop", "watchtarget-controller")
			if err != nil {
				t.Fatal(err)
			}
			if err := env.Install(ctx); err != nil {
				t.Fatal(err)
			}
			cm, sec := configmaps.GVR().GroupResource(), secrets.GVR().GroupResource()
			if err := env.Grant(ctx, cm, sec); err != nil {
				t.Fatal(err)
			}
			go env.Write(ctx, 200*time.Millisecond)
			targets, err := env.WatchTargets(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			events, err := env.WatchEvents(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			sessions := newLive()
			stop := tc.run(t, env.ControllerConfig(), env.Namespace, sessions)
			if err := env.CreateTarget(ctx, "app", configmaps, secrets); err != nil {
				t.Fatal(err)
			}
			if _, err := targets.Await(ctx, "app", time.Minute, "Ready", sandbox.Target.Ready); err != nil {
				t.Fatal(err)
			}
			if err := sessions.await(ctx, time.Minute, cm, sec); err != nil {
				t.Fatal(err)
			}
			if tc.streams != "" {
				if _, err := targets.Await(ctx, "app", time.Minute, tc.streams+"=True", func(s sandbox.Target) bool {
					return s.Status(tc.streams) == metav1.ConditionTrue
				}); err != nil {
					t.Fatal(err)
				}
			}

			// published counts what the target showed from `from` on.
			published := func(from time.Time) (writes, evs, dips int) {
				for _, w := range targets.Writes("app") {
					if !w.Before(from) {
						writes++
					}
				}
				for _, e := range events.Occurrences() {
					if !e.Seen.Before(from) {
						evs++
					}
				}
				for _, s := range targets.History("app") {
					if !s.Seen.Before(from) && !s.Ready() {
						dips++
					}
				}
				return writes, evs, dips
			}
			// quiet waits out a window in which a write would show: a live
			// session of every followed resource since the restart, then 3 s
			// more.
			quiet := func(what string) {
				t.Helper()
				if err := sessions.await(ctx, time.Minute, cm, sec); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				time.Sleep(3 * time.Second) // measuring absence over a window
			}

			// Two rollouts of the controller, one after the other.
			restarted := time.Now()
			for range 2 {
				stop()
				sessions.mark()
				stop = tc.run(t, env.ControllerConfig(), env.Namespace, sessions)
				quiet("controller restart")
			}
			cw, ce, cd := published(restarted)

			// A rollout of the kube-apiserver under it.
			restarted = time.Now()
			sessions.mark()
			c.RestartAPIServer()
			quiet("apiserver restart")
			aw, ae, ad := published(restarted)
			stop()

			if cw+ce+cd+aw+ae+ad != 0 {
				t.Errorf("restarts published: controller writes=%d events=%d dips=%d, apiserver writes=%d events=%d dips=%d; want all 0\n  history %v\n  events %v",
					cw, ce, cd, aw, ae, ad, targets.History("app"), events.Log())
			}
			fmt.Printf("e2e: restart-quiet controller=%s streams_condition=%q controller_restart writes=%d events=%d dips=%d apiserver_restart writes=%d events=%d dips=%d\n",
				tc.name, tc.streams, cw, ce, cd, aw, ae, ad)
		})
	}
}
