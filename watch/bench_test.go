package watch_test

// Benchmarks of a Stream's per-event cost against the loops a user would
// otherwise write (a raw watch.Interface, client-go's RetryWatcher), and of
// the resident cost of an idle stream.
//
//	go test -run '^$' -bench . -benchmem ./watch/
//
// Every sub-benchmark of BenchmarkEvents reads the same events from the same
// in-memory source, so the difference between them is the consumer's cost:
//
//   - The source is a cache.ListWatch whose watch is a benchFeed: one
//     producer goroutine that sends b.N pre-built events on the watch's
//     result channel, then keeps the watch open and silent until it is
//     stopped. Building the events and starting the consumer happen before
//     the timer starts; the producer sends nothing before it starts, and a
//     consumer that opens the watch on its own goroutine (Stream,
//     RetryWatcher) is held inside its Watch call until then.
//   - The events come from a ring of benchRingSize pre-built ConfigMaps,
//     alternately ADDED and MODIFIED, with increasing resourceVersions
//     within the ring. Sending allocates nothing. None of the consumers
//     compares resourceVersions, so wrapping round the ring costs nothing
//     either.
//   - Every consumer hands every event to the same do-nothing handler,
//     which only counts.
//
// The consumers: stream is a watchgrade Stream started from a cursor; raw
// is a user's `ev := <-w.ResultChan()` loop that keeps its own cursor with
// meta.Accessor; rawselect is the same loop selecting on ctx.Done() too, as
// a cancellable loop must; retrywatcher is client-go's RetryWatcher.
//
// ns/op is per event (b.N is the number of events). BenchmarkEvents uses a
// result channel of 1,024 fed by a producer goroutine that runs ahead of the
// consumer; BenchmarkEventsUnbuffered an unbuffered one, as apimachinery's
// StreamWatcher does, so that nearly every event is a goroutine hand-off;
// BenchmarkEventsPrefilled a channel that already holds all b.N events when
// the timer starts, so that no producer runs while timed.

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	watch "github.com/watchgrade/watchgrade/watch"
)

var benchResource = schema.GroupResource{Resource: "configmaps"}

// benchCursor is the resourceVersion every consumer starts from; the ring's
// resourceVersions are above it.
const benchCursor = "1"

// benchRingSize is the number of distinct pre-built events; a power of two.
const benchRingSize = 4096

// benchChanSize is the result channel capacity of BenchmarkEvents.
const benchChanSize = 1024

// benchRing returns the pre-built events: ConfigMaps cm-0 … cm-4095 at
// resourceVersions 2 … 4097, alternately ADDED and MODIFIED.
var benchRing = sync.OnceValue(func() []apiwatch.Event {
	evs := make([]apiwatch.Event, benchRingSize)
	for i := range evs {
		typ := apiwatch.Added
		if i%2 == 1 {
			typ = apiwatch.Modified
		}
		evs[i] = apiwatch.Event{Type: typ, Object: &corev1.ConfigMap{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{
				Namespace:       "default",
				Name:            "cm-" + strconv.Itoa(i),
				ResourceVersion: strconv.Itoa(i + 2),
			},
			Data: map[string]string{"key": "value"},
		}}
	}
	return evs
})

// benchLastRV is the resourceVersion of the n-th (last) event sent.
func benchLastRV(n int) string {
	ev := benchRing()[(n-1)&(benchRingSize-1)]
	m, _ := meta.Accessor(ev.Object)
	return m.GetResourceVersion()
}

// benchFeed is a watch.Interface fed by one producer goroutine: once start
// is closed it sends n events from the ring, then stays open and silent
// until Stop. The producer closes the result channel when it exits.
type benchFeed struct {
	ch       chan apiwatch.Event
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{} // closed when the producer has exited
}

