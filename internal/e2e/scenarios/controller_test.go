package scenarios

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	wgevents "github.com/watchgrade/watchgrade/events"
	wgmetrics "github.com/watchgrade/watchgrade/metrics"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// ownerController is the smallest controller a user would write with the
// library: an accumulator of stream states, a status write of the kstatus
// trio on one owner Widget whenever its verdict changes, an Event on every
// Ready transition, and metrics.
type ownerController struct {
	t      *testing.T
	client dynamic.Interface
	key    types.NamespacedName
	acc    *wgreadiness.Accumulator
	events *countingRecorder
	rec    *wgevents.Recorder
	status *wgstatus.Writer
	// fail is what the Reconcile's own work returns, nil unless a test
	// sets it (setFail).
	fail    error
	metrics *wgmetrics.WatchMetrics
	reg     *prometheus.Registry

	requeue  chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	mu sync.Mutex
	// verdicts holds Ready's status as the accumulator decided it, at
	// every OnChange callback: not sampled.
	verdicts     []metav1.ConditionStatus
	writes       int
	failedWrites int
	// written logs every successful status write; wrote is closed and
	// replaced on each.
	written []written
	wrote   chan struct{}
}

// written is one successful status write: when, and Ready and Stalled.
type written struct {
	at      time.Time
	ready   metav1.ConditionStatus
	reason  string
	stalled bool
}

func (w written) String() string {
	s := string(w.ready) + "/" + w.reason
	if w.stalled {
		s += "+Stalled"
	}
	return s
}

// startOwner creates the owner Widget called name and runs its controller
// until the test ends. The owner depends on the named streams.
func startOwner(t *testing.T, cfg dynamic.Interface, kube kubernetes.Interface, name string, streams ...string) *ownerController {
	t.Helper()
	owner := object(widgetsGVR, name, 0)
	if _, err := cfg.Resource(widgetsGVR).Namespace(ns).Create(t.Context(), owner, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create owner: %v", err)
	}
	return restartOwner(t, cfg, kube, name, streams...)
}

