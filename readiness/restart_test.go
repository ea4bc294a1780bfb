package readiness_test

import (
	"errors"
	"fmt"
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

// persistedReady is what a controller's previous process wrote: the owner
// established at generation gen.
func persistedReady() []metav1.Condition {
	return []metav1.Condition{{
		Type: wgreadiness.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: gen,
		Reason: wgreadiness.ReasonEstablished, Message: "all gates are established",
		LastTransitionTime: metav1.NewTime(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)),
	}}
}

// A controller restart, wired as the README says: a new accumulator, the
// owner tracked again, its three streams starting over and established one
// after another, the owner reconciled after each change; the last resumes
// from a persisted cursor that expired while the controller was down, so
// its first replay is ExpiredResourceVersion, not InitialSync. The persisted
// conditions stand byte for byte: no status write, so no Event, and
// kstatus and kubectl wait never see the owner InProgress.
func TestRestartWritesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got calls
		a := newAccumulator(t, wgreadiness.AccumulatorOptions{OnChange: got.add})
		conds := persistedReady()
		before := slices.Clone(conds)
		reconcile := func(step string) {
			t.Helper()
			if a.Apply(ownerA, &conds, gen, time.Now()) {
				t.Errorf("%s: Apply() changed the conditions to %+v, want them as they were", step, conds)
			}
		}
		// Apply before Track: the owner is not known yet.
		reconcile("before Track")
		a.Track(ownerA, "configmaps", "secrets", "widgets")
		reconcile("tracked, no stream reported")
		streams := []string{"configmaps", "secrets", "widgets"}
		for _, s := range streams {
			a.StateChanged(streamState(s, wgwatch.PhaseStarting, wgwatch.ReasonStarting, false))
		}
		reconcile("every stream Starting")
		for i, s := range streams {
			time.Sleep(2 * time.Second)
			replay := wgwatch.ReasonInitialSync
			if s == "widgets" {
				replay = wgwatch.ReasonExpiredResourceVersion
			}
			a.StateChanged(streamState(s, wgwatch.PhaseReplaying, replay, false))
			reconcile(fmt.Sprintf("%s syncing", s))
			a.StateChanged(streamState(s, wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false))
			synctest.Wait()
			reconcile(fmt.Sprintf("%d of 3 established", i+1))
		}
		if diff := cmp.Diff(before, conds); diff != "" {
			t.Errorf("conditions after the restart (-before +after):\n%s", diff)
		}
		// The grace ends after every stream is established: nothing more.
		time.Sleep(wgreadiness.DefaultStartGrace)
		synctest.Wait()
		reconcile("after the grace")
	})
}

// The grace is not a blind spot: a stream that is still syncing when it
// ends makes the owner Reconciling, and the accumulator says so by
// requeuing the owner at that moment.
func TestRestartGraceEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got calls
		a := newAccumulator(t, wgreadiness.AccumulatorOptions{OnChange: got.add})
		conds := persistedReady()
		a.Track(ownerA, "configmaps")
		a.StateChanged(streamState("configmaps", wgwatch.PhaseReplaying, wgwatch.ReasonInitialSync, false))
		synctest.Wait()
		got.take()
		if a.Apply(ownerA, &conds, gen, time.Now()) {
			t.Fatalf("Apply() within the grace changed the conditions")
		}
		time.Sleep(wgreadiness.DefaultStartGrace)
		synctest.Wait()
		if diff := cmp.Diff([]types.NamespacedName{ownerA}, got.take()); diff != "" {
			t.Errorf("OnChange when the grace ended (-want +got):\n%s", diff)
		}
		if !a.Apply(ownerA, &conds, gen, time.Now()) {
			t.Fatalf("Apply() after the grace changed nothing, want Reconciling")
		}
		want := []metav1.Condition{
			cond("Ready", metav1.ConditionFalse, "InitialSync", "configmaps: Replaying InitialSync"),
			cond("Reconciling", metav1.ConditionTrue, "InitialSync", "configmaps: Replaying InitialSync"),
		}
		if diff := cmp.Diff(want, conds, ignoreTime); diff != "" {
			t.Errorf("conditions after the grace (-want +got):\n%s", diff)
		}
	})
}

