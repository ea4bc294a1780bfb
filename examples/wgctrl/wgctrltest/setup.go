package wgctrltest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing/synctest"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/meta/testrestmapper"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crrecorder "sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/watchgrade/watchgrade/examples/wgctrl"
)

// setupManager is the manager Operator.SetupWithManager is given: the
// controllers it builds are added to it, and it runs none. What it does
// not provide (the embedded Manager is nil) panics, and setup says so.
type setupManager struct {
	manager.Manager
	client    client.Client
	apiReader client.Reader
	scheme    *runtime.Scheme
	cache     cache.Cache
	indexer   client.FieldIndexer
	added     []manager.Runnable
	// For Operator.Main: the Grader it is given, the Events' recorder,
	// the lease, and the probes it registers.
	grade    *wgctrl.Grader
	recorder crrecorder.EventRecorder
	elected  <-chan struct{}
	readyz   []namedCheck
	healthz  []namedCheck
}

// namedCheck is a probe's check as registered.
type namedCheck struct {
	name  string
	check healthz.Checker
}

func (m *setupManager) GetClient() client.Client             { return m.client }
func (m *setupManager) GetAPIReader() client.Reader          { return m.apiReader }
func (m *setupManager) GetScheme() *runtime.Scheme           { return m.scheme }
func (m *setupManager) GetRESTMapper() meta.RESTMapper       { return m.client.RESTMapper() }
func (m *setupManager) GetLogger() logr.Logger               { return logr.Discard() }
func (m *setupManager) GetCache() cache.Cache                { return m.cache }
func (m *setupManager) GetFieldIndexer() client.FieldIndexer { return m.indexer }
func (m *setupManager) Add(r manager.Runnable) error         { m.added = append(m.added, r); return nil }
func (m *setupManager) Elected() <-chan struct{}             { return m.elected }
func (m *setupManager) GetEventRecorder(string) crrecorder.EventRecorder {
	if m.recorder == nil {
		panic("GetEventRecorder") // SetupWithManager's manager has none
	}
	return m.recorder
}
func (m *setupManager) AddReadyzCheck(name string, check healthz.Checker) error {
	m.readyz = append(m.readyz, namedCheck{name, check})
	return nil
}
func (m *setupManager) AddHealthzCheck(name string, check healthz.Checker) error {
	m.healthz = append(m.healthz, namedCheck{name, check})
	return nil
}
func (m *setupManager) GetControllerOptions() config.Controller {
	return config.Controller{SkipNameValidation: ptr.To(true)} // one per process, one name
}

// fieldIndex is an index a setup adds (mgr.GetFieldIndexer().IndexField):
// the kit's client is built with each (fake.ClientBuilder.WithIndex), so
// that Reconcile lists by it as it does from the manager's cache.
type fieldIndex struct {
	obj     client.Object
	field   string
	extract client.IndexerFunc
}

// indexes records the indexes of the setup run before the world is
// built, each kind and field once; the setups of each process find them
// in the client already.
type indexes struct {
	scheme *runtime.Scheme
	all    []fieldIndex
}

func (x *indexes) IndexField(_ context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	gvk, err := apiutil.GVKForObject(obj, x.scheme)
	if err != nil {
		return err
	}
	for _, i := range x.all {
		if g, _ := apiutil.GVKForObject(i.obj, x.scheme); g == gvk && i.field == field {
			return fmt.Errorf("indexer conflict: field %q of %v indexed twice", field, gvk)
		}
	}
	x.all = append(x.all, fieldIndex{obj: obj, field: field, extract: extract})
	return nil
}

// built is the indexer of a process's setup: the world's client has the
// indexes already.
type built struct{}

func (built) IndexField(context.Context, client.Object, string, client.IndexerFunc) error { return nil }

// setup runs the operator's setup on m: Operator.Main with m.grade, or
// Operator.SetupWithManager with readiness. It returns the one controller
// it built, which is the operator's reconciler (the kit calls its
// Reconcile: controller-runtime's, which recovers a panic, then yours),
// and the Owner: readiness, or the one Main made.
func setup(op Operator, m *setupManager, readiness *wgctrl.Owner) (ctl controller.Controller, _ *wgctrl.Owner, err error) {
	what := "Operator.SetupWithManager"
	if op.Main != nil {
		what = "Operator.Main"
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s used a part of the manager the kit does not provide (it has GetClient, GetAPIReader, GetScheme, GetRESTMapper, GetCache, GetFieldIndexer, GetLogger, GetControllerOptions, Add, Elected, GetEventRecorder, AddReadyzCheck and AddHealthzCheck): %v", what, p)
		}
	}()
	if op.Main != nil {
		if err := op.Main(m, m.grade); err != nil {
			return nil, nil, fmt.Errorf("Operator.Main: %w", err)
		}
		var owners []*wgctrl.Owner
		for _, r := range m.added {
			if o, ok := r.(*wgctrl.Owner); ok {
				owners = append(owners, o)
			}
		}
		if len(owners) != 1 {
			return nil, nil, fmt.Errorf("Operator.Main made %d Owners with grade.Owner(mgr, ...), want one: the owner kind's", len(owners))
		}
		readiness = owners[0]
		if len(m.readyz) == 0 {
			return nil, nil, fmt.Errorf("Operator.Main registers no readiness check: add mgr.AddReadyzCheck(\"watches\", grade.ReadyzCheck), or a pod is ready before its caches have synced")
		}
	} else if err := op.SetupWithManager(m, readiness); err != nil {
		return nil, nil, fmt.Errorf("Operator.SetupWithManager: %w", err)
	}
	var ctls []controller.Controller
	for _, r := range m.added {
		if c, ok := r.(controller.Controller); ok {
			ctls = append(ctls, c)
		}
	}
	if len(ctls) != 1 {
		return nil, nil, fmt.Errorf("%s built %d controllers, want one: the owner kind's", what, len(ctls))
	}
	if !readiness.RequeueAdded() {
		return nil, nil, fmt.Errorf("the controller %s builds has no Owner.Requeue source, so an owner whose verdict changes (a denial repaired) is not reconciled until its next event: build it with readiness.ControllerManagedBy(mgr), or add WatchesRawSource(readiness.Requeue())", what)
	}
	return ctls[0], readiness, nil
}

