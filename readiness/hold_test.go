package readiness_test

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// The restart hold's exact rule, case by case: what it holds (a persisted
// Ready=True for the generation, over streams this accumulator has not had
// established yet, within StartGrace by the accumulator's clock) and the
// neighbouring cases it must not hold.

const streamsRunning = "StreamsRunning"

// persistedWithStreams is what a previous process wrote with
// Options.StreamsCondition set: Ready=True and StreamsRunning=True.
func persistedWithStreams() []metav1.Condition {
	at := metav1.NewTime(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	return []metav1.Condition{
		{Type: wgreadiness.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: gen,
			Reason: wgreadiness.ReasonEstablished, Message: "all gates are established", LastTransitionTime: at},
		{Type: streamsRunning, Status: metav1.ConditionTrue, ObservedGeneration: gen,
			Reason: wgreadiness.ReasonEstablished, Message: "all watch streams are established", LastTransitionTime: at},
	}
}

// Defect 1: with Options.StreamsCondition set, a restart rebuilt the
// streams condition on the held path: StreamsRunning went True → False
// (Starting, lastTransitionTime moved) → True, two status writes per owner
// per rollout. The held path changes nothing, byte for byte.
func TestRestartWithStreamsConditionWritesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAccumulator(t, wgreadiness.AccumulatorOptions{Rollup: wgreadiness.Options{StreamsCondition: streamsRunning}})
		conds := persistedWithStreams()
		before := slices.Clone(conds)
		writes := 0
		reconcile := func() {
			if a.Apply(ownerA, &conds, gen, time.Now()) {
				writes++
			}
		}
		a.Track(ownerA, "configmaps", "secrets")
		reconcile()
		for _, s := range []string{"configmaps", "secrets"} {
			a.StateChanged(streamState(s, wgwatch.PhaseStarting, wgwatch.ReasonStarting, false))
			reconcile()
		}
		for _, s := range []string{"configmaps", "secrets"} {
			time.Sleep(time.Second)
			a.StateChanged(streamState(s, wgwatch.PhaseReplaying, wgwatch.ReasonInitialSync, false))
			reconcile()
			a.StateChanged(streamState(s, wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false))
			reconcile()
		}
		if writes != 0 {
			t.Errorf("a restart with StreamsCondition set changed the conditions %d times, want 0", writes)
		}
		if diff := cmp.Diff(before, conds); diff != "" {
			t.Errorf("conditions after the restart (-before +after):\n%s", diff)
		}
	})
}

// The neighbouring cases of defect 1: StreamsCondition turned on in this
// rollout (none persisted) is added once, when the streams are
// established, not written False and then True; and once the grace ends
// with a stream still syncing, both Ready and StreamsRunning move.
func TestRestartWithStreamsConditionNeighbours(t *testing.T) {
	t.Run("streams condition new in this rollout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := newAccumulator(t, wgreadiness.AccumulatorOptions{Rollup: wgreadiness.Options{StreamsCondition: streamsRunning}})
			conds := persistedReady()
			a.Track(ownerA, "configmaps")
			a.StateChanged(streamState("configmaps", wgwatch.PhaseReplaying, wgwatch.ReasonInitialSync, false))
			if a.Apply(ownerA, &conds, gen, time.Now()) {
				t.Fatalf("Apply() while held changed the conditions to %+v", conds)
			}
			a.StateChanged(streamState("configmaps", wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false))
			if !a.Apply(ownerA, &conds, gen, time.Now()) {
				t.Fatalf("Apply() once established changed nothing, want StreamsRunning added")
			}
			if c := meta.FindStatusCondition(conds, streamsRunning); c == nil || c.Status != metav1.ConditionTrue {
				t.Errorf("StreamsRunning = %+v, want True", c)
			}
			if c := meta.FindStatusCondition(conds, wgreadiness.ConditionReady); c.Status != metav1.ConditionTrue {
				t.Errorf("Ready = %+v, want True", c)
			}
		})
	})
	t.Run("grace ends with a stream syncing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := newAccumulator(t, wgreadiness.AccumulatorOptions{Rollup: wgreadiness.Options{StreamsCondition: streamsRunning}})
			conds := persistedWithStreams()
			a.Track(ownerA, "configmaps")
			a.StateChanged(streamState("configmaps", wgwatch.PhaseReplaying, wgwatch.ReasonInitialSync, false))
			time.Sleep(wgreadiness.DefaultStartGrace)
			synctest.Wait()
			if !a.Apply(ownerA, &conds, gen, time.Now()) {
				t.Fatalf("Apply() after the grace changed nothing")
			}
			for _, typ := range []string{wgreadiness.ConditionReady, streamsRunning} {
				if c := meta.FindStatusCondition(conds, typ); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "InitialSync" {
					t.Errorf("%s = %+v, want False/InitialSync", typ, c)
				}
			}
		})
	})
}