// What the grace does not hide: a stream that fails during it, a new
// generation (the controller has work to do), an owner never established.
func TestRestartGraceHoldsOnlyAStartingOwner(t *testing.T) {
	tests := []struct {
		name       string
		state      wgwatch.State
		conds      []metav1.Condition
		generation int64
		wantReady  metav1.ConditionStatus
		wantReason string
	}{
		{"a stream blocked during the grace", streamState("s", wgwatch.PhaseBlocked, wgwatch.ReasonForbidden, true),
			persistedReady(), gen, metav1.ConditionFalse, "Forbidden"},
		{"a stream blocked, not yet needing a human", streamState("s", wgwatch.PhaseBlocked, wgwatch.ReasonConnectionFailed, false),
			persistedReady(), gen, metav1.ConditionFalse, "ConnectionFailed"},
		{"a new generation", streamState("s", wgwatch.PhaseReplaying, wgwatch.ReasonInitialSync, false),
			persistedReady(), gen + 1, metav1.ConditionFalse, "InitialSync"},
		{"never written: the first write waits for the stream", streamState("s", wgwatch.PhaseReplaying, wgwatch.ReasonInitialSync, false),
			nil, gen, "", ""},
		{"established before, Ready=False", streamState("s", wgwatch.PhaseReplaying, wgwatch.ReasonInitialSync, false),
			[]metav1.Condition{cond("Ready", metav1.ConditionFalse, "Forbidden", "x")}, gen, metav1.ConditionFalse, "InitialSync"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAccumulator(t, wgreadiness.AccumulatorOptions{})
			a.Track(ownerA, "s")
			a.StateChanged(tt.state)
			conds := slices.Clone(tt.conds)
			a.Apply(ownerA, &conds, tt.generation, time.Now())
			var ready *metav1.Condition
			for i := range conds {
				if conds[i].Type == wgreadiness.ConditionReady {
					ready = &conds[i]
				}
			}
			switch {
			case tt.wantReady == "":
				if ready != nil {
					t.Errorf("Ready = %+v, want none", ready)
				}
			case ready == nil || ready.Status != tt.wantReady || ready.Reason != tt.wantReason:
				t.Errorf("Ready = %+v, want %s/%s", ready, tt.wantReady, tt.wantReason)
			}
		})
	}
}

// TestRestartDuringAFlapNamesTheFlap: after a restart, an owner Ready
// before it whose one stream flaps while another is still replaying is
// written Ready=False for the flap, not as starting over (InitialSync),
// which would be a second write and a second Event once the replay ends.
func TestRestartDuringAFlapNamesTheFlap(t *testing.T) {
	a := newAccumulator(t, wgreadiness.AccumulatorOptions{})
	a.Track(ownerA, "a", "b")
	a.StateChanged(streamState("a", wgwatch.PhaseReplaying, wgwatch.ReasonInitialSync, false))
	a.StateChanged(streamState("b", wgwatch.PhaseBlocked, wgwatch.ReasonFlapping, false))
	conds := persistedReady()
	a.Apply(ownerA, &conds, gen, time.Now())
	ready := meta.FindStatusCondition(conds, wgreadiness.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != string(wgwatch.ReasonFlapping) {
		t.Errorf("Ready = %+v, want False/Flapping", ready)
	}
}

func TestNewAccumulatorRefusesBadOptions(t *testing.T) {
	for _, opts := range []wgreadiness.Options{
		{StreamsCondition: "Ready"},
		{StreamsCondition: "Stalled"},
		{StreamsCondition: "not a type!"},
		{MessageLimit: 12},
		{MessageLimit: 40000},
		{Empty: "Maybe"},
		{MaxListed: -1},
	} {
		if _, err := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{Rollup: opts}); !errors.Is(err, wgreadiness.ErrInvalidOptions) {
			t.Errorf("NewAccumulator(%+v) = %v, want ErrInvalidOptions", opts, err)
		}
	}
	if _, err := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{Rollup: wgreadiness.Options{StreamsCondition: "StreamsRunning", MessageLimit: 64}}); err != nil {
		t.Errorf("NewAccumulator(valid) = %v", err)
	}
	// Rollup cannot fail: it ignores a StreamsCondition of the trio, so
	// Ready=True never sits beside Stalled=True.
	got := wgreadiness.Rollup([]wgreadiness.Gate{wgreadiness.Stalled("x", "Broken", "b")}, nil, gen, wgreadiness.Options{StreamsCondition: "Ready"})
	var types []string
	for _, c := range got {
		types = append(types, c.Type+"="+string(c.Status))
	}
	if diff := cmp.Diff([]string{"Ready=False", "Stalled=True"}, types); diff != "" {
		t.Errorf("Rollup with StreamsCondition Ready (-want +got):\n%s", diff)
	}
}

// A stream's state change costs the same whatever the number of owners
// that track it: the observer's call allocates nothing per owner (it used
// to roll up every owner, under the lock, on the stream's goroutine).
func TestStateChangedCostsTheSameForManyOwners(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAccumulator(t, wgreadiness.AccumulatorOptions{OnChange: func(types.NamespacedName) {}})
		for i := range 20000 {
			a.Track(types.NamespacedName{Namespace: "ns", Name: fmt.Sprint("o", i)}, "shared")
		}
		synctest.Wait()
		states := []wgwatch.State{
			streamState("shared", wgwatch.PhaseReplaying, wgwatch.ReasonExpiredResourceVersion, false),
			streamState("shared", wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false),
		}
		i := 0
		allocs := testing.AllocsPerRun(100, func() {
			a.StateChanged(states[i%2])
			i++
		})
		synctest.Wait()
		if allocs > 5 {
			t.Errorf("StateChanged with 20,000 owners allocates %v times, want a few whatever the owners", allocs)
		}
	})
}