// readyz is the readiness probe Operator.Main registered, as the
// manager's /readyz answers: every check passes, or the first that
// fails says why.
func (m *setupManager) readyzCheck(req *http.Request) error {
	for _, c := range m.readyz {
		if err := c.check(req); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	return nil
}

// watchedBySetup learns the kinds the controller of op.SetupWithManager
// watches, whichever builder made it: it builds the controller on an
// Owner of its own and starts it in the bubble, and each source asks the
// cache for its informer; it is stopped then. It fails, naming the kind,
// when the controller watches a kind its Owner does not depend on (a kind
// left out of grade.Owner by a controller built with
// ctrl.NewControllerManagedBy). It returns the indexes the setup adds
// too.
func watchedBySetup(op Operator) (watched, ownerWatches []client.Object, _ []fieldIndex, _ error) {
	grade, err := wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry(), Logger: logr.Discard()})
	if err != nil {
		return nil, nil, nil, err
	}
	c := fake.NewClientBuilder().WithScheme(op.Scheme).WithRESTMapper(testrestmapper.TestOnlyStaticRESTMapper(op.Scheme)).Build()
	var readiness *wgctrl.Owner
	if op.Main == nil {
		if readiness, err = grade.NewOwner(wgctrl.OwnerConfig{Client: c, Recorder: &events.FakeRecorder{}}, op.Owner, op.OwnerWatches...); err != nil {
			return nil, nil, nil, err
		}
	}
	asked := &askedCache{}
	idx := &indexes{scheme: op.Scheme}
	elected := make(chan struct{})
	close(elected)
	m := &setupManager{client: c, apiReader: c, scheme: op.Scheme, cache: asked, indexer: idx,
		grade: grade, recorder: &events.FakeRecorder{}, elected: elected}
	ctl, readiness, err := setup(op, m, readiness)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ctl.Start(ctx) // it fails once stopped: its sources never sync
	}()
	synctest.Wait()
	cancel()
	<-done
	synctest.Wait()

	ownerGVK, err := apiutil.GVKForObject(op.Owner, op.Scheme)
	if err != nil {
		return nil, nil, nil, err
	}
	depends := map[string]bool{}
	for _, k := range readiness.Kinds() {
		if gvk, err := apiutil.GVKForObject(k, op.Scheme); err == nil {
			depends[wgctrl.StreamName(gvk)] = true
		}
	}
	var names, missing []string
	for _, obj := range asked.objs() {
		gvk, err := apiutil.GVKForObject(obj, op.Scheme)
		if err != nil {
			return nil, nil, nil, err
		}
		name := wgctrl.StreamName(gvk)
		if gvk == ownerGVK || slices.Contains(names, name) {
			continue
		}
		names = append(names, name)
		watched = append(watched, obj)
		if !depends[name] {
			missing = append(missing, name)
		}
	}
	if op.Main != nil {
		// What Main passed to grade.Owner beyond the controller's watches:
		// kinds the Owner asks the cache for itself.
		for _, k := range readiness.Kinds() {
			if gvk, err := apiutil.GVKForObject(k, op.Scheme); err == nil && !slices.Contains(names, wgctrl.StreamName(gvk)) {
				ownerWatches = append(ownerWatches, k)
			}
		}
	}
	if len(missing) > 0 {
		return nil, nil, nil, fmt.Errorf("the controller Operator.SetupWithManager builds watches %s, which its Owner does not depend on, so no owner hears of that kind's trouble: build it with readiness.ControllerManagedBy(mgr), whose Owns and Watches are the kinds the owners depend on, or pass the kind to grade.Owner", strings.Join(missing, ", "))
	}
	return watched, ownerWatches, idx.all, nil
}

// askedCache is the cache of watchedBySetup's controller: it records the
// object each source asks for an informer of, and has none.
type askedCache struct {
	cache.Cache
	mu    sync.Mutex
	asked []client.Object
}

func (a *askedCache) GetInformer(ctx context.Context, obj client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	a.mu.Lock()
	a.asked = append(a.asked, obj)
	a.mu.Unlock()
	<-ctx.Done()
	return nil, ctx.Err()
}

// objs returns the objects asked for, metadata-only ones as
// metav1.PartialObjectMetadata, in a stable order (sources start
// concurrently): sorted by their Go type and kind.
func (a *askedCache) objs() []client.Object {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := slices.Clone(a.asked)
	key := func(o client.Object) string {
		k := fmt.Sprintf("%T", o)
		if m, ok := o.(*metav1.PartialObjectMetadata); ok {
			k += m.GroupVersionKind().String()
		}
		return k
	}
	slices.SortStableFunc(out, func(x, y client.Object) int { return strings.Compare(key(x), key(y)) })
	return out
}
