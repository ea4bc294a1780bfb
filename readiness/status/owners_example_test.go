package status_test

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
	"github.com/watchgrade/watchgrade/watch"
)

// The owner informer's handler follows each owner's lifecycle: tracked
// with what it depends on, queued, and forgotten when deleted. A stream
// no informer has is a Stalled gate, not a wait that never ends.
func ExampleWriter_OwnerHandler() {
	streams := &watch.Streams{}
	streams.Add("ConfigMap.v1", "", nil) // the process's informers
	acc, _ := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{})
	w, _ := wgstatus.New(wgstatus.Options{
		Accumulator: acc, Streams: streams,
		// In a real controller: the client's UpdateStatus.
		Update: func(_ context.Context, obj runtime.Object) (runtime.Object, error) { return obj, nil },
	})

	handler := w.OwnerHandler(wgstatus.OwnerEvents{
		Dependencies: func(o metav1.Object) wgstatus.Dependencies {
			// Its ConfigMaps, and a Secret kind misspelt.
			return wgstatus.Dependencies{Kinds: []string{"ConfigMap.v1"}, Namespaces: []string{o.GetNamespace()}, Streams: []string{"Secrets.v1"}}
		},
		Changed: func(key types.NamespacedName) { fmt.Println("queued", key) }, // queue.Add
	})
	db := &Database{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", Generation: 1, UID: "u1"}}
	key := types.NamespacedName{Namespace: "shop", Name: "orders"}

	handler.OnAdd(db, true)
	var conds []metav1.Condition
	acc.Apply(key, &conds, db.Generation, time.Now())
	stalled := meta.FindStatusCondition(conds, wgreadiness.ConditionStalled)
	fmt.Printf("Stalled=%s %s\n", stalled.Status, stalled.Reason)
	handler.OnUpdate(db, db) // a resync: nothing changed, nothing queued
	handler.OnDelete(db)
	fmt.Println("gates after the delete:", len(acc.Gates(key)))
	// Output:
	// queued shop/orders
	// Stalled=True UnknownStream
	// gates after the delete: 0
}
