package ctrlruntime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/watchgrade/watchgrade/examples/watchtarget"
	wgmetrics "github.com/watchgrade/watchgrade/metrics"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// DefaultName is the default name of the controller, of its event recorder
// (the reportingController of its Events) and of its logger.
const DefaultName = "watchtarget-ctrlruntime"

// DefaultUnresolvedRetry is how often, by default, a WatchTarget naming a
// resource that cannot be followed is looked at again.
const DefaultUnresolvedRetry = 30 * time.Second

// TargetsStream is the stream name of the cache's WatchTarget informer:
// StreamName(watchtarget.Resource).
const TargetsStream = "watchtargets.v1alpha1.examples.watchgrade.dev"

// Options configure an [Instrumentation] and the controller that
// [SetupWithManager] adds. The zero value works.
type Options struct {
	// Namespace restricts the manager's cache, and so the controller, to
	// the WatchTargets and resources of one namespace; empty means every
	// namespace. See the package documentation for what it does to stream
	// names.
	Namespace string
	// Policy grades the informers' session endings; the zero value means
	// watchgrade's defaults. Its HumanGrace also delays the Stalled gate of
	// a resource that cannot be followed.
	Policy wgwatch.Policy
	// Observer, if set, also sees every informer's states and session
	// endings (a log, or a test's probe). It must not block.
	Observer wgwatch.Observer
	// Registerer receives the watchgrade metrics. Nil means
	// controller-runtime's registry (ctrlmetrics.Registry), which the
	// manager's metrics server serves.
	Registerer prometheus.Registerer
	// Name is the controller's name, the reportingController of its Events
	// and its logger's name. Empty means DefaultName. controller-runtime
	// requires controller names to be unique in a process.
	Name string
	// UnresolvedRetry is how often a WatchTarget naming a resource that
	// cannot be followed is looked at again; 0 means
	// DefaultUnresolvedRetry.
	UnresolvedRetry time.Duration
}

// withDefaults fills in the defaults documented on each field.
func (o Options) withDefaults() Options {
	o.Name = cmp.Or(o.Name, DefaultName)
	if o.Registerer == nil {
		o.Registerer = ctrlmetrics.Registry
	}
	if o.UnresolvedRetry <= 0 {
		o.UnresolvedRetry = DefaultUnresolvedRetry
	}
	return o
}

// humanGrace is Policy.HumanGrace with watchgrade's default.
func (o Options) humanGrace() time.Duration {
	if o.Policy.HumanGrace > 0 {
		return o.Policy.HumanGrace
	}
	return wgwatch.DefaultHumanGrace
}

// Instrumentation is what watchgrade adds to one manager: the cache's
// NewInformer hook that grades every informer, the readiness accumulator the
// informers report to, the watch metrics, and the link from the accumulator
// to the controller's workqueue.
//
// Make one with [NewInstrumentation], apply it to the manager's options with
// [Instrumentation.Configure] before manager.New, and pass it to
// [SetupWithManager]. One Instrumentation serves one manager. Its methods are
// safe for concurrent use.
type Instrumentation struct {
	opts     Options
	log      logr.Logger
	acc      *wgreadiness.Accumulator
	metrics  *wgmetrics.WatchMetrics
	observer wgwatch.Observer

	mu sync.Mutex
	// scheme and mapper identify the resource behind each informer. Both are
	// the manager's: Configure records the scheme and captures the mapper as
	// the manager makes it; SetupWithManager sets them again from the
	// manager, for callers who set only the NewInformer hook.
	scheme *runtime.Scheme
	mapper meta.RESTMapper
	// queue is the controller's workqueue, set when the controller starts
	// its sources.
	queue workqueue.TypedRateLimitingInterface[reconcile.Request]
	// setUp is true once SetupWithManager has used this Instrumentation.
	setUp bool
}

// NewInstrumentation registers the watch metrics and returns an
// Instrumentation ready to Configure a manager with. If the metrics are
// already registered with opts.Registerer (a second manager in one process),
// it reuses them.
func NewInstrumentation(opts Options) (*Instrumentation, error) {
	opts = opts.withDefaults()
	wm, err := watchMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("ctrlruntime: %w", err)
	}
	wm.AddResource(watchtarget.Resource.GroupResource())
	in := &Instrumentation{
		opts:    opts,
		log:     logf.Log.WithName(opts.Name),
		metrics: wm,
		// controller-runtime's own default, until Configure or
		// SetupWithManager records the manager's.
		scheme: clientgoscheme.Scheme,
	}
	// The accumulator turns informer states into one verdict per
	// WatchTarget and calls OnChange, off the informer's goroutine, when a
	// verdict changes: that is what requeues the target.
	acc, err := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{OnChange: in.requeue})
	if err != nil {
		return nil, err
	}
	in.acc = acc
	in.observer = wgwatch.Observers(in.acc, in.metrics, opts.Observer)
	return in, nil
}