// With chanSize < 0 the result channel holds all n events, sent before the
// watch is returned, and the producer sends nothing more.
func newBenchFeed(n, chanSize int, start <-chan struct{}) *benchFeed {
	prefill := chanSize < 0
	if prefill {
		chanSize = n
	}
	f := &benchFeed{
		ch:   make(chan apiwatch.Event, chanSize),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	if prefill {
		ring := benchRing()
		for i := 0; i < n; i++ {
			f.ch <- ring[i&(benchRingSize-1)]
		}
		n = 0
	}
	go f.produce(n, start)
	return f
}

func (f *benchFeed) produce(n int, start <-chan struct{}) {
	defer close(f.done)
	defer close(f.ch)
	select {
	case <-start:
	case <-f.stop:
		return
	}
	ring := benchRing()
	for i := 0; i < n; i++ {
		// A plain send, the cheapest a producer can be: every consumer
		// reads all n events, and teardown drains the channel if one
		// did not.
		f.ch <- ring[i&(benchRingSize-1)]
	}
	<-f.stop
}

func (f *benchFeed) ResultChan() <-chan apiwatch.Event { return f.ch }

func (f *benchFeed) Stop() { f.stopOnce.Do(func() { close(f.stop) }) }

// benchSource is a ListerWatcher whose first watch is a benchFeed of n
// events; any later watch is a silent feed (and fails the benchmark).
//
// With gate set, a Watch call that has built its feed waits for start
// before it returns it, so that a consumer on its own goroutine (a Stream,
// a RetryWatcher) cannot read a prefilled channel before the timer starts.
type benchSource struct {
	n, chanSize int
	gate        bool
	start       chan struct{}
	opened      atomic.Int32
	mu          sync.Mutex
	feeds       []*benchFeed
}

func newBenchSource(n, chanSize int, gate bool) *benchSource {
	return &benchSource{n: n, chanSize: chanSize, gate: gate, start: make(chan struct{})}
}

func (s *benchSource) ListerWatcher() *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (kruntime.Object, error) {
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: benchCursor}}, nil
		},
		WatchFuncWithContext: func(ctx context.Context, _ metav1.ListOptions) (apiwatch.Interface, error) {
			s.mu.Lock()
			n := s.n
			if len(s.feeds) > 0 {
				n = 0
			}
			f := newBenchFeed(n, s.chanSize, s.start)
			s.feeds = append(s.feeds, f)
			s.mu.Unlock()
			s.opened.Add(1)
			if s.gate {
				select {
				case <-s.start:
				case <-ctx.Done():
				}
			}
			return f, nil
		},
	}
}

// waitOpened yields until the first Watch call has built its feed.
func (s *benchSource) waitOpened() {
	for s.opened.Load() == 0 {
		runtime.Gosched()
	}
}

// teardown stops every feed and waits for its producer to exit. Call it
// after the consumer has stopped reading.
func (s *benchSource) teardown(b *testing.B) {
	b.Helper()
	s.mu.Lock()
	feeds := s.feeds
	s.mu.Unlock()
	for _, f := range feeds {
		f.Stop()
		for range f.ch { // unblock a producer the consumer left behind
		}
		<-f.done
	}
	if len(feeds) != 1 {
		b.Errorf("%d watches opened, want 1: the consumer reconnected", len(feeds))
	}
}

// benchHandler does nothing but count; it closes done at the n-th event.
type benchHandler struct {
	n, seen int
	done    chan struct{}
}

func newBenchHandler(n int) *benchHandler {
	return &benchHandler{n: n, done: make(chan struct{})}
}

func (h *benchHandler) Snapshot(context.Context, watch.Snapshot) error { return nil }

func (h *benchHandler) Event(_ context.Context, _ apiwatch.Event) error {
	h.seen++
	if h.seen == h.n {
		close(h.done)
	}
	return nil
}

func (h *benchHandler) check(b *testing.B) {
	b.Helper()
	if h.seen != h.n {
		b.Errorf("handler saw %d events, want %d", h.seen, h.n)
	}
}

// BenchmarkEvents: per-event cost with a buffered result channel fed by a
// producer goroutine.
func BenchmarkEvents(b *testing.B) { benchEvents(b, benchChanSize) }

// BenchmarkEventsUnbuffered: per-event cost with an unbuffered result
// channel fed by a producer goroutine, like apimachinery's StreamWatcher.
func BenchmarkEventsUnbuffered(b *testing.B) { benchEvents(b, 0) }

// BenchmarkEventsPrefilled: per-event cost when all b.N events wait in the
// result channel before the timer starts: no producer runs while timed, so
// this is the consumer's own cost (and b.N×32 bytes of channel buffer).
func BenchmarkEventsPrefilled(b *testing.B) { benchEvents(b, -1) }

func benchEvents(b *testing.B, chanSize int) {
	b.Run("stream", func(b *testing.B) { benchStream(b, chanSize, 10*time.Millisecond) })
	b.Run("stream-notlive", func(b *testing.B) { benchStream(b, chanSize, 0) })
	b.Run("raw", func(b *testing.B) { benchRaw(b, chanSize, false) })
	b.Run("rawselect", func(b *testing.B) { benchRaw(b, chanSize, true) })
	b.Run("retrywatcher", func(b *testing.B) { benchRetryWatcher(b, chanSize) })
}

