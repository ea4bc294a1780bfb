// Package wgctrltest runs an operator's own controller, as its own setup
// builds it with wgctrl, through faults of the API server in virtual time,
// with no cluster and no binaries: "ConfigMaps denied in one namespace",
// "the controller restarted while Stalled", "a 410 storm". A table test in
// the operator's repository then asserts what its users see: each owner's
// conditions, its Events and its status writes.
//
//	res := wgctrltest.Run(t, wgctrltest.Operator{
//		Scheme:  scheme,
//		Owner:   &webappv1.Guestbook{},
//		Objects: []client.Object{guestbook},
//		// the scaffold's own SetupWithManager, as main calls it
//		SetupWithManager: func(mgr ctrl.Manager, o *wgctrl.Owner) error {
//			return (&GuestbookReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Readiness: o}).SetupWithManager(mgr)
//		},
//	}, wgctrltest.Deny(&corev1.ConfigMap{}, ""), wgctrltest.Wait(time.Minute), wgctrltest.Restart())
//	res.Warnings(key) // 1
//
// [Run] plays the steps in a testing/synctest bubble of its own, so hours
// of the API server's life take milliseconds. Its world is what an
// operator built on a controller-runtime manager meets, made of the parts
// wgctrl's own tests use:
//
//   - The owners live in controller-runtime's fake client (the owners of
//     Operator.Objects; none is created during a run), which Reconcile
//     reads and whose status subresource Owner.Status writes; every
//     status write is counted per owner, and [Result.Timeline] has each
//     step, Reconcile, write and Event at its virtual time.
//   - Each watched kind is served by a watchtest.Server (one per namespace
//     of Operator.Namespaces, as a cache restricted to namespaces runs one
//     informer per namespace), whose informer the Grader grades, as the
//     manager's cache hook does. As controller-runtime's cache, it makes a
//     kind's informers one namespace after another, in the order of
//     Operator.Namespaces (the real cache's is a Go map's), each once the
//     one before it has synced, and all those not made yet when the Owner
//     asks for the kind. The servers do not hold the fake client's
//     objects: the verdicts depend on how the streams fare, not on what
//     they carry. The servers outlive a restart, as the API server does.
//   - The controller is controller-runtime's own (controller.NewUnmanaged,
//     the version wgctrl requires), with the manager's defaults: its
//     priority queue and rate limiter, its handling of what Reconcile
//     returns (an error logged at error level and retried with backoff, a
//     reconcile.TerminalError logged and not retried, RequeueAfter, the
//     deprecated Requeue), one worker. Its sources are the Owner's Requeue
//     and the watched kinds' informers: its workers start once every
//     informer has synced (never, while a kind is denied from the start:
//     the Owner's standby writer reports it meanwhile), and reconcile
//     every owner then, as its For source queues the owners listed. It
//     reconciles through the controller Operator.SetupWithManager built
//     (controller-runtime's Reconcile, which recovers a panic, then
//     yours), whose own queue, sources, options and predicates are not
//     run: they are what the kit's controller stands in for.
//   - Events are recorded per owner ("Warning Forbidden ..."), as
//     client-go's events recorder would record them.
//   - The readiness probe (Grader.ReadyzCheck, or Operator.Main's
//     readiness checks) is looked at after each
//     step and during each Wait, and recorded with how many of the
//     informers the controller needs have synced ([RecordProbe]).
//   - The informers' watch error handler is the one
//     Grader.ManagerOptions gives the cache, and the lines logged at error
//     level are recorded ([Result.ErrorLogs]), as are a Reconcile's
//     errors, which controller-runtime logs at error level.
//
// Run checks the wiring: a run fails, with a message that names the
// mistake, when an owner it reconciled ends without a Ready condition
// (which the status step gives every owner it reconciles: a reconciler
// built without the Owner it is given, or whose Reconcile never calls
// Owner.Status), and, with Operator.SetupWithManager, when the controller
// it builds has no Owner.Requeue source or watches a kind its Owner does
// not depend on (built with wgctrl.Owner.ControllerManagedBy, neither can
// be written). With Operator.Main, the function main.go calls once the
// manager is made, the kit runs main's wiring, the probe included: a run
// also fails when it makes no Owner, registers no readiness check, or
// registers checks that pass while Grader.ReadyzCheck fails (healthz.Ping
// as the readiness check). With SetupWithManager or Reconciler the kit
// wires the probe itself, and such a main.go is not caught.
//
// Every process runs as a leader-elected manager does: one started by
// [Rollout] waits for the lease (no informer, nothing reconciled, its probe
// as Grader.ReadyzCheck answers there) until the old one has stopped and
// LeaseDuration has passed; the first process and one started by [Restart]
// take the lease at once.
//
// How it differs from a real manager: the owner kind's informer is not
// graded (the owners never go through a simulated server; the standby
// writer sees them as they are when it starts); the servers' errors reach
// the informers at once, where client-go's REST client would retry a
// reset connection itself; of controller-runtime's own log lines those
// of the controller at error level are recorded ([RecordLog], "Reconciler
// error: ...", with the lines the Grader, its Owners and the watch error
// handler log at error level; client-go's own klog lines are not
// captured), but not those logged once the process is told to stop (the
// controller logs one for sources that never synced: a stop's, not a
// fault's). Denying a kind cuts its open watches, as a Role removed shows
// on a real server when the watches next reopen (within the API server's
// watch timeout).
package wgctrltest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta/testrestmapper"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/watchgrade/watchgrade/examples/wgctrl"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// Operator is the operator under test, wired as its main wires it.
type Operator struct {
	// Scheme knows the owner kind and every watched kind. Required.
	Scheme *runtime.Scheme
	// Owner is an object of the owner kind, as passed to Grader.Owner.
	// Its status subresource is what Owner.Status writes. Required.
	Owner client.Object
	// Watches are the kinds the controller watches (Owns, Watches), each
	// in the representation its informer has: a
	// metav1.PartialObjectMetadata with its kind set for a
	// builder.OnlyMetadata watch. Its workers start once their informers
	// have synced. They are what is passed to Grader.Owner, unless
	// OwnerWatches is set.
	Watches []client.Object
	// OwnerWatches, if set, are what is passed to Grader.Owner instead of
	// Watches: a kind watched metadata-only passed typed (as
	// examples/README.md's steps pass it: the Owner follows the
	// controller's informer), or a kind the controller does not watch,
	// which the Owner asks the cache for itself (its Reconcile reads it
	// with the client, say). A second informer of a watched kind, in
	// another representation, is recorded ([RecordInformer]).
	OwnerWatches []client.Object
	// Objects are in the fake client from the start: the owners, and
	// anything else Reconcile reads.
	Objects []client.Object
	// Namespaces restricts the cache to these namespaces, as
	// cache.Options.DefaultNamespaces does: one informer per namespace
	// and watched kind, made in this order (put a denied namespace first
	// to see what a real cache does one start in two). Defaults to none: one informer per watched kind,
	// of every namespace.
	Namespaces []string
	// Options configure the Grader. Registerer defaults to a registry of
	// the run's own.
	Options wgctrl.Options
	// SetupWithManager is the operator's own setup, the code its main
	// runs after grade.Owner: it builds the owner kind's controller and
	// its reconciler on mgr, as kubebuilder's SetupWithManager does:
	//
	//	SetupWithManager: func(mgr manager.Manager, readiness *wgctrl.Owner) error {
	//		return (&GuestbookReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Readiness: readiness}).SetupWithManager(mgr)
	//	},
	//
	// The kit calls it once per process (again at each Restart) with a
	// manager that builds controllers and runs none (its client is the
	// kit's), and reconciles through the controller it built. Before the
	// run, it starts that controller once, with no informers, to learn
	// the kinds its sources watch, which are Watches when Watches is nil.
	// The run fails, naming the mistake, when the controller has no
	// Owner.Requeue source, or watches a kind its Owner does not depend
	// on: both are caught by building it with
	// readiness.ControllerManagedBy(mgr). The kit's own controller
	// queues and retries with the manager's defaults: your controller's
	// options (WithOptions) and predicates (WithEventFilter) are not
	// played. Set it or Reconciler.
	SetupWithManager func(mgr manager.Manager, readiness *wgctrl.Owner) error
	// Main, if set, is the operator's wiring as its main runs it once the
	// manager is made: grade.Owner, the controller's setup and the
	// readiness probe. Factor it out of main.go, and call it there, so
	// that the kit runs the wiring main runs:
	//
	//	func wire(mgr manager.Manager, grade *wgctrl.Grader) error {
	//		readiness, err := grade.Owner(mgr, &Guestbook{})
	//		if err != nil {
	//			return err
	//		}
	//		if err := (&GuestbookReconciler{Client: mgr.GetClient(), Readiness: readiness}).SetupWithManager(mgr); err != nil {
	//			return err
	//		}
	//		return mgr.AddReadyzCheck("watches", grade.ReadyzCheck)
	//	}
	//
	// It is run as SetupWithManager is, once per process with a Grader of
	// the process's own, on a manager that also has Elected,
	// GetEventRecorder, AddReadyzCheck and AddHealthzCheck, and checked
	// as SetupWithManager is, and more: the run fails, naming the mistake,
	// when Main makes no Owner (or several: the kit runs one owner kind),
	// registers no readiness check, or registers checks that pass before
	// any informer has synced while grade.ReadyzCheck fails (healthz.Ping
	// where grade.ReadyzCheck belongs). Its readiness checks, every one
	// passing, are the probe the kit looks at (RecordProbe) and a Rollout
	// waits for. Set one of Main, SetupWithManager and Reconciler; with
	// Main, Watches and OwnerWatches are learnt from it.
	Main func(mgr manager.Manager, grade *wgctrl.Grader) error
	// Reconciler makes the operator's reconciler from the client and the
	// Owner, as its main does, once per process (again at each Restart),
	// where SetupWithManager is not set.
	Reconciler func(c client.Client, readiness *wgctrl.Owner) reconcile.Reconciler
	// Setup, if set, is called with each process's Owner before it starts:
	// Owner.FollowNamespaces, say.
	Setup func(*wgctrl.Owner)
	// Seed seeds the random spreads of the informers' waits (a source per
	// informer and process, unless Options.Seed is set), so that a run
	// plays the same each time. client-go's reflectors draw their backoff
	// jitter from math/rand's global source: for a run that replays
	// exactly, seed that too (math/rand.Seed, which needs
	// //go:debug randseednop=0 in the test file), as the operator judge
	// does. To that end each server answers in a time of its own, a
	// fault reaches the servers one at a time, 611 µs apart, and a
	// stopped process's informers stop one at a time.
	Seed uint64
}