// watchMetrics registers the watch metrics with reg, or returns the set
// already registered there.
func watchMetrics(reg prometheus.Registerer) (*wgmetrics.WatchMetrics, error) {
	wm, err := wgmetrics.NewWatchMetrics(reg, wgmetrics.WatchOptions{})
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(*wgmetrics.WatchMetrics); ok {
			return existing, nil
		}
	}
	return wm, err
}

// Accumulator returns the readiness accumulator every informer reports to.
func (in *Instrumentation) Accumulator() *wgreadiness.Accumulator { return in.acc }

// Metrics returns the watch metrics every informer reports to.
func (in *Instrumentation) Metrics() *wgmetrics.WatchMetrics { return in.metrics }

// Configure sets what the Instrumentation needs in the manager's options;
// call it before manager.New. It
//
//   - sets Cache.NewInformer to [Instrumentation.NewInformer], replacing any
//     hook already there;
//   - sets Cache.DefaultWatchErrorHandler, when unset, to
//     [wgwatch.WatchErrorLogger]: the reflectors' failures are logged
//     graded, where client-go's default logs each as an error;
//   - restricts the cache to Options.Namespace, when set, through
//     Cache.DefaultNamespaces (replacing any namespaces already there);
//   - wraps MapperProvider (controller-runtime's default when unset) so that
//     the RESTMapper the manager makes is recorded as it is made, before any
//     informer can exist, even one that a field indexer starts before
//     SetupWithManager;
//   - records Scheme (controller-runtime's default when unset).
func (in *Instrumentation) Configure(o *manager.Options) {
	o.Cache.NewInformer = in.NewInformer
	if o.Cache.DefaultWatchErrorHandler == nil {
		o.Cache.DefaultWatchErrorHandler = wgwatch.WatchErrorLogger(in.log.WithName("watch"), wgwatch.LogOptions{Policy: in.opts.Policy})
	}
	if in.opts.Namespace != "" {
		o.Cache.DefaultNamespaces = map[string]cache.Config{in.opts.Namespace: {}}
	}
	provider := o.MapperProvider
	if provider == nil {
		provider = apiutil.NewDynamicRESTMapper
	}
	o.MapperProvider = func(cfg *rest.Config, hc *http.Client) (meta.RESTMapper, error) {
		m, err := provider(cfg, hc)
		if err == nil {
			in.bind(nil, m)
		}
		return m, err
	}
	in.bind(o.Scheme, nil)
}

// bind records the manager's scheme and mapper; a nil one is left as it is.
func (in *Instrumentation) bind(s *runtime.Scheme, m meta.RESTMapper) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if s != nil {
		in.scheme = s
	}
	if m != nil {
		in.mapper = m
	}
}

// NewInformer is the manager cache's NewInformer hook (cache.Options): it
// builds the informer controller-runtime asks for exactly as the default hook
// does, from lw wrapped with [wgwatch.Instrument], so that the informer's
// lists, watches and session endings are graded and reported to the
// accumulator, the metrics and Options.Observer. The informer itself behaves
// as it would without the wrapper.
//
// The stream is named after the informer's resource (see the package
// documentation), found from obj's kind with the manager's RESTMapper. The
// cache has just mapped the same kind to build lw, so that lookup fails only
// if the mapper was not recorded (Configure and SetupWithManager were both
// skipped) or the resource vanished in between. The informer is then still
// graded, under a name and a resource label made from its kind (say
// "apps/v1, Kind=Deployment" and "Deployment.apps"), which no WatchTarget
// tracks and which no one can mistake for a resource name; the error is
// logged. Guessing a resource from the kind would be worse: a wrong guess
// looks right in every dashboard. An un-instrumented informer would be worse
// still: its failures would go unseen.
func (in *Instrumentation) NewInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	name, gr, err := in.identify(obj)
	if err != nil {
		in.log.Error(err, "cannot map the informer's kind to a resource; its stream is named after the kind", "stream", name)
	}
	ilw, err := wgwatch.Instrument(lw, wgwatch.InstrumentOptions{
		Resource: gr,
		Name:     name,
		Observer: in.observer,
		Policy:   in.opts.Policy,
	})
	if err != nil {
		// Only a nil ListerWatcher or an empty resource get here, and
		// neither happens: controller-runtime always passes a ListerWatcher
		// and identify always names a resource. Should it happen, a working
		// informer that is not graded beats a crash.
		in.log.Error(err, "informer is not instrumented", "stream", name)
		return toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
	}
	// controller-runtime's default hook is toolscache.NewSharedIndexInformer
	// (pkg/cache/internal/informers.go); keep it, only the ListerWatcher
	// differs.
	return toolscache.NewSharedIndexInformer(ilw, obj, resync, indexers)
}

