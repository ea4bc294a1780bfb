// Package wgctrl adds watchgrade to an operator built on a controller-runtime
// manager, one that declares its inputs the usual way, with For, Owns and
// Watches (a kubebuilder or Operator SDK scaffold): every informer of the
// manager's cache is graded, each owner object gets the kstatus trio (Ready,
// Reconciling, Stalled) and status.observedGeneration from the streams of
// the kinds its controller watches, Events are recorded only on transitions
// (a Warning only when a human must act), and the watch metrics and the
// owners' time-to-first-Ready histogram are served on the manager's
// /metrics.
//
//	grade, err := wgctrl.New(wgctrl.Options{WaitForHuman: true})
//	mgr, err := ctrl.NewManager(cfg, grade.ManagerOptions(ctrl.Options{Scheme: scheme}))
//	readiness, err := grade.Owner(mgr, &webappv1.Guestbook{})
//
//	// the controller, as kubebuilder scaffolds it, built by the Owner:
//	readiness.ControllerManagedBy(mgr). // not ctrl.NewControllerManagedBy(mgr)
//		For(&webappv1.Guestbook{}).
//		Owns(&corev1.ConfigMap{}).
//		Complete(r)
//
//	// Reconcile, after reading the Guestbook gb:
//	defer func() { res, err = r.Readiness.Status(ctx, gb, res, err) }()
//
// Two more lines serve what the streams know to the rest of the cluster:
// the readiness probe, which fails until every informer has synced once
// and passes on a replica waiting for the lease, so that a leader-elected
// operator's rolling update completes ([Grader.ReadyzCheck]:
// mgr.AddReadyzCheck("watches", grade.ReadyzCheck), never as the liveness
// probe), and, already set by ManagerOptions, the
// reflectors' failures logged graded ([wgwatch.WatchErrorLogger]) instead
// of one error per failed list or watch.
//
// The owner's status needs conditions (kubebuilder scaffolds them) and
// observedGeneration (add `ObservedGeneration int64
// json:"observedGeneration,omitempty"` and regenerate the CRD): kstatus and
// kubectl wait read it, and without it every reconcile after a restart
// would be a status write. The controller needs RBAC to record Events:
// `+kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch`
// (a cluster-scoped owner's Events land in "default": see below).
// examples/README.md has the whole change to a fresh kubebuilder project,
// the one its end-to-end test applies and runs.
//
// # Where this module lives, and why
//
// The library's root module never requires controller-runtime: through
// minimum version selection it would set the controller-runtime and
// Kubernetes versions of every user of the library, controller-runtime
// users or not. So the integration is a module of its own,
// github.com/watchgrade/watchgrade/examples/wgctrl, that requires the root
// module, controller-runtime and client-go and nothing else (no
// k8s.io/kubernetes, so no replace directives for whoever requires it). It
// sits under examples/ because the repository's top level is fixed, and
// examples/ is where the design keeps everything that depends on
// controller-runtime; it is a module of its own, apart from the examples
// module (which requires the end-to-end harness and needs 33 replace
// lines), so that it can be required alone. Its name follows the wg prefix
// the library's packages are imported with (wgwatch, wgevents, ...).
//
// # What controller-runtime does with a kind that needs a human
//
// A controller starts its workers only once every source (For, Owns,
// Watches) has synced, and the manager's cache reports synced only when all
// of its informers have. An informer that RBAC denies never syncs, and a
// kind whose CRD is missing gets no informer at all (the source asks again
// every 10 seconds). After CacheSyncTimeout (two minutes by default) the
// controller fails and the manager exits: a crash loop, and no Reconcile
// ever runs to say why, which is exactly the problem watchgrade exists to
// report. Since a source waits for the whole cache, one such kind holds
// back the workers of every controller of the manager, not only of those
// that watch it. A denial that starts while the controller runs does not
// stop the workers (the informer has synced once); its informer keeps
// retrying.
//
// # What this package does instead
//
//   - It keeps controller-runtime's rule: workers never run on a cache that
//     has not synced, because a controller acting on an empty cache of its
//     children can delete or recreate them. With [Options.WaitForHuman],
//     [Grader.ManagerOptions] sets the controllers' CacheSyncTimeout to
//     [CacheSyncTimeout] (ten years) when it is unset, so the controller
//     waits for the human instead of exiting; it is an option because it
//     changes every controller of the manager.
//   - The owner is told anyway, by a standby writer that does not need the
//     controller's workers: [Owner.Start], which the manager runs. It follows
//     the owner kind's informer (which syncs: only the watched kind is
//     denied), tracks every owner object against the watched kinds' streams,
//     and writes the trio of every owner whose verdict is Stalled, with one
//     Warning Event, within the streams' human grace (Policy.HumanGrace, 15
//     seconds, plus the informer's retry), and of every owner Ready=True
//     that a watched kind's stream in trouble past the start grace takes
//     Ready from ([wgreadiness.Accumulator.ApplyStandby]). It writes nothing
//     else (it knows none of the gates your Reconcile sets: the controller
//     writes the rest once it runs, for the generation it has reconciled),
//     what it leaves unwritten does not end the restart hold, and it
//     stands down for good at the first [Owner.Status] call: from then on
//     the controller's workers run.
//   - A watched kind that the API server does not serve has no informer and
//     so no stream: the standby writer reports the kind's stream Blocked with
//     reason ResourceNotFound, needing a human, after the same grace, and
//     keeps asking; once the CRD is installed the informer starts and the
//     controller's source finds it within 10 seconds.
//   - When the human has fixed it, the informer syncs, the workers start,
//     and Reconcile writes Ready=True with a Normal Event.
//
// A denial that starts while the controller runs takes the usual path: the
// stream is graded Blocked, Forbidden, needing a human, the accumulator
// hands the owners to the controller's workqueue ([Owner.Requeue]), and
// Reconcile's [Owner.Status] writes Stalled with one Warning.
//
// # Stream names
//
// Owners, Ready's messages and the metrics know an informer by one name,
// [StreamName]: "ConfigMap.v1", "Deployment.v1.apps". It is made from the
// kind, not the resource, so a kind whose CRD is missing is named too. The
// cache runs one informer per kind and representation for the whole cache
// (every namespace it covers), shared by every owner that depends on the
// kind; every representation (typed, unstructured, metadata-only) carries
// the kind's name, so an owner depends on the kind whichever informer of it
// the controller runs: pass a kind watched with builder.OnlyMetadata to
// [Grader.Owner] typed or as a metav1.PartialObjectMetadata, and the
// owners follow the controller's metadata-only informer, with no second
// one listing every full object.
//
// # Several namespaces, and cluster-scoped owners
//
// A cache restricted to namespaces (cache.Options.DefaultNamespaces, or a
// ByObject's Namespaces) runs one informer per namespace for a kind.
// controller-runtime does not tell the NewInformer hook which namespace
// each serves; the Grader finds out as the informer is made, with a list
// that the cache's HTTP client (wrapped by [Grader.ManagerOptions])
// answers itself, empty, without sending it: client-go's request metrics
// count it as one successful request. The metrics and the probe still know
// the kind by its one name, with the worst state among its informers (the
// core's rule, [wgwatch.Streams], as for an informer removed and made
// again); but each owner depends on the kind only in the namespaces it
// follows ([wgwatch.Streams.Dependencies]; Ready's message names them:
// "team-b/ConfigMap.v1"): a namespaced owner its own, a cluster-scoped one every
// namespace of the cache, unless its Reconcile says otherwise with
// [Owner.FollowNamespaces] (a cluster-scoped TenantQuota that counts team-a's
// ConfigMaps follows team-a). So RBAC denied in team-b makes the owners
// that follow team-b Stalled, with one Warning each, and leaves the others
// Ready, with no write and no Event. controller-runtime's cache makes a
// kind's informers one namespace after another, and the controller's
// source waits for each to sync before it asks for the next, so a
// namespace denied from the start would leave those after it with none:
// the Owner asks the cache for them (without waiting for a sync, in the
// representation the controller's informers have), so that each
// namespace's owners follow their own namespace's informer from the start.
// A namespace the cache does not watch the kind in at all gives the owners
// that follow it a Stalled gate, [ReasonNamespaceNotWatched]: nobody
// watches their data there. Where the cache's DefaultNamespaces include
// cache.AllNamespaces, a namespace with no informer of its own is served
// by the informer of every namespace, and followed through the kind's
// worst state.
//
// An owner's Events are recorded in its namespace; a cluster-scoped
// owner's land in the namespace "default" (client-go's recorders put them
// there), so its controller needs the Events RBAC there or cluster-wide.
//
// Owners depend on the streams of the kinds their controller watches:
// built with [Owner.ControllerManagedBy], the controller's Owns, Watches
// and WatchesMetadata are those kinds, said once, and its Build adds the
// Owner's Requeue source, so neither can be left out (a controller built
// with ctrl.NewControllerManagedBy lists its kinds again in
// [Grader.Owner], and adds the source itself; [Owner.Start] logs an error
// when no controller has it). You never write those names. Per-object dependencies (an informer Reconcile
// asks the cache for, say) go through [Owner.Track], named by [StreamName]
// from the informer's kind (a controller that knows a resource maps it to
// its kind with the manager's RESTMapper, as examples/ctrlruntime does),
// which gives the owner a Stalled gate with reason [ReasonUnknownStream]
// for a name no informer of the cache has: a misspelt name is a Warning,
// not a Reconciling that never ends.
//
// # Metrics
//
// The watch metrics go on controller-runtime's registry (Options.Registerer),
// which the manager's metrics server serves wherever the scaffold serves
// controller-runtime's own: with kubebuilder's defaults, HTTPS with
// authentication on :8443, scraped through config/prometheus. Nothing needs
// to change there. Their names are watchgrade's defaults, the ones the
// monitoring kit (examples/monitoring) queries; this package offers no
// prefix option.
//
// # What is wgctrl's, and what is the core's
//
// The rules are the root module's, where the judges play them:
// wgstatus.Writer decides and writes the status, stands by, and tracks
// what each owner depends on (kinds by namespace, unknown streams,
// namespaces not watched, kinds not served, and AwaitInformer's wait for
// a kind to be served); wgwatch.Streams merges the informers of a kind
// and holds the probe's rule, and StreamInformer.Informer wraps each
// informer so that Streams learns when it stops. wgctrl is wiring of
// what only controller-runtime needs: the manager's hooks
// (ManagerOptions: the cache's informers and the reflectors' logger),
// the Builder that says the watched kinds once, the Requeue source into
// the controller's workqueue, Status's mapping of the step's outcome onto
// a reconcile.Result, the RESTMapper's and the cache's answers (served
// kinds, the namespaces a restricted cache makes informers in), and the
// lease on a leader-elected replica.
//
// # Testing a reconciler
//
// Package github.com/watchgrade/watchgrade/examples/wgctrl/wgctrltest runs
// your own Reconciler, wired as above, through API server faults (denials
// in a namespace, outages, 410 storms, restarts) in virtual time, and
// reports each owner's conditions, Events and status writes: the way to
// table-test the wiring with no cluster. Underneath it,
// [Grader.NewOwner] makes an Owner from controller-runtime's fake client
// and a fake recorder, and the Grader is the informers' observer: feed it
// states, or run an informer built by [Grader.NewInformer] over
// github.com/watchgrade/watchgrade/watch/watchtest's simulated server, then
// call Reconcile and read the owner back (see the package example). A nil
// *Owner writes nothing, so a test that builds the reconciler without one
// (kubebuilder's scaffolded controller test) still runs.
package wgctrl