// Step is one thing that happens to the operator's world. [Run] plays the
// steps in order; each takes no virtual time but [Wait] (and under a
// millisecond for each server a fault reaches, see Operator.Seed).
type Step struct {
	name string
	do   func(*world) error
}

// String names the step, as Result's timeline shows it.
func (s Step) String() string { return s.name }

// Wait lets d of virtual time pass.
func Wait(d time.Duration) Step {
	return Step{name: "wait " + d.String(), do: func(w *world) error {
		// The probe is looked at 10 ms, 100 ms, 1 s, 10 s and each minute
		// into the wait (RecordProbe).
		var slept time.Duration
		for _, at := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second, 10 * time.Second, time.Minute} {
			if at >= d {
				break
			}
			time.Sleep(at - slept)
			slept = at
			synctest.Wait()
			w.probe()
		}
		for ; slept+time.Minute < d; slept += time.Minute {
			time.Sleep(time.Minute)
			synctest.Wait()
			w.probe()
		}
		time.Sleep(d - slept)
		return nil
	}}
}

// Deny makes the API server deny kind's lists and watches in namespace
// ("" for every namespace), as a RoleBinding removed does: 403 Forbidden,
// open watches cut.
func Deny(kind client.Object, namespace string) Step {
	return serverStep("deny", kind, namespace, func(s *watchtest.Server, gr schema.GroupResource, namespace string) {
		s.SetFaults(watchtest.Faults{Err: watchtest.ForbiddenFor(gr, namespace)})
		s.CloseWatches()
	})
}

