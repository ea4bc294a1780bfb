package wgctrl

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	wgmetrics "github.com/watchgrade/watchgrade/metrics"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// CacheSyncTimeout is the controllers' CacheSyncTimeout that
// [Grader.ManagerOptions] sets, with [Options.WaitForHuman], when the
// options leave it zero: ten years, in effect never. controller-runtime's
// own default, two minutes, turns a watched kind that RBAC denies, or whose
// CRD is missing, into a manager that exits and restarts for as long as no
// one fixes it; with this one the controller's workers wait for the human
// while the Owner's standby writer tells them (see the package
// documentation).
const CacheSyncTimeout = 10 * 365 * 24 * time.Hour

// Options configure a [Grader]. The zero value works.
type Options struct {
	// Policy grades the informers' session endings. Defaults to
	// watchgrade's defaults (wgwatch.Policy's zero value). Its HumanGrace
	// is also how long a watched kind that the API server does not serve
	// (a CRD not installed) is waited for before it is reported.
	Policy wgwatch.Policy
	// Observer, if set, also sees every informer's states and session
	// endings: a log, or a test's probe. It must not block.
	Observer wgwatch.Observer
	// Registerer receives the watch metrics. Defaults to
	// controller-runtime's registry (sigs.k8s.io/controller-runtime/pkg/metrics.Registry),
	// which the manager's metrics server serves. The metric names are
	// watchgrade's defaults, the ones the monitoring kit's rules and
	// dashboard query.
	Registerer prometheus.Registerer
	// Rollup configures every Owner's roll-up of gates into conditions.
	// Defaults to the readiness package's defaults.
	Rollup wgreadiness.Options
	// WaitForHuman has [Grader.ManagerOptions] set the controllers'
	// CacheSyncTimeout to [CacheSyncTimeout] (ten years) when the manager's
	// options leave it zero: a controller whose watched kind needs a human
	// (RBAC denies it, its CRD is missing) then waits for the human instead
	// of failing after controller-runtime's two minutes, which exits the
	// manager and crash-loops the pod, while the Owner's standby writer
	// reports the owners Stalled. A controller's own WithOptions still
	// wins. Defaults to false: controller-runtime's timeout is kept.
	WaitForHuman bool
	// Seed, if set, seeds the random spread of the informers' waits
	// (wgwatch.InstrumentOptions.Rand): each informer draws from a source
	// of its own, seeded from *Seed, its stream name, its namespace and
	// how many informers the Grader made before it, so that a test that
	// replays a history from a seed replays it
	// (github.com/watchgrade/watchgrade/examples/wgctrl/wgctrltest's
	// Operator.Seed sets it). Nil: math/rand/v2's global source.
	Seed *uint64
	// Logger receives the lines of the Grader and its Owners and, through
	// the watch error handler [Grader.ManagerOptions] installs, the
	// reflectors' failures as they are graded. Defaults to
	// controller-runtime's logger (sigs.k8s.io/controller-runtime/pkg/log.Log,
	// what ctrl.SetLogger sets) named "watchgrade". A test gives its own
	// to see which lines an operator logs at error level
	// (github.com/watchgrade/watchgrade/examples/wgctrl/wgctrltest records
	// them).
	Logger logr.Logger
}

// Grader grades every informer of one manager's cache and keeps the
// owners that depend on them. Make one with [New], pass the manager's
// options through [Grader.ManagerOptions] before the manager is made, then
// declare each owner kind with [Grader.Owner]. Its methods are safe for
// concurrent use.
type Grader struct {
	opts       Options
	log        logr.Logger
	metrics    *wgmetrics.WatchMetrics
	firstReady *wgmetrics.FirstReady
	clock      clock.WithTicker

	mu sync.Mutex
	// scheme and mapper identify the kind behind each informer. Both are
	// the manager's: ManagerOptions records the scheme and captures the
	// mapper as the manager makes it.
	scheme *runtime.Scheme
	mapper meta.RESTMapper
	// streams holds each informer the cache has made, by stream name:
	// one per representation of the kind it has made, and per namespace
	// where the cache is restricted to namespaces (see
	// [Grader.NewInformer]); objs holds the object the first of each
	// name was made for (its representation of the kind).
	streams wgwatch.Streams
	objs    map[string]runtime.Object
	// probing is true once ManagerOptions' NewCache has made the cache's
	// HTTP client answer the Grader's namespace probes (namespaceOf).
	probing bool
	// owners are told about every informer's states.
	owners []*Owner
	// managed is true once ManagerOptions has run.
	managed bool
	// cacheNamespaces and cacheByObject are the namespaces the manager's
	// cache options restrict informers to (DefaultNamespaces, and each
	// ByObject's), as ManagerOptions saw them.
	cacheNamespaces []string
	cacheByObject   map[client.Object][]string
	// synced answers ReadyzCheck.
	synced wgwatch.SyncCheck
	// leaderElection is the manager's option, as ManagerOptions saw it;
	// elected are the Elected channels of the managers Owner was given.
	leaderElection bool
	elected        []<-chan struct{}
}

