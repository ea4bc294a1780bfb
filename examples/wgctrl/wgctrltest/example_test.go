package wgctrltest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/watchgrade/watchgrade/examples/wgctrl"
	"github.com/watchgrade/watchgrade/examples/wgctrl/wgctrltest"
)

// Guestbook stands for an operator's own kind, as kubebuilder scaffolds
// it, with observedGeneration added (the adoption's step 1).
type Guestbook struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            GuestbookStatus `json:"status,omitempty"`
}

type GuestbookStatus struct {
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
}

type GuestbookList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Guestbook `json:"items"`
}

func (g *Guestbook) DeepCopyObject() runtime.Object {
	c := *g
	g.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.Status.Conditions = make([]metav1.Condition, len(g.Status.Conditions))
	for i := range g.Status.Conditions {
		g.Status.Conditions[i].DeepCopyInto(&c.Status.Conditions[i])
	}
	return &c
}

func (l *GuestbookList) DeepCopyObject() runtime.Object {
	c := *l
	c.Items = make([]Guestbook, len(l.Items))
	for i := range l.Items {
		c.Items[i] = *l.Items[i].DeepCopyObject().(*Guestbook)
	}
	return &c
}

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	gv := schema.GroupVersion{Group: "webapp.example.com", Version: "v1"}
	s.AddKnownTypes(gv, &Guestbook{}, &GuestbookList{})
	metav1.AddToGroupVersion(s, gv)
	return s
}

// GuestbookReconciler is the adoption's Reconcile: read the Guestbook, do
// the operator's own work, and end with Owner.Status.
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

// SetupWithManager is the adoption's, as kubebuilder scaffolds it, built
// by the Owner: the kinds it Owns are the kinds the Guestbooks depend on.
func (r *GuestbookReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return r.Readiness.ControllerManagedBy(mgr).
		For(&Guestbook{}).
		Owns(&corev1.ConfigMap{}).
		Complete(r)
}

func guestbook(namespace, name string) *Guestbook {
	return &Guestbook{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Generation: 1}}
}

func guestbookOperator(objects ...client.Object) wgctrltest.Operator {
	return wgctrltest.Operator{
		Scheme:  newScheme(),
		Owner:   &Guestbook{},
		Objects: objects,
		// The operator's own setup, as its main calls it.
		SetupWithManager: func(mgr manager.Manager, readiness *wgctrl.Owner) error {
			return (&GuestbookReconciler{Client: mgr.GetClient(), Readiness: readiness}).SetupWithManager(mgr)
		},
	}
}

// status says an owner's Ready and Stalled, with their reasons.
func status(conds []metav1.Condition) string {
	var parts []string
	for _, typ := range []string{"Ready", "Stalled"} {
		if c := meta.FindStatusCondition(conds, typ); c != nil {
			parts = append(parts, fmt.Sprintf("%s=%s/%s", typ, c.Status, c.Reason))
		}
	}
	return strings.Join(parts, " ")
}

// The Guestbook operator's ConfigMaps denied from its start, the
// controller restarted while its Guestbook is Stalled, then the Role
// repaired: one Warning for the denial, nothing for the restart, one
// Normal for the repair.
func Example() {
	key := types.NamespacedName{Namespace: "shop", Name: "gb"}
	t := &testing.T{} // in a test function, its own t
	res := wgctrltest.Run(t, guestbookOperator(guestbook(key.Namespace, key.Name)),
		wgctrltest.Deny(&corev1.ConfigMap{}, ""),
		wgctrltest.Wait(time.Minute),
		wgctrltest.Restart(),
		wgctrltest.Wait(10*time.Minute),
		wgctrltest.Allow(&corev1.ConfigMap{}, ""),
		wgctrltest.Wait(3*time.Minute), // the informer's backoff: up to a minute
	)
	fmt.Println(status(res.Conditions(key)))
	fmt.Println("status writes:", res.StatusWrites(key))
	for _, e := range res.Events(key) {
		fmt.Println(strings.Join(strings.Fields(e)[:2], " ")) // type and reason
	}
	// Output:
	// Ready=True/Established
	// status writes: 2
	// Warning Forbidden
	// Normal Established
}