// Allow takes back every fault of kind's server in namespace ("" for
// every namespace): the human fixed the Role, or the outage is over.
func Allow(kind client.Object, namespace string) Step {
	return serverStep("allow", kind, namespace, func(s *watchtest.Server, _ schema.GroupResource, _ string) { s.SetFaults(watchtest.Faults{}) })
}

// Outage refuses every connection to the API server for d, as a
// control-plane blip does, then serves again (with the faults it had):
// OutageBegins, Wait(d), OutageEnds.
func Outage(d time.Duration) Step {
	return Step{name: "outage " + d.String(), do: func(w *world) error {
		if err := w.outageBegins(); err != nil {
			return err
		}
		time.Sleep(d)
		return w.outageEnds()
	}}
}

// RefuseWrites answers every write of the operator's client (its
// children, its status writes) with 429 Too Many Requests for d, while
// its reads and the informers' watches are served: an API server that
// sheds mutating requests (its priority and fairness limits, or etcd
// slow to write). It takes d of virtual time.
func RefuseWrites(d time.Duration) Step {
	return Step{name: "refuse writes " + d.String(), do: func(w *world) error {
		w.writesRefused.Store(true)
		time.Sleep(d)
		w.writesRefused.Store(false)
		return nil
	}}
}

// OutageBegins refuses every connection to the API server until
// OutageEnds, so that other steps happen during the outage: a Restart of
// the operator while the control plane is down, say. Deny and Allow are
// refused during an outage.
func OutageBegins() Step {
	return Step{name: "outage begins", do: (*world).outageBegins}
}

// OutageEnds ends the outage OutageBegins began: the API server serves
// again, with the faults it had (a denial stays denied).
func OutageEnds() Step {
	return Step{name: "outage ends", do: (*world).outageEnds}
}

func (w *world) outageBegins() error {
	if w.down != nil {
		return errors.New("an outage has begun already")
	}
	servers := w.allServers()
	w.down = make([]watchtest.Faults, len(servers))
	for i, s := range servers {
		w.down[i] = s.Faults()
	}
	w.outage.Store(true)
	settled(servers, func(s *watchtest.Server) {
		s.SetFaults(watchtest.Faults{Refuse: true})
		s.CloseWatches()
	})
	return nil
}

func (w *world) outageEnds() error {
	if w.down == nil {
		return errors.New("no outage has begun")
	}
	for i, s := range w.allServers() {
		s.SetFaults(w.down[i])
	}
	w.down = nil
	w.outage.Store(false)
	return nil
}

// ExpiryStorm expires every cursor of kind's informers n times, every gap:
// the kube-apiserver restarts, its watch cache starts anew, and each
// informer's resume meets 410 Gone and relists, as a rolling restart of a
// control plane does. It takes n×gap of virtual time.
func ExpiryStorm(kind client.Object, n int, gap time.Duration) Step {
	return Step{name: fmt.Sprintf("410 storm %d×%s", n, gap), do: func(w *world) error {
		servers, _, err := w.serversOf(kind, "")
		if err != nil {
			return err
		}
		for range n {
			settled(servers, (*watchtest.Server).Restart)
			time.Sleep(gap)
		}
		return nil
	}}
}

// Restart stops the operator's process and starts a new one (a new Grader,
// Owner, informers and reconciler), as a rollout or a crash does; the
// objects and the API server's faults stay.
func Restart() Step {
	return Step{name: "restart", do: func(w *world) error {
		old := w.proc
		old.stop()
		w.mu.Lock()
		w.live = slices.DeleteFunc(w.live, func(p *process) bool { return p == old })
		w.mu.Unlock()
		p, err := w.start(nil)
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.proc = p
		w.mu.Unlock()
		return nil
	}}
}

