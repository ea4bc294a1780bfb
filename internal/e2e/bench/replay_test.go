package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// Group 2: the replay of a large collection.
//
// The setup creates, for each size in -bench.replay.sizes, that many small
// ConfigMaps in a namespace of their own. Each consumer then replays one
// namespace from nothing, in turn, once per round and per encoding (JSON,
// as for custom resources and dynamic clients; protobuf, client-go 0.37's
// default for built-in types through typed clients):
//
//   - watchlist: a graded wgwatch.Stream (its default: a watch-list).
//   - listwatch: a Stream with DisableWatchList: a LIST in pages of 500,
//     then a WATCH from the list's resourceVersion.
//   - listwatch-5000: the same with ListPageSize 5000.
//   - informer: a SharedIndexInformer as client-go 0.37 runs it (a
//     watch-list).
//   - informer-list: an informer over a ListerWatcher that says it cannot
//     do a watch-list: a LIST then a WATCH, as informers did before
//     client-go 0.35. This is a reflector's first LIST: resourceVersion 0
//     ("any"), served whole from the watch cache in one response. Its
//     relist after an expiry asks for the latest (resourceVersion "") in
//     pages of 500, as a Stream's LIST does.
//
// time_s is the wall time from the consumer's start until its handler has
// the whole collection (a stream's Snapshot call; an informer handler's
// last initial add); cpu_s and allocs/B the process's over that window.
// held_B is the live heap (after forced collections) once the replay is
// done and the consumer idle on the watch that follows, less the heap
// before it started: a stream's no-op handler keeps nothing, so all of
// it is the stream's and client-go's; an informer's includes its store,
// the collection it is meant to keep. With -bench.heapprofile DIR each
// run writes that heap's profile there.
var (
	replaySizes = flag.String("bench.replay.sizes", "10000,50000,100000", "comma-separated collection sizes of BenchmarkReplay")
	heapProfile = flag.String("bench.heapprofile", "", "directory for BenchmarkReplay's heap profiles, taken once each replay is done")
)

func replayNS(n int) string { return fmt.Sprintf("replay-%d", n) }

// replayCluster is the cluster of BenchmarkReplay and
// BenchmarkServerReplay, which run one after the other and share it, and
// its collections: etcd in a child of its own (for the servers' figures;
// the clients' are the same either way), and each collection written
// once, when a benchmark first needs it.
func replayCluster(b *testing.B) (*harness.Remote, *replayData) {
	b.Helper()
	return serverCluster(b, "replay", harness.Options{}, func(*harness.Remote) *replayData {
		return &replayData{written: map[int]bool{}}
	})
}

// replayData says which collections of the replay cluster are written.
type replayData struct{ written map[int]bool }

// ensure writes the collection of n ConfigMaps, in namespace replayNS(n),
// unless it is written already.
func (d *replayData) ensure(b *testing.B, r *harness.Remote, n int) {
	b.Helper()
	if d.written[n] {
		return
	}
	c := newClient(b, r.Config(), contentProtobuf)
	defer c.Close()
	start := time.Now()
	createObjects(b, c, replayNS(n), n)
	record(fmt.Sprintf("replay/setup/%d", n), "objects", n, "write_s", time.Since(start))
	d.written[n] = true
}

func sizes(b *testing.B) []int {
	var out []int
	for _, f := range strings.Split(*replaySizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("-bench.replay.sizes: bad size %q", f)
		}
		out = append(out, n)
	}
	return out
}

type replayMode struct {
	name  string
	start func(b *testing.B, lw *countingLW, n int, snapped chan<- int) (stop func())
}

var replayModes = []replayMode{
	{"watchlist", func(b *testing.B, lw *countingLW, n int, snapped chan<- int) func() {
		return startReplayStream(b, lw, snapped, wgwatch.StreamOptions{})
	}},
	{"listwatch", func(b *testing.B, lw *countingLW, n int, snapped chan<- int) func() {
		return startReplayStream(b, lw, snapped, wgwatch.StreamOptions{DisableWatchList: true})
	}},
	{"listwatch-5000", func(b *testing.B, lw *countingLW, n int, snapped chan<- int) func() {
		return startReplayStream(b, lw, snapped, wgwatch.StreamOptions{DisableWatchList: true, ListPageSize: 5000})
	}},
	{"informer", func(b *testing.B, lw *countingLW, n int, snapped chan<- int) func() {
		return startReplayInformer(b, lw, n, snapped)
	}},
	{"informer-list", func(b *testing.B, lw *countingLW, n int, snapped chan<- int) func() {
		return startReplayInformer(b, noWatchList{lw}, n, snapped)
	}},
}

func BenchmarkReplay(b *testing.B) {
	defer timeGroup("replay")()
	ns := sizes(b)
	r, data := replayCluster(b)
	for _, n := range ns {
		data.ensure(b, r, n)
	}
	encs := []struct {
		name string
		c    *client
	}{{"json", newClient(b, r.Config(), contentJSON)}, {"protobuf", newClient(b, r.Config(), contentProtobuf)}}
	for _, e := range encs {
		defer e.c.Close()
		if _, err := e.c.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
			b.Fatalf("get namespace: %v", err)
		}
		for _, n := range ns {
			group := fmt.Sprintf("replay/%d/%s", n, e.name)
			for _, m := range []string{"watchlist", "listwatch"} {
				defineRatio(group+"/ratio", m+"/informer_time", "time_s", group+"/"+m, group+"/informer")
				defineRatio(group+"/ratio", m+"/informer_allocs", "allocs", group+"/"+m, group+"/informer")
				defineRatio(group+"/ratio", m+"/informer-list_time", "time_s", group+"/"+m, group+"/informer-list")
				defineRatio(group+"/ratio", m+"/informer-list_allocs", "allocs", group+"/"+m, group+"/informer-list")
			}
		}
	}
	for round := 1; round <= *benchRounds; round++ {
		for _, n := range ns {
			for _, e := range encs {
				for _, mode := range rotate(replayModes, round) {
					name := fmt.Sprintf("%d/%s/%s", n, e.name, mode.name)
					b.Run(roundName(name, round), func(b *testing.B) {
						benchReplay(b, e.c, n, "replay/"+name, mode, round)
					})
				}
			}
		}
	}
}

