package wgctrl_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/watchgrade/watchgrade/examples/wgctrl"
)

// The controller built by its Owner: the kinds it Owns and Watches are the
// kinds the Guestbooks depend on, said once, and the Owner's Requeue
// source is added. (The manager here is of a server nobody answers: a
// controller builds without one.)
func ExampleOwner_ControllerManagedBy() {
	grade, _ := wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry()})
	mgr, _ := ctrl.NewManager(&rest.Config{Host: "http://127.0.0.1:1"}, grade.ManagerOptions(manager.Options{
		Scheme: newScheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}))
	readiness, _ := grade.Owner(mgr, &Guestbook{})
	// In place of ctrl.NewControllerManagedBy(mgr):
	err := readiness.ControllerManagedBy(mgr).
		For(&Guestbook{}).
		Owns(&corev1.ConfigMap{}).
		Watches(&corev1.Secret{}, &handler.EnqueueRequestForObject{}, builder.OnlyMetadata).
		Complete(&GuestbookReconciler{Client: mgr.GetClient(), Readiness: readiness})
	fmt.Println(err)
	fmt.Println(readiness.Streams())
	fmt.Println(readiness.RequeueAdded())
	// Output:
	// <nil>
	// [ConfigMap.v1 Secret.v1]
	// true
}