// Rollout rolls the operator out as a Deployment of kubebuilder's
// manifests does (one replica, --leader-elect, the default rolling
// update): a new process starts while the current one runs and holds the
// lease; once the new one's readiness probe passes (looked at every 10 s,
// as a kubelet does), the current one is stopped, and the new one takes
// the lease LeaseDuration (controller-runtime's 15 s) later, since the
// scaffold leaves LeaderElectionReleaseOnCancel unset: until then it has
// no informer and reconciles nothing. A new process whose probe has not
// passed within a minute fails the run: the rollout would hang, the old
// process kept. It takes the probe's wait and the 15 s of virtual time.
func Rollout() Step {
	return Step{name: "rollout", do: func(w *world) error {
		elected := make(chan struct{})
		next, err := w.start(elected)
		if err != nil {
			return err
		}
		var probe error
		for i := range 7 {
			if i > 0 {
				time.Sleep(10 * time.Second)
			}
			synctest.Wait()
			if probe = next.readyz(nil); probe == nil {
				break
			}
		}
		if probe != nil {
			next.stop()
			w.mu.Lock()
			w.live = slices.DeleteFunc(w.live, func(p *process) bool { return p == next })
			w.mu.Unlock()
			return fmt.Errorf("the new process's readiness probe did not pass within 1m0s while the old one holds the lease, so a rolling update would hang: %v", probe)
		}
		needed := 0
		for _, name := range w.order {
			needed += len(w.kinds[name])
		}
		w.result.mu.Lock()
		w.result.recordLocked(RecordProbe, types.NamespacedName{}, 0, fmt.Sprintf("ready while waiting for the lease; informers synced 0/%d", needed))
		w.result.mu.Unlock()
		old := w.proc
		old.stop()
		w.mu.Lock()
		w.live = slices.DeleteFunc(w.live, func(p *process) bool { return p == old })
		w.proc = next
		w.mu.Unlock()
		time.Sleep(LeaseDuration)
		close(elected)
		return nil
	}}
}

// LeaseDuration is how long a Rollout's new process waits for the lease
// once the old one stopped: controller-runtime's default
// LeaseDuration, which an old process that does not release its lease
// (LeaderElectionReleaseOnCancel unset, as kubebuilder scaffolds) leaves
// to expire.
const LeaseDuration = 15 * time.Second

// ReplaceInformers removes kind's informers from the cache and makes them
// anew, as an operator that watches kinds dynamically (CRDs installed
// later) does with cache.RemoveInformer and GetInformer: the Grader
// forgets the informers stopped and grades the new ones.
func ReplaceInformers(kind client.Object) Step {
	return Step{name: fmt.Sprintf("replace the informers of %T", kind), do: func(w *world) error {
		gvk, err := apiutil.GVKForObject(kind, w.op.Scheme)
		if err != nil {
			return err
		}
		name := wgctrl.StreamName(gvk)
		if _, ok := w.kinds[name]; !ok {
			return fmt.Errorf("%s is not among the Operator's Watches", name)
		}
		w.proc.replace(w, name)
		return nil
	}}
}

// StatusConflicts makes the next n status writes fail with 409 Conflict,
// as a write racing another writer of the owner does.
func StatusConflicts(n int) Step {
	return Step{name: fmt.Sprintf("%d status conflicts", n), do: func(w *world) error {
		w.mu.Lock()
		w.conflicts += n
		w.mu.Unlock()
		return nil
	}}
}

// Update changes the owner key with change, as kubectl apply does (its
// generation moves if change touched the spec: set it in change), and
// hands it to the controller.
func Update(key types.NamespacedName, change func(client.Object)) Step {
	return Step{name: "update " + key.String(), do: func(w *world) error {
		obj, err := w.newOwner()
		if err != nil {
			return err
		}
		if err := w.server.Get(context.Background(), key, obj); err != nil {
			return err
		}
		change(obj)
		if err := w.server.Update(context.Background(), obj); err != nil {
			return err
		}
		w.proc.enqueue(key)
		return nil
	}}
}

// Delete deletes the owner key, as kubectl delete does (it has no
// finalizers): the owner kind's informer hands the deletion to the Owner
// and the controller.
func Delete(key types.NamespacedName) Step {
	return Step{name: "delete " + key.String(), do: func(w *world) error { return w.delete(key) }}
}

// DeleteDuringReconcile deletes the owner key just after the operator's
// client next reads it, so that a Reconcile begun on it finds it gone when
// it writes (NotFound), as an owner deleted during a reconcile does; it
// hands key to the controller, so that the read comes soon.
func DeleteDuringReconcile(key types.NamespacedName) Step {
	return Step{name: "delete " + key.String() + " during its next reconcile", do: func(w *world) error {
		obj, err := w.newOwner()
		if err != nil {
			return err
		}
		if err := w.server.Get(context.Background(), key, obj); err != nil {
			return err
		}
		w.mu.Lock()
		w.deleteOnGet[key] = true
		w.mu.Unlock()
		w.proc.enqueue(key)
		return nil
	}}
}

// get is the operator's client's Get: an owner DeleteDuringReconcile
// armed is deleted once read.
func (w *world) get(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	w.mu.Lock()
	armed := w.deleteOnGet[key]
	delete(w.deleteOnGet, key)
	w.mu.Unlock()
	if armed {
		return w.delete(key)
	}
	return nil
}

// delete deletes the owner key and hands the deletion to the current
// process: its owner informer's handlers, then its controller.
func (w *world) delete(key types.NamespacedName) error {
	obj, err := w.newOwner()
	if err != nil {
		return err
	}
	if err := w.server.Get(context.Background(), key, obj); err != nil {
		return err
	}
	if err := w.server.Delete(context.Background(), obj); err != nil {
		return err
	}
	w.result.mu.Lock()
	w.result.recordLocked(RecordDelete, key, 0, "")
	w.result.mu.Unlock()
	w.mu.Lock()
	live := slices.Clone(w.live)
	w.mu.Unlock()
	for _, p := range live {
		p.deleted(obj)
	}
	return nil
}

