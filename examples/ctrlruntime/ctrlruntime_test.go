package ctrlruntime

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wgevents "github.com/watchgrade/watchgrade/events"
	"github.com/watchgrade/watchgrade/examples/watchtarget"
	"github.com/watchgrade/watchgrade/examples/wgctrl"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

var (
	configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	widgetsGVR    = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	widgetGVK     = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
)

// testMapper knows ConfigMaps, WatchTargets and Namespaces (cluster-scoped).
func testMapper() *meta.DefaultRESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(corev1.SchemeGroupVersion.WithKind("ConfigMap"), meta.RESTScopeNamespace)
	m.Add(corev1.SchemeGroupVersion.WithKind("Namespace"), meta.RESTScopeRoot)
	m.Add(watchtarget.Kind, meta.RESTScopeNamespace)
	return m
}

// observed records the states an Observer sees.
type observed struct {
	mu     sync.Mutex
	states []wgwatch.State
}

func (o *observed) StateChanged(s wgwatch.State) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.states = append(o.states, s)
}

func (o *observed) SessionEnded(wgwatch.SessionEnd) {}

func (o *observed) all() []wgwatch.State {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]wgwatch.State(nil), o.states...)
}

func newTestInstrumentation(t *testing.T, opts Options) *Instrumentation {
	t.Helper()
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	in, err := NewInstrumentation(opts)
	if err != nil {
		t.Fatalf("NewInstrumentation() = %v", err)
	}
	return in
}

// The WatchTargets' informer is named as wgctrl names every informer.
func TestTargetsStream(t *testing.T) {
	if got := wgctrl.StreamName(watchtarget.Kind); got != TargetsStream {
		t.Errorf("wgctrl.StreamName(%v) = %q, want TargetsStream %q", watchtarget.Kind, got, TargetsStream)
	}
}

// ManagerOptions restricts the cache to the namespace and hands it wgctrl's
// hooks; the cache's NewInformer hook then returns a working informer whose
// states reach the WatchTargets' accumulator and Options.Observer under
// the kind's stream name (wgctrl.StreamName), and whose metrics label is
// the resource the manager's RESTMapper maps the kind to.
func TestManagerOptionsFeedAccumulator(t *testing.T) {
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	widget := &unstructured.Unstructured{}
	widget.SetGroupVersionKind(widgetGVK)
	mapper := testMapper()
	mapper.Add(widgetGVK, meta.RESTScopeNamespace)

	for _, tc := range []struct {
		name     string
		obj      runtime.Object
		stream   string
		resource schema.GroupResource
	}{
		{"typed", &corev1.ConfigMap{}, "ConfigMap.v1", configMapsGVR.GroupResource()},
		{"custom resource", widget, "Widget.v1.example.com", widgetsGVR.GroupResource()},
		{"WatchTargets", &watchtarget.WatchTarget{}, TargetsStream, watchtarget.Resource.GroupResource()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				obs := &observed{}
				in := newTestInstrumentation(t, Options{Namespace: "shop", Observer: obs})
				opts := in.ManagerOptions(manager.Options{Scheme: scheme,
					MapperProvider: func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return mapper, nil }})
				if got := slices.Collect(maps.Keys(opts.Cache.DefaultNamespaces)); !slices.Equal(got, []string{"shop"}) {
					t.Errorf("the cache's namespaces = %v, want [shop]", got)
				}
				if opts.Cache.DefaultWatchErrorHandler == nil {
					t.Errorf("no graded watch error handler")
				}
				if _, err := opts.MapperProvider(nil, nil); err != nil { // as manager.New calls it
					t.Fatal(err)
				}
				lw := watchtest.New(watchtest.Session{Hang: true, Events: []apiwatch.Event{initialEventsEnd(t, tc.obj, "5")}})
				informer := opts.Cache.NewInformer(lw, tc.obj, 0, toolscache.Indexers{})

				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan struct{})
				go func() { defer close(done); informer.RunWithContext(ctx) }()
				synctest.Wait()
				synced := informer.HasSynced()
				// The watch after the replay is live once it has stayed open
				// for ShortSession and the informer has taken what it sent
				// (a moment of quiet after that).
				time.Sleep(wgwatch.DefaultShortSession + time.Second)
				synctest.Wait()
				cancel()
				<-done
				synctest.Wait()

				if !synced {
					t.Errorf("informer has not synced")
				}
				states := obs.all()
				if len(states) == 0 {
					t.Fatalf("observer saw no state")
				}
				last := states[len(states)-1]
				if last.Stream != tc.stream || last.Resource != tc.resource || last.Phase != wgwatch.PhaseStreaming {
					t.Errorf("last state = %+v, want stream %q, resource %v, phase Streaming", last, tc.stream, tc.resource)
				}
				// The accumulator saw it too: an owner tracking the stream
				// is established.
				key := types.NamespacedName{Namespace: "ns", Name: "owner"}
				in.Accumulator().Track(key, tc.stream)
				if gates := in.Accumulator().Gates(key); len(gates) != 1 || gates[0].Level != wgreadiness.LevelEstablished {
					t.Errorf("owner's gates = %+v, want one established", gates)
				}
				// And the readiness probe: every informer has synced.
				if err := in.Grader().ReadyzCheck(nil); err != nil {
					t.Errorf("ReadyzCheck = %v, want nil once the informer streamed", err)
				}
			})
		})
	}
}

