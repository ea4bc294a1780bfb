package wgctrl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	wgevents "github.com/watchgrade/watchgrade/events"
	wgmetrics "github.com/watchgrade/watchgrade/metrics"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// ReasonUnknownStream is the reason of the Stalled gate an owner gets for a
// stream passed to [Owner.Track] that no informer of the manager's cache is
// named after: a name that does not follow [StreamName], or an informer not
// asked for before Track ([wgstatus.ReasonUnknownStream]).
const ReasonUnknownStream = wgstatus.ReasonUnknownStream

// ReasonNamespaceNotWatched is the reason of the Stalled gate an owner
// gets for a namespace it follows ([Owner.FollowNamespaces]) in which the
// manager's cache, restricted to namespaces, watches a kind the owner
// depends on in none ([wgstatus.ReasonNamespaceNotWatched]).
const ReasonNamespaceNotWatched = wgstatus.ReasonNamespaceNotWatched

// retryEvery is how often the standby writer asks again for an informer
// the cache cannot make yet (a kind the API server does not serve).
const retryEvery = 5 * time.Second

// InformerGetter is the one method of the manager's cache an Owner needs.
type InformerGetter interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error)
}

// OwnerConfig holds what an Owner uses of a manager. [Grader.Owner] fills it
// from the manager; a unit test fills it with controller-runtime's fake
// client (see the package example).
type OwnerConfig struct {
	// Client reads owners and writes their status. Required.
	Client client.Client
	// APIReader reads an owner again after a write conflict, past the
	// cache. Defaults to Client.
	APIReader client.Reader
	// Informers is the manager's cache. Needed only by Owner.Start: the
	// standby writer and the watched kinds' informers.
	Informers InformerGetter
	// Recorder records the Events. Required.
	Recorder wgevents.EventsV1Recorder
	// RESTMapper is used, if the Grader has none yet, to label the
	// informers' metrics. Defaults to Client.RESTMapper().
	RESTMapper meta.RESTMapper
	// Elected is closed once this process holds the lease (the manager's
	// Elected(), which Grader.Owner passes): while it is open, with
	// leader election on (manager.Options.LeaderElection, as
	// ManagerOptions saw it), ReadyzCheck passes on this replica waiting
	// for the lease. Nil: no lease to wait for.
	Elected <-chan struct{}
}

// dep is a kind an owner kind depends on.
type dep struct {
	obj  client.Object
	gvk  schema.GroupVersionKind
	name string
}

// Owner is one owner kind's readiness: the streams of the kinds its
// controller watches, an accumulator that rolls them up per owner object,
// the link to the controller's workqueue ([Owner.Requeue]), the status step
// of Reconcile ([Owner.Status]), and a standby writer for the time the
// controller's workers cannot run (see the package documentation).
//
// Make one per owner kind with [Grader.Owner]. Its methods are safe for
// concurrent use.
type Owner struct {
	g      *Grader
	gvk    schema.GroupVersionKind
	newObj func() (client.Object, error)
	deps   []dep
	acc    *wgreadiness.Accumulator
	cfg    OwnerConfig
	events *wgevents.Recorder
	status *wgstatus.Writer
	log    logr.Logger

	mu sync.Mutex
	// started is true once Start runs.
	started bool
	// queue is the controller's workqueue, once its sources start;
	// requeueMade is true once Requeue has made the source that sets it.
	queue       workqueue.TypedRateLimitingInterface[reconcile.Request]
	requeueMade bool
	// followFunc is FollowNamespaces' function.
	followFunc func(client.Object) []string
	// gr is the owner kind's resource, once the RESTMapper has said.
	gr schema.GroupResource
}

