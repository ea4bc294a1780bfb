package wgctrl_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/watchgrade/watchgrade/examples/wgctrl"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

func TestMain(m *testing.M) {
	watchtest.DisableHandleErrorBackoff()
	os.Exit(m.Run())
}

var gbKey = types.NamespacedName{Namespace: "shop", Name: "gb"}

// fixture is a Guestbook on controller-runtime's fake client, and an Owner
// of Guestbooks that depend on ConfigMaps.
type fixture struct {
	client   client.Client
	recorder *events.FakeRecorder
	grade    *wgctrl.Grader
	owner    *wgctrl.Owner
}

func newFixture(t *testing.T, deps ...client.Object) *fixture {
	t.Helper()
	gb := &Guestbook{ObjectMeta: metav1.ObjectMeta{Name: gbKey.Name, Namespace: gbKey.Namespace, Generation: 1}}
	c := fake.NewClientBuilder().WithScheme(newScheme()).WithObjects(gb).WithStatusSubresource(gb).Build()
	f := &fixture{client: c, recorder: events.NewFakeRecorder(100)}
	var err error
	f.grade, err = wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	f.owner, err = f.grade.NewOwner(wgctrl.OwnerConfig{Client: c, Recorder: f.recorder}, &Guestbook{}, deps...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) reconcile(t *testing.T) {
	t.Helper()
	r := &GuestbookReconciler{Client: f.client, Readiness: f.owner}
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: gbKey}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
}

func (f *fixture) guestbook(t *testing.T) *Guestbook {
	t.Helper()
	gb := &Guestbook{}
	if err := f.client.Get(context.Background(), gbKey, gb); err != nil {
		t.Fatal(err)
	}
	return gb
}

// events drains the Events recorded so far.
func (f *fixture) events() []string {
	var out []string
	for len(f.recorder.Events) > 0 {
		out = append(out, <-f.recorder.Events)
	}
	return out
}

// warnings counts the Warnings among events.
func warnings(events []string) int {
	n := 0
	for _, e := range events {
		if strings.HasPrefix(e, corev1.EventTypeWarning+" ") {
			n++
		}
	}
	return n
}

func condition(gb *Guestbook, typ string) (metav1.ConditionStatus, string) {
	c := meta.FindStatusCondition(gb.Status.Conditions, typ)
	if c == nil {
		return "", ""
	}
	return c.Status, c.Reason
}

// A real informer, built by the Grader's hook, over watchtest's simulated
// API server: RBAC denies the ConfigMaps from the start, then a human
// repairs it. Time is virtual.
func TestReconcilerOverWatchtest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, &corev1.ConfigMap{})
		srv := watchtest.NewServer(watchtest.ServerOptions{})
		srv.SetFaults(watchtest.Faults{Err: watchtest.Forbidden()})
		inf := f.grade.NewInformer(srv, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { inf.RunWithContext(ctx) })
		defer func() { cancel(); wg.Wait() }()

		f.reconcile(t)
		if got := f.guestbook(t).Status.Conditions; len(got) != 0 {
			t.Errorf("at start, conditions = %v, want none: a new owner's first write waits for its stream", got)
		}
		synctest.Wait()
		if err := f.grade.ReadyzCheck(nil); !errors.Is(err, wgwatch.ErrNotSynced) {
			t.Errorf("at start, ReadyzCheck() = %v, want ErrNotSynced", err)
		}
		time.Sleep(wgwatch.DefaultHumanGrace + time.Minute)
		synctest.Wait()
		f.reconcile(t)
		gb := f.guestbook(t)
		if s, r := condition(gb, wgreadiness.ConditionStalled); s != metav1.ConditionTrue || r != string(wgwatch.ReasonForbidden) {
			t.Errorf("denied: Stalled = %s (%s), want True (Forbidden)", s, r)
		}
		if gb.Status.ObservedGeneration != 1 {
			t.Errorf("observedGeneration = %d, want 1", gb.Status.ObservedGeneration)
		}
		rv := gb.ResourceVersion
		f.reconcile(t)
		if got := f.guestbook(t).ResourceVersion; got != rv {
			t.Errorf("a reconcile that changed nothing wrote the status (resourceVersion %s -> %s)", rv, got)
		}
		if n := warnings(f.events()); n != 1 {
			t.Errorf("Warnings = %d, want 1", n)
		}

		srv.SetFaults(watchtest.Faults{})
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		f.reconcile(t)
		if s, r := condition(f.guestbook(t), wgreadiness.ConditionReady); s != metav1.ConditionTrue {
			t.Errorf("repaired: Ready = %s (%s), want True", s, r)
		}
		if err := f.grade.ReadyzCheck(nil); err != nil {
			t.Errorf("synced: ReadyzCheck() = %v, want nil", err)
		}
		// Denied again: the owner is Stalled, the probe stays ready.
		srv.SetFaults(watchtest.Faults{Err: watchtest.Forbidden()})
		srv.CloseWatches()
		time.Sleep(wgwatch.DefaultTransientGrace + time.Minute)
		synctest.Wait()
		if err := f.grade.ReadyzCheck(nil); err != nil {
			t.Errorf("denied after it synced: ReadyzCheck() = %v, want nil", err)
		}
	})
}

