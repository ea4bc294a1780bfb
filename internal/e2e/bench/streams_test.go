package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// Group 3: many idle streams over one client.
//
// Each round starts manyStreams consumers of one namespace holding one
// ConfigMap, all through one new typed clientset (protobuf, its default;
// one HTTP/2 connection pool), waits until every one is idle on an open
// watch (a stream or an instrumented informer Streaming, that is live; a
// plain informer's handler has its one initial add), and measures this
// process against what it was before they started: goroutines, live heap
// and goroutine stacks (after forced collections), per consumer, and the
// TCP connections the clientset kept open (conns) and dialed (dials).
//
//   - stream: a graded wgwatch.Stream with a no-op handler.
//   - stream-uncompressed: the same over a client with DisableCompression.
//     kube-apiserver 1.37 gzips a watch-list's response when the client
//     accepts it, and the watch goes on after the replay with the same
//     response, so each idle watch keeps a gzip reader (about 37 KiB).
//   - informer: a SharedIndexInformer with one handler (its store holds
//     the one object).
//   - instrumented: the same informer over wgwatch.Instrument.
//
// BenchmarkManyStreams runs against kube-apiserver's defaults, which let a
// client have 100 streams per HTTP/2 connection (its
// --http2-max-streams-per-connection is 0: Go's HTTP/2 server default,
// which the apiserver sets to 100); Go's HTTP/2 client then dials another
// connection for every 100 watches. BenchmarkManyStreamsOneConnection
// runs with --http2-max-streams-per-connection=2000.
const (
	manyStreams = 1000
	manyNS      = "idle"
)

type manyKind struct {
	name string
	// uncompressed sets DisableCompression in the client's config.
	uncompressed bool
	start        func(b *testing.B, c *client, i int, live func()) (stop func())
}

var manyKinds = []manyKind{
	{name: "stream", start: startIdleStream},
	{name: "stream-uncompressed", uncompressed: true, start: startIdleStream},
	{name: "informer", start: func(b *testing.B, c *client, i int, live func()) func() {
		return runIdleInformer(b, typedLW(c, manyNS), live, true)
	}},
	{name: "instrumented", start: func(b *testing.B, c *client, i int, live func()) func() {
		ilw, err := wgwatch.Instrument(typedLW(c, manyNS), wgwatch.InstrumentOptions{
			Resource: configmaps, Name: "idle-" + strconv.Itoa(i), Observer: onStreaming(live),
		})
		if err != nil {
			b.Fatalf("Instrument: %v", err)
		}
		return runIdleInformer(b, ilw, live, false)
	}},
}

func startIdleStream(b *testing.B, c *client, i int, live func()) func() {
	st, err := wgwatch.NewStream(typedLW(c, manyNS), wgwatch.HandlerFuncs{}, wgwatch.StreamOptions{
		Resource: configmaps, Name: "idle-" + strconv.Itoa(i), Observer: onStreaming(live),
	})
	if err != nil {
		b.Fatalf("NewStream: %v", err)
	}
	return runStream(b, st)
}

// onStreaming is an observer that calls live at the first Streaming.
func onStreaming(live func()) wgwatch.Observer {
	var once sync.Once
	return observerFuncs{state: func(s wgwatch.State) {
		if s.Phase == wgwatch.PhaseStreaming {
			once.Do(live)
		}
	}}
}

// observerFuncs adapts functions to a wgwatch.Observer; nil ones do nothing.
type observerFuncs struct {
	state func(wgwatch.State)
	ended func(wgwatch.SessionEnd)
}

func (o observerFuncs) StateChanged(s wgwatch.State) {
	if o.state != nil {
		o.state(s)
	}
}

func (o observerFuncs) SessionEnded(e wgwatch.SessionEnd) {
	if o.ended != nil {
		o.ended(e)
	}
}

