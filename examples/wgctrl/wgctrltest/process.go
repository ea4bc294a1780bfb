package wgctrltest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/watchgrade/watchgrade/examples/wgctrl"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// process is one process of the operator: a Grader, an Owner and its
// standby writer, the watched kinds' informers, and a controller.
type process struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	ctx   context.Context
	grade *wgctrl.Grader
	// watchErrors is each informer's watch error handler, as the cache
	// sets it from manager.Options.Cache.DefaultWatchErrorHandler.
	watchErrors toolscache.WatchErrorHandlerWithContext

	mu sync.Mutex
	// queue is the controller's, once it has made it; pending holds the
	// owners queued before (a deletion while the process starts).
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
	pending []types.NamespacedName
	// made holds the watched kinds' informers made so far, by stream name
	// and namespace; done counts the kinds whose informers the
	// controller's sources have seen all synced, and ready is closed once
	// they are all: the controller's workers start.
	made  map[string]toolscache.SharedIndexInformer
	stops []context.CancelFunc // each informer's, in the order made
	// stopOf stops the informer of made's key; replaced is closed, and
	// made anew, when informers are replaced (ReplaceInformers).
	stopOf   map[string]context.CancelFunc
	replaced chan struct{}
	done     int
	ready    chan struct{}
	// readyz is the process's readiness probe: Operator.Main's checks, or
	// the Grader's.
	readyz func(*http.Request) error
	// ownerHandlers are the handlers added to the owner kind's informer,
	// under ownerMu (see informer).
	ownerMu       sync.Mutex
	ownerHandlers []toolscache.ResourceEventHandler
}

// start starts a process of the operator. With elected nil it holds the
// lease at once; otherwise it waits for elected to close, as a manager
// with leader election waits for the lease: its cache has no informer
// until then (the controller's sources and the Owner's standby writer,
// which make them, are leader-elected runnables), and its probe answers
// as the Grader says a replica waiting for the lease answers.
func (w *world) start(elected <-chan struct{}) (*process, error) {
	opts := w.op.Options
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	if opts.Seed == nil {
		// Each process's informers draw from sources of their own, seeded
		// from Operator.Seed and the process.
		seed := w.op.Seed + uint64(w.processes)*0x9e3779b97f4a7c15
		opts.Seed = &seed
	}
	// Error-level lines are recorded (RecordLog), then logged where the
	// Options said.
	sink := &errorLines{res: w.result, next: opts.Logger.GetSink()}
	opts.Logger = logr.New(sink)
	w.processes++
	grade, err := wgctrl.New(opts)
	if err != nil {
		return nil, err
	}
	// The reflectors' failures are logged as the manager's cache logs
	// them: through the watch error handler ManagerOptions sets.
	// With leader election, as kubebuilder deploys a manager: a process
	// started by Rollout waits for the lease; the others hold it at once.
	mo := manager.Options{Scheme: w.op.Scheme, LeaderElection: true}
	if len(w.op.Namespaces) > 0 {
		mo.Cache.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range w.op.Namespaces {
			mo.Cache.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	watchErrors := grade.ManagerOptions(mo).Cache.DefaultWatchErrorHandler
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{cancel: cancel,
		ctx: ctx, grade: grade, watchErrors: watchErrors, made: map[string]toolscache.SharedIndexInformer{}, ready: make(chan struct{}),
		stopOf: map[string]context.CancelFunc{}, replaced: make(chan struct{})}
	if w.watched() == 0 {
		close(p.ready)
	}
	// Deletions reach it from now on, while it starts too (its Owner's
	// standby writer may read an owner DeleteDuringReconcile deletes).
	w.mu.Lock()
	w.live = append(w.live, p)
	w.mu.Unlock()
	deps := w.op.Watches
	if w.op.OwnerWatches != nil || w.op.SetupWithManager != nil {
		// With SetupWithManager, what main passes to grade.Owner: the
		// controller's builder adds the rest.
		deps = w.op.OwnerWatches
	}
	lease := elected
	if lease == nil {
		now := make(chan struct{})
		close(now)
		lease = now
	}
	p.readyz = grade.ReadyzCheck
	var owner *wgctrl.Owner
	var r reconcile.Reconciler
	if w.op.Main != nil {
		if owner, r, err = p.main(w, grade, lease, elected == nil); err != nil {
			cancel()
			return nil, err
		}
	} else {
		if owner, err = grade.NewOwner(wgctrl.OwnerConfig{Client: w.client, APIReader: w.apiReader(), Recorder: recorder{w.result}, Informers: informers{w, p}, Elected: lease}, w.op.Owner, deps...); err != nil {
			cancel()
			return nil, err
		}
		if w.op.Setup != nil {
			w.op.Setup(owner)
		}
		if w.op.SetupWithManager != nil {
			m := &setupManager{client: w.client, apiReader: w.apiReader(), scheme: w.op.Scheme, indexer: built{}}
			if r, _, err = setup(w.op, m, owner); err != nil {
				cancel()
				return nil, err
			}
		} else {
			r = w.op.Reconciler(w.client, owner)
		}
	}
	requeue := owner.Requeue()
	c, err := p.controller(w, r, requeue)
	if err != nil {
		cancel()
		return nil, err
	}
	queued := make(chan struct{})
	if err := c.Watch(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.queue = q
		for _, key := range p.pending {
			q.Add(reconcile.Request{NamespacedName: key})
		}
		p.pending = nil
		close(queued)
		return nil
	})); err != nil {
		cancel()
		return nil, err
	}
	lead := func() {
		for _, name := range w.order {
			if !w.unwatched[name] {
				p.wg.Go(func() { p.makeInformers(w, name) })
			}
		}
		p.wg.Go(func() {
			if err := owner.Start(ctx); err != nil {
				panic(fmt.Sprintf("wgctrltest: Owner.Start: %v", err)) // only a second Start fails
			}
		})
		p.wg.Go(func() {
			// Stopped before its sources synced, Start returns an error:
			// what a process logs once told to stop is not recorded
			// (controllerLog).
			if err := c.Start(ctx); err != nil && ctx.Err() == nil {
				w.result.logError(types.NamespacedName{}, "controller: "+err.Error())
			}
		})
	}
	if elected == nil {
		lead()
		// The controller has made its queue and is starting its
		// sources: a deletion may be queued from now on.
		<-queued
		return p, nil
	}
	p.wg.Go(func() {
		select {
		case <-ctx.Done():
		case <-elected:
			lead()
		}
	})
	return p, nil
}

