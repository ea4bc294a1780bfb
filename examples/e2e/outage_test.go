package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/watchgrade/watchgrade/examples/wgctrl"
	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// TestControllerRuntimeInformerOutage is internal/e2e's TestInformerOutage
// under controller-runtime: apiserver outages of 5, 10 and 17 s in front of
// a manager whose cache builds its ConfigMap informer through a
// wgctrl.Grader (watch.Instrument on the cache's NewInformer hook), with a
// reconciler on ConfigMaps. The reflector's own backoff doubles to 30 s and
// would keep it away from a server that is back: Instrument retries a
// refused call itself until the trouble is published, so none of these
// outages may publish anything, and the manager's cache must have the
// ConfigMap written once the apiserver is back. Each outage meets a manager
// of its own, as each meets an informer of its own there: the reflector's
// wait between its rounds grows with every round until two minutes pass
// without one, and Instrument cannot shorten it (the watch package's doc,
// Informers).
//
// The manager must also log no line at error level (the Grader's graded
// watch error log says short trouble at V(1)).
func TestControllerRuntimeInformerOutage(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(c.Config())
	const ns = "crt-outage"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	var downs, published []string
	// Each outage's times and session endings, shown if the test fails.
	var timeline []string
	var recs []*outageRecorder
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, line := range timeline {
			t.Log(line)
		}
		for _, rec := range recs {
			for _, e := range rec.endingsCopy() {
				t.Logf("%v outage: %s", rec.down, e)
			}
		}
	})
	failed := 0
	for _, down := range []time.Duration{5 * time.Second, 10 * time.Second, 17 * time.Second} {
		rec := &outageRecorder{down: down}
		recs = append(recs, rec)
		mgr, stop := runOutageManager(t, c.Config(), ns, rec)
		stream := wgctrl.StreamName(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
		rec.await(t, 60*time.Second, stream+" Streaming", func() bool {
			st, ok := rec.last()
			return ok && st.Stream == stream && st.Phase == wgwatch.PhaseStreaming
		})
		before := rec.count()
		caughtUp := func(name, what string) {
			t.Helper()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"down": down.String()}}
			if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			rec.await(t, 60*time.Second, what+" in the manager's cache", func() bool {
				return mgr.GetCache().Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.ConfigMap{}) == nil
			})
		}
		prefix := fmt.Sprintf("crt-outage-%d", down/time.Second)
		caughtUp(prefix+"-before", "the write before the outage")
		refusing := time.Now() // StopAPIServer refuses connections first, then shuts the apiserver down
		c.StopAPIServer()
		stopped := time.Now()
		time.Sleep(down)   // the outage itself: the time is the point
		c.StartAPIServer() // a new apiserver: it takes a moment to start
		back := time.Now()
		caughtUp(prefix+"-after", fmt.Sprintf("the write after the %v outage", down))
		timeline = append(timeline, fmt.Sprintf("%v outage: refusing from %s, apiserver down at %s, back at %s, the write after it in the cache at %s", down,
			refusing.Format(logTime), stopped.Format(logTime), back.Format(logTime), time.Now().Format(logTime)))
		// down, how long the server was gone, and how soon after it was
		// back the manager's cache had the write made then.
		downs = append(downs, fmt.Sprintf("%.0fs(gone=%s,caught_up=%s)", down.Seconds(),
			back.Sub(stopped).Round(100*time.Millisecond), time.Since(back).Round(100*time.Millisecond)))
		// Past the transient grace from the outage's start, where a
		// Blocked for it would have been published.
		time.Sleep(max(wgwatch.DefaultTransientGrace+5*time.Second-time.Since(stopped), 0))
		for _, st := range rec.statesSince(before) {
			published = append(published, fmt.Sprintf("%.0fs:%s/%s", down.Seconds(), st.Phase, st.Reason))
		}
		failed += rec.errors()
		stop()
	}
	errs := ctrlErrors.since(began)
	fmt.Printf("e2e: ctrlruntime-informer-outage downs=%s published=%d error_endings=%d error_logs=%d states=%v\n",
		strings.Join(downs, ","), len(published), failed, len(errs), published)
	if len(published) != 0 {
		t.Errorf("outages of 5, 10 and 17 s published %v, want nothing", published)
	}
	if len(errs) != 0 {
		t.Errorf("the managers logged %d lines at error level through outages shorter than the transient grace, want 0:%s", len(errs), formatErrorLines(errs))
	}
}

// runOutageManager starts a controller-runtime manager on cfg whose cache,
// restricted to namespace, grades its informers through a wgctrl.Grader
// reporting to observer, with a reconciler on ConfigMaps that does nothing.
// It returns the manager and the function that stops it and waits for it.
func runOutageManager(t *testing.T, cfg *rest.Config, namespace string, observer wgwatch.Observer) (ctrlmanager.Manager, func()) {
	t.Helper()
	grade, err := wgctrl.New(wgctrl.Options{Observer: observer, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrlmanager.New(cfg, grade.ManagerOptions(ctrlmanager.Options{
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: new(true)},
	}))
	if err != nil {
		t.Fatal(err)
	}
	noop := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	if err := builder.ControllerManagedBy(mgr).For(&corev1.ConfigMap{}).Complete(noop); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return mgr, stopOnce(t, cancel, done)
}

// logTime formats the times the test logs.
const logTime = "15:04:05.000"

// outageRecorder keeps every state and session ending the Grader passes
// on.
type outageRecorder struct {
	down    time.Duration // the outage it records
	mu      sync.Mutex
	states  []wgwatch.State
	endings []outageEnding
}

type outageEnding struct {
	at time.Time
	e  wgwatch.SessionEnd
}

func (e outageEnding) String() string {
	return fmt.Sprintf("%s %s stage=%s outcome=%s next=%s publish=%v duration=%s err=%v",
		e.at.Format(logTime), e.e.Stream, e.e.Stage, e.e.Verdict.Outcome, e.e.Verdict.Next, e.e.Verdict.Publish,
		e.e.Duration.Round(time.Millisecond), e.e.Err)
}

var _ wgwatch.Observer = (*outageRecorder)(nil)

func (r *outageRecorder) StateChanged(s wgwatch.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, s)
}

func (r *outageRecorder) SessionEnded(e wgwatch.SessionEnd) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endings = append(r.endings, outageEnding{at: time.Now(), e: e})
}

func (r *outageRecorder) last() (wgwatch.State, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.states) == 0 {
		return wgwatch.State{}, false
	}
	return r.states[len(r.states)-1], true
}

func (r *outageRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.states)
}

func (r *outageRecorder) statesSince(i int) []wgwatch.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]wgwatch.State(nil), r.states[i:]...)
}

func (r *outageRecorder) endingsCopy() []outageEnding {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]outageEnding(nil), r.endings...)
}

// errors counts the session endings graded an error.
func (r *outageRecorder) errors() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.endings {
		if e.e.Verdict.Outcome == wgwatch.OutcomeError {
			n++
		}
	}
	return n
}

func (r *outageRecorder) stateLog() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.states {
		out = append(out, fmt.Sprintf("%s:%s/%s", s.Stream, s.Phase, s.Reason))
	}
	return out
}

// await polls ok every 50 ms until it holds, for at most timeout.
func (r *outageRecorder) await(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return ok(), nil })
	if err != nil {
		t.Fatalf("no %s within %v: %v; states %v", what, timeout, err, r.stateLog())
	}
}