func benchReplay(b *testing.B, c *client, n int, name string, mode replayMode, round int) {
	b.ReportAllocs()
	var total usage
	var held float64
	for range b.N {
		b.StopTimer()
		lw := &countingLW{inner: typedLW(c, replayNS(n))}
		heap0, _, _ := heapNow()
		snapped := make(chan int, 1)
		b.StartTimer()
		m := startMeter(b)
		stop := mode.start(b, lw, n, snapped)
		got := waitFor(b, snapped, mode.name+": the snapshot")
		u := m.stop(b)
		b.StopTimer()
		if got != n {
			b.Fatalf("%s: snapshot of %d objects, want %d", mode.name, got, n)
		}
		// Idle: the watch that follows the replay is open (a watch-list
		// goes on with the same watch).
		lw.waitWatches(b, 1)
		heap1, _, _ := heapNow()
		if *heapProfile != "" {
			writeHeapProfile(b, fmt.Sprintf("%s-round%d.pb.gz", strings.ReplaceAll(name, "/", "-"), round))
		}
		held += float64(heap1) - float64(heap0)
		stop()
		total.add(u)
		b.StartTimer()
	}
	runs := float64(b.N)
	b.ReportMetric(total.Wall.Seconds()/runs, "s/snapshot")
	b.ReportMetric(held/runs, "held-B")
	record(name,
		"time_s", total.Wall.Seconds()/runs,
		"cpu_s", total.CPU.Seconds()/runs,
		"allocs", float64(total.Allocs)/runs,
		"B", float64(total.Bytes)/runs,
		"held_B", held/runs,
		"held_B/object", held/runs/float64(n))
}

func waitFor[T any](b *testing.B, ch <-chan T, what string) T {
	b.Helper()
	t := time.NewTimer(waitTimeout)
	defer t.Stop()
	select {
	case v := <-ch:
		return v
	case <-t.C:
		b.Fatalf("%s: none after %v", what, waitTimeout)
	}
	panic("unreachable")
}

func writeHeapProfile(b *testing.B, file string) {
	b.Helper()
	if err := os.MkdirAll(*heapProfile, 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(filepath.Join(*heapProfile, file))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// startReplayStream runs a Stream with opts from no cursor whose handler
// sends the snapshot's size to snapped and keeps nothing.
func startReplayStream(b *testing.B, lw cache.ListerWatcher, snapped chan<- int, opts wgwatch.StreamOptions) func() {
	h := wgwatch.HandlerFuncs{SnapshotFunc: func(_ context.Context, snap wgwatch.Snapshot) error {
		select {
		case snapped <- len(snap.Objects):
		default:
		}
		return nil
	}}
	opts.Resource, opts.Name = configmaps, "replay"
	st, err := wgwatch.NewStream(lw, h, opts)
	if err != nil {
		b.Fatalf("NewStream: %v", err)
	}
	return runStream(b, st)
}

// startReplayInformer runs an informer whose handler sends n to snapped
// at the n-th add of its initial list.
func startReplayInformer(b *testing.B, lw cache.ListerWatcher, n int, snapped chan<- int) func() {
	informer := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	var initial int
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if isInInitialList {
				if initial++; initial == n {
					snapped <- n
				}
			}
		},
	})
	if err != nil {
		b.Fatalf("AddEventHandler: %v", err)
	}
	return runInformer(informer)
}

// countingLW counts the watches its inner ListerWatcher has returned.
type countingLW struct {
	inner cache.ListerWatcherWithContext

	mu      sync.Mutex
	watches int
	changed chan struct{} // closed (and replaced) at every watch returned
}

func (l *countingLW) List(o metav1.ListOptions) (kruntime.Object, error) {
	return l.ListWithContext(context.Background(), o)
}

func (l *countingLW) ListWithContext(ctx context.Context, o metav1.ListOptions) (kruntime.Object, error) {
	return l.inner.ListWithContext(ctx, o)
}

func (l *countingLW) Watch(o metav1.ListOptions) (apiwatch.Interface, error) {
	return l.WatchWithContext(context.Background(), o)
}

func (l *countingLW) WatchWithContext(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
	w, err := l.inner.WatchWithContext(ctx, o)
	if err == nil {
		l.mu.Lock()
		l.watches++
		if l.changed != nil {
			close(l.changed)
			l.changed = nil
		}
		l.mu.Unlock()
	}
	return w, err
}

// waitWatches waits until the ListerWatcher has returned n watches.
func (l *countingLW) waitWatches(b *testing.B, n int) {
	b.Helper()
	t := time.NewTimer(waitTimeout)
	defer t.Stop()
	for {
		l.mu.Lock()
		if l.watches >= n {
			l.mu.Unlock()
			return
		}
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-t.C:
			b.Fatalf("%d watches opened after %v, want %d", l.watches, waitTimeout, n)
		}
	}
}

// noWatchList hides a ListerWatcher's watch-list support from an
// informer's reflector, which then lists.
type noWatchList struct{ *countingLW }

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }
