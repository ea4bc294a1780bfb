package watch_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	watch "github.com/watchgrade/watchgrade/watch"
)

// BenchmarkInformerEvents: what Instrument adds to each event an informer
// receives. Both sub-benchmarks run a client-go SharedIndexInformer (its
// reflector, DeltaFIFO, store and one counting handler) over the same
// in-memory source as BenchmarkEventsUnbuffered: b.N pre-built events sent
// by a producer goroutine on an unbuffered channel, as apimachinery's
// StreamWatcher sends what it decodes. informer reads it directly;
// instrumented reads it through Instrument's forwarding goroutine. The
// informer's LIST is an empty list at the cursor, so it watches from
// there. ns/op is per event.
func BenchmarkInformerEvents(b *testing.B) {
	b.Run("informer", func(b *testing.B) { benchInformer(b, false) })
	b.Run("instrumented", func(b *testing.B) { benchInformer(b, true) })
}

// benchListOnly hides the source's (absent) watch-list support from the
// reflector, which then lists.
type benchListOnly struct{ *cache.ListWatch }

func (benchListOnly) IsWatchListSemanticsUnSupported() bool { return true }

func benchInformer(b *testing.B, instrumented bool) {
	b.ReportAllocs()
	src := newBenchSource(b.N, 0, true)
	var lw cache.ListerWatcher = benchListOnly{src.ListerWatcher()}
	if instrumented {
		ilw, err := watch.Instrument(lw, watch.InstrumentOptions{Resource: benchResource})
		if err != nil {
			b.Fatalf("Instrument() = %v", err)
		}
		lw = ilw
	}
	informer := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	seen, done := 0, make(chan struct{})
	count := func() {
		if seen++; seen == b.N {
			close(done)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { count() },
		UpdateFunc: func(any, any) { count() },
	}); err != nil {
		b.Fatalf("AddEventHandler() = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		informer.RunWithContext(ctx)
	}()
	src.waitOpened()

	b.ResetTimer()
	close(src.start)
	<-done
	b.StopTimer()

	cancel()
	<-stopped
	src.teardown(b)
}