// initialEventsEnd is watchtest.InitialEventsEnd carried by an object of
// obj's type, which the reflector of an informer of that type expects.
func initialEventsEnd(t *testing.T, obj runtime.Object, resourceVersion string) apiwatch.Event {
	t.Helper()
	bookmark := obj.DeepCopyObject()
	m, err := meta.Accessor(bookmark)
	if err != nil {
		t.Fatal(err)
	}
	m.SetResourceVersion(resourceVersion)
	m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	return apiwatch.Event{Type: apiwatch.Bookmark, Object: bookmark}
}

// A second Instrumentation on the same registry (a second manager in one
// process) reuses the first one's metrics instead of failing.
func TestNewInstrumentationReusesMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := newTestInstrumentation(t, Options{Registerer: reg})
	b := newTestInstrumentation(t, Options{Registerer: reg})
	if a.Grader().Metrics() != b.Grader().Metrics() {
		t.Errorf("second Instrumentation made new metrics; want the registered ones reused")
	}
}

// A verdict change reaches the controller's workqueue, and never blocks.
func TestAccumulatorRequeues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := newTestInstrumentation(t, Options{})
		key := types.NamespacedName{Namespace: "ns", Name: "a"}
		// No queue yet: dropped, and nothing blocks.
		in.Accumulator().Track(key, "ConfigMap.v1")
		synctest.Wait()

		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		defer q.ShutDown()
		if err := in.startRequeue(t.Context(), q); err != nil {
			t.Fatal(err)
		}
		in.Accumulator().StateChanged(wgwatch.State{Stream: "ConfigMap.v1", Phase: wgwatch.PhaseStreaming, Reason: wgwatch.ReasonWatching})
		synctest.Wait()
		if q.Len() != 1 {
			t.Fatalf("queue holds %d requests, want 1", q.Len())
		}
		if got, _ := q.Get(); got.NamespacedName != key {
			t.Errorf("queued %v, want %v", got, key)
		}
	})
}

// fakeInformers records what the reconciler asks the cache for.
type fakeInformers struct {
	mu   sync.Mutex
	objs []client.Object
}

func (f *fakeInformers) GetInformer(_ context.Context, obj client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.objs = append(f.objs, obj)
	return nil, nil
}

type reconcilerFixture struct {
	r         *Reconciler
	client    client.Client
	mapper    *meta.DefaultRESTMapper
	informers *fakeInformers
	recorder  *events.FakeRecorder
	now       time.Time
}

func newReconciler(t *testing.T, targets ...*watchtarget.WatchTarget) *reconcilerFixture {
	t.Helper()
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	objs := make([]client.Object, 0, len(targets))
	for _, wt := range targets {
		objs = append(objs, wt)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&watchtarget.WatchTarget{}).Build()
	f := &reconcilerFixture{
		client:    c,
		mapper:    testMapper(),
		informers: &fakeInformers{},
		recorder:  events.NewFakeRecorder(10),
		now:       time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	in := newTestInstrumentation(t, Options{})
	rec, err := wgevents.NewEventsRecorder(f.recorder, wgevents.EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return f.now }
	status, err := newStatusWriter(c, c, in.acc, rec, now)
	if err != nil {
		t.Fatal(err)
	}
	f.r = &Reconciler{
		client: c, informers: f.informers, mapper: f.mapper, scheme: scheme, in: in,
		status:       status,
		now:          now,
		failingSince: map[types.NamespacedName]map[string]time.Time{},
	}
	return f
}

func target(name string, refs ...watchtarget.ResourceRef) *watchtarget.WatchTarget {
	return &watchtarget.WatchTarget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: 1},
		Spec:       watchtarget.Spec{Resources: refs},
	}
}

