package bench

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// Group 1: events through the real decode path.
//
// The setup writes a span of events once: decodeObjects ConfigMaps in a
// namespace of their own, then -bench.decode.events updates of them, round
// robin, and compacts etcd. Every consumer then watches that namespace from
// the resourceVersion just before the span and stops at the span's last
// event: the same events, served from the apiserver's watch cache (etcd no
// longer has them: a watch the cache could not serve would get a 410 and
// fail the benchmark), with no writer running. Each consumer runs in turn,
// JSON and protobuf, once per round; between runs the heap is collected.
//
// The consumers, each handing every event to the same do-nothing sink:
//
//   - stream: a graded wgwatch.Stream started from the cursor.
//   - watchloop: a plain loop over the typed client's Watch that keeps the
//     cursor (meta.Accessor on every event) and selects on its context.
//   - retrywatcher: client-go's RetryWatcher from the cursor.
//   - informer: a SharedIndexInformer (its store, DeltaFIFO and handler
//     notification); its LIST is an empty list at the cursor, so it
//     watches the span as it would after a LIST.
//   - instrumented: the same informer over wgwatch.Instrument.
//
// cpu_ns/event is this process's CPU time (getrusage: user and system,
// every goroutine, the garbage collector included) from the consumer's
// start to its last event, over the number of events; the servers run in
// another process. allocs/event and B/event are heap allocations over the
// same window; events/s is the rate over its wall time.
var decodeEvents = flag.Int("bench.decode.events", 30000, "events in BenchmarkDecode's span")

const (
	decodeNS      = "decode"
	decodeObjects = 100
)

// span is the setup's span of events: n updates after resourceVersion
// from, the last at last.
type span struct {
	from, last string
	n          int
}

func writeSpan(b *testing.B, r *harness.Remote) span {
	b.Helper()
	c := newClient(b, r.Config(), contentProtobuf)
	defer c.Close()
	ctx := context.Background()
	createObjects(b, c, decodeNS, decodeObjects)
	list, err := c.CoreV1().ConfigMaps(decodeNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatalf("list: %v", err)
	}
	n := *decodeEvents
	start := time.Now()
	last := parallel(b, n, 8, func(i int) (string, error) {
		cm, err := c.CoreV1().ConfigMaps(decodeNS).Update(ctx, configMap(decodeNS, objectName(i%decodeObjects), i+1), metav1.UpdateOptions{})
		if err != nil {
			return "", err
		}
		return cm.ResourceVersion, nil
	})
	wrote := time.Since(start)
	rev, err := r.Compact()
	if err != nil {
		b.Fatalf("compact: %v", err)
	}
	capacity := watchCacheCapacity(b, c)
	if capacity >= 0 && capacity < n {
		b.Fatalf("the watch cache holds %d configmap events, fewer than the span's %d", capacity, n)
	}
	record("decode/setup", "events", n, "objects", decodeObjects, "write_s", wrote, "compacted_at", rev, "watch_cache_capacity", capacity)
	return span{from: list.ResourceVersion, last: strconv.FormatInt(last, 10), n: n}
}

// A decodeConsumer starts consuming the span into s and returns a function
// that stops it and waits until it has stopped.
type decodeConsumer struct {
	name  string
	start func(b *testing.B, c *client, sp span, s *sink) (stop func())
}

var decodeConsumers = []decodeConsumer{
	{"stream", startStream},
	{"watchloop", startWatchLoop},
	{"retrywatcher", startRetryWatcher},
	{"informer", func(b *testing.B, c *client, sp span, s *sink) func() {
		return startInformer(b, listOnly{typedLW(c, decodeNS), sp.from}, s, sp)
	}},
	{"instrumented", func(b *testing.B, c *client, sp span, s *sink) func() {
		ilw, err := wgwatch.Instrument(listOnly{typedLW(c, decodeNS), sp.from}, wgwatch.InstrumentOptions{Resource: configmaps, Name: "decode"})
		if err != nil {
			b.Fatalf("Instrument: %v", err)
		}
		return startInformer(b, ilw, s, sp)
	}},
}

func BenchmarkDecode(b *testing.B) {
	defer timeGroup("decode")()
	r, sp := cluster(b, "decode", harness.Options{}, func(r *harness.Remote) span { return writeSpan(b, r) })
	type encoding struct {
		name string
		c    *client
	}
	var encs []encoding
	for _, e := range []struct{ name, contentType string }{{"json", contentJSON}, {"protobuf", contentProtobuf}} {
		c := newClient(b, r.Config(), e.contentType)
		defer c.Close()
		// Warm the connection (TLS, HTTP/2) so no consumer pays for it.
		if _, err := c.CoreV1().Namespaces().Get(context.Background(), decodeNS, metav1.GetOptions{}); err != nil {
			b.Fatalf("get namespace: %v", err)
		}
		encs = append(encs, encoding{e.name, c})
		group := "decode/" + e.name
		defineRatio(group+"/ratio", "stream/watchloop", "cpu_ns/event", group+"/stream", group+"/watchloop")
		defineRatio(group+"/ratio", "instrumented/informer", "cpu_ns/event", group+"/instrumented", group+"/informer")
		defineRatio(group+"/ratio", "retrywatcher/watchloop", "cpu_ns/event", group+"/retrywatcher", group+"/watchloop")
		defineRatio(group+"/ratio", "informer/watchloop", "cpu_ns/event", group+"/informer", group+"/watchloop")
		defineRatio(group+"/ratio", "instrumented/informer_allocs", "allocs/event", group+"/instrumented", group+"/informer")
	}
	for round := 1; round <= *benchRounds; round++ {
		for _, e := range encs {
			for _, dc := range rotate(decodeConsumers, round) {
				name := e.name + "/" + dc.name
				b.Run(roundName(name, round), func(b *testing.B) { benchDecode(b, e.c, sp, "decode/"+name, dc) })
			}
		}
	}
}

