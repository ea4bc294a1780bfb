package readiness_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newAccumulator(t *testing.T, opts wgreadiness.AccumulatorOptions) *wgreadiness.Accumulator {
	t.Helper()
	a, err := wgreadiness.NewAccumulator(opts)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// calls records OnChange calls.
type calls struct {
	mu   sync.Mutex
	keys []types.NamespacedName
}

func (c *calls) add(k types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys = append(c.keys, k)
}

// take returns the calls so far and forgets them.
func (c *calls) take() []types.NamespacedName {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.keys
	c.keys = nil
	return k
}

var (
	ownerA = types.NamespacedName{Namespace: "ns", Name: "a"}
	ownerB = types.NamespacedName{Namespace: "ns", Name: "b"}
)

func TestAccumulatorOnChange(t *testing.T) {
	type step struct {
		do   func(a *wgreadiness.Accumulator)
		want []types.NamespacedName
	}
	replaying := streamState("pods", wgwatch.PhaseReplaying, wgwatch.ReasonInitialSync, false)
	streaming := streamState("pods", wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false)
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "tracking a new owner, then its stream's states",
			steps: []step{
				{func(a *wgreadiness.Accumulator) { a.Track(ownerA, "pods") }, []types.NamespacedName{ownerA}},
				{func(a *wgreadiness.Accumulator) { a.Track(ownerA, "pods") }, nil},
				{func(a *wgreadiness.Accumulator) { a.StateChanged(replaying) }, []types.NamespacedName{ownerA}},
				{func(a *wgreadiness.Accumulator) { a.StateChanged(replaying) }, nil},
				{func(a *wgreadiness.Accumulator) { a.StateChanged(streaming) }, []types.NamespacedName{ownerA}},
			},
		},
		{
			name: "a stream no owner tracks calls nobody",
			steps: []step{
				{func(a *wgreadiness.Accumulator) { a.StateChanged(replaying) }, nil},
				{func(a *wgreadiness.Accumulator) { a.SessionEnded(wgwatch.SessionEnd{Stream: "pods"}) }, nil},
			},
		},
		{
			name: "a shared stream calls every owner tracking it",
			steps: []step{
				{func(a *wgreadiness.Accumulator) { a.StateChanged(streaming) }, nil},
				{func(a *wgreadiness.Accumulator) { a.Track(ownerA, "pods") }, []types.NamespacedName{ownerA}},
				{func(a *wgreadiness.Accumulator) { a.Track(ownerB, "pods") }, []types.NamespacedName{ownerB}},
				{func(a *wgreadiness.Accumulator) { a.StateChanged(replaying) }, []types.NamespacedName{ownerA, ownerB}},
			},
		},
		{
			name: "a change that leaves the verdict alone calls nobody",
			steps: []step{
				{func(a *wgreadiness.Accumulator) { a.Track(ownerA, "pods") }, []types.NamespacedName{ownerA}},
				{func(a *wgreadiness.Accumulator) { a.SetGate(ownerA, stalledGate) }, []types.NamespacedName{ownerA}},
				// The stream is not the worst gate: Ready does not move.
				{func(a *wgreadiness.Accumulator) { a.StateChanged(streaming) }, nil},
				{func(a *wgreadiness.Accumulator) { a.RemoveGate(ownerA, "nope") }, nil},
				{func(a *wgreadiness.Accumulator) { a.RemoveGate(ownerA, stalledGate.Name) }, []types.NamespacedName{ownerA}},
			},
		},
		{
			name: "removing a stream re-evaluates its owners",
			steps: []step{
				{func(a *wgreadiness.Accumulator) { a.StateChanged(streaming) }, nil},
				{func(a *wgreadiness.Accumulator) { a.Track(ownerA, "pods", "nodes") }, []types.NamespacedName{ownerA}},
				{func(a *wgreadiness.Accumulator) { a.RemoveStream("nodes") }, []types.NamespacedName{ownerA}},
				{func(a *wgreadiness.Accumulator) { a.RemoveStream("nodes") }, nil},
			},
		},
		{
			name: "a removed owner is not called",
			steps: []step{
				{func(a *wgreadiness.Accumulator) { a.Track(ownerA, "pods") }, []types.NamespacedName{ownerA}},
				{func(a *wgreadiness.Accumulator) { a.RemoveOwner(ownerA); a.StateChanged(replaying) }, nil},
				{func(a *wgreadiness.Accumulator) { a.RemoveOwner(ownerA) }, nil},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var got calls
				a := newAccumulator(t, wgreadiness.AccumulatorOptions{OnChange: got.add})
				for i, s := range tt.steps {
					s.do(a)
					synctest.Wait()
					if diff := cmp.Diff(s.want, got.take()); diff != "" {
						t.Errorf("step %d: OnChange calls mismatch (-want +got):\n%s", i, diff)
					}
				}
			})
		})
	}
}