// New registers the watch metrics and the time-to-first-Ready metrics with
// opts.Registerer and returns a Grader. If that registry already has them
// (a second manager in one process), they are reused.
func New(opts Options) (*Grader, error) {
	if err := opts.Rollup.Validate(); err != nil {
		return nil, fmt.Errorf("wgctrl: %w", err)
	}
	reg := opts.Registerer
	if reg == nil {
		reg = ctrlmetrics.Registry
	}
	wm, err := wgmetrics.NewWatchMetrics(reg, wgmetrics.WatchOptions{})
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(*wgmetrics.WatchMetrics); ok {
			wm, err = existing, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("wgctrl: %w", err)
	}
	fr, err := wgmetrics.NewFirstReady(reg, wgmetrics.FirstReadyOptions{})
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(*wgmetrics.FirstReady); ok {
			fr, err = existing, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("wgctrl: %w", err)
	}
	log := opts.Logger
	if log.GetSink() == nil {
		log = logf.Log.WithName("watchgrade")
	}
	g := &Grader{
		opts:       opts,
		log:        log,
		metrics:    wm,
		firstReady: fr,
		clock:      clock.RealClock{},
		scheme:     clientgoscheme.Scheme, // controller-runtime's default
		objs:       map[string]runtime.Object{},
	}
	g.streams.Observer = g.Observer()
	g.streams.InNamespace = wgwatch.ObserverFuncs{StateChangedFunc: g.stateChanged}
	g.streams.Configured = g.configuredNamespaces
	g.streams.Synced = &g.synced
	return g, nil
}

// Metrics returns the watch metrics every informer reports to.
func (g *Grader) Metrics() *wgmetrics.WatchMetrics { return g.metrics }

// FirstReady returns the time-to-first-Ready metrics, which every Owner
// feeds with each sighting of its objects: one observation per object,
// from its creation to its first Ready=True.
func (g *Grader) FirstReady() *wgmetrics.FirstReady { return g.firstReady }

