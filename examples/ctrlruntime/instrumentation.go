package ctrlruntime

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/watchgrade/watchgrade/examples/watchtarget"
	"github.com/watchgrade/watchgrade/examples/wgctrl"
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
// wgctrl.StreamName(watchtarget.Kind).
const TargetsStream = "WatchTarget.v1alpha1.examples.watchgrade.dev"

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

// withDefaults fills in the defaults documented on each field that this
// package applies (wgctrl applies Registerer's).
func (o Options) withDefaults() Options {
	o.Name = cmp.Or(o.Name, DefaultName)
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

// Instrumentation is what watchgrade adds to one manager: a [wgctrl.Grader],
// which grades every informer of the manager's cache, logs the reflectors'
// failures graded, exports the watch metrics and answers the readiness
// probe; the WatchTargets' readiness accumulator, which the Grader's
// informers report to; and the link from the accumulator to the
// controller's workqueue.
//
// Make one with [NewInstrumentation], pass the manager's options through
// [Instrumentation.ManagerOptions] before manager.New, and pass it to
// [SetupWithManager]. One Instrumentation serves one manager. Its methods
// are safe for concurrent use.
type Instrumentation struct {
	opts  Options
	grade *wgctrl.Grader
	acc   *wgreadiness.Accumulator

	mu sync.Mutex
	// queue is the controller's workqueue, set when the controller starts
	// its sources.
	queue workqueue.TypedRateLimitingInterface[reconcile.Request]
	// setUp is true once SetupWithManager has used this Instrumentation.
	setUp bool
}

// NewInstrumentation makes the accumulator and the Grader, whose informers
// report to it (wgctrl's Options.Observer), and registers the watch metrics
// with opts.Registerer. If the metrics are already registered there (a
// second manager in one process), it reuses them.
func NewInstrumentation(opts Options) (*Instrumentation, error) {
	opts = opts.withDefaults()
	in := &Instrumentation{opts: opts}
	// The accumulator turns informer states into one verdict per
	// WatchTarget and calls OnChange, off the informer's goroutine, when a
	// verdict changes: that is what requeues the target.
	// It is given the informers' Policy: its restart hold follows their
	// ProgressDeadline.
	acc, err := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{Policy: opts.Policy, OnChange: in.requeue})
	if err != nil {
		return nil, fmt.Errorf("ctrlruntime: %w", err)
	}
	in.acc = acc
	in.grade, err = wgctrl.New(wgctrl.Options{
		Policy:     opts.Policy,
		Observer:   wgwatch.Observers(acc, opts.Observer),
		Registerer: opts.Registerer,
	})
	if err != nil {
		return nil, fmt.Errorf("ctrlruntime: %w", err)
	}
	in.grade.Metrics().AddResource(watchtarget.Resource.GroupResource())
	return in, nil
}

// Accumulator returns the readiness accumulator every informer reports to.
func (in *Instrumentation) Accumulator() *wgreadiness.Accumulator { return in.acc }

// Grader returns the Grader of the manager's informers: its Metrics, and
// its ReadyzCheck for the manager's readiness probe.
func (in *Instrumentation) Grader() *wgctrl.Grader { return in.grade }

// ManagerOptions returns o with what the Instrumentation needs; pass the
// result to manager.New (ctrl.NewManager). It restricts the cache to
// Options.Namespace, when set, through Cache.DefaultNamespaces (replacing
// any namespaces already there), then passes o through
// [wgctrl.Grader.ManagerOptions]: every informer of the cache is graded
// (built by any NewInformer hook already set, from the graded
// ListerWatcher), the reflectors' failures are logged graded (then handed
// to any DefaultWatchErrorHandler already set), and the manager's scheme
// and RESTMapper name the informers. wgctrl's WaitForHuman stays off: the
// controller's only watched kind is WatchTarget, and the resources targets
// name are asked for by Reconcile without waiting for them, so no resource
// a human must fix holds the controller's workers back.
func (in *Instrumentation) ManagerOptions(o manager.Options) manager.Options {
	if in.opts.Namespace != "" {
		o.Cache.DefaultNamespaces = map[string]cache.Config{in.opts.Namespace: {}}
	}
	return in.grade.ManagerOptions(o)
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