// restartOwner runs a controller of the existing owner Widget called
// name, as a new process does: nothing in memory, the persisted status
// read at its first reconcile. Stop it with stop.
func restartOwner(t *testing.T, cfg dynamic.Interface, kube kubernetes.Interface, name string, streams ...string) *ownerController {
	t.Helper()
	broadcaster := record.NewBroadcaster(record.WithContext(context.Background()))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events(ns)})
	t.Cleanup(broadcaster.Shutdown)
	counting := &countingRecorder{next: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "watchgrade-e2e"})}

	reg := prometheus.NewRegistry()
	wm, err := wgmetrics.NewWatchMetrics(reg, wgmetrics.WatchOptions{})
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	rec, err := wgevents.NewRecorder(counting)
	if err != nil {
		t.Fatal(err)
	}
	c := &ownerController{
		t: t, client: cfg, key: types.NamespacedName{Namespace: ns, Name: name},
		events: counting, rec: rec, metrics: wm, reg: reg,
		requeue: make(chan struct{}, 1), done: make(chan struct{}),
	}
	acc, err := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{OnChange: c.onChange})
	if err != nil {
		t.Fatal(err)
	}
	c.acc = acc
	widgets := cfg.Resource(widgetsGVR).Namespace(ns)
	c.status, err = wgstatus.New(wgstatus.Options{
		Accumulator: acc, Events: rec, Resource: widgetsGVR.GroupResource(),
		Update: func(ctx context.Context, obj runtime.Object) (runtime.Object, error) {
			return widgets.UpdateStatus(ctx, obj.(*unstructured.Unstructured), metav1.UpdateOptions{})
		},
		Get: func(ctx context.Context, key types.NamespacedName) (runtime.Object, error) {
			return widgets.Get(ctx, key.Name, metav1.GetOptions{})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c.acc.Track(c.key, streams...)
	go c.run()
	t.Cleanup(c.stop)
	return c
}

// stop stops the controller's loop (not a reconcile in progress).
func (c *ownerController) stop() { c.stopOnce.Do(func() { close(c.done) }) }

// observer is what every stream of the owner reports to.
func (c *ownerController) observer() wgwatch.Observer { return wgwatch.Observers(c.acc, c.metrics) }

func (c *ownerController) onChange(key types.NamespacedName) {
	if key != c.key {
		return
	}
	gates := c.acc.Gates(key)
	c.mu.Lock()
	var existing []metav1.Condition
	if n := len(c.verdicts); n > 0 {
		existing = []metav1.Condition{{Type: wgreadiness.ConditionReady, Status: c.verdicts[n-1]}}
	}
	ready := meta.FindStatusCondition(wgreadiness.Rollup(gates, existing, 1, wgreadiness.Options{}), wgreadiness.ConditionReady)
	c.verdicts = append(c.verdicts, ready.Status)
	c.mu.Unlock()
	select {
	case c.requeue <- struct{}{}:
	default:
	}
}

func (c *ownerController) run() {
	for {
		select {
		case <-c.done:
			return
		case <-c.requeue:
			if err := c.reconcile(context.Background()); err != nil {
				// Requeue with a delay, as a workqueue's rate limiter would
				// (the apiserver may be down for a while).
				c.mu.Lock()
				c.failedWrites++
				c.mu.Unlock()
				time.AfterFunc(500*time.Millisecond, func() {
					select {
					case c.requeue <- struct{}{}:
					default:
					}
				})
			}
		}
	}
}

// reconcile is the status step (wgstatus.Writer.Write): the owner's trio
// and status.observedGeneration in one status update, an Event only after
// that write succeeded.
func (c *ownerController) reconcile(ctx context.Context) error {
	obj, err := c.client.Resource(widgetsGVR).Namespace(ns).Get(ctx, c.key.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	c.mu.Lock()
	reconcileErr := c.fail
	c.mu.Unlock()
	res := c.status.Write(ctx, obj, reconcileErr)
	switch {
	case res.Err != nil:
		return res.Err
	case res.Outcome == wgstatus.Conflict:
		return fmt.Errorf("status write of %s kept conflicting", c.key)
	case res.Outcome != wgstatus.Written:
		return nil
	}
	w := written{at: time.Now(), stalled: meta.IsStatusConditionTrue(res.After, wgreadiness.ConditionStalled)}
	if r := meta.FindStatusCondition(res.After, wgreadiness.ConditionReady); r != nil {
		w.ready, w.reason = r.Status, r.Reason
	}
	c.mu.Lock()
	c.writes++
	c.written = append(c.written, w)
	if c.wrote != nil {
		close(c.wrote)
	}
	c.wrote = make(chan struct{})
	c.mu.Unlock()
	return nil
}

// setFail has the Reconcile's own work return err from now on (nil: it
// succeeds), and reconciles the owner at once.
func (c *ownerController) setFail(err error) {
	c.mu.Lock()
	c.fail = err
	c.mu.Unlock()
	select {
	case c.requeue <- struct{}{}:
	default:
	}
}

// writeLog returns the status writes so far, as "Ready/Reason[+Stalled]".
func (c *ownerController) writeLog() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, w := range c.written {
		out = append(out, w.String())
	}
	return out
}

// firstWrite returns when Ready was first written with status.
func (c *ownerController) firstWrite(status metav1.ConditionStatus) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.written {
		if w.ready == status {
			return w.at, true
		}
	}
	return time.Time{}, false
}

// waitReady waits for a status write with Ready=True.
func (c *ownerController) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	c.waitReadyReason(t, timeout, metav1.ConditionTrue, wgreadiness.ReasonEstablished, false)
}

// waitReadyReason waits until the last status write has Ready's status
// and reason, and Stalled as given.
func (c *ownerController) waitReadyReason(t *testing.T, timeout time.Duration, status metav1.ConditionStatus, reason string, stalled bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		n := len(c.written)
		ok := n > 0 && c.written[n-1].ready == status && c.written[n-1].reason == reason && c.written[n-1].stalled == stalled
		if c.wrote == nil {
			c.wrote = make(chan struct{})
		}
		wrote := c.wrote
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-wrote:
		case <-deadline.C:
			t.Fatalf("no status write of Ready=%s/%s stalled=%v within %v: %v", status, reason, stalled, timeout, c.writeLog())
		}
	}
}