// fakeInformers stands for the manager's cache: the Guestbooks' informer
// delivers one Guestbook; the ConfigMaps' kind is not served until served
// is set.
type fakeInformers struct {
	mu     sync.Mutex
	served bool
	gb     client.Object
	asked  []string // the Go types of the objects GetInformer was asked for
}

func (fi *fakeInformers) GetInformer(_ context.Context, obj client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	fi.mu.Lock()
	defer fi.mu.Unlock()
	fi.asked = append(fi.asked, fmt.Sprintf("%T", obj))
	switch obj.(type) {
	case *Guestbook:
		return &fakeInformer{objs: []any{fi.gb}}, nil
	case *corev1.ConfigMap:
		if fi.served {
			return &fakeInformer{}, nil
		}
		return nil, &meta.NoKindMatchError{GroupKind: schema.GroupKind{Kind: "ConfigMap"}}
	}
	return nil, &meta.NoKindMatchError{}
}

// servedMapper serves ConfigMaps as fi does.
type servedMapper struct{ fi *fakeInformers }

func (m servedMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m.fi.mu.Lock()
	defer m.fi.mu.Unlock()
	if gk.Kind == "ConfigMap" && !m.fi.served {
		return nil, &meta.NoKindMatchError{GroupKind: gk}
	}
	return &meta.RESTMapping{Resource: schema.GroupVersionResource{Version: "v1", Resource: strings.ToLower(gk.Kind) + "s"}}, nil
}

func (servedMapper) KindFor(schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	return schema.GroupVersionKind{}, errors.New("not implemented")
}
func (servedMapper) KindsFor(schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	return nil, errors.New("not implemented")
}
func (servedMapper) ResourceFor(schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	return schema.GroupVersionResource{}, errors.New("not implemented")
}
func (servedMapper) ResourcesFor(schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	return nil, errors.New("not implemented")
}
func (m servedMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	r, err := m.RESTMapping(gk, versions...)
	if err != nil {
		return nil, err
	}
	return []*meta.RESTMapping{r}, nil
}
func (servedMapper) ResourceSingularizer(resource string) (string, error) { return resource, nil }

type fakeInformer struct {
	cache.Informer
	objs []any
}

func (fi *fakeInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	for _, o := range fi.objs {
		h.OnAdd(o, true)
	}
	return nil, nil
}

// The standby writer tells an owner that a watched kind is not served,
// with no Reconcile at all (the controller's workers wait for it), and
// stands down once Reconcile runs.
func TestStandbyWriterReportsKindNotServed(t *testing.T) {
	standbyWriterReportsKindNotServed(t, false)
}

// The same with the manager's cache restricted to the owner's namespace:
// the owner depends on its namespace's stream ("shop/ConfigMap.v1"), and
// the kind not served is reported under that name too (under the kind's
// name alone, no owner heard of it: no condition, no Event).
func TestStandbyWriterReportsKindNotServedInARestrictedCache(t *testing.T) {
	standbyWriterReportsKindNotServed(t, true)
}

func standbyWriterReportsKindNotServed(t *testing.T, restricted bool) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, &corev1.ConfigMap{})
		if restricted {
			f.grade.ManagerOptions(manager.Options{Scheme: newScheme(), Cache: cache.Options{
				DefaultNamespaces: map[string]cache.Config{gbKey.Namespace: {}},
			}})
		}
		fi := &fakeInformers{gb: f.guestbook(t)}
		cfg := wgctrl.OwnerConfig{Client: f.client, Recorder: f.recorder, Informers: fi, RESTMapper: servedMapper{fi}}
		owner, err := f.grade.NewOwner(cfg, &Guestbook{}, &corev1.ConfigMap{})
		if err != nil {
			t.Fatal(err)
		}
		f.owner = owner
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- owner.Start(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Start: %v", err)
			}
		}()

		time.Sleep(wgwatch.DefaultHumanGrace - time.Second)
		synctest.Wait()
		if s, _ := condition(f.guestbook(t), wgreadiness.ConditionStalled); s != "" {
			t.Errorf("within the grace: Stalled = %s, want absent (nothing written)", s)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if s, r := condition(f.guestbook(t), wgreadiness.ConditionStalled); s != metav1.ConditionTrue || r != string(wgwatch.ReasonResourceNotFound) {
			t.Errorf("past the grace: Stalled = %s (%s), want True (ResourceNotFound)", s, r)
		}
		if got := f.events(); len(got) != 1 || got[0][:7] != "Warning" {
			t.Errorf("Events = %q, want one Warning", got)
		}

		fi.mu.Lock()
		fi.served = true
		fi.mu.Unlock()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		f.reconcile(t) // the controller's workers run: the standby writer stands down
		if s, _ := condition(f.guestbook(t), wgreadiness.ConditionStalled); s != "" {
			t.Errorf("served again and reconciled: Stalled = %s, want absent", s)
		}
		rv := f.guestbook(t).ResourceVersion
		f.grade.Observer().StateChanged(wgwatch.State{Stream: "ConfigMap.v1", Phase: wgwatch.PhaseBlocked, Reason: wgwatch.ReasonForbidden, NeedsHuman: true})
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := f.guestbook(t).ResourceVersion; got != rv {
			t.Errorf("after Reconcile ran, the standby writer still wrote (resourceVersion %s -> %s)", rv, got)
		}
	})
}

