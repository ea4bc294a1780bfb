// Package ctrlruntime is a WatchTarget controller written by hand with
// controller-runtime and watchgrade: WatchTargets name, at run time, the
// resources to follow, so each one tracks informers of its own. Package
// github.com/watchgrade/watchgrade/examples/clientgo is the same controller
// on plain client-go.
//
// To add watchgrade to your own operator (a kubebuilder or Operator SDK
// scaffold whose controllers use For, Owns and Watches), do not copy this
// package: require github.com/watchgrade/watchgrade/examples/wgctrl, a module
// of its own that needs no replace directives, and follow
// examples/README.md. This package lives in the examples module, which
// requires the end-to-end harness. Its streams are named after resources
// ("configmaps.v1"); wgctrl's after kinds ("ConfigMap.v1"), so that a kind
// whose CRD is missing has a name too.
//
// For every WatchTarget it makes sure the manager's cache runs an informer
// for each resource the target names, and writes the kstatus trio (Ready,
// Reconciling, Stalled) with status.observedGeneration in one status update
// whenever the verdict changes. It records an Event only on a transition
// (a Warning only when a human must act) and exports the watchgrade metrics
// on controller-runtime's registry, next to its own.
//
// # Wiring
//
// Three steps, in this order (cmd/watchtarget-ctrlruntime does exactly this,
// and [NewManager] does it for tests):
//
//	in, err := ctrlruntime.NewInstrumentation(ctrlruntime.Options{Namespace: ns})
//	mgrOpts := ctrl.Options{Scheme: scheme /* client-go types + WatchTarget */}
//	in.Configure(&mgrOpts)             // before ctrl.NewManager: the cache hook
//	mgr, err := ctrl.NewManager(cfg, mgrOpts)
//	_, err = ctrlruntime.SetupWithManager(mgr, in)
//	err = mgr.Start(ctx)
//
// [Instrumentation.Configure] must run before the manager is made: the cache
// builds every informer through cache.Options.NewInformer, and that option
// cannot be changed once the cache exists.
//
// # Data flow
//
//	informer ──List/Watch──▶ wgwatch.Instrument ──State──▶ readiness.Accumulator
//	(manager cache)               │                               │
//	                              └──SessionEnd──▶ WatchMetrics   OnChange(owner)
//	                                                              │
//	                                   controller workqueue ◀─────┘
//	                                              │
//	                      Reconcile: Get, Track, Apply, Status().Update, Record
//
// How each watchgrade piece is wired:
//
//   - Grading: [Instrumentation.NewInformer] is the cache's NewInformer hook.
//     It wraps the ListerWatcher controller-runtime hands it with
//     [wgwatch.Instrument] and builds the informer exactly as the default hook
//     does (toolscache.NewSharedIndexInformer, same resync and indexers).
//     Every informer of the cache is graded, the WatchTargets' own included.
//   - Readiness: each informer reports to one [wgreadiness.Accumulator]
//     (through [wgwatch.Observers], with the metrics and Options.Observer).
//     Reconcile tells it which streams a WatchTarget depends on
//     ([wgreadiness.Accumulator.Track]) and adds a gate of the target's own for
//     each resource that cannot be followed at all
//     ([wgreadiness.Accumulator.SetGate]).
//   - Requeue: the accumulator's OnChange hands the owner's key straight to
//     the controller's workqueue, through a [source.Func] the controller
//     starts. OnChange is called on the accumulator's own goroutine, one call
//     at a time, and a workqueue Add never blocks (and is a no-op once the
//     queue has shut down), so nothing can wedge: no channel, buffer or
//     goroutine is needed. A [source.Channel] would need all three, and a send
//     into it after the manager stopped would block the accumulator's delivery
//     goroutine for good.
//   - Events: [wgevents.NewEventsRecorder] over the manager's events.k8s.io
//     recorder (manager.Manager.GetEventRecorder), called only after a
//     successful status write.
//   - Metrics: [wgmetrics.NewWatchMetrics] on Options.Registerer, which
//     defaults to controller-runtime's registry, so the manager's metrics
//     server serves them. A second Instrumentation in one process (tests that
//     build one manager after another) reuses the first set rather than
//     failing; two managers running at once on one registry would mix
//     their streams' states, so give each its own Options.Registerer.
//
// # Stream names
//
// The accumulator and the metrics know a stream by its name, which must be
// unique among the informers that report to them. The cache runs one informer
// per GroupVersionKind and representation (typed, unstructured, or
// metadata-only), covering every namespace the cache watches, and that
// informer is shared by every WatchTarget that names the resource. So an
// informer's stream is named after its resource and version, in kubectl's
// fully-qualified form ([StreamName]): "configmaps.v1",
// "deployments.v1.apps". Reconcile asks for typed objects when the manager's
// scheme knows the kind (sharing the informer that the rest of an operator
// reads through the cached client) and for unstructured ones otherwise; those
// informers carry the plain name, the one WatchTargets track. An informer of
// another representation of the same kind, which the operator's own code may
// start, is suffixed " (unstructured)" or " (metadata)" so that it never
// shares a name.
//
// When Options.Namespace is set, Configure restricts the whole cache to that
// namespace (cache.Options.DefaultNamespaces), so "configmaps.v1" means the
// ConfigMaps of that namespace; otherwise it means the ConfigMaps of every
// namespace, and a WatchTarget's Ready reflects the health of that watch. (A
// cache restricted to several namespaces runs one informer per namespace per
// kind; this hook cannot tell them apart, so their names would collide.
// Extend the naming before you configure several.)
//
// # Resources that cannot be followed
//
// A resource is looked up with the manager's RESTMapper. One that cannot be
// followed becomes a gate of the WatchTarget's own, named after it
// ([StreamName] of the spec's reference), with a reason saying why:
//
//   - the API server does not serve it (a typo, a CustomResourceDefinition
//     not installed yet): Progressing with reason WaitingForResource for
//     Policy.HumanGrace, as a stream's failure that needs a human is, so that
//     a CRD applied together with the WatchTarget raises no Warning; then
//     Stalled with reason ResourceNotFound;
//   - it is named by a partial name only a RESTMapper would accept (a
//     singular, a missing group), matches several kinds, or is
//     cluster-scoped: Stalled at once (ResourceNotFound, AmbiguousResource,
//     ClusterScoped);
//   - discovery fails (the API server unreachable) or the cache cannot make
//     the informer: Progressing (DiscoveryFailed, InformerFailed).
//
// The target is looked at again every Options.UnresolvedRetry, since nothing
// else would notice that the resource has appeared, and the gate goes away
// once the resource resolves. None of this returns an error to
// controller-runtime, so a bad spec never turns into a loop of error logs.
//
// Informers are asked for without waiting for them to sync
// (cache.BlockUntilSynced(false)): an informer that RBAC forbids never syncs,
// and must show as a Forbidden stream (Stalled after the grace), not hang the
// reconcile.
//
// # Differences from the client-go version
//
//   - The manager's informer cache replaces the clientgo package's Mirror and
//     graded Streams: the informer lists, watches and retries on its own, and
//     [wgwatch.Instrument] only grades what it sees. The reflector's own
//     backoff, not watchgrade's, decides when it retries; the grading table,
//     the states and the metrics are the same.
//   - One informer per kind serves every owner and every namespace the cache
//     watches, instead of one stream per namespace and resource, hence the
//     stream names above.
//   - Informers are never stopped when no WatchTarget names their resource
//     any more: the cache shares them with the rest of the operator (the
//     WatchTargets' own informer among them), and removing one under another
//     user's feet would break it. An idle informer costs one watch and affects
//     no owner's verdict, but it is still graded: one that RBAC forbids
//     stays Blocked in watchgrade_watch_streams (and keeps an alert on
//     Blocked streams firing) until the process restarts. If your operator
//     owns such informers alone, remove them with the cache's
//     RemoveInformer when no owner tracks them.
//   - The WatchTarget informer's own health is graded and exported as
//     metrics, but no WatchTarget depends on it: if it fails, nothing is
//     reconciled anyway.
package ctrlruntime
