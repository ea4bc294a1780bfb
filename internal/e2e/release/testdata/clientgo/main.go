// Command clientgo is the README's client-go quick start as a whole
// program: TestGoGet builds it in a fresh module after running the README's
// `go get github.com/watchgrade/watchgrade@latest`. The quick start's lines
// are as the README has them; around them is the least that compiles (a
// clientset, an owner type, a reconcile that writes its status).
package main

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	wgevents "github.com/watchgrade/watchgrade/events"
	wgmetrics "github.com/watchgrade/watchgrade/metrics"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// Shop is an owner object with the status the roll-up writes.
type Shop struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            ShopStatus `json:"status,omitempty"`
}

// ShopStatus holds the trio and the generation it was computed for.
type ShopStatus struct {
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
}

// DeepCopyObject makes Shop a runtime.Object.
func (s *Shop) DeepCopyObject() runtime.Object {
	c := *s
	s.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.Status.Conditions = slices.Clone(s.Status.Conditions)
	return &c
}

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", "", fields.Everything())
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName]())
	reg := prometheus.NewRegistry()
	eventRecorder := record.NewBroadcaster().NewRecorder(scheme.Scheme, corev1.EventSource{Component: "shop-controller"})

	// The README's quick start, from here on.
	watchMetrics, err := wgmetrics.NewWatchMetrics(reg, wgmetrics.WatchOptions{})
	if err != nil {
		return err
	}
	acc, err := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{
		OnChange: func(key types.NamespacedName) { queue.Add(key) }, // requeue the owner
	})
	if err != nil {
		return err
	}
	recorder, err := wgevents.NewRecorder(eventRecorder) // client-go's record.EventRecorder
	if err != nil {
		return err
	}
	ilw, err := wgwatch.Instrument(lw, wgwatch.InstrumentOptions{
		Resource: schema.GroupResource{Resource: "configmaps"},
		Name:     "configmaps",
		Observer: wgwatch.Observers(acc, watchMetrics), // the accumulator and metrics below
	})
	if err != nil {
		return err
	}
	informer := cache.NewSharedIndexInformer(ilw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	go informer.Run(ctx.Done())

	client := statusClient{}
	updateStatus := func(ctx context.Context, obj runtime.Object) (runtime.Object, error) {
		return client.UpdateStatus(ctx, obj.(*Shop))
	}
	getOwner := func(ctx context.Context, key types.NamespacedName) (runtime.Object, error) {
		return client.Get(ctx, key)
	}
	status, err := wgstatus.New(wgstatus.Options{Accumulator: acc, Events: recorder, Update: updateStatus, Get: getOwner})
	if err != nil {
		return err
	}
	owner := &Shop{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "main", Generation: 1}}
	ownerKey := types.NamespacedName{Namespace: owner.Namespace, Name: owner.Name}
	status.Track(ownerKey, wgstatus.Dependencies{Streams: []string{"configmaps"}}) // depends on it

	// In the owner's reconcile: your own readiness is a gate, then one call
	// decides, writes the trio and observedGeneration, and records the Event.
	var reconcileErr error // what the rest of the reconcile returned
	acc.SetGate(ownerKey, wgreadiness.Progressing("StatefulSet", "ReplicasNotReady", "0 of 3 replicas are ready"))
	res := status.Write(ctx, owner, reconcileErr) // a failed reconcile is never Ready=True
	return res.Err
}

// statusClient stands for a client that reads the owner and writes its
// status subresource.
type statusClient struct{}

func (statusClient) UpdateStatus(ctx context.Context, s *Shop) (*Shop, error) { return s, ctx.Err() }

func (statusClient) Get(ctx context.Context, key types.NamespacedName) (*Shop, error) {
	return &Shop{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, ctx.Err()
}