// A controller that watches ConfigMaps metadata-only (builder.OnlyMetadata)
// and an Owner given the typed &corev1.ConfigMap{} (as the adoption steps
// show) run one ConfigMap informer, the controller's: the standby writer
// does not ask the cache for a typed one, which would list and hold every
// ConfigMap's full object for nothing. A watched kind no controller makes
// an informer for still gets one, once the kind has been served a while.
func TestMetadataOnlyWatchMakesNoSecondInformer(t *testing.T) {
	for _, tc := range []struct {
		name          string
		controllerHas bool // the controller's watch makes a metadata-only informer
		wantTyped     bool
	}{
		{"the controller watches metadata only", true, false},
		{"no controller watches the kind", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t)
				fi := &fakeInformers{gb: f.guestbook(t), served: true}
				cfg := wgctrl.OwnerConfig{Client: f.client, Recorder: f.recorder, Informers: fi, RESTMapper: servedMapper{fi}}
				owner, err := f.grade.NewOwner(cfg, &Guestbook{}, &corev1.ConfigMap{})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error)
				go func() { done <- owner.Start(ctx) }()
				var stop context.CancelFunc = func() {}
				if tc.controllerHas {
					// The controller's source starts a moment after the
					// manager's runnables.
					time.Sleep(100 * time.Millisecond)
					metadataCM := &metav1.PartialObjectMetadata{}
					metadataCM.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
					inf := f.grade.NewInformer(watchtest.New(), metadataCM, 0, toolscache.Indexers{})
					var infCtx context.Context
					infCtx, stop = context.WithCancel(t.Context())
					go inf.RunWithContext(infCtx)
				}
				time.Sleep(time.Minute)
				synctest.Wait()
				fi.mu.Lock()
				typed := slices.Contains(fi.asked, "*v1.ConfigMap")
				asked := slices.Clone(fi.asked)
				fi.mu.Unlock()
				if typed != tc.wantTyped {
					t.Errorf("the standby writer asked the cache for a typed ConfigMap informer: %v, want %v (asked for %q)", typed, tc.wantTyped, asked)
				}
				if got := owner.Streams(); !slices.Equal(got, []string{"ConfigMap.v1"}) {
					t.Errorf("Owner.Streams() = %q, want [ConfigMap.v1]", got)
				}
				cancel()
				stop()
				if err := <-done; err != nil {
					t.Errorf("Start: %v", err)
				}
				synctest.Wait()
			})
		})
	}
}

// A name passed to Track that no informer has is a Stalled gate, not a
// Reconciling that never ends; it goes once the informer exists.
func TestTrackUnknownStream(t *testing.T) {
	f := newFixture(t)
	f.owner.Track(gbKey, "configmaps.v1") // the resource's name, not the kind's
	f.reconcile(t)
	if s, r := condition(f.guestbook(t), wgreadiness.ConditionStalled); s != metav1.ConditionTrue || r != wgctrl.ReasonUnknownStream {
		t.Errorf("Stalled = %s (%s), want True (%s)", s, r, wgctrl.ReasonUnknownStream)
	}
	f.grade.NewInformer(watchtest.New(), &corev1.ConfigMap{}, 0, toolscache.Indexers{})
	name := wgctrl.StreamName(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	f.owner.Track(gbKey, name)
	f.reconcile(t)
	gb := f.guestbook(t)
	if s, _ := condition(gb, wgreadiness.ConditionStalled); s != "" {
		t.Errorf("tracking %q: Stalled = %s, want absent", name, s)
	}
	if s, r := condition(gb, wgreadiness.ConditionReconciling); s != metav1.ConditionTrue || r != string(wgwatch.ReasonStarting) {
		t.Errorf("tracking %q: Reconciling = %s (%s), want True (Starting)", name, s, r)
	}
}

// Status of an owner whose status the API server sent in a shape no
// condition list has returns an error; it never panics.
func TestStatusRejectsBadStatus(t *testing.T) {
	f := newFixture(t, &corev1.ConfigMap{})
	for _, tc := range []struct {
		name   string
		status map[string]any
	}{
		{name: "conditions not a list", status: map[string]any{"conditions": "Ready"}},
		{name: "condition not an object", status: map[string]any{"conditions": []any{"Ready"}}},
		{name: "observedGeneration not a number", status: map[string]any{"observedGeneration": "one"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "webapp.example.com/v1", "kind": "Guestbook",
				"metadata": map[string]any{"name": "gb", "namespace": "shop", "generation": int64(1)},
				"status":   tc.status,
			}}
			if err := statusErr(f.owner, t, u); err == nil {
				t.Errorf("Status(%v) = nil, want an error", tc.status)
			}
		})
	}
}

