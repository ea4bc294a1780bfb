package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/watchgrade/watchgrade/examples/internal/sandbox"
	"github.com/watchgrade/watchgrade/examples/watchtarget"
	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

var (
	configmaps = watchtarget.ResourceRef{Version: "v1", Resource: "configmaps"}
	secrets    = watchtarget.ResourceRef{Version: "v1", Resource: "secrets"}
)

// startController starts a controller that acts as cfg's identity, is
// limited to namespace and reports every stream to observer; it stops when
// the test ends. It returns the registry its metrics are on.
type startController func(t *testing.T, cfg *rest.Config, namespace string, observer wgwatch.Observer) prometheus.Gatherer

// timeline is when the story's scenes began: for the checks a controller's
// test adds to the story (the controller-runtime controller's error logs).
type timeline struct {
	began  time.Time // before the controller started
	denied time.Time // RBAC denied secrets
}

// exercise is the story both controllers must tell the same way.
func exercise(t *testing.T, name string, start startController) timeline {
	c := harness.Start(t, harness.Options{RBAC: true, Flags: []string{"--min-request-timeout=1"}})
	ctx := t.Context()
	began := time.Now()
	env, err := sandbox.New(c.Config(), "shop", "watchtarget-controller")
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Install(ctx); err != nil {
		t.Fatal(err)
	}
	both := []schema.GroupResource{configmaps.GVR().GroupResource(), secrets.GVR().GroupResource()}
	if err := env.Grant(ctx, both...); err != nil {
		t.Fatal(err)
	}
	go env.Write(ctx, 200*time.Millisecond)
	targets, err := env.WatchTargets(ctx, func(s sandbox.Target) { t.Logf("%6.1fs target %v", time.Since(began).Seconds(), s) })
	if err != nil {
		t.Fatal(err)
	}
	events, err := env.WatchEvents(ctx, func(e sandbox.Event) {
		t.Logf("%6.1fs event %s %s: %s", time.Since(began).Seconds(), e.Type, e.Reason, e.Message)
	})
	if err != nil {
		t.Fatal(err)
	}
	sessions := newSessionCounter()
	gatherer := start(t, env.ControllerConfig(), env.Namespace, sessions)
	obs := observe(t, name, env, gatherer)
	readyNow := func(u *unstructured.Unstructured) bool {
		g, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		return g == u.GetGeneration() && hasCondition(wgreadiness.ConditionReady, metav1.ConditionTrue)(u)
	}
	if err := env.CreateTarget(ctx, "app", configmaps, secrets); err != nil {
		t.Fatal(err)
	}
	created := time.Now()

	// 1. Ready for its generation: what `kubectl wait --for=condition=Ready` needs.
	if _, err := targets.Await(ctx, "app", time.Minute, "Ready=True with observedGeneration = generation", sandbox.Target.Ready); err != nil {
		t.Fatal(err)
	}
	readyAfter := time.Since(created)
	since := len(targets.History("app")) - 1
	obs.scrape(ctx, "ready", "app", readyNow)

	// 2. Routine closes (--min-request-timeout=1 ends every watch within
	// two seconds) change nothing a user sees.
	cm, sec := configmaps.GVR().GroupResource(), secrets.GVR().GroupResource()
	if err := sessions.await(ctx, time.Minute, "5 closed sessions of each followed resource", func() bool {
		return sessions.count(cm, wgwatch.OutcomeClosed) >= 5 && sessions.count(sec, wgwatch.OutcomeClosed) >= 5
	}); err != nil {
		t.Fatal(err)
	}
	for _, s := range targets.History("app")[since:] {
		if !s.Ready() {
			t.Errorf("across routine closes the target showed %v, want Ready=True throughout", s)
		}
	}
	if n := events.Count(corev1.EventTypeWarning); n != 0 {
		t.Errorf("%d Warnings before anything went wrong, want 0: %v", n, events.Log())
	}
	obs.scrape(ctx, "routine", "app", readyNow)

	// 3. A new generation is observed in the same update as the conditions.
	if err := env.SetTargetResources(ctx, "app", secrets, configmaps); err != nil {
		t.Fatal(err)
	}
	if _, err := targets.Await(ctx, "app", time.Minute, "Ready=True for generation 2", func(s sandbox.Target) bool {
		return s.Generation == 2 && s.Ready()
	}); err != nil {
		t.Fatal(err)
	}
	for _, s := range targets.History("app") {
		for _, cond := range s.Conditions {
			if cond.ObservedGeneration != s.ObservedGeneration {
				t.Errorf("condition %s has observedGeneration %d, status has %d: one update writes both", cond.Type, cond.ObservedGeneration, s.ObservedGeneration)
			}
		}
	}

	// 4. RBAC denies secrets for longer than the grace: Stalled, one Warning.
	denied := time.Now()
	if err := env.Grant(ctx, cm); err != nil {
		t.Fatal(err)
	}
	stalled, err := targets.Await(ctx, "app", 2*time.Minute, "Stalled=True", func(s sandbox.Target) bool {
		return s.Status(wgreadiness.ConditionStalled) == metav1.ConditionTrue
	})
	if err != nil {
		t.Fatal(err)
	}
	stalledAfter := time.Since(denied)
	if got := stalled.Reason(wgreadiness.ConditionStalled); got != string(wgwatch.ReasonForbidden) {
		t.Errorf("Stalled reason = %q, want %q", got, wgwatch.ReasonForbidden)
	}
	if err := events.Await(ctx, 30*time.Second, "a Warning", func(e *sandbox.Events) bool { return e.Count(corev1.EventTypeWarning) >= 1 }); err != nil {
		t.Fatal(err)
	}
	// The per-object series an operator pages on.
	scraped := obs.scrape(ctx, "stalled", "app", hasCondition(wgreadiness.ConditionStalled, metav1.ConditionTrue))
	if v, err := seriesValue(scraped, `watchtarget_status_condition{name="app",namespace="shop",status="True",type="Stalled"}`); err != nil || v != "1" {
		t.Errorf("while Stalled, the scrape shows Stalled=True as %q (%v), want 1", v, err)
	}

	// 5. A human repairs the Role: Ready again, with a Normal Event.
	repaired := time.Now()
	if err := env.Grant(ctx, both...); err != nil {
		t.Fatal(err)
	}
	if _, err := targets.Await(ctx, "app", 2*time.Minute, "Ready=True after the repair", sandbox.Target.Ready); err != nil {
		t.Fatal(err)
	}
	recoveredAfter := time.Since(repaired)
	scraped = obs.scrape(ctx, "recovered", "app", readyNow)
	if v, err := seriesValue(scraped, `watchtarget_status_condition{name="app",namespace="shop",status="True",type="Ready"}`); err != nil || v != "1" {
		t.Errorf("after the repair, the scrape shows Ready=True as %q (%v), want 1", v, err)
	}
	if v, err := seriesValue(scraped, `watchgrade_time_to_first_ready_seconds_count{resource="watchtargets.examples.watchgrade.dev"}`); err != nil || v != "1" {
		t.Errorf("time to first Ready observed %q times (%v), want once: the recovery is not a first Ready", v, err)
	}
	if err := events.Await(ctx, 30*time.Second, "a Normal Event after the Warning", func(e *sandbox.Events) bool {
		log := e.Log()
		i := slices.Index(log, corev1.EventTypeWarning+"/"+string(wgwatch.ReasonForbidden))
		return i >= 0 && slices.ContainsFunc(log[i+1:], func(s string) bool { return strings.HasPrefix(s, corev1.EventTypeNormal+"/") })
	}); err != nil {
		t.Fatal(err)
	}

	// 6. What kstatus (and so kubectl wait, Flux, Argo CD) computes, and
	// the Event tally: one Warning for the one thing a human had to do.
	u, err := env.Dynamic.Resource(watchtarget.Resource).Namespace(env.Namespace).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := status.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != status.CurrentStatus {
		t.Errorf("kstatus = %s (%s), want Current", res.Status, res.Message)
	}
	if n := events.Count(corev1.EventTypeWarning); n != 1 {
		t.Errorf("%d Warnings, want exactly 1 (the denial): %v", n, events.Log())
	}
	if problems, err := testutil.GatherAndLint(gatherer); err != nil || len(problems) > 0 {
		t.Errorf("metrics lint: %v %v", problems, err)
	}
	closedMetric := sessionsMetric(t, gatherer, cm.String(), "closed")
	if closedMetric < 5 {
		t.Errorf("watchgrade_watch_sessions_ended_total{resource=%q,outcome=\"closed\"} = %v, want at least 5", cm, closedMetric)
	}
	obs.fixtures(targets.History("app"))
	fmt.Printf("e2e: examples-%s ready_after=%.2fs closed=%d error=%d stalled_after=%.1fs recovered_after=%.1fs warnings=%d events=%v kstatus=%s\n",
		name, readyAfter.Seconds(), sessions.count(cm, wgwatch.OutcomeClosed)+sessions.count(sec, wgwatch.OutcomeClosed),
		sessions.count(cm, wgwatch.OutcomeError)+sessions.count(sec, wgwatch.OutcomeError),
		stalledAfter.Seconds(), recoveredAfter.Seconds(), events.Count(corev1.EventTypeWarning), events.Log(), res.Status)
	return timeline{began: began, denied: denied}
}