// Owner declares an owner kind, adds its standby writer to mgr, and returns
// it. Call it before mgr.Start, once per owner kind, and build the kind's
// controller with [Owner.ControllerManagedBy]: the kinds the controller
// watches (Owns and Watches) are then the kinds the owners depend on, said
// once. deps adds kinds the builder does not see (a raw source's), or, for
// a controller built with ctrl.NewControllerManagedBy, lists every kind of
// its Owns and Watches (the owner kind itself need not be listed). Pass
// each kind as a typed object or a metav1.PartialObjectMetadata with its
// kind set: either means the kind, and the owners follow whichever
// informer of it the controller's watch makes (a builder.OnlyMetadata
// watch makes a metadata-only one), with no second informer (see
// [Owner.Start]).
func (g *Grader) Owner(mgr manager.Manager, owner client.Object, deps ...client.Object) (*Owner, error) {
	gvk, err := apiutil.GVKForObject(owner, mgr.GetScheme())
	if err != nil {
		return nil, fmt.Errorf("wgctrl: %w", err)
	}
	o, err := g.NewOwner(OwnerConfig{
		Client:     mgr.GetClient(),
		APIReader:  mgr.GetAPIReader(),
		Informers:  mgr.GetCache(),
		Recorder:   mgr.GetEventRecorder(strings.ToLower(gvk.Kind) + "-controller"),
		RESTMapper: mgr.GetRESTMapper(),
		Elected:    mgr.Elected(),
	}, owner, deps...)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(o); err != nil {
		return nil, fmt.Errorf("wgctrl: %w", err)
	}
	// The probe waits for the owner kind's informer too, which the
	// manager's cache makes through the Grader's hook (NewOwner expects
	// the watched kinds').
	if name, err := g.streamName(owner); err == nil {
		g.synced.Expect(name)
	}
	return o, nil
}

// NewOwner is [Grader.Owner] without a manager: the Owner is not started
// (run Start yourself if you need the standby writer), and the probe
// waits for the watched kinds' informers but not for the owner kind's.
// Unit tests use it with a fake client.
func (g *Grader) NewOwner(cfg OwnerConfig, owner client.Object, deps ...client.Object) (*Owner, error) {
	if cfg.Client == nil || cfg.Recorder == nil {
		return nil, errors.New("wgctrl: OwnerConfig needs a Client and a Recorder")
	}
	if cfg.APIReader == nil {
		cfg.APIReader = cfg.Client
	}
	if cfg.RESTMapper == nil {
		cfg.RESTMapper = cfg.Client.RESTMapper()
	}
	g.mu.Lock()
	awaitLease := cfg.Elected != nil && g.leaderElection
	if cfg.Elected != nil {
		g.elected = append(g.elected, cfg.Elected)
	}
	if !g.managed {
		g.scheme = cfg.Client.Scheme()
	}
	if g.mapper == nil {
		g.mapper = cfg.RESTMapper
	}
	scheme := g.scheme
	g.mu.Unlock()
	if awaitLease {
		g.streams.AwaitLease(cfg.Elected) // the replicas' probe: see ReadyzCheck
	}

	gvk, err := apiutil.GVKForObject(owner, scheme)
	if err != nil {
		return nil, fmt.Errorf("wgctrl: %w", err)
	}
	o := &Owner{
		g:   g,
		gvk: gvk,
		newObj: func() (client.Object, error) {
			obj, err := scheme.New(gvk)
			if err != nil {
				return nil, err
			}
			co, ok := obj.(client.Object)
			if !ok {
				return nil, fmt.Errorf("%v is not a client.Object", gvk)
			}
			return co, nil
		},
		cfg: cfg,
		log: g.log.WithValues("owner", gvk.Kind),
	}
	if err := o.watch(deps...); err != nil {
		return nil, err
	}
	o.acc, err = wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{Rollup: g.opts.Rollup, Policy: g.opts.Policy, OnChange: o.changed})
	if err != nil {
		return nil, fmt.Errorf("wgctrl: %w", err)
	}
	o.events, err = wgevents.NewEventsRecorder(cfg.Recorder, wgevents.EventsOptions{})
	if err != nil {
		return nil, fmt.Errorf("wgctrl: %w", err)
	}
	o.status, err = wgstatus.New(wgstatus.Options{
		Accumulator: o.acc, Update: o.updateStatus, Get: o.getLive,
		Events: o.events, FirstReady: sightings{o}, ProgressDeadline: g.opts.Policy.ProgressDeadline,
		Clock: g.clock, Logger: o.log, Streams: &g.streams, HumanGrace: max(g.opts.Policy.HumanGrace, 0),
	})
	if err != nil {
		return nil, fmt.Errorf("wgctrl: %w", err)
	}
	g.mu.Lock()
	g.owners = append(g.owners, o)
	g.mu.Unlock()
	return o, nil
}