func TestManagerOptions(t *testing.T) {
	grade, err := wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	o := grade.ManagerOptions(manager.Options{})
	if o.Cache.NewInformer == nil {
		t.Error("Cache.NewInformer not set")
	}
	if o.MapperProvider == nil {
		t.Error("MapperProvider not set")
	}
	if o.Controller.CacheSyncTimeout != 0 {
		t.Errorf("without WaitForHuman, Controller.CacheSyncTimeout = %v, want it left to controller-runtime", o.Controller.CacheSyncTimeout)
	}
	waiting, err := wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry(), WaitForHuman: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := waiting.ManagerOptions(manager.Options{}).Controller.CacheSyncTimeout; got != wgctrl.CacheSyncTimeout {
		t.Errorf("with WaitForHuman, Controller.CacheSyncTimeout = %v, want %v", got, wgctrl.CacheSyncTimeout)
	}
	mine := manager.Options{}
	mine.Controller.CacheSyncTimeout = 5 * time.Minute
	if got := waiting.ManagerOptions(mine).Controller.CacheSyncTimeout; got != 5*time.Minute {
		t.Errorf("a CacheSyncTimeout of the caller's became %v, want it kept", got)
	}
	// Hooks of the caller's are wrapped, not replaced: their NewInformer
	// builds the informer from the graded ListerWatcher, and their watch
	// error handler still sees every error, after the graded log.
	var built, handled int
	theirs := manager.Options{}
	theirs.Cache.NewInformer = func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
		built++
		if lw == nil {
			t.Error("the caller's NewInformer got no ListerWatcher")
		}
		return toolscache.NewSharedIndexInformer(lw, obj, resync, idx)
	}
	theirs.Cache.DefaultWatchErrorHandler = func(context.Context, *toolscache.Reflector, error) { handled++ }
	wrapped := grade.ManagerOptions(theirs)
	wrapped.Cache.NewInformer(watchtest.New(), &corev1.ConfigMap{}, 0, toolscache.Indexers{})
	r := toolscache.NewReflector(&toolscache.ListWatch{}, &corev1.ConfigMap{}, toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), 0)
	wrapped.Cache.DefaultWatchErrorHandler(t.Context(), r, errors.New("connection refused"))
	if built != 1 || handled != 1 {
		t.Errorf("the caller's hooks ran %d and %d times, want once each", built, handled)
	}
	if !slices.Contains(grade.Streams(), wgctrl.StreamName(corev1.SchemeGroupVersion.WithKind("ConfigMap"))) {
		t.Errorf("Streams() = %v: the informer the caller's hook built is not graded", grade.Streams())
	}
	if o.Cache.DefaultWatchErrorHandler == nil {
		t.Error("Cache.DefaultWatchErrorHandler not set")
	}
	// The metrics are reused, not registered twice, by a second Grader
	// on one registry (a second manager in one process).
	reg := prometheus.NewRegistry()
	a, err := wgctrl.New(wgctrl.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	b, err := wgctrl.New(wgctrl.Options{Registerer: reg})
	if err != nil {
		t.Fatalf("second New on one registry: %v", err)
	}
	if a.Metrics() != b.Metrics() {
		t.Error("the second Grader did not reuse the registered metrics")
	}
}

// Every informer of the cache is named by StreamName from its kind,
// whatever its representation (typed, unstructured, metadata-only), so an
// Owner given the typed kind follows the informer a builder.OnlyMetadata
// watch makes, and a kind passed in two representations is one stream.
// The metrics are labelled with the resource the manager's RESTMapper maps
// the kind to.
func TestStreamNamesOfInformers(t *testing.T) {
	cm := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	widget := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(cm, meta.RESTScopeNamespace)
	mapper.Add(widget, meta.RESTScopeNamespace)
	unstructuredCM := &unstructured.Unstructured{}
	unstructuredCM.SetGroupVersionKind(cm)
	metadataCM := &metav1.PartialObjectMetadata{}
	metadataCM.SetGroupVersionKind(cm)
	metadataCMs := &metav1.PartialObjectMetadataList{}
	metadataCMs.SetGroupVersionKind(cm)
	unstructuredWidget := &unstructured.Unstructured{}
	unstructuredWidget.SetGroupVersionKind(widget)
	for _, tc := range []struct {
		obj          runtime.Object
		want         string
		wantResource schema.GroupResource
	}{
		{&corev1.ConfigMap{}, "ConfigMap.v1", schema.GroupResource{Resource: "configmaps"}},
		{unstructuredCM, "ConfigMap.v1", schema.GroupResource{Resource: "configmaps"}},
		{metadataCM, "ConfigMap.v1", schema.GroupResource{Resource: "configmaps"}},
		{metadataCMs, "ConfigMap.v1", schema.GroupResource{Resource: "configmaps"}},
		{unstructuredWidget, "Widget.v1.example.com", schema.GroupResource{Group: "example.com", Resource: "widgets"}}, // no Go type
	} {
		obs := &states{}
		grade, err := wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry(), Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		o := grade.ManagerOptions(manager.Options{Scheme: newScheme(),
			MapperProvider: func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return mapper, nil }})
		if _, err := o.MapperProvider(nil, nil); err != nil { // as manager.New calls it
			t.Fatal(err)
		}
		inf := o.Cache.NewInformer(watchtest.New(watchtest.Session{Hang: true}), tc.obj, 0, toolscache.Indexers{})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); inf.RunWithContext(ctx) }()
		if err := obs.await(tc.want); err != nil {
			t.Errorf("%T: %v", tc.obj, err)
		}
		cancel()
		<-done
		if s, ok := obs.get(tc.want); ok && s.Resource != tc.wantResource {
			t.Errorf("%T: the informer's resource = %v, want %v", tc.obj, s.Resource, tc.wantResource)
		}
		if got := grade.Streams(); !slices.Equal(got, []string{tc.want}) {
			t.Errorf("%T: Grader.Streams() = %q, want [%q]", tc.obj, got, tc.want)
		}
	}
	grade, err := wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	grade.ManagerOptions(manager.Options{Scheme: newScheme()})
	c := fake.NewClientBuilder().WithScheme(newScheme()).Build()
	owner, err := grade.NewOwner(wgctrl.OwnerConfig{Client: c, Recorder: events.NewFakeRecorder(1)}, &Guestbook{}, &corev1.ConfigMap{}, metadataCM)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := owner.Streams(), []string{"ConfigMap.v1"}; !slices.Equal(got, want) {
		t.Errorf("Owner.Streams() = %q, want %q (one kind, two representations)", got, want)
	}
}