// controller is the operator's controller, controller-runtime's own (the
// version wgctrl requires), as the builder makes it with the manager's
// defaults: its priority queue and rate limiter, its reconcileHandler's
// handling of what Reconcile returns (an error retried with backoff and
// logged at error level, a TerminalError logged and not retried,
// RequeueAfter, the deprecated Requeue), one worker. Its sources are the
// Owner's Requeue and the kit's informers: its workers start once every
// watched kind's informers have synced, and it reconciles every owner
// then, as its For source queues the owners its informer lists.
func (p *process) controller(w *world, r reconcile.Reconciler, requeue source.Source) (controller.Controller, error) {
	skip := true
	c, err := controller.NewUnmanaged("wgctrltest", controller.Options{
		Reconciler: reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			// A worker takes 333 µs to pick the request up: what queued
			// it (an informer's state changing) may draw client-go's
			// jitter at the instant it did, and so may Reconcile (a
			// status conflict's retry draws math/rand's global source):
			// one after the other, or a seed would not replay.
			time.Sleep(333 * time.Microsecond)
			w.reconciling(req.NamespacedName)
			return r.Reconcile(ctx, req)
		}),
		MaxConcurrentReconciles: 1,
		CacheSyncTimeout:        wgctrl.CacheSyncTimeout,
		SkipNameValidation:      &skip, // one per process, one name
		LogConstructor: func(req *reconcile.Request) logr.Logger {
			var key types.NamespacedName
			if req != nil {
				key = req.NamespacedName
			}
			return logr.New(&controllerLog{res: w.result, owner: key, stopped: p.ctx.Done()})
		},
	})
	if err != nil {
		return nil, err
	}
	if err := c.Watch(requeue); err != nil {
		return nil, err
	}
	return c, c.Watch(synced{p: p, w: w})
}