// watch adds kinds to those the owners depend on, each once (a kind in
// two representations is one stream). The probe waits for their
// informers, each until it has synced once or is found not served
// (Start): it does not pass before anything is known. It fails once
// Start runs: the standby writer follows the kinds it had then.
func (o *Owner) watch(kinds ...client.Object) error {
	scheme := o.g.schemeOf()
	var names []string
	for _, k := range kinds {
		gvk, err := apiutil.GVKForObject(k, scheme)
		if err != nil {
			return fmt.Errorf("wgctrl: %w", err)
		}
		name, err := o.g.streamName(k)
		if err != nil {
			return err
		}
		o.mu.Lock()
		switch {
		case o.started:
			o.mu.Unlock()
			return fmt.Errorf("wgctrl: %s watched after the manager started: build the %s controller before mgr.Start", name, o.gvk.Kind)
		case !slices.ContainsFunc(o.deps, func(x dep) bool { return x.name == name }):
			o.deps = append(o.deps, dep{obj: k, gvk: gvk, name: name})
			names = append(names, name)
		}
		o.mu.Unlock()
	}
	o.g.synced.Expect(names...)
	return nil
}

// Kinds returns the watched kinds, one object each, in the order they were
// added ([Grader.Owner]'s, then the controller's [Builder]'s): a
// metav1.PartialObjectMetadata for a kind the controller watches
// metadata-only. wgctrltest builds its simulated servers from them.
func (o *Owner) Kinds() []client.Object {
	deps := o.kinds()
	objs := make([]client.Object, len(deps))
	for i, d := range deps {
		objs[i] = d.obj
	}
	return objs
}

// kinds returns the watched kinds, in the order they were added.
func (o *Owner) kinds() []dep {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.deps)
}

// Accumulator returns the owner kind's accumulator: set gates of your own
// on it (SetGate), such as a dependency outside the cluster.
func (o *Owner) Accumulator() *wgreadiness.Accumulator { return o.acc }

// Streams returns the stream names every owner of the kind depends on, one
// per watched kind (passed to Grader.Owner, then those of the controller's
// Builder; a kind passed twice, typed and metadata-only, is one), in that
// order.
func (o *Owner) Streams() []string {
	deps := o.kinds()
	names := make([]string, len(deps))
	for i, d := range deps {
		names[i] = d.name
	}
	return names
}

// Requeue returns the source that hands the controller's workqueue every
// owner whose verdict changed: [Owner.ControllerManagedBy] adds it; a
// controller built otherwise adds it with WatchesRawSource (Start logs an
// error when no controller has it). Add never blocks (and is a no-op once the queue has
// shut down); before the controller starts there is no queue, and nothing
// is lost, since every owner is reconciled when it starts. A nil Owner's
// source queues nothing.
func (o *Owner) Requeue() source.Source {
	if o == nil {
		return source.Func(func(context.Context, workqueue.TypedRateLimitingInterface[reconcile.Request]) error { return nil })
	}
	o.mu.Lock()
	o.requeueMade = true
	o.mu.Unlock()
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.queue = q
		return nil
	})
}

// RequeueAdded reports whether [Owner.Requeue] has made the Owner's
// source: [Owner.ControllerManagedBy] adds it to the controller it builds.
// Without it, an owner whose verdict changes (a denial repaired) is not
// reconciled until its next event. wgctrltest checks a setup with it.
func (o *Owner) RequeueAdded() bool {
	if o == nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.requeueMade
}