// states keeps the last state of each stream an Observer is told about.
type states struct {
	mu   sync.Mutex
	last map[string]wgwatch.State
}

func (s *states) StateChanged(st wgwatch.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[string]wgwatch.State{}
	}
	s.last[st.Stream] = st
}

func (*states) SessionEnded(wgwatch.SessionEnd) {}

func (s *states) get(stream string) (wgwatch.State, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.last[stream]
	return st, ok
}

// await waits up to ten seconds for a state of stream.
func (s *states) await(stream string) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, ok := s.get(stream); ok {
			return nil
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Errorf("no state of %q; streams seen: %v", stream, slices.Sorted(maps.Keys(s.last)))
}

// A reconciler built without an Owner (kubebuilder's scaffolded controller
// test builds it so) still runs: a nil Owner writes nothing.
func TestNilOwner(t *testing.T) {
	f := newFixture(t)
	r := &GuestbookReconciler{Client: f.client}
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: gbKey}); err != nil {
		t.Fatalf("Reconcile with a nil Owner: %v", err)
	}
	if got := f.guestbook(t).Status.Conditions; len(got) != 0 {
		t.Errorf("a nil Owner wrote conditions: %v", got)
	}
	var o *wgctrl.Owner
	if o.Requeue() == nil {
		t.Error("a nil Owner's Requeue() = nil, want a source that queues nothing")
	}
}

// A CRD whose status has no observedGeneration drops it on every write.
// Status must notice and stop comparing it, or every reconcile (after a
// restart, every one) would be a status write.
func TestStatusWithoutObservedGenerationInTheSchema(t *testing.T) {
	gb := &Guestbook{ObjectMeta: metav1.ObjectMeta{Name: gbKey.Name, Namespace: gbKey.Namespace, Generation: 1}}
	base := fake.NewClientBuilder().WithScheme(newScheme()).WithObjects(gb).WithStatusSubresource(gb).Build()
	writes := 0
	c := interceptor.NewClient(base, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			writes++
			if u, ok := obj.(*unstructured.Unstructured); ok {
				unstructured.RemoveNestedField(u.Object, "status", "observedGeneration") // the API server's pruning
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	grade, err := wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	owner, err := grade.NewOwner(wgctrl.OwnerConfig{Client: c, Recorder: events.NewFakeRecorder(10)}, &Guestbook{})
	if err != nil {
		t.Fatal(err)
	}
	r := &GuestbookReconciler{Client: c, Readiness: owner}
	for range 3 {
		if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: gbKey}); err != nil {
			t.Fatal(err)
		}
	}
	if writes != 1 {
		t.Errorf("3 reconciles that changed nothing after the first wrote the status %d times, want 1", writes)
	}
}

// By default the watch metrics go on controller-runtime's registry, the
// one the manager's metrics server serves, under watchgrade's own names.
func TestMetricsOnTheManagersRegistry(t *testing.T) {
	grade, err := wgctrl.New(wgctrl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	grade.NewInformer(watchtest.New(), &corev1.ConfigMap{}, 0, toolscache.Indexers{})
	grade.Metrics().StateChanged(wgwatch.State{Stream: "ConfigMap.v1", Resource: schema.GroupResource{Resource: "configmaps"}, Phase: wgwatch.PhaseStreaming})
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() == "watchgrade_watch_streams" {
			return
		}
	}
	t.Error("controller-runtime's registry has no watchgrade_watch_streams")
}

