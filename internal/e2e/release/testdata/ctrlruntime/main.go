// Command ctrlruntime is the README's controller-runtime quick start as a
// whole program: TestGoGet builds it in a fresh module after running the
// README's `go get github.com/watchgrade/watchgrade/examples/wgctrl@latest`.
// Its lines are the README's (TestQuickStartsAreBuilt checks it); around
// them is the least of a kubebuilder scaffold that compiles: the
// Guestbook type, whose package the README imports as webappv1, and main.
package main

import (
	"context"
	"fmt"
	"os"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/watchgrade/watchgrade/examples/wgctrl"
)

// Guestbook is the owner kind, as kubebuilder scaffolds it, with
// status.observedGeneration added.
type Guestbook struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            GuestbookStatus `json:"status,omitempty"`
}

// GuestbookStatus holds the trio and the generation it was computed for.
type GuestbookStatus struct {
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
}

// GuestbookList is a list of Guestbooks.
type GuestbookList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Guestbook `json:"items"`
}

// DeepCopyObject makes Guestbook a runtime.Object.
func (g *Guestbook) DeepCopyObject() runtime.Object {
	c := *g
	g.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.Status.Conditions = slices.Clone(g.Status.Conditions)
	return &c
}

// DeepCopyObject makes GuestbookList a runtime.Object.
func (l *GuestbookList) DeepCopyObject() runtime.Object {
	c := *l
	c.Items = make([]Guestbook, len(l.Items))
	for i := range l.Items {
		c.Items[i] = *l.Items[i].DeepCopyObject().(*Guestbook)
	}
	return &c
}

// GuestbookReconciler is the scaffold's reconciler with the Readiness
// field the quick start adds. From here to the end of Reconcile's first
// lines, and in run, the lines are the README's.
type GuestbookReconciler struct {
	client.Client
	Readiness *wgctrl.Owner
}

// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
func (r *GuestbookReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	gb := &Guestbook{} // its status gains ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	if err := r.Get(ctx, req.NamespacedName, gb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer func() { res, err = r.Readiness.Status(ctx, gb, res, err) }()
	return ctrl.Result{}, nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	scheme.AddKnownTypes(schema.GroupVersion{Group: "webapp.example.com", Version: "v1"}, &Guestbook{}, &GuestbookList{})
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}

	// The README's quick start, from here on.
	grade, err := wgctrl.New(wgctrl.Options{WaitForHuman: true})
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, grade.ManagerOptions(ctrl.Options{Scheme: scheme}))
	if err != nil {
		return err
	}
	readiness, err := grade.Owner(mgr, &Guestbook{})
	if err != nil {
		return err
	}
	err = mgr.AddReadyzCheck("watches", grade.ReadyzCheck) // instead of healthz.Ping
	if err != nil {
		return err
	}
	err = readiness.ControllerManagedBy(mgr).For(&Guestbook{}).Owns(&corev1.ConfigMap{}).
		Complete(&GuestbookReconciler{Client: mgr.GetClient(), Readiness: readiness})
	if err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