// Defect 2: a caller's own gate with Starting=true held Ready=True for
// ever: SetGate kept the flag and the hold trusted it. The hold is for
// streams only; SetGate drops the flag, and Rollup ignores it on a gate
// that is not a stream's.
func TestCallerGateIsNeverHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got calls
		a := newAccumulator(t, wgreadiness.AccumulatorOptions{OnChange: got.add})
		conds := persistedReady()
		waiting := wgreadiness.Progressing("Path", "WaitingForPath", "the path is not accepted yet")
		waiting.Starting = true
		a.SetGate(ownerA, waiting)
		if gates := a.Gates(ownerA); len(gates) != 1 || gates[0].Starting {
			t.Errorf("Gates() = %+v, want the caller's gate without Starting", gates)
		}
		for i := range 10 {
			if i > 0 {
				time.Sleep(wgreadiness.DefaultStartGrace)
				synctest.Wait()
			}
			a.Apply(ownerA, &conds, gen, time.Now())
			if !meta.IsStatusConditionTrue(conds, wgreadiness.ConditionReconciling) || meta.IsStatusConditionTrue(conds, wgreadiness.ConditionReady) {
				t.Fatalf("after %d start graces: conditions %+v, want Ready=False and Reconciling=True", i, conds)
			}
		}
		// Rollup alone: a caller's gate marked Starting is not held either.
		got2 := wgreadiness.Rollup([]wgreadiness.Gate{waiting}, persistedReady(), gen, wgreadiness.Options{})
		if got2[0].Status != metav1.ConditionFalse {
			t.Errorf("Rollup(caller's gate Starting) Ready = %+v, want False", got2[0])
		}
	})
}

// Defect 3: a stalled gate marked Starting was held: Ready=True, no
// Stalled, no Warning, for ever. Stalled wins over the hold, always.
func TestStalledGateIsNeverHeld(t *testing.T) {
	stalledStream := wgreadiness.StreamGate(streamState("configmaps", wgwatch.PhaseBlocked, wgwatch.ReasonForbidden, true))
	stalledStream.Starting = true
	startingStream := wgreadiness.StreamGate(streamState("secrets", wgwatch.PhaseStarting, wgwatch.ReasonStarting, false))
	startingStream.Starting = true
	for _, tt := range []struct {
		name  string
		gates []wgreadiness.Gate
	}{
		{"a stalled stream gate marked Starting", []wgreadiness.Gate{stalledStream}},
		{"beside a starting stream", []wgreadiness.Gate{startingStream, stalledStream}},
		{"a caller's stalled gate marked Starting", []wgreadiness.Gate{startingStream, func() wgreadiness.Gate {
			g := stalledGate
			g.Starting = true
			return g
		}()}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := wgreadiness.Rollup(tt.gates, persistedReady(), gen, wgreadiness.Options{})
			if !meta.IsStatusConditionTrue(got, wgreadiness.ConditionStalled) || meta.IsStatusConditionTrue(got, wgreadiness.ConditionReady) {
				t.Errorf("Rollup() = %+v, want Stalled=True and Ready=False", got)
			}
		})
	}
	t.Run("through the accumulator", func(t *testing.T) {
		a := newAccumulator(t, wgreadiness.AccumulatorOptions{})
		g := stalledGate
		g.Starting = true
		a.Track(ownerA, "secrets")
		a.SetGate(ownerA, g)
		conds := persistedReady()
		a.Apply(ownerA, &conds, gen, time.Now())
		if !meta.IsStatusConditionTrue(conds, wgreadiness.ConditionStalled) {
			t.Errorf("Apply() = %+v, want Stalled=True", conds)
		}
	})
}