// The Owner feeds the time-to-first-Ready histogram with every sighting:
// one observation for the Guestbook's first Ready=True, none for the
// reconciles after it.
func TestOwnerObservesFirstReady(t *testing.T) {
	reg := prometheus.NewRegistry()
	created := metav1.NewTime(time.Now().Truncate(time.Second))
	gb := &Guestbook{ObjectMeta: metav1.ObjectMeta{Name: gbKey.Name, Namespace: gbKey.Namespace, Generation: 1, UID: "gb-1", CreationTimestamp: created}}
	c := fake.NewClientBuilder().WithScheme(newScheme()).WithObjects(gb).WithStatusSubresource(gb).Build()
	grade, err := wgctrl.New(wgctrl.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	owner, err := grade.NewOwner(wgctrl.OwnerConfig{Client: c, Recorder: events.NewFakeRecorder(10)}, &Guestbook{}, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	r := &GuestbookReconciler{Client: c, Readiness: owner}
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: gbKey}); err != nil {
			t.Fatal(err)
		}
	}
	reconcile() // the stream has not reported: Ready=Unknown
	grade.Observer().StateChanged(wgwatch.State{Stream: "ConfigMap.v1", Phase: wgwatch.PhaseStreaming, Reason: wgwatch.ReasonWatching})
	reconcile()
	reconcile()
	count := func() uint64 {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "watchgrade_time_to_first_ready_seconds" {
				var n uint64
				for _, m := range f.GetMetric() {
					n += m.GetHistogram().GetSampleCount()
				}
				return n
			}
		}
		t.Fatal("no watchgrade_time_to_first_ready_seconds in the registry")
		return 0
	}
	if n := count(); n != 1 {
		t.Errorf("time_to_first_ready observations = %d, want 1", n)
	}
}

// A status write that keeps conflicting is not an error a Reconcile
// returns (controller-runtime would log it at error level): Status
// requeues the owner, quietly. Nor is a write the API server did not take
// for being away or overloaded (a 500: retried after RetryFirst, doubling),
// nor one that fails as the manager stops; any other failure (RBAC that
// denies the status write) is.
func TestStatusConflictIsQuiet(t *testing.T) {
	gb := &Guestbook{ObjectMeta: metav1.ObjectMeta{Name: gbKey.Name, Namespace: gbKey.Namespace, Generation: 1}}
	base := fake.NewClientBuilder().WithScheme(newScheme()).WithObjects(gb).WithStatusSubresource(gb).Build()
	var fail error
	c := interceptor.NewClient(base, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			return fail
		},
	})
	owner := guestbookOwner(t, c)
	r := &GuestbookReconciler{Client: c, Readiness: owner}
	req := ctrl.Request{NamespacedName: gbKey}

	fail = apierrors.NewConflict(schema.GroupResource{Group: "webapp.example.com", Resource: "guestbooks"}, gbKey.Name, errors.New("the object has been modified"))
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Errorf("conflicts: Reconcile() = %v, want nil", err)
	}
	fail = apierrors.NewInternalError(errors.New("etcd timed out"))
	if res, err := r.Reconcile(t.Context(), req); err != nil || res.RequeueAfter != wgstatus.RetryFirst {
		t.Errorf("a 500: Reconcile() = %+v, %v; want no error, a requeue after %v", res, err, wgstatus.RetryFirst)
	}
	if res, err := r.Reconcile(t.Context(), req); err != nil || res.RequeueAfter != 2*wgstatus.RetryFirst {
		t.Errorf("a second 500: Reconcile() = %+v, %v; want no error, a requeue after %v", res, err, 2*wgstatus.RetryFirst)
	}
	fail = apierrors.NewForbidden(schema.GroupResource{Group: "webapp.example.com", Resource: "guestbooks/status"}, gbKey.Name, errors.New("RBAC"))
	if _, err := r.Reconcile(t.Context(), req); !apierrors.IsForbidden(err) {
		t.Errorf("a 403: Reconcile() = %v, want it returned", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	fail = ctx.Err()
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Errorf("the manager stopping: Reconcile() = %v, want nil", err)
	}
}