// Track sets streams that the owner key depends on beyond the watched
// kinds' (an informer your Reconcile asks the cache for, per object, say).
// Ask the cache for each informer before Track: a name no informer of the
// cache has gets a Stalled gate with reason ReasonUnknownStream, so that a
// name that does not follow [StreamName] is a Warning, not a Reconciling
// that never ends.
func (o *Owner) Track(key types.NamespacedName, streams ...string) {
	if _, ok := o.status.Tracked(key); !ok {
		o.status.Track(key, o.dependencies(&metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}))
	}
	o.status.TrackStreams(key, streams...)
}

// Status is the last step of Reconcile, deferred so that it runs whatever
// the Reconcile's own steps did:
//
//	defer func() { res, err = r.Readiness.Status(ctx, gb, res, err) }()
//
// obj is the owner as Reconcile read it, res and err what the Reconcile
// returns. It is [wgstatus.Writer.Write]: it writes obj's kstatus trio and
// status.observedGeneration in one status update when a reader would see
// a change, then records the Event; obj takes the status written and its
// resourceVersion, so a second call writes nothing. A Reconcile that
// failed publishes it (see package wgstatus): a transient error is
// Reconciling, a [reconcile.TerminalError] or one that lasts past the
// progress deadline is Stalled, never Ready=True for a generation that was
// not reconciled. What it returns is the Reconcile's result and error,
// but: a conflict (the Reconcile's own, or the status write's that kept
// conflicting) returns no error and a requeue after
// [wgstatus.ConflictRetry] (controller-runtime logs every error at error
// level, and a conflict is routine); an owner deleted under the Reconcile
// is forgotten and returns neither; a manager stopping returns no error;
// the API server away or overloaded ([wgstatus.ServerAway]: the status
// write not taken, or the Reconcile's own error while its gate has not
// stalled) returns no error and a requeue after the status step's backoff
// (1 s doubling to a minute), logged at V(1): a 20-second outage is not a
// burst of error-level lines; any other status write the API server
// refused is joined to err (a kind without a status subresource says so).
//
// The first call also tells the standby writer that the controller's
// workers run. On a nil Owner it returns res and err: a reconciler made
// without one (the scaffold's own controller test, say) still runs.
func (o *Owner) Status(ctx context.Context, obj client.Object, res reconcile.Result, err error) (reconcile.Result, error) {
	if o == nil {
		return res, err
	}
	key := client.ObjectKeyFromObject(obj)
	o.status.Track(key, o.dependencies(obj))
	u, cerr := o.unstructured(obj)
	if cerr != nil {
		return res, errors.Join(err, cerr)
	}
	reconcileErr := err
	if errors.Is(err, reconcile.TerminalError(nil)) {
		reconcileErr = wgstatus.Terminal(err)
	}
	out := o.status.Write(ctx, u, reconcileErr)
	if out.ReconcileErr == nil {
		// Routine, or the API server's trouble the status step retries
		// quietly (Retry): no error for controller-runtime to log.
		err = nil
	}
	switch out.Outcome {
	case wgstatus.Written:
		if cerr := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); cerr != nil {
			obj.SetResourceVersion(u.GetResourceVersion())
		}
	case wgstatus.Deleted:
		o.status.Forget(key, obj.GetUID())
		return res, nil
	case wgstatus.Cancelled:
		// The manager is stopping: the next one reconciles the owner
		// again. Nothing failed that a log at error level should show.
		return res, nil
	case wgstatus.Conflict:
		res.RequeueAfter = min(nonZero(res.RequeueAfter), out.RequeueAfter)
		return res, nil
	case wgstatus.Failed:
		return res, errors.Join(err, out.Err)
	}
	if out.Retry != nil {
		// The status write not taken, or the Reconcile's own failure, on
		// trouble no human need act on yet: retried, quietly.
		o.log.V(1).Info("the API server is away or overloaded; retrying", "name", key, "after", out.RequeueAfter, "err", out.Retry.Error())
		res.RequeueAfter = min(nonZero(res.RequeueAfter), out.RequeueAfter)
	}
	return res, err
}

