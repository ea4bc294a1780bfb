package readiness_test

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// BenchmarkAccumulatorStateChanged is the cost, on the stream's goroutine,
// of one state change of a stream that many owners track: what a stream
// pays before it goes on delivering. The delivery goroutine evaluates the
// owners meanwhile, on another core.
func BenchmarkAccumulatorStateChanged(b *testing.B) {
	for _, owners := range []int{1, 20000} {
		b.Run(fmt.Sprintf("owners=%d", owners), func(b *testing.B) {
			a, err := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{OnChange: func(types.NamespacedName) {}})
			if err != nil {
				b.Fatal(err)
			}
			for i := range owners {
				a.Track(types.NamespacedName{Namespace: "ns", Name: fmt.Sprint("o", i)}, "shared", fmt.Sprint("own", i))
			}
			states := []wgwatch.State{
				{Stream: "shared", Phase: wgwatch.PhaseReplaying, Reason: wgwatch.ReasonExpiredResourceVersion, Message: "replaying"},
				{Stream: "shared", Phase: wgwatch.PhaseStreaming, Reason: wgwatch.ReasonWatching, Message: "live"},
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				a.StateChanged(states[i%2])
			}
		})
	}
}

// BenchmarkAccumulatorApply is the cost of one owner's reconcile: its
// gates rolled up onto its conditions (two streams, one gate of its own),
// with nothing to change.
func BenchmarkAccumulatorApply(b *testing.B) {
	for _, owners := range []int{1, 20000} {
		b.Run(fmt.Sprintf("owners=%d", owners), func(b *testing.B) {
			a, err := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{})
			if err != nil {
				b.Fatal(err)
			}
			for i := range owners {
				a.Track(types.NamespacedName{Namespace: "ns", Name: fmt.Sprint("o", i)}, "shared", "other")
			}
			a.StateChanged(wgwatch.State{Stream: "shared", Phase: wgwatch.PhaseStreaming, Reason: wgwatch.ReasonWatching})
			a.StateChanged(wgwatch.State{Stream: "other", Phase: wgwatch.PhaseStreaming, Reason: wgwatch.ReasonWatching})
			key := types.NamespacedName{Namespace: "ns", Name: "o0"}
			a.SetGate(key, wgreadiness.Established("Path", "Accepted", "the path is accepted"))
			now := time.Unix(1e9, 0)
			var conds []metav1.Condition
			a.Apply(key, &conds, 1, now)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if a.Apply(key, &conds, 1, now) {
					b.Fatal("Apply changed the conditions")
				}
			}
		})
	}
}