// reconcile runs one reconcile and returns the result and the target as
// stored afterwards.
func (f *reconcilerFixture) reconcile(t *testing.T, name string) (reconcile.Result, *watchtarget.WatchTarget) {
	t.Helper()
	key := types.NamespacedName{Namespace: "ns", Name: name}
	res, err := f.r.Reconcile(t.Context(), reconcile.Request{NamespacedName: key})
	if err != nil {
		t.Fatalf("Reconcile() = %v", err)
	}
	got := &watchtarget.WatchTarget{}
	if err := f.client.Get(t.Context(), key, got); err != nil {
		t.Fatalf("Get() = %v", err)
	}
	return res, got
}

func (f *reconcilerFixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func condition(wt *watchtarget.WatchTarget, typ string) string {
	c := meta.FindStatusCondition(wt.Status.Conditions, typ)
	if c == nil {
		return "absent"
	}
	return fmt.Sprintf("%s/%s", c.Status, c.Reason)
}

// A followed resource: the informer is asked for (typed, not waiting for
// sync), the target waits for its stream, becomes Ready when the stream
// streams, and a reconcile that changes nothing writes nothing.
func TestReconcileFollowsResource(t *testing.T) {
	f := newReconciler(t, target("a", watchtarget.ResourceRef{Version: "v1", Resource: "configmaps"}))

	res, wt := f.reconcile(t, "a")
	if res.RequeueAfter != 0 {
		t.Errorf("RequeueAfter = %v, want 0", res.RequeueAfter)
	}
	if len(f.informers.objs) != 1 {
		t.Fatalf("asked for %d informers, want 1", len(f.informers.objs))
	}
	if _, ok := f.informers.objs[0].(*corev1.ConfigMap); !ok {
		t.Errorf("asked for an informer of %T, want *v1.ConfigMap", f.informers.objs[0])
	}
	// The stream is starting: the new target's first write waits for it
	// (one write and one Event, not Reconciling then Ready), and no
	// observedGeneration alone reads as Current meanwhile.
	if got := wt.Status.Conditions; len(got) != 0 || wt.Status.ObservedGeneration != 0 {
		t.Errorf("status = %v, observedGeneration %d, want none while the stream starts", got, wt.Status.ObservedGeneration)
	}

	f.r.in.acc.StateChanged(wgwatch.State{Stream: "ConfigMap.v1", Phase: wgwatch.PhaseStreaming, Reason: wgwatch.ReasonWatching})
	_, wt = f.reconcile(t, "a")
	if got := condition(wt, wgreadiness.ConditionReady); got != "True/Established" {
		t.Errorf("Ready = %s, want True/Established", got)
	}
	rv := wt.ResourceVersion
	_, wt = f.reconcile(t, "a")
	if wt.ResourceVersion != rv {
		t.Errorf("a reconcile that changed nothing wrote the status")
	}
	if wt.Status.ObservedGeneration != 1 {
		t.Errorf("observedGeneration = %d, want 1", wt.Status.ObservedGeneration)
	}
	evs := f.events()
	if len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal Established") {
		t.Errorf("events = %q, want one Normal Established", evs)
	}
}