// synced is the controller's sources of the watched kinds, as one: it
// has synced once every watched kind's informers have, and it queues
// every owner then.
type synced struct {
	p *process
	w *world
}

func (s synced) Start(context.Context, workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	return nil
}

func (s synced) WaitForSync(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.p.ready:
	}
	// The owner kind's informer syncs too, 2.9 ms after the process
	// starts at the soonest: a controller that watches no other kind
	// (Operator.OwnerWatches) would otherwise reconcile at the instant the
	// Owner starts, the Owner's start and the first Reconcile tracking
	// the owners in the scheduler's order, and a seed would not replay.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(2900 * time.Microsecond):
	}
	for _, o := range s.w.owners() {
		s.p.enqueue(client.ObjectKeyFromObject(o))
	}
	return nil
}

// makeInformers makes the informers of the watched kind named name, one
// per namespace of Operator.Namespaces in their order, each once the one
// before it has synced: controller-runtime's cache restricted to
// namespaces makes a kind's informers one namespace after another (in
// the order of a map), and a controller's source waits for each to sync
// before it asks for the next, so that an informer that never syncs (its
// namespace denied from the start) leaves the namespaces after it with
// none.
func (p *process) makeInformers(w *world, name string) {
	// The first informer is made 2.3 ms after the Owner starts, so that
	// the Owner's StartGrace and the informers' TransientGrace, which
	// would otherwise begin at one instant, never end at one.
	select {
	case <-p.ctx.Done():
		return
	case <-time.After(2300 * time.Microsecond):
	}
	for _, ns := range w.kinds[name] {
		for synced := false; !synced; {
			p.mu.Lock()
			replaced := p.replaced
			p.mu.Unlock()
			select {
			case <-p.ctx.Done():
				return
			case <-replaced: // wait for the new one
			case <-p.informer(w, name, ns).HasSyncedChecker().Done():
				synced = true
			}
		}
		// 1.3 ms between one informer synced and the next made, about
		// what a cache takes, and not a sum of the servers' latencies: the
		// informer synced draws its watch's timeout (from math/rand's
		// global source) before the next draws anything, so that a seed
		// replays.
		time.Sleep(1300 * time.Microsecond)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done++; p.done == w.watched() {
		close(p.ready)
	}
}

// informer returns the informer of the watched kind named name in
// namespace, made and run the first time it is asked for.
func (p *process) informer(w *world, name, namespace string) toolscache.SharedIndexInformer {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := name + "/" + namespace
	if inf, ok := p.made[key]; ok {
		return inf
	}
	inf := p.grade.NewInformerInNamespace(namespace, w.servers[key], w.objs[name].DeepCopyObject(), 0, toolscache.Indexers{})
	if err := inf.SetWatchErrorHandlerWithContext(p.watchErrors); err != nil {
		panic(fmt.Sprintf("wgctrltest: %v", err)) // only once the informer runs
	}
	p.made[key] = inf
	ctx, stop := context.WithCancel(p.ctx)
	p.stops = append(p.stops, stop)
	p.stopOf[key] = stop
	w.stopping.Go(func() {
		// An informer runs 1.7 ms after it is made, about what a cache
		// takes: the Owner's StartGrace for its stream, which begins when
		// it is made, and the informer's TransientGrace, which begins at
		// its first call, would otherwise end at one instant, racing, and
		// a seed would not replay.
		select {
		case <-ctx.Done(): // Run returns at once: the Grader forgets it
		case <-time.After(1700 * time.Microsecond):
		}
		inf.RunWithContext(ctx)
	})
	return inf
}

// reconciling records that a Reconcile of key begins, with the owner's
// generation as it is.
func (w *world) reconciling(key types.NamespacedName) {
	var generation int64
	if obj, err := w.newOwner(); err == nil && w.server.Get(context.Background(), key, obj) == nil {
		generation = obj.GetGeneration()
	}
	w.result.mu.Lock()
	w.result.recordLocked(RecordReconcile, key, generation, "")
	w.result.mu.Unlock()
}

// synced reports whether the informer of made's key exists and has
// synced.
func (p *process) synced(key string) bool {
	p.mu.Lock()
	inf, ok := p.made[key]
	p.mu.Unlock()
	return ok && inf.HasSynced()
}

// enqueue hands key to the controller.
func (p *process) enqueue(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.queue == nil {
		p.pending = append(p.pending, key)
		return
	}
	p.queue.Add(reconcile.Request{NamespacedName: key})
}

// stop stops the process and waits for its goroutines but its
// informers', as a process that exits does: a reflector stopped in a
// watch-list that failed sleeps out a jittered backoff first (client-go
// does not cut that sleep short), and Run waits for them at its end
// (world.stopping). It stops the informers one at a time, each settled
// before the next: that backoff is drawn from math/rand's global source,
// and informers stopped at once would draw in the scheduler's order. It
// is called from the bubble's own goroutine.
func (p *process) stop() {
	p.mu.Lock()
	stops := slices.Clone(p.stops)
	p.mu.Unlock()
	for _, stop := range stops {
		stop()
		synctest.Wait()
	}
	p.cancel()
	p.wg.Wait()
}

// replace stops the informers of the watched kind named name, one at a
// time and each settled, and makes them anew, 1.3 ms apart, as
// cache.RemoveInformer then GetInformer do. It is called from the
// bubble's own goroutine.
func (p *process) replace(w *world, name string) {
	for i, ns := range w.kinds[name] {
		if i > 0 {
			// As makeInformers spaces them: informers started at one
			// instant queue their owners at one instant, in the
			// scheduler's order.
			time.Sleep(1300 * time.Microsecond)
		}
		key := name + "/" + ns
		p.mu.Lock()
		stop, ok := p.stopOf[key]
		delete(p.made, key)
		delete(p.stopOf, key)
		p.mu.Unlock()
		if ok {
			stop()
			synctest.Wait()
		}
		p.informer(w, name, ns)
	}
	p.mu.Lock()
	close(p.replaced)
	p.replaced = make(chan struct{})
	p.mu.Unlock()
}

// informers is the manager's cache as the Owner asks it: the owner kind's
// informer delivers the owners as they are when it is asked; a watched
// kind's informers, which the Grader already grades, deliver nothing, and
// asking for them makes those of every namespace not made yet, as
// controller-runtime's cache restricted to namespaces does when asked not
// to wait for a sync.
type informers struct {
	w *world
	p *process
}

func (i informers) GetInformer(_ context.Context, obj client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	gvk, err := apiutil.GVKForObject(obj, i.w.op.Scheme)
	if err != nil {
		return nil, err
	}
	if gvk == i.w.ownerGVK {
		return &informer{w: i.w, p: i.p}, nil
	}
	name := wgctrl.StreamName(gvk)
	if theirs := i.w.objs[name]; theirs != nil && !i.w.unwatched[name] && metadataOnly(obj) != metadataOnly(theirs) {
		// The real cache would make a second informer per namespace, in
		// this representation, beside the controller's.
		i.w.result.mu.Lock()
		i.w.result.recordLocked(RecordInformer, types.NamespacedName{}, 0,
			fmt.Sprintf("a second informer of %s (%T) beside the controller's (%T)", name, obj, theirs))
		i.w.result.mu.Unlock()
		return &informer{}, nil
	}
	for j, ns := range i.w.kinds[name] {
		if j > 0 {
			// 1.3 ms apart, as makeInformers makes them: informers made
			// at one instant report their first states at one instant,
			// and their owners are queued in the scheduler's order.
			time.Sleep(1300 * time.Microsecond)
		}
		i.p.informer(i.w, name, ns)
	}
	return &informer{}, nil
}

// watched counts the kinds the controller watches (Operator.Watches).
func (w *world) watched() int {
	n := 0
	for _, name := range w.order {
		if !w.unwatched[name] {
			n++
		}
	}
	return n
}

// informer is the owner kind's informer (p set) or a watched kind's,
// which delivers nothing. The owner kind's delivers to each handler added
// the owners as they are when it is added, then their deletions
// (process.deleted), as a real informer's handler sees them: no deletion
// is lost between the two, because the owners are read and the handler
// registered under ownerMu, which a deletion takes after the object is
// gone from the server (a deletion in between was lost, and the Owner
// kept requeueing the deleted owner: the operator judge's seed 28 once).
type informer struct {
	cache.Informer
	w *world
	p *process // nil for a watched kind's
}

func (i *informer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	if i.p == nil {
		return nil, nil
	}
	i.p.ownerMu.Lock()
	defer i.p.ownerMu.Unlock()
	for _, o := range i.w.owners() {
		h.OnAdd(o, true)
	}
	i.p.ownerHandlers = append(i.p.ownerHandlers, h)
	return nil, nil
}

// deleted hands an owner's deletion, once it is gone from the server, to
// the owner kind's handlers, then to the controller (its For watch queues
// the owner).
func (p *process) deleted(obj client.Object) {
	p.ownerMu.Lock()
	handlers := slices.Clone(p.ownerHandlers)
	p.ownerMu.Unlock()
	for _, h := range handlers {
		h.OnDelete(obj)
	}
	p.enqueue(client.ObjectKeyFromObject(obj))
}

// main runs Operator.Main on a manager of the process's parts (its
// cache, the kit's client and recorder, the lease) and returns the Owner
// it made and the controller it built. Its readiness checks are the
// process's probe; with the lease held (elected), they are checked
// against the Grader's before any informer exists: one that passes while
// the Grader's fails (healthz.Ping) fails the run, naming the mistake.
// The owner kind's informer is not graded (the kit's owners go through no
// simulated server): the Grader is told it has synced.
func (p *process) main(w *world, grade *wgctrl.Grader, lease <-chan struct{}, elected bool) (*wgctrl.Owner, reconcile.Reconciler, error) {
	m := &setupManager{client: w.client, apiReader: w.apiReader(), scheme: w.op.Scheme, cache: processCache{inf: informers{w, p}},
		indexer: built{}, grade: grade, recorder: recorder{w.result}, elected: lease}
	ctl, owner, err := setup(w.op, m, nil)
	if err != nil {
		return nil, nil, err
	}
	if w.op.Setup != nil {
		w.op.Setup(owner)
	}
	if elected {
		if graded := grade.ReadyzCheck(nil); graded != nil && m.readyzCheck(nil) == nil {
			var names []string
			for _, c := range m.readyz {
				names = append(names, strconv.Quote(c.name))
			}
			return nil, nil, fmt.Errorf("the readiness checks Operator.Main registers (%s) pass before any informer has synced, while grade.ReadyzCheck says %q: register mgr.AddReadyzCheck(\"watches\", grade.ReadyzCheck), not healthz.Ping, or the pod takes traffic with empty caches and a rolling update stops the old process before the new one can reconcile",
				strings.Join(names, ", "), graded.Error())
		}
	}
	p.readyz = m.readyzCheck
	grade.Observer().StateChanged(wgwatch.State{Stream: wgctrl.StreamName(w.ownerGVK), Phase: wgwatch.PhaseStreaming, Reason: wgwatch.ReasonWatching,
		Resource: schema.GroupResource{Group: w.ownerGVK.Group, Resource: strings.ToLower(w.ownerGVK.Kind) + "s"}})
	return owner, ctl, nil
}

// processCache is the cache Operator.Main's manager has: the process's
// informers; what else it is asked panics, and setup says so.
type processCache struct {
	cache.Cache
	inf informers
}

func (c processCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	return c.inf.GetInformer(ctx, obj, opts...)
}

// recorder records each Event for its owner, as "TYPE REASON NOTE".
type recorder struct{ res *Result }

func (r recorder) AnnotatedEventf(regarding, related runtime.Object, _ map[string]string, eventtype, reason, action, note string, args ...any) {
	r.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

func (r recorder) Eventf(regarding, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	m, err := meta.Accessor(regarding)
	if err != nil {
		return
	}
	key := types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}
	r.res.mu.Lock()
	defer r.res.mu.Unlock()
	e := eventtype + " " + reason + " " + fmt.Sprintf(note, args...)
	r.res.events[key] = append(r.res.events[key], e)
	r.res.recordLocked(RecordEvent, key, 0, e)
}
