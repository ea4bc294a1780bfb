// Package clientgo is a WatchTarget controller written with plain client-go
// and watchgrade: the wiring to copy into an operator that does not use
// controller-runtime.
//
// For every WatchTarget it runs one graded stream per named resource
// ([wgwatch.Stream], shared by the targets of a namespace that name the same
// resource), keeps an in-memory [Mirror] of each collection, and writes the
// kstatus trio (Ready, Reconciling, Stalled), and StreamsRunning, a positive
// condition that summarises its streams alone ([StreamsCondition]), with
// status.observedGeneration in one status update whenever the verdict
// changes. A rollout of the controller writes none of them: the
// accumulator holds the persisted conditions, StreamsRunning included,
// while the streams start over. It records an Event only
// on a transition (Warning only when a human must act) and exports the
// watchgrade metrics on the registerer it is given.
//
// The pieces, in the order data flows:
//
//	stream ──State──▶ readiness.Accumulator ──OnChange(owner)──▶ workqueue
//	   │                                                            │
//	   └──SessionEnd──▶ metrics.WatchMetrics          reconcile: Get, then
//	                                                  wgstatus.Writer.Write
//
// The WatchTargets themselves are followed by a graded stream too, whose
// handler starts and stops the resource streams.
package clientgo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	wgevents "github.com/watchgrade/watchgrade/events"
	"github.com/watchgrade/watchgrade/examples/watchtarget"
	wgmetrics "github.com/watchgrade/watchgrade/metrics"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// TargetsStream is the name of the stream that follows the WatchTargets.
const TargetsStream = "watchtargets"

// StreamsCondition is the type of the condition, beside the trio, that says
// whether every stream of a WatchTarget is established
// ([wgreadiness.Options.StreamsCondition]): True with reason Established,
// or False with the worst stream's reason, while Ready may also wait on
// gates that are not streams.
const StreamsCondition = "StreamsRunning"

// Options configure a [Controller].
type Options struct {
	// Config reaches the API server as the controller's own identity.
	// Required.
	Config *rest.Config
	// Namespace limits the controller to the WatchTargets of one
	// namespace; empty means every namespace.
	Namespace string
	// Registerer receives the watchgrade metrics. Nil means a private
	// registry (nothing exported).
	Registerer prometheus.Registerer
	// Recorder records the Events; nil means a core/v1 event broadcaster
	// writing to the API server as component "watchtarget-controller".
	Recorder record.EventRecorder
	// Policy grades watch endings; the zero value means watchgrade's
	// defaults.
	Policy wgwatch.Policy
	// MaxBackoff caps each stream's wait between attempts; 0 means
	// watchgrade's default (60s). A stream that needs a human retries every
	// MaxBackoff/2 to MaxBackoff, so this also bounds how long a repair
	// (a restored Role, an installed CRD) takes to show as Ready.
	MaxBackoff time.Duration
	// Observer, if set, also sees every stream's states and session endings
	// (a log, or the demo's live output). It must not block.
	Observer wgwatch.Observer
	// Workers is the number of reconcile workers; 0 means 2.
	Workers int
}

// Controller reconciles WatchTargets. Make one with [New] and call Run once.
type Controller struct {
	opts     Options
	dynamic  dynamic.Interface
	acc      *wgreadiness.Accumulator
	metrics  *wgmetrics.WatchMetrics
	observer wgwatch.Observer
	queue    workqueue.TypedRateLimitingInterface[types.NamespacedName]
	status   *wgstatus.Writer // set in Run, with the Event recorder

	// kube is set when the controller makes its own recorder, in Run.
	kube kubernetes.Interface

	targets *Mirror

	mu      sync.Mutex
	ctx     context.Context // Run's context: resource streams run under it
	owners  map[types.NamespacedName]struct{}
	streams map[string]*followed
}

// followed is one running resource stream.
type followed struct {
	mirror *Mirror
	cancel context.CancelFunc
	done   chan struct{}
}

