package readiness_test

import (
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

func printConditions(conds []metav1.Condition) {
	for _, c := range conds {
		fmt.Printf("%s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
}

// Rollup decides the trio from gates: here a stream replaying after its
// cursor expired, on an owner that was Ready before.
func ExampleRollup() {
	gates := []wgreadiness.Gate{
		wgreadiness.StreamGate(wgwatch.State{
			Stream: "apps/deployments", Phase: wgwatch.PhaseReplaying,
			Reason: wgwatch.ReasonExpiredResourceVersion, Message: "the resourceVersion expired; replaying the collection",
		}),
		wgreadiness.Established("SourceCluster", "Reachable", "the source cluster answers"),
	}
	existing := []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Established"}}
	printConditions(wgreadiness.Rollup(gates, existing, 4, wgreadiness.Options{}))
	// Output:
	// Ready=False ExpiredResourceVersion: apps/deployments: the resourceVersion expired; replaying the collection
	// Reconciling=True ExpiredResourceVersion: apps/deployments: the resourceVersion expired; replaying the collection
}

// Apply writes the trio onto an object's conditions; lastTransitionTime
// moves only when a status does.
func ExampleApply() {
	var conds []metav1.Condition // status.conditions of a new object
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

	stalled := []wgreadiness.Gate{wgreadiness.Stalled("apps/deployments", "Forbidden", "deployments is forbidden")}
	fmt.Println(wgreadiness.Apply(&conds, stalled, 1, now, wgreadiness.Options{}))
	fmt.Println(wgreadiness.Apply(&conds, stalled, 1, now.Add(time.Minute), wgreadiness.Options{}))
	printConditions(conds)
	fmt.Println(conds[0].LastTransitionTime.UTC().Format(time.TimeOnly), conds[0].ObservedGeneration)
	// Output:
	// true
	// false
	// Ready=False Forbidden: apps/deployments: deployments is forbidden
	// Stalled=True Forbidden: apps/deployments: deployments is forbidden
	// 12:00:00 1
}

// An Accumulator is the Observer of every stream; it calls back when an
// owner's verdict changes, and the reconcile applies the owner's gates.
func ExampleAccumulator() {
	changed := make(chan types.NamespacedName, 10)
	acc, err := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{
		OnChange: func(key types.NamespacedName) { changed <- key }, // a workqueue's Add in a controller
	})
	if err != nil {
		panic(err)
	}
	key := types.NamespacedName{Namespace: "team-a", Name: "target"}

	// In Reconcile: declare what the owner depends on.
	acc.Track(key, "apps/deployments")
	fmt.Println("requeue", <-changed)

	// A stream reports (normally the stream itself calls this).
	var observer wgwatch.Observer = acc
	observer.StateChanged(wgwatch.State{
		Stream: "apps/deployments", Phase: wgwatch.PhaseStreaming,
		Reason: wgwatch.ReasonWatching, Message: "the stream is delivering live events",
	})
	fmt.Println("requeue", <-changed)

	// In Reconcile again: write the trio, and the status if it changed.
	var conds []metav1.Condition
	if acc.Apply(key, &conds, 1, time.Now()) {
		printConditions(conds)
	}

	// The owner is deleted.
	acc.RemoveOwner(key)
	fmt.Println(len(acc.Gates(key)))
	// Output:
	// requeue team-a/target
	// requeue team-a/target
	// Ready=True Established: all gates are established
	// 0
}

// After a controller restart, an owner whose persisted Ready is True for
// its generation keeps its conditions while its streams start over
// (within StartGrace): Apply changes nothing, so there is no status write
// and no Event, and kstatus never sees the owner InProgress.
func ExampleAccumulator_restart() {
	acc, err := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{})
	if err != nil {
		panic(err)
	}
	key := types.NamespacedName{Namespace: "team-a", Name: "target"}
	conds := []metav1.Condition{{ // what the previous process wrote
		Type: wgreadiness.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: 1,
		Reason: wgreadiness.ReasonEstablished, Message: "all gates are established",
	}}

	acc.Track(key, "apps/deployments")
	acc.StateChanged(wgwatch.State{Stream: "apps/deployments", Phase: wgwatch.PhaseReplaying, Reason: wgwatch.ReasonInitialSync})
	fmt.Println("syncing, changed:", acc.Apply(key, &conds, 1, time.Now()))
	acc.StateChanged(wgwatch.State{Stream: "apps/deployments", Phase: wgwatch.PhaseStreaming, Reason: wgwatch.ReasonWatching})
	fmt.Println("streaming, changed:", acc.Apply(key, &conds, 1, time.Now()))
	printConditions(conds)
	// Output:
	// syncing, changed: false
	// streaming, changed: false
	// Ready=True Established: all gates are established
}

// A Stalled owner across a restart: the previous process wrote Stalled
// (RBAC denies the secrets watch) and recorded its one Warning. The new
// process keeps those conditions while the stream starts over and finds
// the denial again, so it writes nothing and records no second Warning;
// once the denial is repaired the stream is established and the owner
// recovers in one write.
func ExampleAccumulator_restartStalled() {
	acc, err := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{})
	if err != nil {
		panic(err)
	}
	key := types.NamespacedName{Namespace: "team-a", Name: "target"}
	denied := "core/secrets: requests to the API server fail: secrets is forbidden"
	conds := []metav1.Condition{ // what the previous process wrote
		{Type: wgreadiness.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: 1, Reason: "Forbidden", Message: denied},
		{Type: wgreadiness.ConditionStalled, Status: metav1.ConditionTrue, ObservedGeneration: 1, Reason: "Forbidden", Message: denied},
	}

	acc.Track(key, "core/secrets")
	for _, s := range []wgwatch.State{
		{Stream: "core/secrets", Phase: wgwatch.PhaseStarting, Reason: wgwatch.ReasonStarting},
		{Stream: "core/secrets", Phase: wgwatch.PhaseBlocked, Reason: wgwatch.ReasonForbidden, NeedsHuman: true,
			Message: "requests to the API server fail: secrets is forbidden"},
		{Stream: "core/secrets", Phase: wgwatch.PhaseStreaming, Reason: wgwatch.ReasonWatching},
	} {
		acc.StateChanged(s)
		fmt.Printf("%s %s, changed: %v\n", s.Phase, s.Reason, acc.Apply(key, &conds, 1, time.Now()))
	}
	printConditions(conds)
	// Output:
	// Starting Starting, changed: false
	// Blocked Forbidden, changed: false
	// Streaming Watching, changed: true
	// Ready=True Established: all gates are established
}

