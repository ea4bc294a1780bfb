package day

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	apiwatch "k8s.io/apimachinery/pkg/watch"

	"github.com/watchgrade/watchgrade/examples/monitoring"
	"github.com/watchgrade/watchgrade/examples/watchtarget"
	wgmetrics "github.com/watchgrade/watchgrade/metrics"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// cluster is the day's API server: one simulated collection
// (watchtest.Server) per namespace and resource the WatchTargets name, and
// one for the WatchTargets of every namespace. It outlives the
// controllers, as an API server outlives its clients.
type cluster struct {
	t       *testing.T
	targets *watchtest.Server

	mu      sync.Mutex
	servers map[string]*watchtest.Server // by namespace/resource
}

var (
	configmaps = watchtarget.ResourceRef{Version: "v1", Resource: "configmaps"}
	secrets    = watchtarget.ResourceRef{Version: "v1", Resource: "secrets"}
)

func newCluster(t *testing.T) *cluster {
	return &cluster{
		t: t,
		targets: watchtest.NewServer(watchtest.ServerOptions{
			Resource:          watchtarget.Resource.GroupResource(),
			Object:            &watchtarget.WatchTarget{TypeMeta: metav1.TypeMeta{APIVersion: watchtarget.Resource.GroupVersion().String(), Kind: "WatchTarget"}},
			List:              &watchtarget.WatchTargetList{TypeMeta: metav1.TypeMeta{APIVersion: watchtarget.Resource.GroupVersion().String(), Kind: "WatchTargetList"}},
			DisableWatchCache: true,
			Seed:              1,
		}),
		servers: map[string]*watchtest.Server{},
	}
}

// server returns the collection of r in namespace, created (with a few
// objects) on first use. With the watch cache off, as
// --watch-cache=false, a resume expires only after a compaction past its
// cursor (or a restart): deterministically.
func (c *cluster) server(namespace string, r watchtarget.ResourceRef) *watchtest.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := namespace + "/" + r.Resource
	if s := c.servers[key]; s != nil {
		return s
	}
	s := watchtest.NewServer(watchtest.ServerOptions{
		Resource:          r.GVR().GroupResource(),
		DisableWatchCache: true,
		Seed:              uint64(len(c.servers) + 2),
	})
	for i := range 3 {
		cm := configMap(namespace, fmt.Sprintf("%s-%d", r.Resource, i))
		if _, err := s.Create(cm); err != nil {
			c.t.Fatal(err)
		}
	}
	c.servers[key] = s
	return s
}

// each calls f for every collection but the WatchTargets'.
func (c *cluster) each(f func(*watchtest.Server)) {
	c.mu.Lock()
	all := make([]*watchtest.Server, 0, len(c.servers))
	for _, s := range c.servers {
		all = append(all, s)
	}
	c.mu.Unlock()
	for _, s := range all {
		f(s)
	}
	f(c.targets)
}

// create creates a WatchTarget following resources in its namespace.
func (c *cluster) create(namespace, name string, resources ...watchtarget.ResourceRef) {
	for _, r := range resources {
		c.server(namespace, r)
	}
	wt := &watchtarget.WatchTarget{
		TypeMeta:   metav1.TypeMeta{APIVersion: watchtarget.Resource.GroupVersion().String(), Kind: "WatchTarget"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Generation: 1, UID: types.UID(namespace + "-" + name)},
		Spec:       watchtarget.Spec{Resources: resources},
	}
	if _, err := c.targets.Create(wt); err != nil {
		c.t.Fatal(err)
	}
}

// target returns the WatchTarget as the API server has it, or nil.
func (c *cluster) target(key types.NamespacedName) *watchtarget.WatchTarget {
	for _, o := range c.targets.Objects() {
		if wt, ok := o.(*watchtarget.WatchTarget); ok && wt.Namespace == key.Namespace && wt.Name == key.Name {
			return wt
		}
	}
	return nil
}

// controller is one process of the WatchTarget controller, wired as
// examples/clientgo wires it: a graded stream of the WatchTargets whose
// handler starts one graded stream per namespace and resource they name;
// a readiness accumulator that rolls each target's streams up into its
// kstatus trio, written with status.observedGeneration when the verdict
// changes; the watchgrade metrics; and, as examples/README.md's "Install
// the monitoring" asks, a monitoring.ConditionCollector on the same
// registry, reading the controller's own view of the WatchTargets. Its
// /metrics is served as cmd/watchtarget-clientgo serves it. Where it
// differs from examples/clientgo: it talks to the cluster through the
// ListerWatcher interface instead of HTTP (the example builds its
// ListerWatchers from a rest.Config), writes status with the simulated
// server's Update, queues with a channel rather than a workqueue, and
// records no Events; the streams, the grading, the accumulator, the
// metrics and the collector are the library's and the kit's own.
type controller struct {
	c       *cluster
	reg     *prometheus.Registry
	metrics *wgmetrics.WatchMetrics
	acc     *wgreadiness.Accumulator
	status  *wgstatus.Writer
	queue   chan types.NamespacedName
	handler http.Handler

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	view    map[types.NamespacedName]*watchtarget.WatchTarget // the targets stream's mirror
	streams map[string]context.CancelFunc
}

// start starts a controller process: what a pod's container does.
func (c *cluster) start(t *testing.T) *controller {
	ctl := &controller{c: c, reg: prometheus.NewRegistry(), queue: make(chan types.NamespacedName, 64),
		view: map[types.NamespacedName]*watchtarget.WatchTarget{}, streams: map[string]context.CancelFunc{}}
	var err error
	if ctl.metrics, err = wgmetrics.NewWatchMetrics(ctl.reg, wgmetrics.WatchOptions{}); err != nil {
		t.Fatal(err)
	}
	ctl.metrics.AddResource(watchtarget.Resource.GroupResource())
	ctl.ctx, ctl.cancel = context.WithCancel(context.Background())
	if ctl.acc, err = wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{OnChange: func(key types.NamespacedName) {
		select {
		case ctl.queue <- key:
		case <-ctl.ctx.Done():
		}
	}}); err != nil {
		t.Fatal(err)
	}
	if ctl.status, err = wgstatus.New(wgstatus.Options{
		Accumulator: ctl.acc, Resource: watchtarget.Resource.GroupResource(),
		Update: func(_ context.Context, obj runtime.Object) (runtime.Object, error) { return c.targets.Update(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	cc, err := monitoring.NewConditionCollector(monitoring.ConditionCollectorOptions{Name: "watchtarget", Objects: viewLister{ctl}})
	if err != nil {
		t.Fatal(err)
	}
	ctl.reg.MustRegister(cc)
	ctl.handler = promhttp.HandlerFor(ctl.reg, promhttp.HandlerOpts{Registry: ctl.reg})

	targets, err := wgwatch.NewStream(c.targets, wgwatch.HandlerFuncs{
		SnapshotFunc: func(_ context.Context, snap wgwatch.Snapshot) error {
			ctl.mu.Lock()
			ctl.view = map[types.NamespacedName]*watchtarget.WatchTarget{}
			for _, o := range snap.Objects {
				if wt, ok := o.(*watchtarget.WatchTarget); ok {
					ctl.view[types.NamespacedName{Namespace: wt.Namespace, Name: wt.Name}] = wt
				}
			}
			ctl.mu.Unlock()
			ctl.sync()
			return nil
		},
		EventFunc: func(_ context.Context, ev apiwatch.Event) error {
			wt, ok := ev.Object.(*watchtarget.WatchTarget)
			if !ok {
				return nil
			}
			key := types.NamespacedName{Namespace: wt.Namespace, Name: wt.Name}
			ctl.mu.Lock()
			if ev.Type == apiwatch.Deleted {
				delete(ctl.view, key)
			} else {
				ctl.view[key] = wt
			}
			ctl.mu.Unlock()
			ctl.sync()
			return nil
		},
	}, wgwatch.StreamOptions{Resource: watchtarget.Resource.GroupResource(), Name: "watchtargets",
		Observer: ctl.metrics})
	if err != nil {
		t.Fatal(err)
	}
	ctl.wg.Go(func() { _ = targets.Run(ctl.ctx) })
	ctl.wg.Go(ctl.work)
	return ctl
}

// stop ends the process: every goroutine stops, nothing is torn down
// gracefully on the API's side (a crash and a rollout's SIGTERM look the
// same to the rules).
func (ctl *controller) stop() {
	ctl.cancel()
	ctl.wg.Wait()
}

// sync starts the streams the targets need and tracks them.
func (ctl *controller) sync() {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	for key, wt := range ctl.view {
		var names []string
		for _, r := range wt.Spec.Resources {
			name := watchtarget.StreamName(wt.Namespace, r)
			names = append(names, name)
			if _, ok := ctl.streams[name]; ok {
				continue
			}
			s, err := wgwatch.NewStream(ctl.c.server(wt.Namespace, r), wgwatch.HandlerFuncs{},
				wgwatch.StreamOptions{Resource: r.GVR().GroupResource(), Name: name, Observer: wgwatch.Observers(ctl.acc, ctl.metrics)})
			if err != nil {
				ctl.c.t.Error(err)
				continue
			}
			ctl.metrics.AddResource(r.GVR().GroupResource())
			ctx, cancel := context.WithCancel(ctl.ctx)
			ctl.streams[name] = cancel
			ctl.wg.Go(func() { _ = s.Run(ctx) })
		}
		ctl.acc.Track(key, names...)
	}
}

// work reconciles: the status step (wgstatus.Writer.Write) on the
// target as stored, as examples/clientgo's reconcile does.
func (ctl *controller) work() {
	for {
		select {
		case <-ctl.ctx.Done():
			return
		case key := <-ctl.queue:
			wt := ctl.c.target(key)
			if wt == nil {
				continue
			}
			if res := ctl.status.Write(ctl.ctx, wt.DeepCopy(), nil); res.Err != nil {
				ctl.c.t.Errorf("status write of %s: %v", key, res.Err)
			}
		}
	}
}

// viewLister lists the controller's view of the WatchTargets, as an
// informer's store would.
type viewLister struct{ ctl *controller }

func (v viewLister) List() []any {
	v.ctl.mu.Lock()
	defer v.ctl.mu.Unlock()
	out := make([]any, 0, len(v.ctl.view))
	for _, wt := range v.ctl.view {
		out = append(out, wt)
	}
	return out
}

func configMap(namespace, name string) runtime.Object {
	return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
}
