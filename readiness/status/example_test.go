package status_test

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
)

// Database is an operator's own typed owner kind.
type Database struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            DatabaseStatus `json:"status,omitempty"`
}

type DatabaseStatus struct {
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
}

func (d *Database) DeepCopyObject() runtime.Object {
	c := *d
	d.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.Status.Conditions = slices.Clone(d.Status.Conditions)
	return &c
}

// The status step of a client-go Reconcile: the operator's own readiness
// (its StatefulSet's replicas) is a gate, a failed Reconcile is in
// progress, never Ready, and one call decides, writes and records.
func Example() {
	acc, _ := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{})
	writes := 0
	w, _ := wgstatus.New(wgstatus.Options{
		Accumulator: acc,
		// In a real controller: the typed or dynamic client's UpdateStatus.
		Update: func(_ context.Context, obj runtime.Object) (runtime.Object, error) {
			writes++
			db := obj.(*Database)
			db.ResourceVersion = fmt.Sprint(writes + 1)
			return db, nil
		},
	})
	db := &Database{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", Generation: 1, ResourceVersion: "1"}}
	key := types.NamespacedName{Namespace: "shop", Name: "orders"}

	reconcile := func(replicasReady int, err error) {
		acc.Track(key) // and the streams the owner depends on
		if replicasReady < 3 {
			acc.SetGate(key, wgreadiness.Progressing("StatefulSet", "ReplicasNotReady", fmt.Sprintf("%d of 3 replicas are ready", replicasReady)))
		} else {
			acc.SetGate(key, wgreadiness.Established("StatefulSet", "ReplicasReady", "3 of 3 replicas are ready"))
		}
		res := w.Write(context.Background(), db, err)
		ready := meta.FindStatusCondition(db.Status.Conditions, wgreadiness.ConditionReady)
		fmt.Printf("%s: Ready=%s %s: %s\n", res.Outcome, ready.Status, ready.Reason, ready.Message)
	}
	reconcile(0, nil)
	reconcile(3, nil)
	reconcile(3, nil)
	reconcile(3, errors.New("updating Service shop/orders: connection refused"))
	reconcile(3, wgstatus.Terminal(errors.New("spec.version 9.9 is not a version this operator runs")))
	fmt.Println("status writes:", writes, "observedGeneration:", db.Status.ObservedGeneration)
	// Output:
	// Written: Ready=Unknown ReplicasNotReady: StatefulSet: 0 of 3 replicas are ready
	// Written: Ready=True Established: all gates are established
	// Unchanged: Ready=True Established: all gates are established
	// Written: Ready=False ReconcileFailed: Reconcile: the reconcile of generation 1 failed; retrying
	// Written: Ready=False ReconcileFailed: Reconcile: the reconcile of generation 1 failed and will not be retried: spec.version 9.9 is not a version this operator runs
	// status writes: 4 observedGeneration: 1
}
