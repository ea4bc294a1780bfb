package ctrlruntime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	wgevents "github.com/watchgrade/watchgrade/events"
	"github.com/watchgrade/watchgrade/examples/watchtarget"
	"github.com/watchgrade/watchgrade/examples/wgctrl"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
)

// Reasons of the gates a WatchTarget gets for a resource that cannot be
// followed. Each is a valid condition reason, copied into Ready, Reconciling
// or Stalled.
const (
	// ReasonWaitingForResource: the API server does not serve the resource,
	// for less than Policy.HumanGrace so far (Progressing).
	ReasonWaitingForResource = "WaitingForResource"
	// ReasonResourceNotFound: the API server does not serve the resource:
	// still not after Policy.HumanGrace, or the spec names it by a partial
	// name that only a RESTMapper would match, such as a singular
	// (Stalled).
	ReasonResourceNotFound = "ResourceNotFound"
	// ReasonAmbiguousResource: the resource matches several kinds
	// (Stalled).
	ReasonAmbiguousResource = "AmbiguousResource"
	// ReasonClusterScoped: the resource is cluster-scoped; a WatchTarget
	// follows namespaced resources only (Stalled).
	ReasonClusterScoped = "ClusterScoped"
	// ReasonDiscoveryFailed: API discovery failed; retried (Progressing).
	ReasonDiscoveryFailed = "DiscoveryFailed"
	// ReasonInformerFailed: the cache could not make the informer; retried
	// (Progressing).
	ReasonInformerFailed = "InformerFailed"
)

// informerGetter is the one method Reconcile needs from the manager's cache.
type informerGetter interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error)
}

// Reconciler reconciles WatchTargets: it makes sure an informer runs for each
// resource a target names and writes the target's readiness. [SetupWithManager]
// makes one and adds it to a manager.
type Reconciler struct {
	client    client.Client
	informers informerGetter
	mapper    meta.RESTMapper
	scheme    *runtime.Scheme
	in        *Instrumentation
	status    *wgstatus.Writer
	// now is the clock of conditions and of the grace of unresolved
	// resources; tests replace it.
	now func() time.Time

	mu sync.Mutex
	// failingSince holds, per WatchTarget, since when each resource it
	// names has been failing to resolve (by stream name).
	failingSince map[types.NamespacedName]map[string]time.Time
}