// nonZero is d, or the longest duration when d is zero (no requeue asked).
func nonZero(d time.Duration) time.Duration {
	if d <= 0 {
		return time.Duration(1<<63 - 1)
	}
	return d
}

// unstructured is obj as the status step writes it: any owner type's
// status.conditions and status.observedGeneration, through the one
// representation, whatever fields its Go type declares.
func (o *Owner) unstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := toUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("wgctrl: %w", err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(o.gvk)
	return u, nil
}

// updateStatus is the status step's write: the manager's client.
func (o *Owner) updateStatus(ctx context.Context, obj runtime.Object) (runtime.Object, error) {
	u, err := o.unstructured(obj)
	if err != nil {
		return nil, err
	}
	if err := o.cfg.Client.Status().Update(ctx, u); err != nil {
		return nil, err
	}
	return u, nil
}

// getLive is the status step's read past the cache.
func (o *Owner) getLive(ctx context.Context, key types.NamespacedName) (runtime.Object, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(o.gvk)
	if err := o.cfg.APIReader.Get(ctx, key, u); err != nil {
		return nil, err
	}
	return u, nil
}

// sightings feeds the Grader's time-to-first-Ready with the owner kind's
// resource as the RESTMapper says it.
type sightings struct{ o *Owner }

func (s sightings) ObserveConditions(_ schema.GroupResource, obj metav1.Object, conds []metav1.Condition) wgmetrics.FirstReadyResult {
	return s.o.g.firstReady.ObserveConditions(s.o.resource(), obj, conds)
}

func (s sightings) Delete(uid types.UID) { s.o.g.firstReady.Delete(uid) }

// resource is the owner kind's resource, the metrics' label: from the
// RESTMapper, or the kind's when it cannot say.
func (o *Owner) resource() schema.GroupResource {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.gr.Empty() {
		return o.gr
	}
	if m := o.cfg.RESTMapper; m != nil {
		if mapping, err := m.RESTMapping(o.gvk.GroupKind(), o.gvk.Version); err == nil {
			o.gr = mapping.Resource.GroupResource()
			o.g.firstReady.AddResource(o.gr)
			return o.gr
		}
	}
	return schema.GroupResource{Group: o.gvk.Group, Resource: o.gvk.Kind}
}

// changed is the accumulator's OnChange: it queues the owner for the
// controller and, until the controller's workers run, for the standby
// writer. It never blocks.
func (o *Owner) changed(key types.NamespacedName) {
	o.mu.Lock()
	q := o.queue
	o.mu.Unlock()
	if q != nil {
		q.Add(reconcile.Request{NamespacedName: key})
	}
	o.status.QueueStandby(key)
}

// Start runs the standby writer until ctx is done; the manager calls it
// (Grader.Owner adds the Owner to the manager). It asks the cache for the
// owner kind's informer, without waiting for it to sync, and for a watched
// kind's only when no informer of the kind exists once the kind has been
// served for 15 s (the controller's watches make theirs as it starts,
// metadata-only ones included). It tracks every owner object as it
// appears, reports a watched kind the API server does not serve (a CRD
// not installed) once it has not been served for Policy.HumanGrace, and,
// until Status is first called, writes every owner whose verdict is
// Stalled or whose Ready=True a watched kind's stream takes away
// ([wgreadiness.Accumulator.ApplyStandby]). It returns nil when ctx is
// done, after its goroutines have ended.
func (o *Owner) Start(ctx context.Context) error {
	if o.cfg.Informers == nil {
		return errors.New("wgctrl: Owner.Start needs OwnerConfig.Informers")
	}
	o.mu.Lock()
	if o.started {
		o.mu.Unlock()
		return errors.New("wgctrl: Owner.Start called twice")
	}
	o.started = true
	requeued := o.requeueMade
	o.mu.Unlock()
	if !requeued {
		o.log.Error(nil, "the Owner's Requeue source is in no controller, so an owner whose verdict changes (a stream blocked, then repaired) is not reconciled until its next event: build the controller with Owner.ControllerManagedBy, or add WatchesRawSource(owner.Requeue()) to it")
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { o.followOwners(ctx) })
	for _, d := range o.kinds() {
		wg.Go(func() { o.follow(ctx, d) })
	}
	wg.Go(func() { _ = o.status.RunStandby(ctx, o.readOwner) })
	<-ctx.Done()
	return nil
}