// benchStream: a watchgrade Stream started from a cursor (no replay).
// With shortSession at 10 ms it is measured live, the steady state of a
// session the server keeps for 30 to 60 minutes; with 0 (the default, 1
// s) the benchmark, a second long, runs mostly before the session is
// live, when each event also reads the clock and polls the liveness
// timer: what the first second of a session costs, a resume with a
// backlog for example.
func benchStream(b *testing.B, chanSize int, shortSession time.Duration) {
	b.ReportAllocs()
	src := newBenchSource(b.N, chanSize, true)
	h := newBenchHandler(b.N)
	s, err := watch.NewStream(src.ListerWatcher(), h, watch.StreamOptions{Resource: benchResource, Cursor: benchCursor,
		Policy: watch.Policy{ShortSession: shortSession}})
	if err != nil {
		b.Fatalf("NewStream() = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx) }()
	src.waitOpened()

	b.ResetTimer()
	close(src.start)
	<-h.done
	b.StopTimer()

	cancel()
	if err := <-runErr; err != nil {
		b.Errorf("Run() = %v, want nil", err)
	}
	src.teardown(b)
	h.check(b)
	if got, want := s.Cursor(), benchLastRV(b.N); got != want {
		b.Errorf("Cursor() = %q, want %q", got, want)
	}
}

// benchRaw: the loop a user writes over a raw watch.Interface, keeping its
// own cursor. With withSelect, the loop also selects on ctx.Done(), as a
// loop that must stop when its owner is done does (and as a Stream does).
func benchRaw(b *testing.B, chanSize int, withSelect bool) {
	b.ReportAllocs()
	src := newBenchSource(b.N, chanSize, false)
	h := newBenchHandler(b.N)
	var hi watch.Handler = h // called through the interface, as a Stream does
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := src.ListerWatcher().WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: benchCursor, AllowWatchBookmarks: true})
	if err != nil {
		b.Fatalf("Watch() = %v", err)
	}
	src.waitOpened()
	cursor := benchCursor

	b.ResetTimer()
	close(src.start)
	ch := w.ResultChan()
	for i := 0; i < b.N; i++ {
		var ev apiwatch.Event
		var ok bool
		if withSelect {
			select {
			case <-ctx.Done():
				b.Fatal("context done")
			case ev, ok = <-ch:
			}
		} else {
			ev, ok = <-ch
		}
		if !ok {
			b.Fatal("result channel closed early")
		}
		switch ev.Type {
		case apiwatch.Added, apiwatch.Modified, apiwatch.Deleted:
			m, err := meta.Accessor(ev.Object)
			if err != nil {
				b.Fatalf("meta.Accessor() = %v", err)
			}
			rv := m.GetResourceVersion()
			if rv == "" {
				b.Fatal("event without resourceVersion")
			}
			if err := hi.Event(ctx, ev); err != nil {
				b.Fatalf("Event() = %v", err)
			}
			cursor = rv
		default:
			b.Fatalf("unexpected %s event", ev.Type)
		}
	}
	b.StopTimer()

	w.Stop()
	src.teardown(b)
	h.check(b)
	if want := benchLastRV(b.N); cursor != want {
		b.Errorf("cursor = %q, want %q", cursor, want)
	}
}

// benchRetryWatcher: client-go's RetryWatcher, which keeps the cursor on
// its own goroutine and forwards events on an unbuffered channel.
func benchRetryWatcher(b *testing.B, chanSize int) {
	b.ReportAllocs()
	src := newBenchSource(b.N, chanSize, true)
	h := newBenchHandler(b.N)
	var hi watch.Handler = h
	ctx := context.Background()
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, benchCursor, src.ListerWatcher())
	if err != nil {
		b.Fatalf("NewRetryWatcherWithContext() = %v", err)
	}
	src.waitOpened()

	b.ResetTimer()
	close(src.start)
	ch := rw.ResultChan()
	for i := 0; i < b.N; i++ {
		ev, ok := <-ch
		if !ok {
			b.Fatal("RetryWatcher closed early")
		}
		switch ev.Type {
		case apiwatch.Added, apiwatch.Modified, apiwatch.Deleted:
			if err := hi.Event(ctx, ev); err != nil {
				b.Fatalf("Event() = %v", err)
			}
		default:
			b.Fatalf("unexpected %s event", ev.Type)
		}
	}
	b.StopTimer()

	rw.Stop()
	<-rw.Done()
	src.teardown(b)
	h.check(b)
}