func serverStep(verb string, kind client.Object, namespace string, do func(s *watchtest.Server, gr schema.GroupResource, namespace string)) Step {
	name := verb + " " + fmt.Sprintf("%T", kind)
	if namespace != "" {
		name += " in " + namespace
	}
	return Step{name: name, do: func(w *world) error {
		if w.down != nil {
			return fmt.Errorf("%s during an outage (OutageBegins): end it first", name)
		}
		servers, nss, err := w.serversOf(kind, namespace)
		if err != nil {
			return err
		}
		gr := schema.GroupResource{Resource: fmt.Sprintf("%T", kind)} // what the mapper cannot map
		if gvk, err := apiutil.GVKForObject(kind, w.op.Scheme); err == nil {
			if m, err := w.client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
				gr = m.Resource.GroupResource()
			}
		}
		k := 0
		settled(servers, func(s *watchtest.Server) { do(s, gr, nss[k]); k++ })
		return nil
	}}
}

// settled does do to each server in turn, 611 µs apart and 611 µs after
// the step begins (not a sum of the servers' latencies), and lets the
// informers react to each (synctest.Wait) before the next: informers that
// react at one instant draw client-go's jitter (math/rand's global
// source) in the order the scheduler runs them, and grace periods that
// began at one instant (a process's StartGrace, an informer's
// TransientGrace) would end at one instant, racing, so that a seed would
// not replay.
func settled(servers []*watchtest.Server, do func(*watchtest.Server)) {
	for _, s := range servers {
		time.Sleep(611 * time.Microsecond)
		do(s)
		synctest.Wait()
	}
}

// Result is what the run left: each owner's conditions, Events and status
// writes, and the timeline of the run.
type Result struct {
	client client.Client
	owner  schema.GroupVersionKind
	began  time.Time
	mu     sync.Mutex
	events map[types.NamespacedName][]string
	writes map[types.NamespacedName]int
	lines  []Record
}

// Record is one line of a run's timeline.
type Record struct {
	// At is the virtual time since the run began.
	At time.Duration
	// What is RecordStep, RecordReconcile, RecordWrite, RecordEvent,
	// RecordLog, RecordProbe, RecordDelete or RecordInformer.
	What RecordKind
	// Owner is the owner reconciled, written or whose Event it is; zero
	// for a step.
	Owner types.NamespacedName
	// Generation is, for a reconcile, the owner's metadata.generation as
	// the Reconcile began; for a write, the status.observedGeneration
	// written.
	Generation int64
	// Detail is the step's name, the Event ("TYPE REASON NOTE"), or the
	// conditions written ("Ready=True/Established Stalled=...").
	Detail string
}

// RecordKind says what a [Record] records.
type RecordKind string

// The kinds of [Record].
const (
	RecordStep      RecordKind = "step"
	RecordReconcile RecordKind = "reconcile"
	RecordWrite     RecordKind = "write"
	RecordEvent     RecordKind = "event"
	// RecordLog is a line logged at error level by the Grader, its Owners
	// or the reflectors' watch error handler (Detail: "NAME: MESSAGE:
	// ERROR KEY=VALUE..."), or a Reconcile's error, which
	// controller-runtime logs at error level ("Reconciler error: ...").
	RecordLog RecordKind = "log"
	// RecordProbe is the readiness probe (Grader.ReadyzCheck) as it
	// answers, with how many of the informers the controller needs
	// (every watched kind, in every namespace of the cache) exist and have
	// synced (Detail: "ready; informers synced 2/2", "not ready: ERROR;
	// informers synced 0/2"). It is recorded when either changes, as
	// seen after each step and, during a Wait, 10 ms, 100 ms, 1 s, 10 s
	// and each minute into it.
	RecordProbe RecordKind = "probe"
	// RecordDelete is an owner deleted (Delete, DeleteDuringReconcile).
	RecordDelete RecordKind = "delete"
	// RecordInformer is a second informer of a kind the controller
	// watches, in another representation, asked of the cache (the Owner
	// given a kind typed that the controller watches metadata-only would
	// make the cache run both): a list and watch of every object of the
	// kind that nothing uses.
	RecordInformer RecordKind = "informer"
)

func (r Record) String() string {
	s := fmt.Sprintf("%10s %-9s", r.At.Round(time.Millisecond), r.What)
	if r.Owner != (types.NamespacedName{}) {
		s += " " + r.Owner.String()
	}
	if r.What == RecordReconcile || r.What == RecordWrite {
		s += fmt.Sprintf(" generation=%d", r.Generation)
	}
	if r.Detail != "" {
		s += " " + r.Detail
	}
	return s
}

// Timeline returns the run's records in order: each step as it began,
// each Reconcile as it began, each status write the API server accepted,
// each Event.
func (r *Result) Timeline() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

// record adds a line to the timeline; callers hold r.mu.
func (r *Result) recordLocked(what RecordKind, owner types.NamespacedName, generation int64, detail string) {
	r.lines = append(r.lines, Record{At: time.Since(r.began), What: what, Owner: owner, Generation: generation, Detail: detail})
}

// Conditions returns the owner key's status.conditions as the run left
// them.
func (r *Result) Conditions(key types.NamespacedName) []metav1.Condition {
	conds, _, _ := r.Status(key)
	return conds
}

// Status returns the owner key's status.conditions and
// status.observedGeneration as the run left them, and its generation.
func (r *Result) Status(key types.NamespacedName) (conds []metav1.Condition, observed, generation int64) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(r.owner)
	if err := r.client.Get(context.Background(), key, u); err != nil {
		return nil, 0, 0
	}
	conds, observed = statusOf(u)
	return conds, observed, u.GetGeneration()
}

// statusOf reads obj's status.conditions and status.observedGeneration.
func statusOf(obj client.Object) ([]metav1.Condition, int64) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, 0
	}
	observed, _, _ := unstructured.NestedInt64(u, "status", "observedGeneration")
	raw, _, _ := unstructured.NestedSlice(u, "status", "conditions")
	var conds []metav1.Condition
	for _, c := range raw {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		var cond metav1.Condition
		if runtime.DefaultUnstructuredConverter.FromUnstructured(m, &cond) == nil {
			conds = append(conds, cond)
		}
	}
	return conds, observed
}

// summary says the kstatus trio of conds: "Ready=True/Established
// Reconciling=... Stalled=...", the conditions present.
func summary(conds []metav1.Condition) string {
	var parts []string
	for _, typ := range []string{"Ready", "Reconciling", "Stalled"} {
		for _, c := range conds {
			if c.Type == typ {
				parts = append(parts, fmt.Sprintf("%s=%s/%s", typ, c.Status, c.Reason))
			}
		}
	}
	return strings.Join(parts, " ")
}

// Events returns the Events recorded for the owner key, in order, each as
// "TYPE REASON NOTE".
func (r *Result) Events(key types.NamespacedName) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events[key])
}

// ErrorLogs returns the lines logged at error level during the run, in
// order (see [RecordLog]): an operator whose users are promised that an
// error-level line means a human must act logs none for a restart, an
// outage or a 410 storm.
func (r *Result) ErrorLogs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var lines []string
	for _, l := range r.lines {
		if l.What == RecordLog {
			lines = append(lines, l.Detail)
		}
	}
	return lines
}

// logError records an error-level line, about owner if it is not zero.
func (r *Result) logError(owner types.NamespacedName, line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recordLocked(RecordLog, owner, 0, line)
}

// Warnings counts the Warning Events recorded for the owner key.
func (r *Result) Warnings(key types.NamespacedName) int {
	n := 0
	for _, e := range r.Events(key) {
		if strings.HasPrefix(e, "Warning ") {
			n++
		}
	}
	return n
}

// StatusWrites counts the status writes the API server accepted for the
// owner key.
func (r *Result) StatusWrites(key types.NamespacedName) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes[key]
}

// Run plays steps against op in a testing/synctest bubble of its own and
// returns what the run left, once every goroutine of the run has ended
// (synctest fails t for one left blocked). It fails t when op is
// incomplete or a step cannot be played. Run must not be called from a
// synctest bubble. It removes, process-wide, the rate limit that
// apimachinery's HandleError puts on errors
// (watchtest.DisableHandleErrorBackoff): inside a bubble it would stop
// the informers for decades.
func Run(t *testing.T, op Operator, steps ...Step) *Result {
	t.Helper()
	watchtest.DisableHandleErrorBackoff()
	set := 0
	for _, f := range []bool{op.Main != nil, op.SetupWithManager != nil, op.Reconciler != nil} {
		if f {
			set++
		}
	}
	if op.Scheme == nil || op.Owner == nil || set != 1 {
		t.Fatal("wgctrltest: Operator needs a Scheme, an Owner, and one of Main, SetupWithManager and Reconciler")
		return nil
	}
	var res *Result
	synctest.Test(t, func(t *testing.T) {
		var idx []fieldIndex
		if op.SetupWithManager != nil || op.Main != nil {
			watched, ownerWatches, indexes, err := watchedBySetup(op)
			if err != nil {
				t.Fatalf("wgctrltest: %v", err)
			}
			if op.Watches == nil || op.Main != nil {
				op.Watches = watched
			}
			if op.Main != nil {
				op.OwnerWatches = ownerWatches
			}
			idx = indexes
		}
		w, err := newWorld(op, idx...)
		if err != nil {
			t.Fatalf("wgctrltest: %v", err)
		}
		res = w.result
		res.began = time.Now()
		if w.proc, err = w.start(nil); err != nil {
			t.Fatalf("wgctrltest: %v", err)
		}
		synctest.Wait() // the process has made what it makes at once
		w.probe()
		for _, s := range steps {
			res.mu.Lock()
			res.recordLocked(RecordStep, types.NamespacedName{}, 0, s.name)
			res.mu.Unlock()
			if err := s.do(w); err != nil {
				w.proc.stop()
				w.stopping.Wait()
				t.Fatalf("wgctrltest: step %q: %v", s, err)
			}
			synctest.Wait()
			w.probe()
		}
		w.proc.stop()
		w.stopping.Wait()
		if unwired, failed := w.unwired(); len(unwired) > 0 {
			msg := fmt.Sprintf("wgctrltest: %v were reconciled and never given a Ready condition: is the *wgctrl.Owner that Operator.SetupWithManager (or Reconciler) is given handed to your reconciler, and does its Reconcile end in Owner.Status (defer func() { res, err = r.Readiness.Status(ctx, obj, res, err) }())?", unwired)
			if len(failed) > 0 {
				msg += fmt.Sprintf(" Their Reconciles failed (%q): one that fails before it defers Owner.Status never reaches it; defer it right after reading the object.", failed)
			}
			t.Error(msg)
		}
	})
	return res
}