// TestAccumulatorDoesNotBlock: a stuck OnChange never blocks the observer
// or the other methods, and changes to a waiting owner are coalesced.
func TestAccumulatorDoesNotBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var got calls
		a := newAccumulator(t, wgreadiness.AccumulatorOptions{OnChange: func(k types.NamespacedName) {
			got.add(k)
			<-release
		}})
		a.Track(ownerA, "pods")
		synctest.Wait() // OnChange(ownerA) is now stuck.
		for i := range 10 {
			phase := wgwatch.PhaseReplaying
			if i%2 == 1 {
				phase = wgwatch.PhaseStreaming
			}
			a.StateChanged(streamState("pods", phase, wgwatch.ReasonInitialSync, false))
			a.Track(ownerB, "pods", fmt.Sprint("s", i))
		}
		if gates := a.Gates(ownerA); len(gates) != 1 {
			t.Errorf("Gates(ownerA) = %v, want one gate", gates)
		}
		close(release)
		synctest.Wait()
		// ownerB was queued by Track at once; ownerA's new verdict is found
		// by the delivery goroutine, after the stuck call.
		want := []types.NamespacedName{ownerA, ownerB, ownerA}
		if diff := cmp.Diff(want, got.take()); diff != "" {
			t.Errorf("OnChange calls mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestAccumulatorGatesAndApply(t *testing.T) {
	a := newAccumulator(t, wgreadiness.AccumulatorOptions{})
	a.StateChanged(streamState("pods", wgwatch.PhaseBlocked, wgwatch.ReasonForbidden, true))
	a.Track(ownerA, "pods", "nodes")
	a.SetGate(ownerA, wgreadiness.Gate{Name: "Path", Level: wgreadiness.LevelEstablished, Reason: "Accepted", Stream: true})

	want := []wgreadiness.Gate{
		{Name: "pods", Level: wgreadiness.LevelStalled, Reason: "Forbidden", Message: "Blocked Forbidden", Stream: true},
		// Not reported yet, within its start grace.
		{Name: "nodes", Level: wgreadiness.LevelProgressing, Reason: "Starting", Message: "the stream has not reported yet", Stream: true, Starting: true, Unconfirmed: true},
		{Name: "Path", Level: wgreadiness.LevelEstablished, Reason: "Accepted"},
	}
	if diff := cmp.Diff(want, a.Gates(ownerA)); diff != "" {
		t.Errorf("Gates() mismatch (-want +got):\n%s", diff)
	}
	if got := a.Gates(ownerB); got != nil {
		t.Errorf("Gates(unknown) = %v, want nil", got)
	}

	var conds []metav1.Condition
	if !a.Apply(ownerA, &conds, gen, time.Unix(1e9, 0)) {
		t.Fatalf("Apply() = false, want true")
	}
	wantConds := []metav1.Condition{
		cond("Ready", metav1.ConditionFalse, "Forbidden", "pods: Blocked Forbidden"),
		cond("Stalled", metav1.ConditionTrue, "Forbidden", "pods: Blocked Forbidden"),
	}
	if diff := cmp.Diff(wantConds, conds, ignoreTime); diff != "" {
		t.Errorf("Apply() mismatch (-want +got):\n%s", diff)
	}
}

// TestAccumulatorConcurrent is for the race detector.
// TestAccumulatorConcurrent runs every method from several goroutines at
// once (for the race detector) and then checks what the accumulator
// promises whatever the scheduling was: OnChange calls never overlap, and
// once the storm is over every owner still tracked has been told of its
// verdict, and one more change of an owner's verdict is delivered exactly
// once. (Whether a call is still delivered for an owner removed in the
// middle of the storm depends on scheduling, so it is not asserted.)
func TestAccumulatorConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got calls
		var inFlight, overlaps atomic.Int32
		onChange := func(k types.NamespacedName) {
			if inFlight.Add(1) > 1 {
				overlaps.Add(1)
			}
			got.add(k)
			inFlight.Add(-1)
		}
		a := newAccumulator(t, wgreadiness.AccumulatorOptions{OnChange: onChange})
		var wg sync.WaitGroup
		phases := wgwatch.Phases()
		owners := []types.NamespacedName{{Name: "o0"}, {Name: "o1"}, {Name: "o2"}}
		for w := range 8 {
			wg.Go(func() {
				key := owners[w%len(owners)]
				for i := range 200 {
					stream := fmt.Sprint("s", i%4)
					switch i % 6 {
					case 0:
						a.Track(key, stream, "s0")
					case 1:
						a.SetGate(key, wgreadiness.Progressing(fmt.Sprint("g", i%2), "Waiting", "w"))
					case 2:
						a.Gates(key)
					case 3:
						a.RemoveStream(stream)
					case 4:
						if i%30 == 4 {
							a.RemoveOwner(key)
						}
					default:
						a.StateChanged(streamState(stream, phases[(i+w)%len(phases)], wgwatch.ReasonWatching, i%7 == 0))
					}
				}
				// Every goroutine leaves its owner tracked.
				a.Track(key, "s0")
			})
		}
		wg.Wait()
		synctest.Wait()
		if n := overlaps.Load(); n != 0 {
			t.Errorf("OnChange calls overlapped %d times, want one at a time", n)
		}
		seen := map[types.NamespacedName]bool{}
		for _, k := range got.take() {
			seen[k] = true
		}
		for _, k := range owners {
			if !seen[k] {
				t.Errorf("OnChange never called for %v, which is still tracked", k)
			}
		}
		// Quiet now: one verdict change is one call.
		a.SetGate(owners[0], wgreadiness.Stalled("late", "Broken", "b"))
		synctest.Wait()
		if diff := cmp.Diff([]types.NamespacedName{owners[0]}, got.take()); diff != "" {
			t.Errorf("OnChange after one change (-want +got):\n%s", diff)
		}
	})
}