// identify returns the stream name and resource of the informer for obj.
// On error they are made from obj's kind, or from its Go type if even the
// kind is unknown.
func (in *Instrumentation) identify(obj runtime.Object) (string, schema.GroupResource, error) {
	in.mu.Lock()
	scheme, mapper := in.scheme, in.mapper
	in.mu.Unlock()

	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		t := fmt.Sprintf("%T", obj)
		return t, schema.GroupResource{Resource: t}, err
	}
	if mapper == nil {
		err = errors.New("no RESTMapper recorded: call Configure before manager.New")
	} else {
		var mapping *meta.RESTMapping
		if mapping, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
			return StreamName(mapping.Resource) + representation(obj, gvk, scheme), mapping.Resource.GroupResource(), nil
		}
	}
	return gvk.String(), schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, err
}

// StreamName is the name of the stream of the cache's informer for gvr, in
// kubectl's fully-qualified form resource.version.group: "configmaps.v1",
// "deployments.v1.apps". It is what WatchTargets naming gvr track, and the
// name the accumulator's gates, Ready's message and the metrics' streams
// gauge use.
func StreamName(gvr schema.GroupVersionResource) string {
	name := gvr.Resource + "." + gvr.Version
	if gvr.Group != "" {
		name += "." + gvr.Group
	}
	return name
}

// representation returns the suffix that tells apart informers of one kind
// that hold other representations than the one Reconcile asks for (see
// objectFor): none for that one.
func representation(obj runtime.Object, gvk schema.GroupVersionKind, scheme *runtime.Scheme) string {
	switch obj.(type) {
	case *metav1.PartialObjectMetadata:
		return " (metadata)"
	case runtime.Unstructured:
		if _, typed := typedObject(gvk, scheme); typed {
			return " (unstructured)"
		}
	}
	return ""
}

// objectFor returns the object Reconcile asks the cache for to follow gvk:
// typed when the scheme knows the kind, so that the informer is the one the
// rest of the operator reads through the cached client; unstructured
// otherwise (custom resources the operator has no Go type for).
func objectFor(gvk schema.GroupVersionKind, scheme *runtime.Scheme) client.Object {
	if obj, ok := typedObject(gvk, scheme); ok {
		return obj
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}

// typedObject returns a new typed object of kind gvk, if the scheme has one.
func typedObject(gvk schema.GroupVersionKind, scheme *runtime.Scheme) (client.Object, bool) {
	if !scheme.Recognizes(gvk) {
		return nil, false
	}
	obj, err := scheme.New(gvk)
	if err != nil {
		return nil, false
	}
	co, ok := obj.(client.Object)
	if !ok {
		return nil, false
	}
	// A Go type registered under several kinds needs its kind set to be
	// told apart; for the others it changes nothing.
	co.GetObjectKind().SetGroupVersionKind(gvk)
	return co, true
}

// startRequeue is the controller source (source.Func) that links the
// accumulator to the controller: it keeps the workqueue the controller
// starts it with.
func (in *Instrumentation) startRequeue(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.queue = q
	return nil
}

// requeue is the accumulator's OnChange: it queues the owner whose verdict
// changed. It never blocks: a workqueue Add does not, and it is a no-op once
// the queue has shut down. Before the controller has started there is no
// queue and the call is dropped, which loses nothing: owners are only
// tracked by Reconcile, which runs after the sources have started, and
// every owner is reconciled once the controller starts anyway.
func (in *Instrumentation) requeue(key types.NamespacedName) {
	in.mu.Lock()
	q := in.queue
	in.mu.Unlock()
	if q != nil {
		q.Add(reconcile.Request{NamespacedName: key})
	}
}