// ManagerOptions returns o with what the Grader needs from the manager; pass
// the result to ctrl.NewManager. It
//
//   - sets Cache.NewInformer to a hook that grades every informer of the
//     cache ([Grader.NewInformer]), building it with the hook already
//     there, if any, from the graded ListerWatcher;
//   - sets Cache.DefaultWatchErrorHandler to [wgwatch.WatchErrorLogger]
//     on the Grader's logger, then the handler already there, if any: the
//     reflectors' failures are logged graded (an apiserver restart logs
//     nothing at the default verbosity, a denial one error), where
//     client-go's default logs each failed list or watch as an error;
//   - wraps NewCache (controller-runtime's default when unset) so that the
//     Grader can tell which namespace each informer of a cache restricted
//     to namespaces serves (see [Grader.NewInformer]);
//   - wraps MapperProvider (controller-runtime's default when unset) to
//     record the RESTMapper the manager makes, before any informer exists;
//   - records Scheme (controller-runtime's default when unset);
//   - with [Options.WaitForHuman], sets Controller.CacheSyncTimeout to
//     [CacheSyncTimeout] when it is zero, so that a watched kind that needs
//     a human does not make the manager exit (a controller's own
//     WithOptions still wins).
func (g *Grader) ManagerOptions(o manager.Options) manager.Options {
	build := o.Cache.NewInformer
	o.Cache.NewInformer = func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
		return g.newInformer(build, lw, obj, resync, indexers)
	}
	logs := wgwatch.WatchErrorLogger(g.log.WithName("watch"), wgwatch.LogOptions{Policy: g.opts.Policy})
	if theirs := o.Cache.DefaultWatchErrorHandler; theirs != nil {
		o.Cache.DefaultWatchErrorHandler = func(ctx context.Context, r *toolscache.Reflector, err error) {
			logs(ctx, r, err)
			theirs(ctx, r, err)
		}
	} else {
		o.Cache.DefaultWatchErrorHandler = logs
	}
	newCache := o.NewCache
	if newCache == nil {
		newCache = cache.New
	}
	o.NewCache = func(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
		if opts.HTTPClient != nil {
			opts.HTTPClient = g.probed(opts.HTTPClient)
		}
		return newCache(cfg, opts)
	}
	provider := o.MapperProvider
	if provider == nil {
		provider = apiutil.NewDynamicRESTMapper
	}
	o.MapperProvider = func(cfg *rest.Config, hc *http.Client) (meta.RESTMapper, error) {
		m, err := provider(cfg, hc)
		if err == nil {
			g.mu.Lock()
			g.mapper = m
			g.mu.Unlock()
		}
		return m, err
	}
	if g.opts.WaitForHuman && o.Controller.CacheSyncTimeout == 0 {
		o.Controller.CacheSyncTimeout = CacheSyncTimeout
	}
	g.mu.Lock()
	if o.Scheme != nil {
		g.scheme = o.Scheme
	}
	g.managed = true
	var leases []<-chan struct{}
	if o.LeaderElection && !g.leaderElection {
		leases = slices.Clone(g.elected)
	}
	g.leaderElection = g.leaderElection || o.LeaderElection
	g.cacheNamespaces = slices.Sorted(maps.Keys(o.Cache.DefaultNamespaces))
	g.cacheByObject = map[client.Object][]string{}
	for obj, byObject := range o.Cache.ByObject {
		g.cacheByObject[obj] = slices.Sorted(maps.Keys(byObject.Namespaces))
	}
	g.mu.Unlock()
	for _, elected := range leases {
		g.streams.AwaitLease(elected) // the replicas' probe: see ReadyzCheck
	}
	return o
}

// NewInformer is the cache's NewInformer hook: it builds the informer
// controller-runtime asks for as its default hook does
// (toolscache.NewSharedIndexInformer), from lw wrapped with
// [wgwatch.Instrument], so that its lists, watches and session endings are
// graded and reported to every Owner, the metrics and Options.Observer. The
// informer behaves as it would without the wrapper; once its Run returns
// (the cache's RemoveInformer, or the manager stopping) the Grader forgets
// its state, so that a kind's informer removed and made again is graded by
// the one that runs; a stall it stopped in (RBAC denied) stands until the
// new informer of its namespace has been live or needs a human itself.
//
// The stream is named by [StreamName] from obj's kind, whatever its
// representation (typed, unstructured, metadata-only). A cache restricted
// to namespaces (cache.Options.DefaultNamespaces) makes one informer per
// namespace for a kind, all under that name: the metrics' gauge and the
// probe see the kind's worst state among its informers, and each Owner
// the states of the namespaces each owner follows ([Owner.FollowNamespaces]). The
// hook is not told an informer's namespace: the Grader asks the
// ListerWatcher with a list that the cache's HTTP client, as
// ManagerOptions wraps it, answers without sending it; an informer made
// otherwise (over watchtest, say) serves, as far as the Grader knows,
// every namespace. Each informer's session endings are counted as they
// come. Its resource (the metrics label) comes from the manager's
// RESTMapper; should that lookup fail, the label is the kind's
// ("ConfigMap", "Deployment.apps") and the error is logged: a guess at the
// plural would look right on every dashboard and be wrong.
func (g *Grader) NewInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	return g.newInformer(nil, lw, obj, resync, indexers)
}

// NewInformerInNamespace is [Grader.NewInformer] for an informer whose
// lists and watches lw restricts to namespace, as a cache restricted to
// namespaces makes one per namespace: the Owners that follow namespace
// ([Owner.FollowNamespaces]) follow it. It is for informers made without
// the cache, over watchtest's simulated API server in a test, say
// (github.com/watchgrade/watchgrade/examples/wgctrl/wgctrltest does);
// the cache's hook finds the namespace itself.
func (g *Grader) NewInformerInNamespace(namespace string, lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	name, gr, err := g.identify(obj)
	if err != nil {
		g.log.Error(err, "cannot map the informer's kind to a resource; its metrics are labelled with the kind", "stream", name)
	}
	return g.newInformerIn(nil, namespace, name, gr, lw, obj, resync, indexers)
}

// newInformer is NewInformer, building the informer with build (the
// user's own hook), or as controller-runtime's default does when nil.
func (g *Grader) newInformer(build func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer,
	lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	if build == nil {
		build = toolscache.NewSharedIndexInformer
	}
	name, gr, err := g.identify(obj)
	if err != nil {
		g.log.Error(err, "cannot map the informer's kind to a resource; its metrics are labelled with the kind", "stream", name)
	}
	return g.newInformerIn(build, g.namespaceOf(lw), name, gr, lw, obj, resync, indexers)
}

// newInformerIn is newInformer for an informer restricted to namespace
// ("" for every namespace), named name, of resource gr.
func (g *Grader) newInformerIn(build func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer,
	namespace, name string, gr schema.GroupResource, lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	if build == nil {
		build = toolscache.NewSharedIndexInformer
	}
	inf, newNamespace := g.streams.Add(name, namespace, nil) // nothing published yet
	g.mu.Lock()
	if g.objs[name] == nil {
		g.objs[name] = obj
	}
	owners := slices.Clone(g.owners)
	g.mu.Unlock()
	if newNamespace {
		// Owners that depend on the kind in this namespace follow its
		// informer from now on.
		for _, o := range owners {
			o.status.Retrack(name)
		}
	}
	observer := g.Observer()
	var rnd *rand.Rand
	if g.opts.Seed != nil {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s/%s/%d", name, namespace, len(g.streams.Namespaces(name))-1)
		rnd = rand.New(rand.NewPCG(*g.opts.Seed, h.Sum64()))
	}
	ilw, err := wgwatch.Instrument(lw, wgwatch.InstrumentOptions{
		Resource: gr,
		Name:     name,
		Observer: wgwatch.Observers(inf, wgwatch.ObserverFuncs{SessionEndedFunc: observer.SessionEnded}),
		Policy:   g.opts.Policy,
		Rand:     rnd,
	})
	if err != nil {
		// Only a nil ListerWatcher or an empty resource get here, and
		// neither happens: a working informer that is not graded beats a
		// crash.
		g.log.Error(err, "informer is not graded", "stream", name)
		return build(lw, obj, resync, indexers)
	}
	return inf.Informer(build(ilw, obj, resync, indexers))
}

// missingNamespaces returns the namespaces of namespaces in which the
// cache restricts the kind named name to other namespaces
// ([wgwatch.Streams.Missing]), with an object of the representation of
// its informers made so far, to ask the cache for the rest with.
func (g *Grader) missingNamespaces(name string, namespaces []string) ([]string, client.Object) {
	missing := g.streams.Missing(name, namespaces)
	g.mu.Lock()
	obj, ok := g.objs[name].(client.Object)
	g.mu.Unlock()
	if len(missing) == 0 || !ok {
		return nil, nil
	}
	return missing, obj.DeepCopyObject().(client.Object)
}

// configuredNamespaces returns the namespaces the manager's cache
// options restrict the kind named name to (its ByObject's, or
// DefaultNamespaces), as ManagerOptions saw them; none for every
// namespace, or options not seen.
func (g *Grader) configuredNamespaces(name string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	nss := g.cacheNamespaces
	for obj, byObject := range g.cacheByObject {
		if len(byObject) == 0 {
			continue
		}
		if n, err := g.streamNameLocked(obj); err == nil && n == name {
			nss = byObject
		}
	}
	if slices.Contains(nss, cache.AllNamespaces) {
		return nil
	}
	return nss
}

// ReadyzCheck is a healthz.Checker for the manager's readiness probe,
// mgr.AddReadyzCheck("watches", grade.ReadyzCheck): it fails while an
// informer of the cache has never synced (client-go's HasSynced: its
// first list is in the cache), each namespace's informer of a cache
// restricted to namespaces counting on its own, or, for each
// [Grader.Owner], the informer of its kind or of a kind it watches does
// not exist yet (before the manager has made it: the probe does not pass
// before anything is known), and passes once each has synced, for good
// ([wgwatch.SyncCheck]); an informer made later (a namespace, or a kind's
// informer made again) is waited for in turn. A pod that is not ready is
// taken out of its Services' endpoints, webhooks included, which is right
// while its caches are empty and wrong afterwards, when a denied or
// failing watch is what the owners' Stalled conditions report. An
// informer told to stop (the cache's RemoveInformer) is not waited for,
// though its Run may return a minute later. Do not use it as the liveness
// probe: a restart never fixes RBAC or a missing CRD. A kind whose CRD is
// not installed has no informer, so it does not hold the probe back.
//
// On a replica waiting for the lease (the manager's LeaderElection, as
// [Grader.ManagerOptions] saw it, and this process not elected yet) the
// probe passes, so that a leader-elected operator's rolling update
// completes ([wgwatch.Streams.AwaitLease] says why).
func (g *Grader) ReadyzCheck(req *http.Request) error {
	if err := g.streams.Check(req); err != nil {
		return fmt.Errorf("wgctrl: %w", err)
	}
	return nil
}

// Observer returns what every informer of the cache reports to: the
// Owners, the watch metrics, ReadyzCheck and Options.Observer. A unit test
// of a reconciler hands it the states an informer would report (see the
// package example); nothing else needs it.
func (g *Grader) Observer() wgwatch.Observer {
	return wgwatch.Observers(wgwatch.ObserverFuncs{StateChangedFunc: g.stateChanged}, g.metrics, &g.synced, g.opts.Observer)
}

// stateChanged passes an informer's state on to every Owner.
func (g *Grader) stateChanged(s wgwatch.State) {
	g.mu.Lock()
	owners := slices.Clone(g.owners)
	g.mu.Unlock()
	for _, o := range owners {
		o.acc.StateChanged(s)
	}
}

// identify returns the stream name and resource of the informer for obj.
func (g *Grader) identify(obj runtime.Object) (string, schema.GroupResource, error) {
	g.mu.Lock()
	scheme, mapper := g.scheme, g.mapper
	g.mu.Unlock()
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		t := fmt.Sprintf("%T", obj)
		return t, schema.GroupResource{Resource: t}, err
	}
	name := StreamName(gvk)
	fallback := schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}
	if mapper == nil {
		return name, fallback, errors.New("no RESTMapper recorded: pass the manager's options through ManagerOptions")
	}
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return name, fallback, err
	}
	return name, mapping.Resource.GroupResource(), nil
}

// StreamName is the stream name of the cache's informers for gvk, the one
// name every Owner, the metrics and Ready's message know them by
// ([wgwatch.StreamName]: "ConfigMap.v1", "Deployment.v1.apps"). All the
// informers of a kind carry it, whatever their representation, in the
// namespaces an owner follows ([Owner.FollowNamespaces]).
func StreamName(gvk schema.GroupVersionKind) string { return wgwatch.StreamName(gvk) }

// schemeOf returns the scheme the Grader names kinds by.
func (g *Grader) schemeOf() *runtime.Scheme {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.scheme
}

// streamName returns the stream name of the cache's informers of obj's
// kind, from the manager's scheme.
func (g *Grader) streamName(obj runtime.Object) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.streamNameLocked(obj)
}

func (g *Grader) streamNameLocked(obj runtime.Object) (string, error) {
	gvk, err := apiutil.GVKForObject(obj, g.scheme)
	if err != nil {
		return "", fmt.Errorf("wgctrl: %w", err)
	}
	return StreamName(gvk), nil
}

// Streams returns the names of the informers the cache has made so far,
// sorted.
func (g *Grader) Streams() []string { return g.streams.Names() }
