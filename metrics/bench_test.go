package metrics_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	wgmetrics "github.com/watchgrade/watchgrade/metrics"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// objects returns n widgets with distinct UIDs, canonical UUIDs or not.
func objects(n int, uuids bool) []*metav1.ObjectMeta {
	out := make([]*metav1.ObjectMeta, n)
	for i := range out {
		uid := types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i))
		if !uuids {
			uid = types.UID(fmt.Sprintf("widget-uid-%d", i))
		}
		out[i] = object(uid, 0)
	}
	return out
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkFirstReadyMemory measures the memory the claims of 100,000 live
// objects take, in bytes per object, the objects themselves not counted.
// Each sighting is a fresh copy with its own UID string, as an informer
// delivers after every update, so a claim that kept the string would be
// charged for it.
func BenchmarkFirstReadyMemory(b *testing.B) {
	const n = 100_000
	for _, tt := range []struct {
		name  string
		uuids bool
	}{{"uuid-uids", true}, {"other-uids", false}} {
		b.Run(tt.name, func(b *testing.B) {
			objs := objects(n, tt.uuids)
			var perObject float64
			for b.Loop() {
				before := heapInUse()
				f, _ := newFirstReady(b, wgmetrics.FirstReadyOptions{})
				for _, o := range objs {
					fresh := *o
					fresh.UID = types.UID(strings.Clone(string(o.UID)))
					f.Observe(widgets, &fresh, nil)
				}
				after := heapInUse()
				if f.Claims() != n {
					b.Fatalf("Claims() = %d, want %d", f.Claims(), n)
				}
				perObject = float64(int64(after)-int64(before)) / n
			}
			runtime.KeepAlive(objs)
			b.ReportMetric(perObject, "bytes/object")
		})
	}
}

// BenchmarkFirstReadyObserve measures a sighting of an object already
// claimed, the steady state of a controller, from parallel goroutines.
func BenchmarkFirstReadyObserve(b *testing.B) {
	objs := objects(10_000, true)
	f, _ := newFirstReady(b, wgmetrics.FirstReadyOptions{})
	for _, o := range objs {
		f.Observe(widgets, o, nil)
	}
	cond := ready(metav1.ConditionUnknown)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			f.Observe(widgets, objs[i%len(objs)], cond)
			i++
		}
	})
}

// BenchmarkWatchMetrics measures one session ending and one state change,
// what a stream reports per session at most.
func BenchmarkWatchMetrics(b *testing.B) {
	m, _ := newWatchMetrics(b)
	end := wgwatch.SessionEnd{Stream: "pods", Resource: pods, Stage: wgwatch.StageStream, Duration: 40 * time.Minute,
		Verdict: wgwatch.Verdict{Outcome: wgwatch.OutcomeClosed}}
	states := []wgwatch.State{
		{Stream: "pods", Resource: pods, Phase: wgwatch.PhaseReplaying},
		{Stream: "pods", Resource: pods, Phase: wgwatch.PhaseStreaming},
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m.SessionEnded(end)
		m.StateChanged(states[i%2])
		i++
	}
}