// The control plane down past ProgressDeadline, the operator restarted
// during it, then the control plane back. Nothing can be written while it
// is down (the status writes are retried quietly, at most a minute apart);
// once it is back, the stall, past ProgressDeadline, is written with its
// one Warning while the informer catches up, then Ready.
func ExampleOutageBegins() {
	key := types.NamespacedName{Namespace: "shop", Name: "gb"}
	t := &testing.T{} // in a test function, its own t
	res := wgctrltest.Run(t, guestbookOperator(guestbook(key.Namespace, key.Name)),
		wgctrltest.Wait(time.Minute),
		wgctrltest.OutageBegins(),
		wgctrltest.Wait(6*time.Minute), // past the 5-minute ProgressDeadline
		wgctrltest.Restart(),
		wgctrltest.Wait(10*time.Minute),
		wgctrltest.OutageEnds(),
		wgctrltest.Wait(3*time.Minute),
	)
	fmt.Println(status(res.Conditions(key)))
	for _, e := range res.Events(key) {
		fmt.Println(strings.Join(strings.Fields(e)[:2], " "))
	}
	// Output:
	// Ready=True/Established
	// Normal Established
	// Warning ProgressDeadlineExceeded
	// Normal Established
}

// The ConfigMaps' informers removed and made again (cache.RemoveInformer,
// then GetInformer) while RBAC denies them: the new informer's start does
// not write the stall away, and the denial pages once.
func ExampleReplaceInformers() {
	key := types.NamespacedName{Namespace: "shop", Name: "gb"}
	t := &testing.T{} // in a test function, its own t
	res := wgctrltest.Run(t, guestbookOperator(guestbook(key.Namespace, key.Name)),
		wgctrltest.Wait(time.Minute),
		wgctrltest.Deny(&corev1.ConfigMap{}, ""),
		wgctrltest.Wait(time.Minute),
		wgctrltest.ReplaceInformers(&corev1.ConfigMap{}),
		wgctrltest.Wait(time.Minute),
		wgctrltest.Allow(&corev1.ConfigMap{}, ""),
		wgctrltest.Wait(3*time.Minute),
	)
	fmt.Println(status(res.Conditions(key)))
	for _, e := range res.Events(key) {
		fmt.Println(strings.Join(strings.Fields(e)[:2], " "))
	}
	// Output:
	// Ready=True/Established
	// Normal Established
	// Warning Forbidden
	// Normal Established
}

// A Guestbook deleted while its Reconcile runs, between the Reconcile's
// read and its status write: the NotFound is routine (nothing more is
// written, nothing logged at error level), and the owner is forgotten.
func ExampleDeleteDuringReconcile() {
	key := types.NamespacedName{Namespace: "shop", Name: "gb"}
	t := &testing.T{} // in a test function, its own t
	res := wgctrltest.Run(t, guestbookOperator(guestbook(key.Namespace, key.Name)),
		wgctrltest.Wait(time.Minute),
		wgctrltest.DeleteDuringReconcile(key),
		wgctrltest.Wait(time.Minute),
	)
	fmt.Println("status writes:", res.StatusWrites(key))
	fmt.Println("error-level lines:", len(res.ErrorLogs()))
	deleted, after := false, 0
	for _, r := range res.Timeline() {
		switch {
		case r.Owner != key:
		case r.What == wgctrltest.RecordDelete:
			deleted = true
		case deleted && r.What == wgctrltest.RecordReconcile:
			after++ // the deletion's own request, which finds it gone
		}
	}
	fmt.Println("deleted:", deleted, "reconciles after:", after)
	// Output:
	// status writes: 1
	// error-level lines: 0
	// deleted: true reconciles after: 1
}

