package watch_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"weak"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// After a replay the stream holds nothing of the collection that its
// handler did not keep: not the LIST's items, not the snapshot, for the
// whole watch that follows (30 to 60 minutes on a real server). The items
// are allocated by the List call and watched through weak pointers; while
// the next watch is open, and the stream parked on it, a forced GC must
// collect every one of them, for a LIST+WATCH and for a watch-list replay.
//
// It failed on the listThenWatch of 69c2381^, which read len(snap.Objects)
// after the watch that followed had ended: the slice of the snapshot, and
// every item through it, stayed on the stream's stack for the session.
func TestReplayRetainsNothingDuringNextWatch(t *testing.T) {
	const n = 2000
	for _, tt := range []struct {
		name      string
		watchList bool
	}{
		{"list-then-watch", false},
		{"watch-list", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				src := &retentionSource{n: n, watchList: tt.watchList}
				var snapshotted int
				h := wgwatch.HandlerFuncs{SnapshotFunc: func(_ context.Context, snap wgwatch.Snapshot) error {
					snapshotted = len(snap.Objects) // keeps nothing
					return nil
				}}
				s, err := wgwatch.NewStream(src.listerWatcher(), h, wgwatch.StreamOptions{
					Resource:         configmapsResource,
					DisableWatchList: !tt.watchList,
					ListPageSize:     n, // one page: the List's own items reach the snapshot
				})
				if err != nil {
					t.Fatalf("NewStream() = %v", err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- s.Run(ctx) }()
				synctest.Wait() // parked on the watch that follows the replay

				if snapshotted != n {
					t.Fatalf("snapshot of %d objects, want %d", snapshotted, n)
				}
				if got := src.watches(); got != 1 {
					t.Fatalf("%d watches opened, want 1", got)
				}
				if held := src.held(); held > 0 {
					t.Errorf("%d of %d replayed objects still reachable while the next watch is open, want 0", held, n)
				}
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run() = %v, want nil", err)
				}
			})
		})
	}
}

var configmapsResource = schema.GroupResource{Resource: "configmaps"}

// retentionSource lists (or, for a watch-list, sends as initial events) n
// fresh ConfigMaps, keeping only weak pointers to them; the watch after the
// replay stays open and silent.
type retentionSource struct {
	n         int
	watchList bool

	mu      sync.Mutex
	weak    []weak.Pointer[corev1.ConfigMap]
	opened  int
	silence *watchtest.ListerWatcher
}

func (r *retentionSource) items() []*corev1.ConfigMap {
	out := make([]*corev1.ConfigMap, r.n)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range out {
		cm := watchtest.ConfigMap("cm-"+strconv.Itoa(i), strconv.Itoa(i+2))
		cm.Data = map[string]string{"key": "a value of some size, so the items weigh what small objects do"}
		out[i] = cm
		r.weak = append(r.weak, weak.Make(cm))
	}
	return out
}

func (r *retentionSource) listerWatcher() cache.ListerWatcher {
	r.silence = watchtest.New()
	return &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (kruntime.Object, error) {
			list := &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(r.n + 2)}}
			for _, cm := range r.items() {
				list.Items = append(list.Items, kruntime.RawExtension{Object: cm})
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
			r.mu.Lock()
			r.opened++
			r.mu.Unlock()
			if o.SendInitialEvents == nil || !*o.SendInitialEvents {
				return r.silence.WatchWithContext(ctx, o)
			}
			var evs []apiwatch.Event
			for _, cm := range r.items() {
				evs = append(evs, watchtest.Added(cm))
			}
			evs = append(evs, watchtest.InitialEventsEnd(strconv.Itoa(r.n+2)))
			return watchtest.New(watchtest.Session{Events: evs, Hang: true}).WatchWithContext(ctx, o)
		},
	}
}

func (r *retentionSource) watches() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.opened
}

// held forces garbage collections, a bounded number of them, and returns
// how many of the items are still reachable.
func (r *retentionSource) held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	held := 0
	for range 5 {
		runtime.GC()
		held = 0
		for _, w := range r.weak {
			if w.Value() != nil {
				held++
			}
		}
		if held == 0 {
			break
		}
	}
	return held
}