// A resource the API server does not serve waits for HumanGrace, then
// stalls with a Warning, and recovers once the resource is served.
func TestReconcileUnknownResource(t *testing.T) {
	f := newReconciler(t, target("a", watchtarget.ResourceRef{Group: "example.com", Version: "v1", Resource: "widgets"}))

	res, wt := f.reconcile(t, "a")
	if res.RequeueAfter != wgwatch.DefaultHumanGrace {
		t.Errorf("RequeueAfter = %v, want %v", res.RequeueAfter, wgwatch.DefaultHumanGrace)
	}
	if got := condition(wt, wgreadiness.ConditionReconciling); got != "True/"+ReasonWaitingForResource {
		t.Errorf("Reconciling = %s, want True/%s", got, ReasonWaitingForResource)
	}
	if len(f.informers.objs) != 0 {
		t.Errorf("asked for an informer of an unknown resource")
	}

	f.now = f.now.Add(wgwatch.DefaultHumanGrace)
	res, wt = f.reconcile(t, "a")
	if res.RequeueAfter != DefaultUnresolvedRetry {
		t.Errorf("RequeueAfter = %v, want %v", res.RequeueAfter, DefaultUnresolvedRetry)
	}
	if got := condition(wt, wgreadiness.ConditionStalled); got != "True/"+ReasonResourceNotFound {
		t.Errorf("Stalled = %s, want True/%s", got, ReasonResourceNotFound)
	}
	if msg := meta.FindStatusCondition(wt.Status.Conditions, wgreadiness.ConditionStalled).Message; !strings.HasPrefix(msg, "widgets.v1.example.com: ") {
		t.Errorf("Stalled message = %q, want it to name widgets.v1.example.com", msg)
	}
	if evs := f.events(); len(evs) != 2 || !strings.HasPrefix(evs[1], "Warning "+ReasonResourceNotFound) {
		t.Errorf("events = %q, want the second a Warning %s", evs, ReasonResourceNotFound)
	}

	// The CRD is installed: the gate goes, the stream is tracked, and the
	// informer is unstructured (the scheme has no Widget type).
	f.mapper.Add(widgetGVK, meta.RESTScopeNamespace)
	res, wt = f.reconcile(t, "a")
	if res.RequeueAfter != 0 {
		t.Errorf("RequeueAfter = %v, want 0", res.RequeueAfter)
	}
	if got := condition(wt, wgreadiness.ConditionStalled); got != "absent" {
		t.Errorf("Stalled = %s, want absent", got)
	}
	if len(f.informers.objs) != 1 {
		t.Fatalf("asked for %d informers, want 1", len(f.informers.objs))
	}
	if u, ok := f.informers.objs[0].(*unstructured.Unstructured); !ok || u.GroupVersionKind() != widgetGVK {
		t.Errorf("asked for an informer of %#v, want an unstructured Widget", f.informers.objs[0])
	}
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	if gates := f.r.in.acc.Gates(key); len(gates) != 1 || !gates[0].Stream || gates[0].Name != "Widget.v1.example.com" {
		t.Errorf("gates = %+v, want the Widgets' stream only, named after the kind", gates)
	}
}

// References a RESTMapper would accept but the API server would not, and
// cluster-scoped resources, stall at once.
func TestReconcileInvalidResource(t *testing.T) {
	for _, tc := range []struct {
		ref    watchtarget.ResourceRef
		reason string
	}{
		{watchtarget.ResourceRef{Version: "v1", Resource: "configmap"}, ReasonResourceNotFound},
		{watchtarget.ResourceRef{Version: "v1", Resource: "namespaces"}, ReasonClusterScoped},
	} {
		t.Run(tc.ref.Resource, func(t *testing.T) {
			f := newReconciler(t, target("a", tc.ref))
			res, wt := f.reconcile(t, "a")
			if res.RequeueAfter != DefaultUnresolvedRetry {
				t.Errorf("RequeueAfter = %v, want %v", res.RequeueAfter, DefaultUnresolvedRetry)
			}
			if got := condition(wt, wgreadiness.ConditionStalled); got != "True/"+tc.reason {
				t.Errorf("Stalled = %s, want True/%s", got, tc.reason)
			}
		})
	}
}

// A deleted target is forgotten.
func TestReconcileDeleted(t *testing.T) {
	f := newReconciler(t, target("a", watchtarget.ResourceRef{Version: "v1", Resource: "configmaps"}))
	f.reconcile(t, "a")
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	if err := f.client.Delete(t.Context(), &watchtarget.WatchTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.Reconcile(t.Context(), reconcile.Request{NamespacedName: key}); err != nil {
		t.Fatalf("Reconcile() = %v", err)
	}
	if gates := f.r.in.acc.Gates(key); len(gates) != 0 {
		t.Errorf("gates of a deleted target = %+v, want none", gates)
	}
}