// New checks opts and returns a controller ready to Run.
func New(opts Options) (*Controller, error) {
	if opts.Config == nil {
		return nil, errors.New("clientgo: Options.Config is required")
	}
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	dyn, err := dynamic.NewForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("clientgo: %w", err)
	}
	wm, err := wgmetrics.NewWatchMetrics(opts.Registerer, wgmetrics.WatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("clientgo: %w", err)
	}
	wm.AddResource(watchtarget.Resource.GroupResource())
	c := &Controller{
		opts:    opts,
		dynamic: dyn,
		metrics: wm,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "watchtargets"}),
		targets: NewMirror(),
		owners:  map[types.NamespacedName]struct{}{},
		streams: map[string]*followed{},
	}
	// The accumulator turns stream states into one verdict per WatchTarget
	// and calls OnChange (never blocking the stream) when a verdict
	// changes: that is what requeues the target. It is given the streams'
	// Policy: its restart hold follows their ProgressDeadline.
	if c.acc, err = wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{
		Rollup:   wgreadiness.Options{StreamsCondition: StreamsCondition},
		Policy:   opts.Policy,
		OnChange: func(key types.NamespacedName) { c.queue.Add(key) },
	}); err != nil {
		return nil, fmt.Errorf("clientgo: %w", err)
	}
	c.observer = wgwatch.Observers(c.acc, c.metrics, opts.Observer)

	if opts.Recorder == nil {
		if c.kube, err = kubernetes.NewForConfig(opts.Config); err != nil {
			return nil, fmt.Errorf("clientgo: %w", err)
		}
	}
	return c, nil
}

// Run follows the WatchTargets and their resources until ctx ends, then
// stops every stream and worker. It returns nil after a teardown.
func (c *Controller) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.mu.Lock()
	if c.ctx != nil {
		c.mu.Unlock()
		return errors.New("clientgo: Run called twice")
	}
	c.ctx = ctx
	c.mu.Unlock()

	recorder := c.opts.Recorder
	if recorder == nil {
		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		defer broadcaster.Shutdown()
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.kube.CoreV1().Events("")})
		recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "watchtarget-controller"})
	}
	// wgevents.Recorder records only when Ready or Stalled moves, and a
	// Warning only when the object is Stalled: a human must act.
	events, err := wgevents.NewRecorder(recorder)
	if err != nil {
		return fmt.Errorf("clientgo: %w", err)
	}
	if c.status, err = c.newStatusWriter(events); err != nil {
		return fmt.Errorf("clientgo: %w", err)
	}

	targets, err := wgwatch.NewStream(
		ListWatch(c.dynamic, watchtarget.Resource, c.opts.Namespace),
		targetsHandler{c},
		wgwatch.StreamOptions{
			Resource:   watchtarget.Resource.GroupResource(),
			Name:       TargetsStream,
			Observer:   wgwatch.Observers(c.metrics, c.opts.Observer),
			Policy:     c.opts.Policy,
			MaxBackoff: c.opts.MaxBackoff,
		})
	if err != nil {
		return fmt.Errorf("clientgo: %w", err)
	}

	var workers sync.WaitGroup
	for range c.opts.Workers {
		workers.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	err = targets.Run(ctx)
	c.queue.ShutDown()
	workers.Wait()
	c.mu.Lock()
	names := make([]string, 0, len(c.streams))
	for name := range c.streams {
		names = append(names, name)
	}
	for _, name := range names {
		c.stopLocked(name)
	}
	c.mu.Unlock()
	c.metrics.StreamStopped(TargetsStream)
	return err
}

// Mirrored returns how many objects each resource stream's mirror holds,
// by stream name.
func (c *Controller) Mirrored() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.streams))
	for name, f := range c.streams {
		out[name] = f.mirror.Len()
	}
	return out
}

// targetsHandler keeps the WatchTarget mirror and, after every change,
// brings the set of resource streams in line with it.
type targetsHandler struct{ c *Controller }

func (h targetsHandler) Snapshot(ctx context.Context, snap wgwatch.Snapshot) error {
	if err := h.c.targets.Snapshot(ctx, snap); err != nil {
		return err
	}
	h.c.sync(ctx, nil) // everything may have changed: requeue every target
	return nil
}

func (h targetsHandler) Event(ctx context.Context, ev apiwatch.Event) error {
	if err := h.c.targets.Event(ctx, ev); err != nil {
		return err
	}
	var changed *types.NamespacedName
	if u, ok := ev.Object.(*unstructured.Unstructured); ok {
		changed = &types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}
	}
	h.c.sync(ctx, changed)
	return nil
}

// sync tracks every WatchTarget's streams in the accumulator, starts the
// streams some target needs, stops the ones none needs, and forgets deleted
// targets. It requeues the changed target, or every target if changed is
// nil; the accumulator's OnChange requeues a target whose verdict changes.
//
// It holds c.mu while a stream it stops finishes: an Observer given in
// Options must not call back into the Controller.
func (c *Controller) sync(ctx context.Context, changed *types.NamespacedName) {
	logger := klog.FromContext(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	wanted := map[string]schema.GroupVersionResource{}
	namespaceOf := map[string]string{}
	seen := map[types.NamespacedName]struct{}{}
	for _, obj := range c.targets.list() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		t, err := watchtarget.FromUnstructured(u)
		if err != nil {
			// The CRD's schema makes this unlikely; without a spec there is
			// nothing to follow.
			logger.Error(err, "WatchTarget cannot be read")
			continue
		}
		key := types.NamespacedName{Namespace: t.Namespace, Name: t.Name}
		seen[key] = struct{}{}
		names := streamNames(t)
		for i, r := range t.Spec.Resources {
			wanted[names[i]] = r.GVR()
			namespaceOf[names[i]] = t.Namespace
		}
		// Track replaces the target's set of streams; a target naming no
		// resource rolls up as Reconciling with reason NoGates.
		c.status.Track(key, wgstatus.Dependencies{Streams: names})
		if changed == nil || *changed == key {
			c.queue.Add(key)
		}
	}
	for key := range c.owners {
		if _, ok := seen[key]; !ok {
			c.status.Forget(key, "") // no time-to-first-Ready here: no UID needed
		}
	}
	c.owners = seen
	for name := range c.streams {
		if _, ok := wanted[name]; !ok {
			c.stopLocked(name)
		}
	}
	for name, gvr := range wanted {
		if _, ok := c.streams[name]; !ok {
			c.startLocked(name, gvr, namespaceOf[name])
		}
	}
}

// streamNames returns the names of t's streams, in spec order.
func streamNames(t *watchtarget.WatchTarget) []string {
	names := make([]string, len(t.Spec.Resources))
	for i, r := range t.Spec.Resources {
		names[i] = watchtarget.StreamName(t.Namespace, r)
	}
	return names
}

// follow tracks t's streams and starts any that is not running yet.
func (c *Controller) follow(t *watchtarget.WatchTarget) {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := streamNames(t)
	for i, r := range t.Spec.Resources {
		if _, ok := c.streams[names[i]]; !ok {
			c.startLocked(names[i], r.GVR(), t.Namespace)
		}
	}
	c.status.Track(types.NamespacedName{Namespace: t.Namespace, Name: t.Name}, wgstatus.Dependencies{Streams: names})
}

// startLocked starts a graded stream of gvr in namespace, feeding a mirror.
func (c *Controller) startLocked(name string, gvr schema.GroupVersionResource, namespace string) {
	mirror := NewMirror()
	stream, err := wgwatch.NewStream(ListWatch(c.dynamic, gvr, namespace), mirror, wgwatch.StreamOptions{
		Resource:   gvr.GroupResource(),
		Name:       name,
		Observer:   c.observer,
		Policy:     c.opts.Policy,
		MaxBackoff: c.opts.MaxBackoff,
	})
	if err != nil {
		// Only a malformed reference gets here (the CRD requires a
		// resource): report it as the stream's state, needing a human.
		c.acc.StateChanged(wgwatch.State{
			Stream: name, Resource: gvr.GroupResource(), Phase: wgwatch.PhaseBlocked,
			Reason: wgwatch.ReasonInvalidRequest, Message: err.Error(), NeedsHuman: true,
		})
		return
	}
	c.metrics.AddResource(gvr.GroupResource())
	ctx, cancel := context.WithCancel(c.ctx)
	f := &followed{mirror: mirror, cancel: cancel, done: make(chan struct{})}
	c.streams[name] = f
	go func() {
		defer close(f.done)
		// Run returns nil after the teardown; it has no other ending.
		_ = stream.Run(ctx)
	}()
}

// stopLocked stops a stream, waits for it, and forgets its state so that a
// stream of the same name started later begins afresh.
func (c *Controller) stopLocked(name string) {
	f := c.streams[name]
	if f == nil {
		return
	}
	f.cancel()
	<-f.done
	delete(c.streams, name)
	c.acc.RemoveStream(name)
	c.metrics.StreamStopped(name)
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	res := c.reconcile(ctx, key)
	switch {
	case res.Err != nil:
		klog.FromContext(ctx).Error(res.Err, "reconcile failed; retrying", "watchtarget", key)
		c.queue.AddRateLimited(key)
	case res.RequeueAfter > 0:
		// A status write lost to a newer version, or the API server
		// away (res.Retry): routine, and quiet.
		if res.Retry != nil {
			klog.FromContext(ctx).V(1).Info("the API server is away; retrying", "watchtarget", key, "after", res.RequeueAfter, "err", res.Retry.Error())
		}
		c.queue.Forget(key)
		c.queue.AddAfter(key, res.RequeueAfter)
	default:
		c.queue.Forget(key)
	}
	return true
}

// reconcile reads the target, follows its streams, and hands it to the
// status step, which writes the trio and status.observedGeneration in one
// status update when they changed and records an Event only after that
// write succeeded.
func (c *Controller) reconcile(ctx context.Context, key types.NamespacedName) wgstatus.Result {
	u, err := c.dynamic.Resource(watchtarget.Resource).Namespace(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if err != nil {
		// Deleted (forgotten), the API server away (retried quietly), or
		// a failure to log.
		return c.status.ReadFailed(ctx, key, err)
	}
	t, err := watchtarget.FromUnstructured(u)
	if err != nil {
		// A spec this controller cannot read will not read better on a
		// retry: the target is Stalled, naming the error.
		return c.status.Write(ctx, u, wgstatus.Terminal(err))
	}
	// Track the streams of the spec just read: this GET may be ahead of
	// the targets stream, and the verdict written for this generation must
	// be about this generation's resources.
	c.follow(t)
	return c.status.Write(ctx, u, nil)
}

// newStatusWriter returns the WatchTargets' status step, writing through
// the dynamic client and recording with events.
func (c *Controller) newStatusWriter(events *wgevents.Recorder) (*wgstatus.Writer, error) {
	targets := c.dynamic.Resource(watchtarget.Resource)
	return wgstatus.New(wgstatus.Options{
		Accumulator: c.acc,
		Resource:    watchtarget.Resource.GroupResource(),
		Events:      events,
		Update: func(ctx context.Context, obj runtime.Object) (runtime.Object, error) {
			u := obj.(*unstructured.Unstructured)
			return targets.Namespace(u.GetNamespace()).UpdateStatus(ctx, u, metav1.UpdateOptions{})
		},
		Get: func(ctx context.Context, key types.NamespacedName) (runtime.Object, error) {
			return targets.Namespace(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
		},
		ProgressDeadline: c.opts.Policy.ProgressDeadline,
	})
}

// ListWatch lists and watches gvr in namespace (all namespaces if empty)
// with a dynamic client: the source of a graded stream of any resource.
func ListWatch(client dynamic.Interface, gvr schema.GroupVersionResource, namespace string) cache.ListerWatcher {
	r := client.Resource(gvr).Namespace(namespace)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return r.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
			return r.Watch(ctx, o)
		},
	}
}