// sessionsMetric sums watchgrade_watch_sessions_ended_total for a resource
// and outcome.
func sessionsMetric(t *testing.T, g prometheus.Gatherer, resource, outcome string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, f := range families {
		if f.GetName() != "watchgrade_watch_sessions_ended_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["resource"] == resource && labels["outcome"] == outcome {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}

// sessionCounter counts session endings by resource and outcome.
type sessionCounter struct {
	wgwatch.ObserverFuncs
	mu      sync.Mutex
	counts  map[schema.GroupResource]map[wgwatch.Outcome]int
	changed chan struct{}
}

func newSessionCounter() *sessionCounter {
	c := &sessionCounter{counts: map[schema.GroupResource]map[wgwatch.Outcome]int{}, changed: make(chan struct{})}
	c.SessionEndedFunc = func(end wgwatch.SessionEnd) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.counts[end.Resource] == nil {
			c.counts[end.Resource] = map[wgwatch.Outcome]int{}
		}
		c.counts[end.Resource][end.Verdict.Outcome]++
		close(c.changed)
		c.changed = make(chan struct{})
	}
	return c
}

func (c *sessionCounter) count(gr schema.GroupResource, o wgwatch.Outcome) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[gr][o]
}

func (c *sessionCounter) await(ctx context.Context, timeout time.Duration, what string, ok func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		c.mu.Lock()
		changed := c.changed
		c.mu.Unlock()
		if ok() {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%s not seen within %v", what, timeout)
		}
	}
}
