package wgctrl_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/watchgrade/watchgrade/examples/wgctrl"
)

// builderManager returns a Grader and a manager of a server nobody
// answers: a controller builds without it.
func builderManager(t *testing.T) (*wgctrl.Grader, manager.Manager) {
	t.Helper()
	grade, err := wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	opts := grade.ManagerOptions(manager.Options{Scheme: newScheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	mgr, err := ctrl.NewManager(&rest.Config{Host: "http://127.0.0.1:1"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return grade, mgr
}

// The kinds the controller is built to watch are the kinds the owners
// depend on, said once: Owns, Watches and WatchesMetadata each add one,
// the probe waits for each, and the Requeue source is added.
func TestControllerManagedBySaysTheWatchedKindsOnce(t *testing.T) {
	grade, mgr := builderManager(t)
	owner, err := grade.Owner(mgr, &Guestbook{})
	if err != nil {
		t.Fatal(err)
	}
	if got := owner.Streams(); len(got) != 0 {
		t.Fatalf("before the controller is built: Streams() = %v, want none", got)
	}
	err = owner.ControllerManagedBy(mgr).
		For(&Guestbook{}).
		Owns(&corev1.ConfigMap{}).
		WatchesMetadata(&corev1.Secret{}, &handler.EnqueueRequestForObject{}).
		Watches(&corev1.ConfigMap{}, &handler.EnqueueRequestForObject{}). // the same kind again: one stream
		Named("guestbook").
		Complete(&GuestbookReconciler{Client: mgr.GetClient(), Readiness: owner})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := owner.Streams(), []string{"ConfigMap.v1", "Secret.v1"}; !slices.Equal(got, want) {
		t.Errorf("Streams() = %v, want %v", got, want)
	}
	if kinds := owner.Kinds(); len(kinds) != 2 {
		t.Errorf("Kinds() = %v, want two", kinds)
	} else if _, ok := kinds[1].(*metav1.PartialObjectMetadata); !ok {
		t.Errorf("Kinds()[1] = %T, want a *metav1.PartialObjectMetadata: Secrets are watched metadata-only", kinds[1])
	}
	if err := grade.ReadyzCheck(nil); err == nil || !strings.Contains(err.Error(), "Secret.v1") {
		t.Errorf("ReadyzCheck() = %v, want it to wait for Secret.v1", err)
	}
	if !owner.RequeueAdded() {
		t.Error("the controller was built without the Owner's Requeue source")
	}
}

// A controller For another kind than its Owner's would write, through the
// Owner, the status of objects it never reconciles: Build says so.
func TestControllerManagedByRefusesAnotherOwnerKind(t *testing.T) {
	grade, mgr := builderManager(t)
	owner, err := grade.Owner(mgr, &Guestbook{})
	if err != nil {
		t.Fatal(err)
	}
	err = owner.ControllerManagedBy(mgr).For(&corev1.ConfigMap{}).Complete(&GuestbookReconciler{Client: mgr.GetClient(), Readiness: owner})
	if err == nil || !strings.Contains(err.Error(), "For ConfigMap") || !strings.Contains(err.Error(), "Guestbook.webapp.example.com") {
		t.Errorf("Complete() = %v, want an error naming ConfigMap and Guestbook.webapp.example.com", err)
	}
}

// A nil Owner (a reconciler built without one, as the scaffold's own test
// builds it) builds the controller as ctrl.NewControllerManagedBy does.
func TestControllerManagedByOfANilOwner(t *testing.T) {
	_, mgr := builderManager(t)
	var owner *wgctrl.Owner
	if err := owner.ControllerManagedBy(mgr).For(&Guestbook{}).Owns(&corev1.ConfigMap{}).Complete(&GuestbookReconciler{Client: mgr.GetClient()}); err != nil {
		t.Errorf("Complete() = %v, want nil", err)
	}
}

// The standby writer follows the kinds it had when it started: a
// controller built after that fails, rather than leave a kind unfollowed.
// And an Owner whose Requeue source is in no controller says so at Start,
// once, as an error: its owners would wait for their next event.
func TestOwnerStartedWithoutItsController(t *testing.T) {
	for _, requeue := range []bool{false, true} {
		name := "no Requeue source"
		if requeue {
			name = "with its Requeue source"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var errorLines []string
				logger := funcr.New(func(prefix, args string) {
					if strings.Contains(args, `"error"`) {
						mu.Lock()
						errorLines = append(errorLines, args)
						mu.Unlock()
					}
				}, funcr.Options{})
				f := newFixture(t)
				grade, err := wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry(), Logger: logger})
				if err != nil {
					t.Fatal(err)
				}
				fi := &fakeInformers{gb: f.guestbook(t), served: true}
				owner, err := grade.NewOwner(wgctrl.OwnerConfig{Client: f.client, Recorder: f.recorder, Informers: fi, RESTMapper: servedMapper{fi}}, &Guestbook{})
				if err != nil {
					t.Fatal(err)
				}
				if requeue {
					owner.Requeue()
				}
				_, mgr := builderManager(t)
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error)
				go func() { done <- owner.Start(ctx) }()
				synctest.Wait()

				err = owner.ControllerManagedBy(mgr).For(&Guestbook{}).Owns(&corev1.ConfigMap{}).Complete(&GuestbookReconciler{Client: f.client, Readiness: owner})
				if err == nil || !strings.Contains(err.Error(), "before mgr.Start") {
					t.Errorf("built after Start: Complete() = %v, want an error saying to build it before mgr.Start", err)
				}
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Start: %v", err)
				}
				mu.Lock()
				defer mu.Unlock()
				n := 0
				for _, l := range errorLines {
					if strings.Contains(l, "Requeue source is in no controller") {
						n++
					}
				}
				if want := map[bool]int{false: 1, true: 0}[requeue]; n != want {
					t.Errorf("error lines about the Requeue source: %d, want %d (error lines: %q)", n, want, errorLines)
				}
			})
		})
	}
}
