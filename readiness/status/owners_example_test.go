package status_test

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

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

// A kind whose CRD is not installed: the owners that depend on it are
// Stalled once it has gone unserved for the human grace, and in progress
// again once it is served.
func ExampleWriter_NotServed() {
	clock := clocktesting.NewFakeClock(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC))
	acc, _ := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{Clock: clock})
	w, _ := wgstatus.New(wgstatus.Options{
		Accumulator: acc, Clock: clock, Streams: &watch.Streams{},
		Update: func(_ context.Context, obj runtime.Object) (runtime.Object, error) { return obj, nil },
	})
	key := types.NamespacedName{Namespace: "shop", Name: "orders"}
	w.Track(key, wgstatus.Dependencies{Kinds: []string{"Backup.v1.example.dev"}})
	backup := schema.GroupResource{Group: "example.dev", Resource: "Backup"}
	verdict := func(when string) {
		g := acc.Gates(key)[0] // the kind's stream
		fmt.Printf("%s: %s %s\n", when, g.Level, g.Reason)
	}
	w.NotServed("Backup.v1.example.dev", backup) // the cache found no such kind
	clock.Step(watch.DefaultHumanGrace - time.Second)
	w.NotServed("Backup.v1.example.dev", backup)
	verdict("within the grace")
	clock.Step(time.Second)
	w.NotServed("Backup.v1.example.dev", backup)
	verdict("after the grace")
	w.Served("Backup.v1.example.dev", backup) // the CRD installed
	verdict("served")
	// Output:
	// within the grace: Progressing Starting
	// after the grace: Stalled ResourceNotFound
	// served: Progressing Starting
}

// A client-go controller depends on Backups, whose CRD may be installed
// after it starts: AwaitInformer reports the kind while the API server
// does not serve it, and starts its informer once it does. Served would
// ask a RESTMapper (meta.IsNoMatchError: not served); this one is
// installed at the third ask.
func ExampleWriter_AwaitInformer() {
	acc, _ := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{})
	w, _ := wgstatus.New(wgstatus.Options{
		Accumulator: acc, Streams: &watch.Streams{}, HumanGrace: time.Millisecond,
		Update: func(_ context.Context, obj runtime.Object) (runtime.Object, error) { return obj, nil },
	})
	key := types.NamespacedName{Namespace: "shop", Name: "orders"}
	const backups = "Backup.v1.example.dev"
	w.Track(key, wgstatus.Dependencies{Kinds: []string{backups}})
	verdict := func(when string) {
		g := acc.Gates(key)[0] // the kind's stream
		fmt.Printf("%s: %s %s\n", when, g.Level, g.Reason)
	}
	asks := 0
	err := w.AwaitInformer(context.Background(), wgstatus.Kind{
		Name: backups, Resource: schema.GroupResource{Group: "example.dev", Resource: "backups"},
		Every: 10 * time.Millisecond,
		Served: func(context.Context) (bool, error) {
			asks++
			verdict(fmt.Sprint("ask ", asks))
			return asks == 3, nil
		},
		Start: func(context.Context) error {
			fmt.Println("informer started") // informer.Run, say, in a goroutine
			return nil
		},
	})
	verdict(fmt.Sprint("returned ", err))
	// Output:
	// ask 1: Progressing Starting
	// ask 2: Progressing Starting
	// ask 3: Stalled ResourceNotFound
	// informer started
	// returned <nil>: Progressing Starting
}

// A cache restricted to namespaces made no informer of a kind in one an
// owner depends on it in: the owner is Stalled, not waiting for ever.
func ExampleWriter_NotWatched() {
	streams := &watch.Streams{}
	streams.Add("ConfigMap.v1", "team-a", nil) // the cache watches team-a only
	acc, _ := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{})
	w, _ := wgstatus.New(wgstatus.Options{
		Accumulator: acc, Streams: streams,
		Update: func(_ context.Context, obj runtime.Object) (runtime.Object, error) { return obj, nil },
	})
	key := types.NamespacedName{Namespace: "shop", Name: "orders"}
	w.Track(key, wgstatus.Dependencies{Kinds: []string{"ConfigMap.v1"}, Namespaces: []string{"shop"}})
	fmt.Println("namespaces to make informers in:", w.TrackedNamespaces())
	w.NotWatched("ConfigMap.v1", "shop") // asked, the cache made none there
	for _, g := range acc.Gates(key) {
		if !g.Stream {
			fmt.Printf("%s: %s %s\n", g.Name, g.Level, g.Reason)
		}
	}
	// Output:
	// namespaces to make informers in: [shop]
	// shop/ConfigMap.v1: Stalled NamespaceNotWatched
}

// The standby writer writes what must not wait for the controller's
// workers (here a stall), and stands down at the first Write.
func ExampleWriter_RunStandby() {
	acc, _ := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{})
	written := make(chan string, 1)
	w, _ := wgstatus.New(wgstatus.Options{
		Accumulator: acc,
		Update: func(_ context.Context, obj runtime.Object) (runtime.Object, error) {
			db := obj.(*Database)
			written <- meta.FindStatusCondition(db.Status.Conditions, wgreadiness.ConditionStalled).Reason
			return db, nil
		},
	})
	db := &Database{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", Generation: 1}}
	key := types.NamespacedName{Namespace: "shop", Name: "orders"}
	acc.Track(key)
	acc.SetGate(key, wgreadiness.Stalled("Secrets", "Forbidden", "secrets is forbidden"))
	w.QueueStandby(key) // the accumulator's OnChange does, beside the controller's queue

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- w.RunStandby(ctx, func(context.Context, types.NamespacedName) (runtime.Object, error) {
			return db.DeepCopyObject(), nil // in a controller: a read from its cache
		})
	}()
	fmt.Println("standby wrote Stalled:", <-written)
	cancel()
	fmt.Println("RunStandby returned:", <-done)
	// Output:
	// standby wrote Stalled: Forbidden
	// RunStandby returned: <nil>
}

// A Reconcile made an informer for one owner (its Secret, say): the
// owner depends on its stream too, and still does when its informer's
// update tracks it again.
func ExampleWriter_TrackStreams() {
	streams := &watch.Streams{}
	streams.Add("ConfigMap.v1", "", nil)
	streams.Add("Secret.v1", "", nil) // the Reconcile's own informer
	acc, _ := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{})
	w, _ := wgstatus.New(wgstatus.Options{
		Accumulator: acc, Streams: streams,
		Update: func(_ context.Context, obj runtime.Object) (runtime.Object, error) { return obj, nil },
	})
	key := types.NamespacedName{Namespace: "shop", Name: "orders"}
	w.Track(key, wgstatus.Dependencies{Kinds: []string{"ConfigMap.v1"}})
	w.TrackStreams(key, "Secret.v1")
	w.Track(key, wgstatus.Dependencies{Kinds: []string{"ConfigMap.v1"}}) // the owner seen again
	for _, g := range acc.Gates(key) {
		fmt.Println(g.Name)
	}
	// Output:
	// ConfigMap.v1
	// Secret.v1
}