// SetupWithManager adds the WatchTarget controller to mgr. mgr must have been
// made with options passed through in ([Instrumentation.ManagerOptions]),
// and with a scheme that knows WatchTarget (watchtarget.AddToScheme).
//
// The controller watches WatchTargets (their spec: status-only updates,
// its own among them, are filtered out, since readiness changes arrive from
// the accumulator) and the accumulator's requeues.
func SetupWithManager(mgr manager.Manager, in *Instrumentation) (*Reconciler, error) {
	if in == nil {
		return nil, errors.New("ctrlruntime: SetupWithManager needs an Instrumentation")
	}
	if !mgr.GetScheme().Recognizes(watchtarget.Kind) {
		return nil, errors.New("ctrlruntime: the manager's scheme does not know WatchTarget; add it with watchtarget.AddToScheme")
	}
	in.mu.Lock()
	if in.setUp {
		in.mu.Unlock()
		return nil, errors.New("ctrlruntime: this Instrumentation is already set up with a manager; make one per manager")
	}
	in.setUp = true
	in.mu.Unlock()
	// wgevents.Recorder records only when Ready or Stalled moves, and a
	// Warning only when the object is Stalled: a human must act.
	events, err := wgevents.NewEventsRecorder(mgr.GetEventRecorder(in.opts.Name), wgevents.EventsOptions{})
	if err != nil {
		return nil, fmt.Errorf("ctrlruntime: %w", err)
	}

	r := &Reconciler{
		client:       mgr.GetClient(),
		informers:    mgr.GetCache(),
		mapper:       mgr.GetRESTMapper(),
		scheme:       mgr.GetScheme(),
		in:           in,
		now:          time.Now,
		failingSince: map[types.NamespacedName]map[string]time.Time{},
	}
	if r.status, err = newStatusWriter(r.client, mgr.GetAPIReader(), in.acc, events, time.Now); err != nil {
		return nil, fmt.Errorf("ctrlruntime: %w", err)
	}
	err = builder.ControllerManagedBy(mgr).
		Named(in.opts.Name).
		For(&watchtarget.WatchTarget{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Func(in.startRequeue)).
		Complete(r)
	if err != nil {
		return nil, fmt.Errorf("ctrlruntime: %w", err)
	}
	return r, nil
}

// Instrumentation returns the Instrumentation the reconciler was set up with.
func (r *Reconciler) Instrumentation() *Instrumentation { return r.in }

// newStatusWriter returns the WatchTargets' status step: it writes with
// c, reads the object again from the API server through reader (after a
// conflict, and to tell a deleted target from a 404 of another kind),
// records with events and stamps conditions with now.
func newStatusWriter(c client.Client, reader client.Reader, acc *wgreadiness.Accumulator, events *wgevents.Recorder, now func() time.Time) (*wgstatus.Writer, error) {
	return wgstatus.New(wgstatus.Options{
		Accumulator: acc,
		Resource:    watchtarget.Resource.GroupResource(),
		Events:      events,
		Clock:       nowClock(now),
		Update: func(ctx context.Context, obj runtime.Object) (runtime.Object, error) {
			t := obj.(*watchtarget.WatchTarget)
			return t, c.Status().Update(ctx, t)
		},
		Get: func(ctx context.Context, key types.NamespacedName) (runtime.Object, error) {
			t := &watchtarget.WatchTarget{}
			return t, reader.Get(ctx, key, t)
		},
	})
}

// nowClock is a clock.PassiveClock over a func, the reconciler's clock.
type nowClock func() time.Time

func (c nowClock) Now() time.Time                  { return c() }
func (c nowClock) Since(t time.Time) time.Duration { return c().Sub(t) }

// Reconcile follows the target's resources and hands it to the status
// step, which writes the trio and status.observedGeneration in one status
// update when a reader would see a change, and records an Event only
// after that write succeeded. A conflict is retried after a short wait,
// quietly (status-only updates do not requeue through For, whose
// predicate passes generation changes only), and so is a write the API
// server did not take for being away or overloaded (Unavailable: after
// the status step's backoff, 1 s doubling to a minute); any other failed
// write is returned, and controller-runtime retries with backoff.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	key := req.NamespacedName
	t := &watchtarget.WatchTarget{}
	if err := r.client.Get(ctx, key, t); err != nil {
		if apierrors.IsNotFound(err) {
			// Deleted: forget it. Its informers keep running (see the
			// package documentation).
			r.status.Forget(key, "")
			r.forget(key)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}

	retry := r.follow(ctx, key, t)
	res := r.status.Write(ctx, t, nil)
	if res.Err != nil {
		return reconcile.Result{}, res.Err
	}
	if res.RequeueAfter > 0 && (retry == 0 || res.RequeueAfter < retry) {
		retry = res.RequeueAfter
	}
	return reconcile.Result{RequeueAfter: retry}, nil
}

// unresolved is why a resource a WatchTarget names cannot be followed.
type unresolved struct {
	reason  string
	message string
	level   wgreadiness.Level
	// grace is true for a resource the API server does not serve: it may
	// be about to (a CRD applied together with the WatchTarget takes
	// seconds to be served), so the gate is Progressing, with reason
	// ReasonWaitingForResource, for Policy.HumanGrace before it is
	// Stalled.
	grace bool
}

// follow makes sure an informer runs for every resource t names, tracks
// their streams for t, and turns each resource that cannot be followed into
// a gate of t's own, removing the gates of resources that now resolve. It
// returns how soon t must be looked at again: 0 when every resource
// resolved.
func (r *Reconciler) follow(ctx context.Context, key types.NamespacedName, t *watchtarget.WatchTarget) time.Duration {
	acc := r.in.acc
	now := r.now()
	var streams []string
	failing := map[string]unresolved{}
	for _, ref := range t.Spec.Resources {
		name, u := r.ensureInformer(ctx, ref.GVR())
		if u != nil {
			failing[name] = *u
			continue
		}
		streams = append(streams, name)
	}
	// Track replaces the target's set of streams; a target naming no
	// resource rolls up as Reconciling with reason NoGates.
	r.status.Track(key, wgstatus.Dependencies{Streams: streams})

	since := r.failing(key, failing, now)
	var retry time.Duration
	for name, u := range failing {
		wait := r.in.opts.UnresolvedRetry
		gate := wgreadiness.Gate{Name: name, Level: u.level, Reason: u.reason, Message: u.message}
		if left := r.in.opts.humanGrace() - now.Sub(since[name]); u.grace && left > 0 {
			gate = wgreadiness.Progressing(name, ReasonWaitingForResource,
				"the API server does not serve this resource yet; waiting in case it is being installed")
			wait = min(wait, left)
		}
		acc.SetGate(key, gate)
		if retry == 0 || wait < retry {
			retry = wait
		}
	}
	for _, g := range acc.Gates(key) {
		if _, ok := failing[g.Name]; !ok && !g.Stream {
			acc.RemoveGate(key, g.Name)
		}
	}
	return retry
}

// ensureInformer maps gvr to its kind with the manager's RESTMapper and asks
// the cache for the kind's informer, without waiting for it to sync: an
// informer that RBAC forbids never syncs, and its stream reports that
// instead. When the informer runs (or will, once the cache starts), it
// returns the informer's stream name (wgctrl.StreamName of the kind) and
// nil. Otherwise it returns the name of the gate that says why, made from
// gvr as the spec names it (refName: the kind may be unknown), and the
// reason. Messages hold no error text, which would change from one try to
// the next and make every reconcile a status write: errors are logged, at
// Info, since they are retried (a discovery that fails during an apiserver
// restart is routine).
func (r *Reconciler) ensureInformer(ctx context.Context, gvr schema.GroupVersionResource) (string, *unresolved) {
	log := logf.FromContext(ctx)
	name := refName(gvr)
	gvk, err := r.mapper.KindFor(gvr)
	var mapping *meta.RESTMapping
	if err == nil {
		mapping, err = r.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	switch {
	case meta.IsNoMatchError(err):
		return name, &unresolved{level: wgreadiness.LevelStalled, grace: true, reason: ReasonResourceNotFound,
			message: "the API server does not serve this resource: check spec.resources, or install the CustomResourceDefinition that defines it"}
	case meta.IsAmbiguousError(err):
		return name, &unresolved{level: wgreadiness.LevelStalled, reason: ReasonAmbiguousResource,
			message: "this resource matches several kinds: name it by its plural, version and group"}
	case err != nil:
		log.Info("API discovery failed; retrying", "resource", name, "err", err)
		return name, &unresolved{level: wgreadiness.LevelProgressing, reason: ReasonDiscoveryFailed,
			message: "API discovery failed; retrying"}
	}
	if mapping.Resource != gvr {
		// The mapper matches partial names (a singular, a missing group);
		// the API server would not, and neither does the client-go version.
		return name, &unresolved{level: wgreadiness.LevelStalled, reason: ReasonResourceNotFound,
			message: fmt.Sprintf("the API server does not serve this resource; did you mean %s?", refName(mapping.Resource))}
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		return name, &unresolved{level: wgreadiness.LevelStalled, reason: ReasonClusterScoped,
			message: "this resource is cluster-scoped; a WatchTarget follows namespaced resources only"}
	}
	if _, err := r.informers.GetInformer(ctx, objectFor(gvk, r.scheme), cache.BlockUntilSynced(false)); err != nil {
		log.Info("cannot start informer; retrying", "resource", name, "err", err)
		return name, &unresolved{level: wgreadiness.LevelProgressing, reason: ReasonInformerFailed,
			message: "the cache cannot start its informer; retrying"}
	}
	return wgctrl.StreamName(gvk), nil
}

// refName names a resource as a WatchTarget's spec does, in kubectl's
// fully-qualified form resource.version.group: "widgets.v1.example.com".
// It names the gate of a resource that cannot be followed, whose kind the
// API server may not know.
func refName(gvr schema.GroupVersionResource) string {
	name := gvr.Resource + "." + gvr.Version
	if gvr.Group != "" {
		name += "." + gvr.Group
	}
	return name
}

// objectFor returns the object Reconcile asks the cache for to follow gvk:
// typed when the scheme knows the kind, so that the informer is the one the
// rest of an operator reads through the cached client; unstructured
// otherwise (custom resources the operator has no Go type for). Both carry
// the kind's plain stream name (wgctrl.StreamName).
func objectFor(gvk schema.GroupVersionKind, scheme *runtime.Scheme) client.Object {
	if scheme.Recognizes(gvk) {
		if obj, err := scheme.New(gvk); err == nil {
			if co, ok := obj.(client.Object); ok {
				// A Go type registered under several kinds needs its kind
				// set to be told apart; for the others it changes nothing.
				co.GetObjectKind().SetGroupVersionKind(gvk)
				return co
			}
		}
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}

// failing records which of key's resources fail now and returns since when
// each has been failing; a resource that resolves starts afresh next time.
func (r *Reconciler) failing(key types.NamespacedName, now map[string]unresolved, at time.Time) map[string]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(now) == 0 {
		delete(r.failingSince, key)
		return nil
	}
	before := r.failingSince[key]
	since := make(map[string]time.Time, len(now))
	for name := range now {
		if t, ok := before[name]; ok {
			since[name] = t
		} else {
			since[name] = at
		}
	}
	r.failingSince[key] = since
	return since
}

// forget drops what the reconciler remembers about a deleted target.
func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.failingSince, key)
}