// Defect 4: a stream that was established, then publishes Starting again
// (Run called again) within StartGrace of when it was first heard of, was
// held. The hold is for streams this accumulator has never had
// established; after RemoveStream a stream of that name starts afresh.
func TestReestablishedStreamIsNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAccumulator(t, wgreadiness.AccumulatorOptions{})
		conds := persistedReady()
		a.Track(ownerA, "configmaps")
		a.StateChanged(streamState("configmaps", wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false))
		if a.Apply(ownerA, &conds, gen, time.Now()) {
			t.Fatalf("Apply() while established changed the conditions")
		}
		time.Sleep(5 * time.Second)
		for _, st := range []wgwatch.State{
			streamState("configmaps", wgwatch.PhaseStarting, wgwatch.ReasonStarting, false),
			streamState("configmaps", wgwatch.PhaseReplaying, wgwatch.ReasonInitialSync, false),
		} {
			a.StateChanged(st)
			c := slices.Clone(conds)
			if !a.Apply(ownerA, &c, gen, time.Now()) || meta.IsStatusConditionTrue(c, wgreadiness.ConditionReady) {
				t.Errorf("%s/%s again, 5s after first heard of: Apply() left %+v, want Ready=False", st.Phase, st.Reason, c)
			}
		}
		// Removed and heard of again: a new stream, held within its own grace.
		a.RemoveStream("configmaps")
		a.Track(ownerA, "configmaps")
		a.StateChanged(streamState("configmaps", wgwatch.PhaseStarting, wgwatch.ReasonStarting, false))
		if a.Apply(ownerA, &conds, gen, time.Now()) {
			t.Errorf("Apply() for a stream removed and started afresh changed the conditions to %+v, want them held", conds)
		}
	})
}

// Defect 5: the hold used two clocks: the caller's now decided whether an
// owner was held, the accumulator's clock woke it at the end of the grace.
// A caller whose now lags (truncated, another clock) stayed held after the
// one OnChange, with no further requeue. Now the accumulator's clock
// decides both; now only stamps lastTransitionTime.
func TestHoldUsesTheAccumulatorsClock(t *testing.T) {
	for _, tt := range []struct {
		name string
		now  func() time.Time
	}{
		{"now truncated to the minute", func() time.Time { return time.Now().Truncate(time.Minute) }},
		{"now a minute behind", func() time.Time { return time.Now().Add(-time.Minute) }},
		{"now far ahead", func() time.Time { return time.Now().Add(time.Hour) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var got calls
				a := newAccumulator(t, wgreadiness.AccumulatorOptions{OnChange: got.add})
				time.Sleep(17 * time.Second) // off the minute
				conds := persistedReady()
				a.Track(ownerA, "configmaps")
				a.StateChanged(streamState("configmaps", wgwatch.PhaseReplaying, wgwatch.ReasonInitialSync, false))
				synctest.Wait()
				got.take()
				if a.Apply(ownerA, &conds, gen, tt.now()) {
					t.Fatalf("Apply() within the grace changed the conditions to %+v", conds)
				}
				time.Sleep(wgreadiness.DefaultStartGrace)
				synctest.Wait()
				if diff := cmp.Diff([]types.NamespacedName{ownerA}, got.take()); diff != "" {
					t.Fatalf("OnChange when the grace ended (-want +got):\n%s", diff)
				}
				if !a.Apply(ownerA, &conds, gen, tt.now()) {
					t.Fatalf("Apply() at the OnChange that ended the grace changed nothing: the owner is held for good")
				}
				if c := meta.FindStatusCondition(conds, wgreadiness.ConditionReconciling); c == nil || c.Status != metav1.ConditionTrue {
					t.Errorf("after the grace: %+v, want Reconciling=True", conds)
				}
			})
		})
	}
}

// Also: with no OnChange there is nobody to deliver to, so a state change
// starts no delivery goroutine.
func TestNoOnChangeStartsNoGoroutine(t *testing.T) {
	a := newAccumulator(t, wgreadiness.AccumulatorOptions{})
	for i := range 100 {
		a.Track(types.NamespacedName{Namespace: "ns", Name: fmt.Sprint("o", i)}, "pods")
	}
	// One P: a goroutine started by StateChanged cannot have run and
	// exited before it is counted.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	before := runtime.NumGoroutine()
	a.StateChanged(streamState("pods", wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false))
	a.StateChanged(streamState("pods", wgwatch.PhaseReplaying, wgwatch.ReasonExpiredResourceVersion, false))
	if n := runtime.NumGoroutine() - before; n != 0 {
		t.Errorf("StateChanged with no OnChange started %d goroutines, want 0", n)
	}
	// The gates are still current.
	if g := a.Gates(ownerA); g != nil {
		t.Errorf("Gates(unknown) = %v", g)
	}
	if g := a.Gates(types.NamespacedName{Namespace: "ns", Name: "o1"}); len(g) != 1 || g[0].Reason != string(wgwatch.ReasonExpiredResourceVersion) {
		t.Errorf("Gates(o1) = %+v, want the replaying stream", g)
	}
}