// unwired returns the owners that exist, were reconciled, and have no
// Ready condition (with the Owner wired, the status step of a Reconcile
// gives every owner it reconciled one), and the first error line of
// each of them whose Reconciles failed.
func (w *world) unwired() (unwired []types.NamespacedName, failed []string) {
	w.result.mu.Lock()
	reconciled := map[types.NamespacedName]bool{}
	errorLines := map[types.NamespacedName][]string{}
	for _, r := range w.result.lines {
		switch r.What {
		case RecordReconcile:
			reconciled[r.Owner] = true
		case RecordLog:
			errorLines[r.Owner] = append(errorLines[r.Owner], r.Detail)
		}
	}
	w.result.mu.Unlock()
	for _, o := range w.owners() {
		key := client.ObjectKeyFromObject(o)
		conds, _ := statusOf(o)
		if reconciled[key] && !slices.ContainsFunc(conds, func(c metav1.Condition) bool { return c.Type == "Ready" }) {
			unwired = append(unwired, key)
			if lines := errorLines[key]; len(lines) > 0 && !slices.Contains(failed, lines[0]) {
				failed = append(failed, lines[0])
			}
		}
	}
	return unwired, failed
}

// world is the run's API server and the operator's current process.
type world struct {
	op       Operator
	ownerGVK schema.GroupVersionKind
	// client is the operator's; server holds the objects, read by the
	// run itself.
	client, server client.WithWatch
	result         *Result
	// servers serve each watched kind, per namespace ("" without
	// Operator.Namespaces), by stream name then namespace.
	servers map[string]*watchtest.Server
	kinds   map[string][]string // namespaces per stream name
	order   []string            // the stream names, as Operator.Watches then OwnerWatches have them
	// unwatched are the kinds only the Owner follows (OwnerWatches): the
	// controller's workers do not wait for their informers.
	unwatched map[string]bool
	objs      map[string]runtime.Object
	// ownerKeys are the owners of Operator.Objects.
	ownerKeys []types.NamespacedName
	proc      *process

	// processes counts the processes started (Restart).
	processes int
	// stopping runs the informers of every process: a process stopped
	// does not wait for its own (see process.stop), Run does at its end.
	stopping sync.WaitGroup
	// down holds each server's faults (allServers' order) from
	// OutageBegins to OutageEnds; nil when the servers are up.
	down []watchtest.Faults
	// outage is set from OutageBegins to OutageEnds: the operator's
	// client is refused too. writesRefused is set while RefuseWrites
	// lasts.
	outage, writesRefused atomic.Bool

	mu        sync.Mutex
	conflicts int
	// deleteOnGet holds the owners DeleteDuringReconcile deletes as the
	// operator next reads them.
	deleteOnGet map[types.NamespacedName]bool
	// live are the processes started and not stopped, in order: a
	// deletion reaches each (a process starting included).
	live []*process
	// probed is the probe's last record (RecordProbe).
	probed string
}

// probe records the current process's readiness probe and how many of
// the informers the controller needs have synced, if either changed. It
// is called from the bubble's own goroutine, with every other one
// blocked.
func (w *world) probe() {
	needed, synced := 0, 0
	for _, name := range w.order {
		for _, ns := range w.kinds[name] {
			needed++
			if w.proc.synced(name + "/" + ns) {
				synced++
			}
		}
	}
	d := "ready"
	if err := w.proc.readyz(nil); err != nil {
		d = "not ready: " + err.Error()
	}
	d += fmt.Sprintf("; informers synced %d/%d", synced, needed)
	if d == w.probed {
		return
	}
	w.probed = d
	w.result.mu.Lock()
	w.result.recordLocked(RecordProbe, types.NamespacedName{}, 0, d)
	w.result.mu.Unlock()
}

func newWorld(op Operator, indexes ...fieldIndex) (*world, error) {
	ownerGVK, err := apiutil.GVKForObject(op.Owner, op.Scheme)
	if err != nil {
		return nil, err
	}
	w := &world{op: op, ownerGVK: ownerGVK, servers: map[string]*watchtest.Server{}, kinds: map[string][]string{}, objs: map[string]runtime.Object{},
		unwatched: map[string]bool{}, deleteOnGet: map[types.NamespacedName]bool{}}
	w.result = &Result{owner: ownerGVK, events: map[types.NamespacedName][]string{}, writes: map[types.NamespacedName]int{}}
	for _, obj := range op.Objects {
		if gvk, err := apiutil.GVKForObject(obj, op.Scheme); err == nil && gvk == ownerGVK {
			w.ownerKeys = append(w.ownerKeys, client.ObjectKeyFromObject(obj))
		}
	}
	status := op.Owner.DeepCopyObject().(client.Object)
	// The API server serves every kind of the scheme, as the manager's
	// RESTMapper finds them (the fake client's own knows none).
	// The operator's client conflicts and deletes as the steps ask; the
	// run's own reads (the records, Result) go around it.
	b := fake.NewClientBuilder().WithScheme(op.Scheme).WithRESTMapper(testrestmapper.TestOnlyStaticRESTMapper(op.Scheme)).
		WithObjects(op.Objects...).WithStatusSubresource(status)
	for _, i := range indexes {
		b = b.WithIndex(i.obj, i.field, i.extract)
	}
	w.server = b.Build()
	w.client = w.operatorClient()
	w.result.client = w.server
	namespaces := op.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	// The controller's watches, then the kinds only the Owner follows.
	kinds := append(slices.Clone(op.Watches), op.OwnerWatches...)
	for i, kind := range kinds {
		gvk, err := apiutil.GVKForObject(kind, op.Scheme)
		if err != nil {
			return nil, err
		}
		name := wgctrl.StreamName(gvk)
		if _, ok := w.kinds[name]; ok {
			continue // one kind, passed twice, or in two representations
		}
		obj, list, err := representation(op.Scheme, kind, gvk)
		if err != nil {
			return nil, err
		}
		if i >= len(op.Watches) {
			w.unwatched[name] = true
		}
		gr := schema.GroupResource{Group: gvk.Group, Resource: strings.ToLower(gvk.Kind) + "s"}
		for _, ns := range namespaces {
			// Each server answers in a time of its own (1 ms, then 37 µs
			// more for each server before it), so that informers that a
			// fault hit at one instant act at different instants from then
			// on: client-go's reflectors draw their jitter from math/rand's
			// global source, whose draws at one instant come in the
			// scheduler's order, and a seed would not replay.
			latency := watchtest.Latency{Request: time.Millisecond + time.Duration(len(w.servers))*37*time.Microsecond}
			w.servers[name+"/"+ns] = watchtest.NewServer(watchtest.ServerOptions{Resource: gr, Object: obj, List: list, Latency: latency})
		}
		w.kinds[name] = namespaces
		w.order = append(w.order, name)
		w.objs[name] = obj
	}
	return w, nil
}

