package bench

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	wgwatch "github.com/watchgrade/watchgrade/watch"
)

var configmaps = schema.GroupResource{Resource: "configmaps"}

// waitTimeout bounds every wait of a benchmark for something the servers
// or the consumers must do; a wait that runs out fails the benchmark.
const waitTimeout = 3 * time.Minute

// configMap is the small object every benchmark writes: a name and one
// data key (the server adds its managedFields).
func configMap(ns, name string, n int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data:       map[string]string{"n": strconv.Itoa(n)},
	}
}

func objectName(i int) string { return fmt.Sprintf("cm-%06d", i) }

func createNamespace(b *testing.B, c *client, ns string) {
	b.Helper()
	_, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatalf("create namespace %s: %v", ns, err)
	}
}

// parallel runs f(i) for i in [0, n) on workers goroutines and returns the
// highest resourceVersion f returned.
func parallel(b *testing.B, n, workers int, f func(i int) (string, error)) int64 {
	b.Helper()
	var (
		mu    sync.Mutex
		maxRV int64
		first error
		wg    sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				rv, err := f(i)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				if v, perr := strconv.ParseInt(rv, 10, 64); perr == nil && v > maxRV {
					maxRV = v
				}
				stop := first != nil
				mu.Unlock()
				if stop {
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		b.Fatalf("write: %v", first)
	}
	return maxRV
}

// createObjects creates n ConfigMaps in ns (16 writers) and returns the
// highest resourceVersion.
func createObjects(b *testing.B, c *client, ns string, n int) int64 {
	b.Helper()
	createNamespace(b, c, ns)
	return parallel(b, n, 16, func(i int) (string, error) {
		cm, err := c.CoreV1().ConfigMaps(ns).Create(context.Background(), configMap(ns, objectName(i), 0), metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return cm.ResourceVersion, nil
	})
}

// typedLW is the ListerWatcher users build from a typed clientset.
func typedLW(c *client, ns string) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoreV1().ConfigMaps(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
			return c.CoreV1().ConfigMaps(ns).Watch(ctx, o)
		},
	}
}

// watchCacheCapacity reads the apiserver's watch cache capacity for
// configmaps from its /metrics (-1 if it has none). kube-apiserver 1.37
// names the gauge watch_cache_capacity, without the apiserver_ prefix of
// the cache's other metrics.
func watchCacheCapacity(b *testing.B, c *client) int {
	b.Helper()
	raw, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("GET /metrics: %v", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		name, _, _ := strings.Cut(line, "{")
		if (name == "watch_cache_capacity" || name == "apiserver_watch_cache_capacity") && strings.Contains(line, `resource="configmaps"`) {
			fields := strings.Fields(line)
			v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
			if err == nil {
				return int(v)
			}
		}
	}
	return -1
}

// sink is the do-nothing handler every consumer hands its events to: it
// counts them, keeps the last, and closes done at the n-th. Each consumer
// calls it from one goroutine.
type sink struct {
	n, seen int
	last    runtime.Object
	done    chan struct{}
}

func newSink(n int) *sink { return &sink{n: n, done: make(chan struct{})} }

func (s *sink) take(obj runtime.Object) {
	s.seen++
	if s.seen == s.n {
		s.last = obj
		close(s.done)
	}
}

// wait waits for the sink's n-th event.
func (s *sink) wait(b *testing.B, what string) {
	b.Helper()
	t := time.NewTimer(waitTimeout)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		b.Fatalf("%s: %d of %d events after %v", what, s.seen, s.n, waitTimeout)
	}
}

// listOnly is a ListerWatcher whose List returns an empty list at from and
// whose watches are the real ones: an informer over it starts watching at
// from, as one does after its LIST, without the LIST. It says it cannot do
// a watch-list, so the reflector lists.
type listOnly struct {
	watch cache.WatcherWithContext
	from  string
}

func (l listOnly) List(o metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), o)
}

func (l listOnly) ListWithContext(context.Context, metav1.ListOptions) (runtime.Object, error) {
	return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: l.from}}, nil
}

func (l listOnly) Watch(o metav1.ListOptions) (apiwatch.Interface, error) {
	return l.WatchWithContext(context.Background(), o)
}

func (l listOnly) WatchWithContext(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
	return l.watch.WatchWithContext(ctx, o)
}

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

var benchRounds = flag.Int("bench.rounds", 5, "rounds of each benchmark group: each consumer runs once a round, in an order rotated every round")

// rotate returns xs rotated left by round, so that over the rounds each
// consumer runs in every position: one that always ran first (right after
// the setup's writes, say) would be measured on a machine in another
// state.
func rotate[T any](xs []T, round int) []T {
	k := round % len(xs)
	return append(append([]T(nil), xs[k:]...), xs[:k]...)
}

// roundName names a sub-benchmark of one round.
func roundName(name string, round int) string { return fmt.Sprintf("%s/round=%d", name, round) }

// runInformer runs informer until the returned stop, which waits for it
// to return.
func runInformer(informer cache.SharedIndexInformer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		informer.RunWithContext(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// runStream runs st until the returned stop, which waits for Run to
// return and reports its error.
func runStream(b *testing.B, st *wgwatch.Stream) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run: %v", err)
		}
	}
}