// followOwners tracks every owner object of the kind, from the cache's
// informer, as it appears, and forgets it when it is deleted.
func (o *Owner) followOwners(ctx context.Context) {
	obj, err := o.newObj()
	if err != nil {
		o.log.Error(err, "cannot follow the owner kind")
		return
	}
	name, err := o.g.streamName(obj)
	if err != nil {
		o.log.Error(err, "cannot follow the owner kind")
		return
	}
	inf, ok := o.informer(ctx, obj, func() { o.g.synced.Forget(name) })
	if !ok {
		return
	}
	_, err = inf.AddEventHandler(o.ownerHandler())
	if err != nil {
		o.log.Error(err, "cannot follow the owner kind")
	}
}

// follow makes sure the cache runs an informer of d's kind, through the
// status step's [wgstatus.Writer.AwaitInformer] (which reports the kind
// while the API server does not serve it). The controller's own watches
// (For, Owns, Watches) make theirs as its sources start, in the
// representation they asked for, and any serves d (all carry the kind's
// one stream name): so the cache is asked for d's own only once the kind
// has been served for settle with none. Then the namespaces the owners
// follow are filled in.
func (o *Owner) follow(ctx context.Context, d dep) {
	err := o.status.AwaitInformer(ctx, wgstatus.Kind{
		Name: d.name, Resource: schema.GroupResource{Group: d.gvk.Group, Resource: d.gvk.Kind},
		Served: func(context.Context) (bool, error) { return o.served(d) },
		Start: func(ctx context.Context) error {
			_, err := o.cfg.Informers.GetInformer(ctx, d.obj, cache.BlockUntilSynced(false))
			return err
		},
		Settle: settle, Every: retryEvery, Clock: o.g.clock,
	})
	if err != nil {
		return // stopping
	}
	t := o.g.clock.NewTicker(retryEvery)
	defer t.Stop()
	o.fillNamespaces(ctx, d, t)
}

// fillNamespaces asks the cache, at each tick of t, for the informers of d's
// kind in the namespaces the owners follow that have none yet, where the
// cache restricts the kind to namespaces. controller-runtime's cache makes
// a kind's informers one namespace after another, and its controller's
// source waits for each to sync before it asks for the next: a namespace
// denied from the start would leave the namespaces after it with no
// informer, their owners waiting on data nobody watches while their
// workers wait too. Asked without waiting for a sync, the cache makes the
// informers of every namespace it is restricted to, the very ones the
// controller's source asks for next, in the representation (typed,
// metadata-only) the controller's informers have. A namespace the cache is
// not restricted to gets none, and is asked for once: the owners that
// follow it get a Stalled gate with reason [ReasonNamespaceNotWatched].
func (o *Owner) fillNamespaces(ctx context.Context, d dep, t clock.Ticker) {
	asked := map[string]bool{}
	for {
		// A tick first: the controller's sources ask for the informers
		// of a start that goes well within it.
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		missing, obj := o.g.missingNamespaces(d.name, o.status.TrackedNamespaces())
		missing = slices.DeleteFunc(missing, func(ns string) bool { return asked[ns] })
		if len(missing) > 0 {
			if _, err := o.cfg.Informers.GetInformer(ctx, obj, cache.BlockUntilSynced(false)); err != nil {
				o.log.V(1).Info("cannot ask the cache for a watched kind's informers in the namespaces the owners follow; retrying", "kind", d.name, "namespaces", missing, "err", err.Error())
			} else {
				o.log.V(1).Info("asked the cache for a watched kind's informers in namespaces the owners follow that had none", "kind", d.name, "namespaces", missing)
				for _, ns := range missing {
					asked[ns] = true
				}
				// The cache makes an informer as it is asked for: a
				// namespace still without one is one it does not watch.
				if unwatched, _ := o.g.missingNamespaces(d.name, missing); len(unwatched) > 0 {
					o.status.NotWatched(d.name, unwatched...)
				}
			}
		}
	}
}