// representation returns an object and an empty list of kind's
// representation: metadata-only for a metav1.PartialObjectMetadata (a
// builder.OnlyMetadata watch), the scheme's typed ones otherwise.
func representation(scheme *runtime.Scheme, kind client.Object, gvk schema.GroupVersionKind) (obj, list runtime.Object, err error) {
	if _, ok := kind.(*metav1.PartialObjectMetadata); ok {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(gvk)
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		return m, l, nil
	}
	if obj, err = scheme.New(gvk); err != nil {
		return nil, nil, err
	}
	if list, err = scheme.New(gvk.GroupVersion().WithKind(gvk.Kind + "List")); err != nil {
		return nil, nil, err
	}
	return obj, list, nil
}

// metadataOnly reports whether obj is the metadata-only representation of
// its kind.
func metadataOnly(obj runtime.Object) bool {
	_, ok := obj.(*metav1.PartialObjectMetadata)
	return ok
}

// allServers returns every server, in the order of Operator.Watches, then
// of Operator.Namespaces.
func (w *world) allServers() []*watchtest.Server {
	var out []*watchtest.Server
	for _, name := range w.order {
		for _, ns := range w.kinds[name] {
			out = append(out, w.servers[name+"/"+ns])
		}
	}
	return out
}

// serversOf returns kind's servers in namespace, or all of them for "".
func (w *world) serversOf(kind client.Object, namespace string) ([]*watchtest.Server, []string, error) {
	gvk, err := apiutil.GVKForObject(kind, w.op.Scheme)
	if err != nil {
		return nil, nil, err
	}
	name := wgctrl.StreamName(gvk)
	nss, ok := w.kinds[name]
	if !ok {
		return nil, nil, fmt.Errorf("%s is not among the Operator's Watches", name)
	}
	var out []*watchtest.Server
	var in []string
	for _, ns := range nss {
		if namespace == "" || ns == namespace || ns == "" {
			out = append(out, w.servers[name+"/"+ns])
			in = append(in, ns)
		}
	}
	if len(out) == 0 {
		return nil, nil, fmt.Errorf("the cache has no informer of %s in namespace %q (Operator.Namespaces)", name, namespace)
	}
	return out, in, nil
}

// statusUpdate counts a status write of an owner, or fails it with a
// conflict while StatusConflicts asks for one.
func (w *world) statusUpdate(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if sub == "status" {
		w.mu.Lock()
		if w.conflicts > 0 {
			w.conflicts--
			w.mu.Unlock()
			return apierrors.NewConflict(schema.GroupResource{Group: w.ownerGVK.Group, Resource: strings.ToLower(w.ownerGVK.Kind) + "s"}, obj.GetName(), errors.New("the object has been modified"))
		}
		w.mu.Unlock()
	}
	if err := c.SubResource(sub).Update(ctx, obj, opts...); err != nil {
		return err
	}
	if sub == "status" {
		key := client.ObjectKeyFromObject(obj)
		conds, observed := statusOf(obj)
		w.result.mu.Lock()
		w.result.writes[key]++
		w.result.recordLocked(RecordWrite, key, observed, summary(conds))
		w.result.mu.Unlock()
	}
	return nil
}

func (w *world) newOwner() (client.Object, error) {
	obj, err := w.op.Scheme.New(w.ownerGVK)
	if err != nil {
		return nil, err
	}
	co, ok := obj.(client.Object)
	if !ok {
		return nil, fmt.Errorf("%v is not a client.Object", w.ownerGVK)
	}
	return co, nil
}

// owners returns the owners of Operator.Objects as the fake client has
// them now, typed, in the order Objects has them. It gets them one by one:
// the fake client cannot list the objects that Owner.Status wrote
// unstructured.
func (w *world) owners() []client.Object {
	var owners []client.Object
	for _, key := range w.ownerKeys {
		obj, err := w.newOwner()
		if err != nil || w.server.Get(context.Background(), key, obj) != nil {
			continue
		}
		owners = append(owners, obj)
	}
	return owners
}