// A controller that watches the ConfigMaps metadata-only
// (builder.OnlyMetadata): the kit learns the kind, and its representation,
// from the controller the setup builds, the Owner follows the
// controller's informer, and the cache runs no second informer of the
// kind.
func ExampleOperator_ownerWatches() {
	key := types.NamespacedName{Namespace: "shop", Name: "gb"}
	t := &testing.T{} // in a test function, its own t
	op := guestbookOperator(guestbook(key.Namespace, key.Name))
	op.SetupWithManager = func(mgr manager.Manager, readiness *wgctrl.Owner) error {
		return readiness.ControllerManagedBy(mgr).
			For(&Guestbook{}).
			Owns(&corev1.ConfigMap{}, builder.OnlyMetadata).
			Complete(&GuestbookReconciler{Client: mgr.GetClient(), Readiness: readiness})
	}
	res := wgctrltest.Run(t, op,
		wgctrltest.Wait(time.Minute),
		wgctrltest.Deny(&corev1.ConfigMap{}, ""),
		wgctrltest.Wait(time.Minute),
	)
	fmt.Println(status(res.Conditions(key)))
	second := 0
	for _, r := range res.Timeline() {
		if r.What == wgctrltest.RecordInformer {
			second++
		}
	}
	fmt.Println("second informers:", second)
	// Output:
	// Ready=False/Forbidden Stalled=True/Forbidden
	// second informers: 0
}

// A rollout of the leader-elected operator over a denial: the new process
// is ready while the old one holds the lease, so the rolling update
// completes, and it writes nothing: the one Warning stands.
func ExampleRollout() {
	key := types.NamespacedName{Namespace: "shop", Name: "gb"}
	t := &testing.T{} // in a test function, its own t
	res := wgctrltest.Run(t, guestbookOperator(guestbook(key.Namespace, key.Name)),
		wgctrltest.Deny(&corev1.ConfigMap{}, ""),
		wgctrltest.Wait(time.Minute),
		wgctrltest.Rollout(),
		wgctrltest.Wait(5*time.Minute),
	)
	fmt.Println(status(res.Conditions(key)))
	fmt.Println("status writes:", res.StatusWrites(key), "warnings:", res.Warnings(key))
	// Output:
	// Ready=False/Forbidden Stalled=True/Forbidden
	// status writes: 1 warnings: 1
}

// RBAC denied while the API server sheds writes: the stall cannot be
// written until the writes are taken again, and nothing is logged at
// error level for the writes refused; the denial's own error line comes
// from the watch error handler.
func ExampleRefuseWrites() {
	key := types.NamespacedName{Namespace: "shop", Name: "gb"}
	t := &testing.T{} // in a test function, its own t
	res := wgctrltest.Run(t, guestbookOperator(guestbook(key.Namespace, key.Name)),
		wgctrltest.Wait(time.Minute),
		wgctrltest.Deny(&corev1.ConfigMap{}, ""),
		wgctrltest.RefuseWrites(2*time.Minute),
		wgctrltest.Wait(2*time.Minute),
	)
	fmt.Println(status(res.Conditions(key)))
	fmt.Println("status writes:", res.StatusWrites(key), "warnings:", res.Warnings(key))
	for _, l := range res.ErrorLogs() {
		fmt.Println(strings.Contains(l, "429") || strings.Contains(l, "shedding"))
	}
	// Output:
	// Ready=False/Forbidden Stalled=True/Forbidden
	// status writes: 2 warnings: 1
	// false
}

// The wiring main.go runs once the manager is made, in a function of its
// own that main.go calls and the table test passes as Operator.Main: the
// kit runs it, the readiness check included, and a Rollout waits for that
// check.
func ExampleOperator_main() {
	key := types.NamespacedName{Namespace: "shop", Name: "gb"}
	op := guestbookOperator(guestbook(key.Namespace, key.Name))
	op.SetupWithManager = nil
	op.Main = func(mgr manager.Manager, grade *wgctrl.Grader) error {
		readiness, err := grade.Owner(mgr, &Guestbook{})
		if err != nil {
			return err
		}
		if err := (&GuestbookReconciler{Client: mgr.GetClient(), Readiness: readiness}).SetupWithManager(mgr); err != nil {
			return err
		}
		return mgr.AddReadyzCheck("watches", grade.ReadyzCheck)
	}
	t := &testing.T{} // in a test function, its own t
	res := wgctrltest.Run(t, op, wgctrltest.Wait(time.Minute), wgctrltest.Rollout(), wgctrltest.Wait(time.Minute))
	fmt.Println(status(res.Conditions(key)))
	fmt.Println("status writes:", res.StatusWrites(key))
	// Output:
	// Ready=True/Established
	// status writes: 1
}