// A write conflict from a spec change under the reconcile: Status reads
// the owner again, at generation 2, and writes the verdict of the
// generation Reconcile read (1) as observed, never 2: kstatus reads the
// owner InProgress until a reconcile of generation 2 writes it. Before,
// generation 2 was written Ready=True before any reconcile saw it.
func TestStatusAfterAConflictWritesTheReconciledGeneration(t *testing.T) {
	gb := &Guestbook{ObjectMeta: metav1.ObjectMeta{Name: gbKey.Name, Namespace: gbKey.Namespace, Generation: 1}}
	base := fake.NewClientBuilder().WithScheme(newScheme()).WithObjects(gb).WithStatusSubresource(gb).Build()
	conflicted := false
	c := interceptor.NewClient(base, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if !conflicted {
				conflicted = true
				spec := &Guestbook{}
				if err := base.Get(ctx, gbKey, spec); err != nil {
					return err
				}
				spec.Generation = 2 // the spec changed under the reconcile
				if err := base.Update(ctx, spec); err != nil {
					return err
				}
				return apierrors.NewConflict(schema.GroupResource{Group: "webapp.example.com", Resource: "guestbooks"}, gbKey.Name, errors.New("the object has been modified"))
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	owner := guestbookOwner(t, c)
	owner.Accumulator().SetGate(gbKey, wgreadiness.Established("Spec", "Valid", "the spec is valid"))
	read := &Guestbook{}
	if err := c.Get(t.Context(), gbKey, read); err != nil {
		t.Fatal(err)
	}
	if err := statusErr(owner, t, read); err != nil {
		t.Fatalf("Status() = %v", err)
	}
	got := &Guestbook{}
	if err := base.Get(t.Context(), gbKey, got); err != nil {
		t.Fatal(err)
	}
	if got.Generation != 2 {
		t.Fatalf("generation = %d, want 2: the case is not set up", got.Generation)
	}
	if got.Status.ObservedGeneration != 1 {
		t.Errorf("status.observedGeneration = %d, want 1 (the generation Reconcile read)", got.Status.ObservedGeneration)
	}
	for _, cond := range got.Status.Conditions {
		if cond.ObservedGeneration != 1 {
			t.Errorf("%s.observedGeneration = %d, want 1", cond.Type, cond.ObservedGeneration)
		}
	}
	// A newer generation's status is not written over.
	got.Status.ObservedGeneration = 2
	if err := base.Status().Update(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	stale := read.DeepCopyObject().(*Guestbook) // as the cache had it: a conflict
	if err := statusErr(owner, t, stale); err != nil {
		t.Fatalf("Status() of a stale read = %v", err)
	}
	if err := base.Get(t.Context(), gbKey, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.ObservedGeneration != 2 {
		t.Errorf("after Status of generation 1 over generation 2's status: observedGeneration = %d, want 2", got.Status.ObservedGeneration)
	}
}

// An owner deleted under the reconcile is routine (no error for
// controller-runtime to log and retry) and forgotten, not tracked again for
// the life of the process, whether Status had a write to make (its
// NotFound tells), or nothing (its status already said it all, or a new
// owner's first write waits for its stream: the cached client tells).
func TestStatusOfADeletedOwnerIsQuiet(t *testing.T) {
	for _, tc := range []struct {
		name       string
		informer   bool // the ConfigMaps' stream is live
		reconcile  bool // reconciled to Ready before it is deleted
		eventFirst bool // its delete event comes before the status step
	}{
		{"a write due", true, false, false},
		{"nothing to write", true, true, false},
		{"its first write waiting for the stream", false, false, false},
		{"a write due, deleted before the status step", true, false, true},
		{"nothing to write, deleted before the status step", true, true, true},
		{"its first write waiting for the stream, deleted before the status step", false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, &corev1.ConfigMap{})
				if tc.informer {
					defer runConfigMapInformer(t, f, watchtest.Faults{})()
					time.Sleep(time.Minute)
					synctest.Wait()
				}
				if tc.reconcile {
					f.reconcile(t)
					if s, r := condition(f.guestbook(t), wgreadiness.ConditionReady); s != metav1.ConditionTrue {
						t.Fatalf("Ready = %s (%s), want True", s, r)
					}
					f.events()
				}
				gb := f.guestbook(t)
				if err := f.client.Delete(t.Context(), gb); err != nil {
					t.Fatal(err)
				}
				// The owner informer's delete event, during the Reconcile
				// (before its status step) or after it.
				if tc.eventFirst {
					f.owner.DeleteEvent(gb)
				}
				if err := statusErr(f.owner, t, gb); err != nil {
					t.Errorf("Status() of a deleted owner = %v, want nil", err)
				}
				if !tc.eventFirst {
					f.owner.DeleteEvent(gb)
				}
				if g := f.owner.Accumulator().Gates(gbKey); g != nil {
					t.Errorf("Gates() of the deleted owner = %+v, want none: it is still tracked", g)
				}
				if got := f.events(); len(got) != 0 {
					t.Errorf("Events = %q, want none", got)
				}
			})
		})
	}
}

// runConfigMapInformer runs a ConfigMaps' informer of f's Grader over a
// simulated API server with faults, inside a synctest bubble; the func it
// returns stops it as the cache's RemoveInformer does, and waits.
func runConfigMapInformer(t *testing.T, f *fixture, faults watchtest.Faults) (remove func()) {
	srv := watchtest.NewServer(watchtest.ServerOptions{})
	srv.SetFaults(faults)
	inf := f.grade.NewInformer(srv, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { inf.RunWithContext(ctx) })
	return func() {
		cancel()
		wg.Wait()
		synctest.Wait()
	}
}

// An informer removed from the cache (cache.RemoveInformer, as operators
// that watch CRDs dynamically do) and made again: the stopped one's last
// stall no longer keeps the owners Stalled, nor its unfinished sync the
// probe failing. Before, the Grader merged every informer ever made for
// the kind, for good.
func TestStoppedInformerIsForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, &corev1.ConfigMap{})
		remove := runConfigMapInformer(t, f, watchtest.Faults{Err: watchtest.Forbidden()})
		time.Sleep(wgwatch.DefaultHumanGrace + time.Minute)
		synctest.Wait()
		f.reconcile(t)
		if s, r := condition(f.guestbook(t), wgreadiness.ConditionStalled); s != metav1.ConditionTrue {
			t.Fatalf("denied: Stalled = %s (%s), want True: the case is not set up", s, r)
		}
		remove()
		defer runConfigMapInformer(t, f, watchtest.Faults{})()
		time.Sleep(time.Minute)
		synctest.Wait()
		f.reconcile(t)
		gb := f.guestbook(t)
		if s, r := condition(gb, wgreadiness.ConditionReady); s != metav1.ConditionTrue {
			t.Errorf("the kind's new informer streams: Ready = %s (%s), want True", s, r)
		}
		if err := f.grade.ReadyzCheck(nil); err != nil {
			t.Errorf("the kind's new informer synced: ReadyzCheck() = %v, want nil", err)
		}
	})
}