func benchDecode(b *testing.B, c *client, sp span, name string, dc decodeConsumer) {
	b.ReportAllocs()
	var total usage
	for range b.N {
		b.StopTimer()
		runtime.GC()
		s := newSink(sp.n)
		b.StartTimer()
		m := startMeter(b)
		stop := dc.start(b, c, sp, s)
		s.wait(b, dc.name)
		u := m.stop(b)
		b.StopTimer()
		stop()
		checkSpan(b, dc.name, sp, s)
		total.add(u)
		b.StartTimer()
	}
	events := float64(b.N * sp.n)
	cpu := float64(total.CPU.Nanoseconds()) / events
	allocs := float64(total.Allocs) / events
	bytes := float64(total.Bytes) / events
	rate := events / total.Wall.Seconds()
	b.ReportMetric(cpu, "cpu-ns/event")
	b.ReportMetric(allocs, "allocs/event")
	b.ReportMetric(bytes, "B/event")
	b.ReportMetric(rate, "events/s")
	record(name, "cpu_ns/event", cpu, "allocs/event", allocs, "B/event", bytes, "events/s", rate)
}

// checkSpan fails the benchmark unless the consumer saw exactly the span.
func checkSpan(b *testing.B, what string, sp span, s *sink) {
	b.Helper()
	if s.seen != sp.n {
		b.Fatalf("%s saw %d events, want %d", what, s.seen, sp.n)
	}
	if s.last == nil {
		return // an informer: checked through its store
	}
	m, err := meta.Accessor(s.last)
	if err != nil {
		b.Fatal(err)
	}
	if got := m.GetResourceVersion(); got != sp.last {
		b.Fatalf("%s: last event at resourceVersion %s, want %s", what, got, sp.last)
	}
}

func startStream(b *testing.B, c *client, sp span, s *sink) func() {
	h := wgwatch.HandlerFuncs{EventFunc: func(_ context.Context, ev apiwatch.Event) error {
		s.take(ev.Object)
		return nil
	}}
	st, err := wgwatch.NewStream(typedLW(c, decodeNS), h, wgwatch.StreamOptions{Resource: configmaps, Name: "decode", Cursor: sp.from})
	if err != nil {
		b.Fatalf("NewStream: %v", err)
	}
	return runStream(b, st)
}

func startWatchLoop(b *testing.B, c *client, sp span, s *sink) func() {
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.CoreV1().ConfigMaps(decodeNS).Watch(ctx, metav1.ListOptions{ResourceVersion: sp.from, AllowWatchBookmarks: true})
	if err != nil {
		b.Fatalf("Watch: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			cursor := sp.from
			results := w.ResultChan()
			for {
				select {
				case <-ctx.Done():
					return nil
				case ev, ok := <-results:
					if !ok {
						return fmt.Errorf("watch closed at %s", cursor)
					}
					switch ev.Type {
					case apiwatch.Added, apiwatch.Modified, apiwatch.Deleted:
						m, err := meta.Accessor(ev.Object)
						if err != nil {
							return err
						}
						cursor = m.GetResourceVersion()
						s.take(ev.Object)
					case apiwatch.Error:
						return fmt.Errorf("ERROR event at %s: %v", cursor, ev.Object)
					}
				}
			}
		}()
	}()
	return func() {
		cancel()
		w.Stop()
		if err := <-done; err != nil {
			b.Errorf("watch loop: %v", err)
		}
	}
}

func startRetryWatcher(b *testing.B, c *client, sp span, s *sink) func() {
	ctx, cancel := context.WithCancel(context.Background())
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, sp.from, typedLW(c, decodeNS))
	if err != nil {
		b.Fatalf("NewRetryWatcher: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range rw.ResultChan() {
			switch ev.Type {
			case apiwatch.Added, apiwatch.Modified, apiwatch.Deleted:
				s.take(ev.Object)
			}
		}
	}()
	return func() {
		cancel()
		rw.Stop()
		<-rw.Done()
		<-done
	}
}

// startInformer runs a SharedIndexInformer over lw with one handler that
// hands every add and update to s.
func startInformer(b *testing.B, lw cache.ListerWatcher, s *sink, sp span) func() {
	informer := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.take(nil) },
		UpdateFunc: func(_, obj any) { s.take(nil) },
	})
	if err != nil {
		b.Fatalf("AddEventHandler: %v", err)
	}
	stop := runInformer(informer)
	return func() {
		stop()
		checkStore(b, informer, sp)
	}
}

// checkStore fails unless the informer's store holds every object and the
// span's last write. (The last handler call need not be the last event:
// the DeltaFIFO hands out an object's queued changes together.)
func checkStore(b *testing.B, informer cache.SharedIndexInformer, sp span) {
	b.Helper()
	objs := informer.GetStore().List()
	if len(objs) != decodeObjects {
		b.Fatalf("informer store holds %d objects, want %d", len(objs), decodeObjects)
	}
	var latest string
	for _, o := range objs {
		if rv := o.(*corev1.ConfigMap).ResourceVersion; rv == sp.last {
			latest = rv
		}
	}
	if latest == "" {
		b.Fatalf("informer store lacks the span's last write (resourceVersion %s)", sp.last)
	}
}
