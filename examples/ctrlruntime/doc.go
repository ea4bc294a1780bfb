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
// examples/README.md. This package is wgctrl in a controller written by
// hand; it lives in the examples module, which requires the end-to-end
// harness.
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
// In this order (cmd/watchtarget-ctrlruntime does exactly this, and
// [NewManager] does it for tests, without the probe):
//
//	in, err := ctrlruntime.NewInstrumentation(ctrlruntime.Options{Namespace: ns})
//	mgr, err := ctrl.NewManager(cfg, in.ManagerOptions(ctrl.Options{
//		Scheme: scheme, // client-go types + WatchTarget
//	}))
//	_, err = ctrlruntime.SetupWithManager(mgr, in)
//	err = mgr.AddReadyzCheck("watches", in.Grader().ReadyzCheck)
//	err = mgr.Start(ctx)
//
// [Instrumentation.ManagerOptions] must run before the manager is made: the
// cache builds every informer through cache.Options.NewInformer, and that
// option cannot be changed once the cache exists.
//
// # Data flow
//
//	informer ──List/Watch──▶ wgctrl.Grader ──State──▶ readiness.Accumulator
//	(manager cache)            │ (wgwatch.Instrument)           │
//	                           ├──▶ WatchMetrics, ReadyzCheck   OnChange(owner)
//	                           └──▶ graded watch error log      │
//	                                                            ▼
//	                                                    controller workqueue
//	                                                            │
//	                      Reconcile: Get, Track, Apply, Status().Update, Record
//
// How each watchgrade piece is wired:
//
//   - Grading, metrics, logs and the probe: a [wgctrl.Grader], the
//     controller-runtime integration, does all of it. Its ManagerOptions
//     sets the cache's NewInformer hook, which wraps the ListerWatcher
//     controller-runtime hands it with [wgwatch.Instrument] and builds the
//     informer as the default hook does, so every informer of the cache is
//     graded, the WatchTargets' own included; it sets the cache's
//     DefaultWatchErrorHandler to [wgwatch.WatchErrorLogger], so the
//     reflectors' failures are logged graded (an apiserver restart logs
//     nothing at the default verbosity, a denial one error) instead of one
//     error per failed list or watch; the watch metrics go on
//     Options.Registerer; and [wgctrl.Grader.ReadyzCheck] answers the
//     readiness probe. This package has no informer hook of its own.
//   - Readiness: the Grader hands every informer's states to one
//     [wgreadiness.Accumulator] of this package's (wgctrl's
//     Options.Observer, with this package's Options.Observer). Reconcile
//     tells it which streams a WatchTarget depends on
//     ([wgreadiness.Accumulator.Track]) and adds a gate of the target's own
//     for each resource that cannot be followed at all
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
//
// # Why a Grader and an accumulator, not a wgctrl.Owner
//
// [wgctrl.Owner] is made for an owner kind whose controller declares the
// kinds it depends on when it is set up (For, Owns, Watches) and whose
// workers wait until their caches have synced: its standby writer reports
// an owner Stalled while those workers cannot run. A WatchTarget's
// dependencies are resources its spec names, found at run time; Reconcile
// asks the cache for their informers itself, without waiting for them to
// sync, so the workers never wait on a resource a human must fix, and the
// standby writer would have nothing to report. Worse, it could roll a
// target up before Reconcile had told the accumulator what the target
// follows, and a roll-up that changes the conditions makes them this
// process's own: a target Stalled before a controller restart would lose
// the hold that keeps its Stalled (and its one Warning) standing while its
// streams start over. The resources that cannot be followed (not served,
// ambiguous, cluster-scoped) are gates of this package's own, with a grace
// and a retry of their own, which Owner.Track's single ReasonUnknownStream
// gate could not express. So this package keeps its accumulator, fed by
// the Grader, and writes the status itself; everything about informers,
// metrics, logs and the probe is wgctrl's.
//
// # Stream names
//
// The accumulator and the metrics know a stream by its name, which must be
// unique among the informers that report to them. The cache runs one informer
// per kind and representation (typed, unstructured, or metadata-only),
// covering every namespace the cache watches, and that informer is shared by
// every WatchTarget that names the kind's resource. Its stream is named as
// wgctrl names every informer of a cache, after the kind ([wgctrl.StreamName]):
// "ConfigMap.v1", "Deployment.v1.apps", and [TargetsStream] for the
// WatchTargets' own. A WatchTarget names a resource, so Reconcile maps it to
// its kind with the manager's RESTMapper to find the name it tracks. It asks
// for typed objects when the manager's scheme knows the kind (sharing the
// informer that the rest of an operator reads through the cached client) and
// for unstructured ones otherwise. An informer of another representation of
// the same kind, which the operator's own code may start (metadata-only,
// say), carries the same name: wgctrl grades a kind by the worst state
// among its informers.
//
// When Options.Namespace is set, ManagerOptions restricts the whole cache to
// that namespace (cache.Options.DefaultNamespaces), so "ConfigMap.v1" means
// the ConfigMaps of that namespace; otherwise it means the ConfigMaps of
// every namespace, and a WatchTarget's Ready reflects the health of that
// watch. (A cache restricted to several namespaces runs one informer per
// namespace per kind, all under the kind's one name: see wgctrl's
// documentation for what it reports then.)
//
// # The readiness probe
//
// [wgctrl.Grader.ReadyzCheck] fails until every informer of the cache has
// synced once, then passes for good. Here the informers include those that
// WatchTargets name: a target naming a resource the controller may not
// list keeps a freshly started pod from being ready until RBAC grants it
// (the target says so, Stalled, with one Warning). Use it as the readiness
// probe only, never for liveness: a restart never fixes RBAC.
//
// # Resources that cannot be followed
//
// A resource is looked up with the manager's RESTMapper. One that cannot be
// followed becomes a gate of the WatchTarget's own, named after the spec's
// reference in kubectl's form resource.version.group
// ("widgets.v1.example.com": its kind may be unknown), with a reason saying
// why:
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
// once the resource resolves (and the target tracks the kind's stream
// instead). None of this returns an error to controller-runtime, so a bad
// spec never turns into a loop of error logs; a failed discovery or
// informer is logged at Info, since it is retried.
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
//     [wgwatch.Instrument], through wgctrl, grades what it sees. The
//     reflector's own backoff decides when it retries (but for a refused
//     connection, which Instrument retries inside the call until the trouble
//     is published, so that an apiserver restart publishes nothing); the
//     grading table, the states and the metrics are the same.
//   - One informer per kind serves every owner and every namespace the cache
//     watches, instead of one stream per namespace and resource, hence the
//     stream names above ("ConfigMap.v1", where the client-go controller
//     has "shop/configmaps.v1").
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
