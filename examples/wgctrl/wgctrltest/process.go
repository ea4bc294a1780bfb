package wgctrltest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/watchgrade/watchgrade/examples/wgctrl"
)

// process is one process of the operator: a Grader, an Owner and its
// standby writer, the watched kinds' informers, and a controller.
type process struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	queue  workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// syncPoll is how often the controller looks whether its sources have
// synced, as controller-runtime's WaitForCacheSync polls.
const syncPoll = 100 * time.Millisecond

// start starts a process of the operator.
func (w *world) start() (*process, error) {
	opts := w.op.Options
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	grade, err := wgctrl.New(opts)
	if err != nil {
		return nil, err
	}
	owner, err := grade.NewOwner(wgctrl.OwnerConfig{Client: w.client, Recorder: recorder{w.result}, Informers: informers{w}}, w.op.Owner, w.op.Watches...)
	if err != nil {
		return nil, err
	}
	if w.op.Setup != nil {
		w.op.Setup(owner)
	}
	r := w.op.Reconciler(w.client, owner)
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{cancel: cancel, queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())}
	var infs []toolscache.SharedIndexInformer
	for _, name := range w.order {
		for _, ns := range w.kinds[name] {
			inf := grade.NewInformerInNamespace(ns, w.servers[name+"/"+ns], w.objs[name].DeepCopyObject(), 0, toolscache.Indexers{})
			infs = append(infs, inf)
			p.wg.Go(func() { inf.RunWithContext(ctx) })
		}
	}
	p.wg.Go(func() {
		if err := owner.Start(ctx); err != nil {
			panic(fmt.Sprintf("wgctrltest: Owner.Start: %v", err)) // only a second Start fails
		}
	})
	if err := owner.Requeue().Start(ctx, p.queue); err != nil {
		cancel()
		return nil, err
	}
	p.wg.Go(func() {
		<-ctx.Done()
		p.queue.ShutDown()
	})
	p.wg.Go(func() { p.work(ctx, w, r, infs) })
	return p, nil
}

// work is the controller: once every informer has synced, it reconciles
// every owner, then each owner queued, one at a time.
func (p *process) work(ctx context.Context, w *world, r reconcile.Reconciler, infs []toolscache.SharedIndexInformer) {
	t := time.NewTicker(syncPoll)
	defer t.Stop()
	for !synced(infs) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	for _, o := range w.owners() {
		p.queue.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
	}
	for {
		req, shutdown := p.queue.Get()
		if shutdown {
			return
		}
		w.reconciling(req.NamespacedName)
		res, err := r.Reconcile(ctx, req)
		switch {
		case err != nil:
			p.queue.AddRateLimited(req)
		case res.RequeueAfter > 0:
			p.queue.Forget(req)
			p.queue.AddAfter(req, res.RequeueAfter)
		default:
			p.queue.Forget(req)
		}
		p.queue.Done(req)
	}
}

func synced(infs []toolscache.SharedIndexInformer) bool {
	for _, inf := range infs {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// reconciling records that a Reconcile of key begins, with the owner's
// generation as it is.
func (w *world) reconciling(key types.NamespacedName) {
	var generation int64
	if obj, err := w.newOwner(); err == nil && w.client.Get(context.Background(), key, obj) == nil {
		generation = obj.GetGeneration()
	}
	w.result.mu.Lock()
	w.result.recordLocked(RecordReconcile, key, generation, "")
	w.result.mu.Unlock()
}

// enqueue hands key to the controller.
func (p *process) enqueue(key types.NamespacedName) {
	p.queue.Add(reconcile.Request{NamespacedName: key})
}

// stop stops the process and waits for its goroutines.
func (p *process) stop() {
	p.cancel()
	p.wg.Wait()
}

// informers is the manager's cache as the Owner's standby writer asks it:
// the owner kind's informer delivers the owners as they are when it is
// asked; the watched kinds' informers, which the Grader already grades,
// deliver nothing.
type informers struct{ w *world }

func (i informers) GetInformer(_ context.Context, obj client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	gvk, err := apiutil.GVKForObject(obj, i.w.op.Scheme)
	if err != nil {
		return nil, err
	}
	if gvk == i.w.ownerGVK {
		return &informer{objs: i.w.owners()}, nil
	}
	return &informer{}, nil
}

// informer delivers objs to each handler added.
type informer struct {
	cache.Informer
	objs []client.Object
}

func (i *informer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	for _, o := range i.objs {
		h.OnAdd(o, true)
	}
	return nil, nil
}

// recorder records each Event for its owner, as "TYPE REASON NOTE".
type recorder struct{ res *Result }

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