// runIdleInformer runs an informer with one handler; with liveOnAdd it
// calls live at the handler's first initial add.
func runIdleInformer(b *testing.B, lw cache.ListerWatcher, live func(), liveOnAdd bool) func() {
	informer := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	var once sync.Once
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if liveOnAdd && isInInitialList {
				once.Do(live)
			}
		},
	})
	if err != nil {
		b.Fatalf("AddEventHandler: %v", err)
	}
	return runInformer(informer)
}

func BenchmarkManyStreams(b *testing.B) {
	benchManyStreams(b, "streams", "streams", harness.Options{}, manyKinds)
}

func BenchmarkManyStreamsOneConnection(b *testing.B) {
	benchManyStreams(b, "streams-h2max2000", "streams/h2max2000",
		harness.Options{Flags: []string{"--http2-max-streams-per-connection=2000"}}, []manyKind{manyKinds[0], manyKinds[2]})
}

func benchManyStreams(b *testing.B, group, prefix string, opts harness.Options, kinds []manyKind) {
	defer timeGroup(prefix)()
	r, _ := cluster(b, group, opts, func(r *harness.Remote) struct{} {
		c := newClient(b, r.Config(), contentProtobuf)
		defer c.Close()
		createObjects(b, c, manyNS, 1)
		return struct{}{}
	})
	for round := 1; round <= *benchRounds; round++ {
		for _, k := range rotate(kinds, round) {
			b.Run(roundName(k.name, round), func(b *testing.B) { benchMany(b, r, prefix+"/"+k.name, k) })
		}
	}
}

func benchMany(b *testing.B, r *harness.Remote, name string, k manyKind) {
	for range b.N {
		b.StopTimer()
		cfg := r.Config()
		cfg.DisableCompression = k.uncompressed
		c := newClient(b, cfg, contentProtobuf)
		if _, err := c.CoreV1().Namespaces().Get(context.Background(), manyNS, metav1.GetOptions{}); err != nil {
			b.Fatalf("get namespace: %v", err)
		}
		heap0, stack0, g0 := heapNow()
		dials0 := c.dials.Load()
		var wg sync.WaitGroup
		wg.Add(manyStreams)
		stops := make([]func(), manyStreams)
		b.StartTimer()
		start := time.Now()
		for i := range stops {
			var once sync.Once
			stops[i] = k.start(b, c, i, func() { once.Do(wg.Done) })
		}
		waitGroup(b, &wg, fmt.Sprintf("%d %ss live", manyStreams, k.name))
		started := time.Since(start)
		b.StopTimer()
		heap1, stack1, g1 := heapNow()
		dials, open := c.dials.Load()-dials0, c.open.Load()
		if *heapProfile != "" {
			writeHeapProfile(b, strings.ReplaceAll(b.Name(), "/", "-")+".pb.gz")
		}
		stopAll(stops)
		c.Close()
		n := float64(manyStreams)
		goroutines := float64(g1-g0) / n
		heap := (float64(heap1) - float64(heap0)) / n
		stack := (float64(stack1) - float64(stack0)) / n
		b.ReportMetric(goroutines, "goroutines/stream")
		b.ReportMetric(heap, "heap-B/stream")
		b.ReportMetric(stack, "stack-B/stream")
		b.ReportMetric(float64(open), "conns")
		record(name, "goroutines/stream", goroutines, "heap_B/stream", heap, "stack_B/stream", stack,
			"total_KiB/stream", (heap+stack)/1024, "conns", open, "dials", dials, "start_s", started)
		b.StartTimer()
	}
}

// stopAll calls every stop at once and waits for them all.
func stopAll(stops []func()) {
	var wg sync.WaitGroup
	for _, stop := range stops {
		wg.Go(stop)
	}
	wg.Wait()
}

// waitGroup waits for wg, failing the benchmark after waitTimeout.
func waitGroup(b *testing.B, wg *sync.WaitGroup, what string) {
	b.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(waitTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		b.Fatalf("%s: not after %v", what, waitTimeout)
	}
}