// A stall on a stream persisted for generation 1, and a controller
// restarted after a spec change (generation 2): the conditions stand as
// they were, for generation 1, while the stream starts over, so the writer
// writes nothing (kstatus reads the owner as in progress: observedGeneration
// behind) and no Event; once the stream shows the denial again, the stall is
// written for generation 2, with no second Warning (Stalled did not move).
func ExampleObserves() {
	acc, err := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{})
	if err != nil {
		panic(err)
	}
	key := types.NamespacedName{Namespace: "team-a", Name: "target"}
	denied := "core/secrets: requests to the API server fail: secrets is forbidden"
	conds := []metav1.Condition{ // what the previous process wrote, for generation 1
		{Type: wgreadiness.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: 1, Reason: "Forbidden", Message: denied},
		{Type: wgreadiness.ConditionStalled, Status: metav1.ConditionTrue, ObservedGeneration: 1, Reason: "Forbidden", Message: denied},
	}
	observed, generation := int64(1), int64(2)

	acc.Track(key, "core/secrets")
	for _, s := range []wgwatch.State{
		{Stream: "core/secrets", Phase: wgwatch.PhaseStarting, Reason: wgwatch.ReasonStarting},
		{Stream: "core/secrets", Phase: wgwatch.PhaseBlocked, Reason: wgwatch.ReasonForbidden, NeedsHuman: true,
			Message: "requests to the API server fail: secrets is forbidden"},
	} {
		acc.StateChanged(s)
		changed := acc.Apply(key, &conds, generation, time.Now())
		write := changed || observed != generation && wgreadiness.Observes(conds, generation)
		fmt.Printf("%s %s: changed %v, write %v\n", s.Phase, s.Reason, changed, write)
		if write {
			observed = generation
		}
	}
	fmt.Println("observedGeneration:", observed)
	// Output:
	// Starting Starting: changed false, write false
	// Blocked Forbidden: changed true, write true
	// observedGeneration: 2
}

// Validate reports every option the roll-up cannot honour at once;
// NewAccumulator refuses them the same way.
func ExampleOptions_Validate() {
	err := wgreadiness.Options{StreamsCondition: wgreadiness.ConditionStalled, MessageLimit: 10}.Validate()
	fmt.Println(errors.Is(err, wgreadiness.ErrInvalidOptions))
	fmt.Println(err)
	// Output:
	// true
	// watchgrade/readiness: invalid options: StreamsCondition "Stalled" must be a condition type other than Ready, Reconciling and Stalled
	// watchgrade/readiness: invalid options: MessageLimit 10 is outside [64, 32768]
}

// StreamLevel maps stream states onto gate levels.
func ExampleStreamLevel() {
	for _, s := range []wgwatch.State{
		{Phase: wgwatch.PhaseStreaming},
		{Phase: wgwatch.PhaseReplaying},
		{Phase: wgwatch.PhaseBlocked},
		{Phase: wgwatch.PhaseBlocked, NeedsHuman: true},
	} {
		fmt.Println(s.Phase, s.NeedsHuman, wgreadiness.StreamLevel(s))
	}
	// Output:
	// Streaming false Established
	// Replaying false Progressing
	// Blocked false Progressing
	// Blocked true Stalled
}