// An informer that never synced, removed, and not made again: the probe
// does not wait for it.
func TestStoppedInformerDoesNotHoldTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, &corev1.ConfigMap{})
		remove := runConfigMapInformer(t, f, watchtest.Faults{Err: watchtest.Forbidden()})
		time.Sleep(time.Minute)
		synctest.Wait()
		if err := f.grade.ReadyzCheck(nil); err == nil {
			t.Fatalf("never synced: ReadyzCheck() = nil: the case is not set up")
		}
		remove()
		if err := f.grade.ReadyzCheck(nil); err != nil {
			t.Errorf("its only informer removed: ReadyzCheck() = %v, want nil", err)
		}
	})
}

// The probe does not pass before anything is known: a manager with an
// Owner is not ready until the informers of the owner kind and of the
// kinds it watches exist and have synced once. Before, it answered 200
// until the first informer reported.
func TestReadyzWaitsForTheOwnersInformers(t *testing.T) {
	grade, err := wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	opts := grade.ManagerOptions(manager.Options{Scheme: newScheme(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	mgr, err := ctrl.NewManager(&rest.Config{Host: "http://127.0.0.1:1"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := grade.Owner(mgr, &Guestbook{}, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	gbStream := wgctrl.StreamName(schema.GroupVersionKind{Group: "webapp.example.com", Version: "v1", Kind: "Guestbook"})
	cmStream := wgctrl.StreamName(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	err = grade.ReadyzCheck(nil)
	if !errors.Is(err, wgwatch.ErrNotSynced) || !strings.Contains(err.Error(), gbStream) || !strings.Contains(err.Error(), cmStream) {
		t.Errorf("before any informer exists: ReadyzCheck() = %v, want ErrNotSynced naming %s and %s", err, gbStream, cmStream)
	}
	grade.Observer().StateChanged(wgwatch.State{Stream: cmStream, Phase: wgwatch.PhaseStreaming})
	if err := grade.ReadyzCheck(nil); !errors.Is(err, wgwatch.ErrNotSynced) {
		t.Errorf("one of two synced: ReadyzCheck() = %v, want ErrNotSynced", err)
	}
	grade.Observer().StateChanged(wgwatch.State{Stream: gbStream, Phase: wgwatch.PhaseStreaming})
	if err := grade.ReadyzCheck(nil); err != nil {
		t.Errorf("both synced: ReadyzCheck() = %v, want nil", err)
	}
}

// guestbookOwner is the Guestbooks' Owner of a new Grader, writing
// through c.
func guestbookOwner(t *testing.T, c client.Client) *wgctrl.Owner {
	t.Helper()
	grade, err := wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	owner, err := grade.NewOwner(wgctrl.OwnerConfig{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(10)}, &Guestbook{})
	if err != nil {
		t.Fatal(err)
	}
	return owner
}

// Status called twice in one Reconcile (a Reconcile that writes the status
// on an early return and again in its deferred step, say) sees what the
// first call wrote: one write, one Warning for one stall.
func TestStatusTwiceInOneReconcileRecordsOneWarning(t *testing.T) {
	f := newFixture(t)
	f.owner.Accumulator().SetGate(gbKey, wgreadiness.Stalled("Spec", "InvalidSpec", "spec.replicas must be positive"))
	gb := f.guestbook(t)
	for range 2 {
		if err := statusErr(f.owner, t, gb); err != nil {
			t.Fatalf("Status() = %v", err)
		}
	}
	if got := f.events(); len(got) != 1 {
		t.Errorf("Events = %q, want one Warning", got)
	}
}

// An owner kind whose CRD serves no status subresource answers every
// status write NotFound: that is not a deletion. The owner stays tracked
// and the error names the fix.
func TestStatusWithoutAStatusSubresourceIsAnError(t *testing.T) {
	gb := &Guestbook{ObjectMeta: metav1.ObjectMeta{Name: gbKey.Name, Namespace: gbKey.Namespace, Generation: 1}}
	c := fake.NewClientBuilder().WithScheme(newScheme()).WithObjects(gb).Build() // no WithStatusSubresource
	owner := guestbookOwner(t, c)
	owner.Accumulator().SetGate(gbKey, wgreadiness.Established("Spec", "Valid", "the spec is valid"))
	read := &Guestbook{}
	if err := c.Get(t.Context(), gbKey, read); err != nil {
		t.Fatal(err)
	}
	err := statusErr(owner, t, read)
	if err == nil || !strings.Contains(err.Error(), "subresource") {
		t.Errorf("Status() = %v, want an error naming the status subresource", err)
	}
	if g := owner.Accumulator().Gates(gbKey); g == nil {
		t.Errorf("the owner was forgotten: it was taken for deleted")
	}
}

// statusErr is the status step of a Reconcile that succeeded, as its
// deferred call returns it: the error only.
func statusErr(o *wgctrl.Owner, t *testing.T, obj client.Object) error {
	_, err := o.Status(t.Context(), obj, ctrl.Result{}, nil)
	return err
}
