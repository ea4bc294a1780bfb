package wgctrl_test

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/watchgrade/watchgrade/examples/wgctrl"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// GuestbookReconciler is a reconciler wired as examples/README.md says: its
// own steps, then the Owner's Status, whatever those steps returned.
type GuestbookReconciler struct {
	client.Client
	Readiness *wgctrl.Owner
}

func (r *GuestbookReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	gb := &Guestbook{}
	if err := r.Get(ctx, req.NamespacedName, gb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer func() { res, err = r.Readiness.Status(ctx, gb, res, err) }()
	// ... the operator's own steps ...
	return ctrl.Result{}, nil
}

// A reconciler wired with wgctrl is unit-tested with controller-runtime's
// fake client and a fake Event recorder. The Grader is every informer's
// observer: here the test tells it what the ConfigMaps' informer would
// report. (TestReconcilerOverWatchtest runs a real informer, built by
// Grader.NewInformer, over watchtest's simulated API server instead.)
func Example_unitTest() {
	ctx := context.Background()
	gb := &Guestbook{ObjectMeta: metav1.ObjectMeta{Name: "gb", Namespace: "shop", Generation: 1}}
	c := fake.NewClientBuilder().WithScheme(newScheme()).WithObjects(gb).WithStatusSubresource(gb).Build()
	recorder := events.NewFakeRecorder(10)

	grade, err := wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		panic(err)
	}
	readiness, err := grade.NewOwner(wgctrl.OwnerConfig{Client: c, Recorder: recorder}, &Guestbook{}, &corev1.ConfigMap{})
	if err != nil {
		panic(err)
	}
	r := &GuestbookReconciler{Client: c, Readiness: readiness}
	reconcile := func() {
		req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "shop", Name: "gb"}}
		if _, err := r.Reconcile(ctx, req); err != nil {
			panic(err)
		}
		got := &Guestbook{}
		if err := c.Get(ctx, req.NamespacedName, got); err != nil {
			panic(err)
		}
		for _, cond := range got.Status.Conditions {
			fmt.Printf("%s=%s %s; ", cond.Type, cond.Status, cond.Reason)
		}
		fmt.Printf("observedGeneration=%d\n", got.Status.ObservedGeneration)
		for len(recorder.Events) > 0 {
			fmt.Println("  event:", <-recorder.Events)
		}
	}

	fmt.Println("streams:", readiness.Streams())
	grade.Observer().StateChanged(wgwatch.State{Stream: "ConfigMap.v1", Phase: wgwatch.PhaseStreaming, Reason: wgwatch.ReasonWatching})
	reconcile()
	grade.Observer().StateChanged(wgwatch.State{Stream: "ConfigMap.v1", Phase: wgwatch.PhaseBlocked, Reason: wgwatch.ReasonForbidden,
		NeedsHuman: true, Message: "configmaps is forbidden"})
	reconcile()
	reconcile() // nothing changed: no write, no Event
	// Output:
	// streams: [ConfigMap.v1]
	// Ready=True Established; observedGeneration=1
	//   event: Normal Established all gates are established
	// Ready=False Forbidden; Stalled=True Forbidden; observedGeneration=1
	//   event: Warning Forbidden ConfigMap.v1: configmaps is forbidden
	// Ready=False Forbidden; Stalled=True Forbidden; observedGeneration=1
}

// Streams are named after the kind: a kind whose CRD is not installed has a
// name too.
func ExampleStreamName() {
	fmt.Println(wgctrl.StreamName(corev1.SchemeGroupVersion.WithKind("ConfigMap")))
	fmt.Println(wgctrl.StreamName(guestbookGV.WithKind("Guestbook")))
	// Output:
	// ConfigMap.v1
	// Guestbook.v1.webapp.example.com
}

// ReadyzCheck is the manager's readiness probe,
// mgr.AddReadyzCheck("watches", grade.ReadyzCheck): not ready until every
// informer of the cache has synced once, then ready for good, a denial
// later included (the owners' Stalled conditions report that).
func ExampleGrader_ReadyzCheck() {
	grade, err := wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		panic(err)
	}
	// What the ConfigMaps' informer reports, as the package example does.
	observer := grade.Observer()
	observer.StateChanged(wgwatch.State{Stream: "ConfigMap.v1", Phase: wgwatch.PhaseReplaying, Reason: wgwatch.ReasonInitialSync})
	fmt.Println(grade.ReadyzCheck(nil))
	observer.StateChanged(wgwatch.State{Stream: "ConfigMap.v1", Phase: wgwatch.PhaseStreaming, Reason: wgwatch.ReasonWatching})
	fmt.Println(grade.ReadyzCheck(nil))
	observer.StateChanged(wgwatch.State{Stream: "ConfigMap.v1", Phase: wgwatch.PhaseBlocked, Reason: wgwatch.ReasonForbidden, NeedsHuman: true})
	fmt.Println(grade.ReadyzCheck(nil))
	// Output:
	// wgctrl: watchgrade/watch: not synced: ConfigMap.v1 never streamed
	// <nil>
	// <nil>
}