// benchIdleCounters counts, across all idle watches, how many have been
// opened, stopped, and had their result channel asked for.
type benchIdleCounters struct {
	opened, stopped, selecting atomic.Int64
}

// benchIdleWatch stays open and silent until stopped. It runs no goroutine.
type benchIdleWatch struct {
	c        *benchIdleCounters
	ch       chan apiwatch.Event
	stopOnce sync.Once
}

// ResultChan is called by a stream each time it enters its select, so the
// first call says the stream has reached its idle wait.
func (w *benchIdleWatch) ResultChan() <-chan apiwatch.Event {
	w.c.selecting.Add(1)
	return w.ch
}

func (w *benchIdleWatch) Stop() {
	w.stopOnce.Do(func() {
		close(w.ch)
		w.c.stopped.Add(1)
	})
}

func benchIdleSource(c *benchIdleCounters) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (kruntime.Object, error) {
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: benchCursor}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (apiwatch.Interface, error) {
			c.opened.Add(1)
			return &benchIdleWatch{c: c, ch: make(chan apiwatch.Event)}, nil
		},
	}
}

// benchWaitAtLeast yields until v reaches want.
func benchWaitAtLeast(b *testing.B, v *atomic.Int64, want int64, what string) {
	b.Helper()
	for i := 0; v.Load() < want; i++ {
		if i == 50_000_000 {
			b.Fatalf("%s: %d, want %d", what, v.Load(), want)
		}
		runtime.Gosched()
	}
}

func benchHeap() (heap, stack uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.StackInuse
}

// BenchmarkIdleStreams: the resident cost of 1,000 streams whose watches
// are open and silent. Each op starts 1,000 streams from a cursor, waits
// until every one is parked on its watch, measures, then stops them all and
// checks that every Run returned and every watch was stopped.
//
// goroutines/stream counts the goroutine that calls Run (the fake watch has
// none; a real watch adds its decoder's). B/stream is live heap after GC:
// the Stream, its watch and timer, and the closure that starts Run.
// stack-B/stream is goroutine stack in use, not part of B/stream.
func BenchmarkIdleStreams(b *testing.B) {
	const n = 1000
	b.ReportAllocs()
	var goroutines, heapBytes, stackBytes float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		var c benchIdleCounters
		lws := make([]*cache.ListWatch, n)
		for j := range lws {
			lws[j] = benchIdleSource(&c)
		}
		streams := make([]*watch.Stream, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		ctx, cancel := context.WithCancel(context.Background())
		g0 := runtime.NumGoroutine()
		heap0, stack0 := benchHeap()
		b.StartTimer()

		for j := range streams {
			s, err := watch.NewStream(lws[j], watch.HandlerFuncs{}, watch.StreamOptions{
				Resource: benchResource,
				Name:     "configmaps-" + strconv.Itoa(j),
				Cursor:   benchCursor,
			})
			if err != nil {
				b.Fatalf("NewStream() = %v", err)
			}
			streams[j] = s
			wg.Go(func() { errs[j] = s.Run(ctx) })
		}
		benchWaitAtLeast(b, &c.opened, n, "watches opened")
		benchWaitAtLeast(b, &c.selecting, n, "streams waiting")

		b.StopTimer()
		g1 := runtime.NumGoroutine()
		heap1, stack1 := benchHeap()
		goroutines += float64(g1-g0) / n
		heapBytes += (float64(heap1) - float64(heap0)) / n
		stackBytes += (float64(stack1) - float64(stack0)) / n
		b.StartTimer()

		cancel()
		wg.Wait()
		b.StopTimer()
		for j, err := range errs {
			if err != nil {
				b.Fatalf("stream %d: Run() = %v, want nil", j, err)
			}
		}
		if got := c.stopped.Load(); got != n {
			b.Fatalf("%d watches stopped, want %d", got, n)
		}
		if got := c.opened.Load(); got != n {
			b.Fatalf("%d watches opened, want %d", got, n)
		}
		for k := 0; runtime.NumGoroutine() > g0; k++ {
			if k == 50_000_000 {
				b.Fatalf("%d goroutines after teardown, want %d", runtime.NumGoroutine(), g0)
			}
			runtime.Gosched()
		}
		runtime.KeepAlive(streams)
		b.StartTimer()
	}
	b.ReportMetric(goroutines/float64(b.N), "goroutines/stream")
	b.ReportMetric(heapBytes/float64(b.N), "B/stream")
	b.ReportMetric(stackBytes/float64(b.N), "stack-B/stream")
}