// kstatus reads the owner back from the API server and computes its status
// with kstatus.
func (c *ownerController) kstatus(ctx context.Context) (status.Status, *unstructured.Unstructured, error) {
	obj, err := c.client.Resource(widgetsGVR).Namespace(ns).Get(ctx, c.key.Name, metav1.GetOptions{})
	if err != nil {
		return "", nil, err
	}
	res, err := status.Compute(obj)
	if err != nil {
		return "", obj, err
	}
	return res.Status, obj, nil
}

// waitKstatus waits until the owner, read back from the API server, has
// the wanted kstatus (and, if given, Ready's reason).
func (c *ownerController) waitKstatus(t *testing.T, timeout time.Duration, want status.Status, readyReason ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, obj, err := c.kstatus(t.Context())
		// Until the controller's first write the owner has no conditions,
		// which kstatus also calls Current: wait for Ready to be there.
		var written bool
		if err == nil {
			conds, _ := conditionsOf(obj)
			ready := meta.FindStatusCondition(conds, wgreadiness.ConditionReady)
			written = ready != nil && (len(readyReason) == 0 || ready.Reason == readyReason[0])
			og, _, _ := unstructured.NestedInt64(obj.Object, "status", "observedGeneration")
			if written && og != obj.GetGeneration() {
				t.Fatalf("status.observedGeneration = %d with conditions written, want %d: the controller writes both in one update", og, obj.GetGeneration())
			}
		}
		if written && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("owner kstatus = %q (err %v), want %q after %v", got, err, want, timeout)
		}
		time.Sleep(50 * time.Millisecond) // polling the API server: there is nothing to subscribe to here
	}
}

// readyLeftTrue reports whether the accumulator's verdict ever went from
// True to anything else.
func (c *ownerController) readyLeftTrue() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	was := false
	for _, v := range c.verdicts {
		if was && v != metav1.ConditionTrue {
			return true
		}
		was = was || v == metav1.ConditionTrue
	}
	return false
}

// sessions reads watchgrade_watch_sessions_ended_total for a resource and
// outcome from the controller's registry.
func (c *ownerController) sessions(resource, outcome string) float64 {
	var v float64
	for _, m := range series(c.t, c.reg, "watchgrade_watch_sessions_ended_total",
		map[string]string{wgmetrics.LabelResource: resource, wgmetrics.LabelOutcome: outcome}) {
		v += m.GetCounter().GetValue()
	}
	return v
}

// lint checks the registry with Prometheus' own linter.
func (c *ownerController) lint(t *testing.T) {
	t.Helper()
	problems, err := testutil.GatherAndLint(c.reg)
	if err != nil || len(problems) > 0 {
		t.Errorf("metrics lint: %v %v", problems, err)
	}
}

func conditionsOf(obj *unstructured.Unstructured) ([]metav1.Condition, error) {
	raw, found, err := unstructured.NestedSlice(obj.Object, "status", "conditions")
	if err != nil || !found {
		return nil, err
	}
	out := make([]metav1.Condition, 0, len(raw))
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("condition %v is not an object", r)
		}
		var cond metav1.Condition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &cond); err != nil {
			return nil, err
		}
		out = append(out, cond)
	}
	return out, nil
}

// countingRecorder counts the Events the library asks for, by type, and
// passes them on to a real recorder that writes them to the API server.
type countingRecorder struct {
	next record.EventRecorder

	mu     sync.Mutex
	byType map[string]int
	log    []string
}

func (r *countingRecorder) Event(obj runtime.Object, eventtype, reason, message string) {
	r.mu.Lock()
	if r.byType == nil {
		r.byType = map[string]int{}
	}
	r.byType[eventtype]++
	r.log = append(r.log, eventtype+"/"+reason)
	r.mu.Unlock()
	r.next.Event(obj, eventtype, reason, message)
}

func (r *countingRecorder) count(eventtype string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byType[eventtype]
}

func (r *countingRecorder) logCopy() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log...)
}