// settle is how long follow leaves the cache to the controller's sources
// once a watched kind is served: controller-runtime's Kind source asks for
// its informer when the controller starts, and every 10 s while the kind
// is not served.
const settle = 15 * time.Second

// served reports whether the API server serves d's kind, as the
// RESTMapper says; with no RESTMapper, it is taken as served and the
// cache's answer decides.
func (o *Owner) served(d dep) (bool, error) {
	if o.cfg.RESTMapper == nil {
		return true, nil
	}
	_, err := o.cfg.RESTMapper.RESTMapping(d.gvk.GroupKind(), d.gvk.Version)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	}
	return false, err
}

// informer asks the cache for obj's informer, without waiting for it to
// sync, every retryEvery until it has one or ctx is done; notServed is
// called after each try that found the kind not served.
func (o *Owner) informer(ctx context.Context, obj client.Object, notServed func()) (cache.Informer, bool) {
	t := o.g.clock.NewTicker(retryEvery)
	defer t.Stop()
	for {
		inf, err := o.cfg.Informers.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err == nil {
			return inf, true
		}
		o.informerError(obj, err, notServed)
		select {
		case <-ctx.Done():
			return nil, false
		case <-t.C():
		}
	}
}

// informerError handles an error of the cache's GetInformer for obj: a
// kind not served calls notServed; the API server not answering yet (a
// manager started while it restarts) is routine, retried, and the streams
// grade it; anything else is logged as an error.
func (o *Owner) informerError(obj client.Object, err error, notServed func()) {
	switch class, _ := wgwatch.Classify(err); {
	case meta.IsNoMatchError(err):
		notServed()
	case class == wgwatch.ClassTransient:
		o.log.V(1).Info("cannot get an informer from the cache yet; retrying", "kind", o.kindOf(obj), "err", err.Error())
	default:
		o.log.Error(err, "cannot get an informer from the cache; retrying", "kind", o.kindOf(obj))
	}
}

// ownerHandler is the owner kind's informer's handler: the status step's
// ([wgstatus.Writer.OwnerHandler]).
func (o *Owner) ownerHandler() toolscache.ResourceEventHandler {
	return o.status.OwnerHandler(wgstatus.OwnerEvents{Dependencies: o.dependencies, Changed: o.changed})
}

// kindOf names obj's kind for a log line ("ConfigMap.v1", whatever its
// representation), or its Go type.
func (o *Owner) kindOf(obj client.Object) string {
	if name, err := o.g.streamName(obj); err == nil {
		return name
	}
	return fmt.Sprintf("%T", obj)
}

// readOwner reads key's owner from the client (the manager's cache) for
// the standby writer.
func (o *Owner) readOwner(ctx context.Context, key types.NamespacedName) (runtime.Object, error) {
	obj, err := o.newObj()
	if err != nil {
		return nil, err
	}
	if err := o.cfg.Client.Get(ctx, key, obj); err != nil {
		return nil, err
	}
	return o.unstructured(obj)
}

// toUnstructured returns obj as the JSON-compatible map a status write is
// made of, so that any kind whose status has conditions (and
// observedGeneration) can be written without methods of its own.
func toUnstructured(obj runtime.Object) (map[string]any, error) {
	if u, ok := obj.(runtime.Unstructured); ok {
		return runtime.DeepCopyJSON(u.UnstructuredContent()), nil
	}
	return runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
}
