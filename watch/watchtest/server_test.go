package watchtest_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"
	"k8s.io/utils/ptr"

	"github.com/watchgrade/watchgrade/watch/watchtest"
)

var _ cache.ListerWatcherWithContext = (*watchtest.Server)(nil)

// event is a watch event in a comparable form: "ADDED a@2", "BOOKMARK @5",
// "BOOKMARK end@5", "ERROR 410".
func event(ev watch.Event) string {
	if ev.Type == watch.Error {
		return fmt.Sprintf("ERROR %d", apierrors.FromObject(ev.Object).(apierrors.APIStatus).Status().Code)
	}
	m, _ := meta.Accessor(ev.Object)
	name := m.GetName()
	if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
		name = "end"
	}
	return fmt.Sprintf("%s %s@%s", ev.Type, name, m.GetResourceVersion())
}

// next reads n events from w, failing if it closes first.
func next(t *testing.T, w watch.Interface, n int) []string {
	t.Helper()
	var got []string
	for range n {
		ev, ok := <-w.ResultChan()
		if !ok {
			t.Fatalf("watch closed after %v, want %d events", got, n)
		}
		got = append(got, event(ev))
	}
	return got
}

// rest reads w until it closes.
func rest(w watch.Interface) []string {
	var got []string
	for ev := range w.ResultChan() {
		got = append(got, event(ev))
	}
	return got
}

// ok returns a function that fails t on a write's error: ok(t)(s.Create(o)).
func ok(t *testing.T) func(runtime.Object, error) {
	t.Helper()
	return func(_ runtime.Object, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

func names(list runtime.Object) []string {
	var out []string
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		m, _ := meta.Accessor(o)
		out = append(out, m.GetName()+"@"+m.GetResourceVersion())
		return nil
	})
	return out
}

func TestServerWritesListAndResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{})
		ok(t)(s.Create(watchtest.ConfigMap("b", "")))
		ok(t)(s.Create(watchtest.ConfigMap("a", "")))
		ok(t)(s.Update(watchtest.ConfigMap("b", "")))
		if _, err := s.Create(watchtest.ConfigMap("a", "")); !apierrors.IsAlreadyExists(err) {
			t.Errorf("Create(existing) = %v, want AlreadyExists", err)
		}
		list, err := s.List(metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"a@3", "b@4"}, names(list)); diff != "" {
			t.Errorf("List() items (-want +got):\n%s", diff)
		}
		if lm, _ := meta.ListAccessor(list); lm.GetResourceVersion() != "4" {
			t.Errorf("List() resourceVersion = %q, want 4", lm.GetResourceVersion())
		}
		if _, ok := list.(*corev1.ConfigMapList); !ok {
			t.Errorf("List() = %T, want *v1.ConfigMapList", list)
		}

		w, err := s.Watch(metav1.ListOptions{ResourceVersion: "2"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if diff := cmp.Diff([]string{"ADDED a@3", "MODIFIED b@4"}, next(t, w, 2)); diff != "" {
			t.Errorf("resume from 2 (-want +got):\n%s", diff)
		}
		if err := s.Delete("default", "a"); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"DELETED a@5"}, next(t, w, 1)); diff != "" {
			t.Errorf("live delete (-want +got):\n%s", diff)
		}
	})
}

func TestServerWatchFromZeroAndEmptySendsSyntheticAdds(t *testing.T) {
	for _, rv := range []string{"", "0"} {
		t.Run(fmt.Sprintf("rv=%q", rv), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := watchtest.NewServer(watchtest.ServerOptions{})
				ok(t)(s.Create(watchtest.ConfigMap("b", "")))
				ok(t)(s.Create(watchtest.ConfigMap("a", "")))
				w, err := s.Watch(metav1.ListOptions{ResourceVersion: rv})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Stop()
				// Key order, not resourceVersion order: a cursor taken from
				// them would go backwards.
				if diff := cmp.Diff([]string{"ADDED a@3", "ADDED b@2"}, next(t, w, 2)); diff != "" {
					t.Errorf("watch from %q (-want +got):\n%s", rv, diff)
				}
			})
		})
	}
}

func TestServerWatchList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{})
		ok(t)(s.Create(watchtest.ConfigMap("a", "")))
		opts := metav1.ListOptions{SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true}
		w, err := s.Watch(opts)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if diff := cmp.Diff([]string{"ADDED a@2", "BOOKMARK end@2"}, next(t, w, 2)); diff != "" {
			t.Errorf("watch-list (-want +got):\n%s", diff)
		}
		s.SetFaults(watchtest.Faults{RefuseWatchList: true})
		if _, err := s.Watch(opts); !apierrors.IsInvalid(err) {
			t.Errorf("Watch(watch-list) with RefuseWatchList = %v, want 422 Invalid", err)
		}
		s.SetFaults(watchtest.Faults{})
		opts.ResourceVersionMatch = ""
		if _, err := s.Watch(opts); !apierrors.IsInvalid(err) {
			t.Errorf("Watch(sendInitialEvents without NotOlderThan) = %v, want 422 Invalid", err)
		}
	})
}

func TestServerExpiryShapes(t *testing.T) {
	tests := []struct {
		shape   watchtest.ExpiryShape
		openErr bool
		want    []string
	}{
		{watchtest.ExpiryErrorEvent, false, []string{"ERROR 410"}},
		{watchtest.ExpiryGoneEvent, false, []string{"ERROR 410"}},
		{watchtest.ExpiryOpenError, true, nil},
	}
	for _, tt := range tests {
		t.Run(string(tt.shape), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := watchtest.NewServer(watchtest.ServerOptions{Expiry: tt.shape})
				ok(t)(s.Create(watchtest.ConfigMap("a", ""))) // 2
				s.Restart()                                   // the new apiserver's writes: 3
				time.Sleep(2 * time.Second)                   // the new watch cache lists at 3
				ok(t)(s.Update(watchtest.ConfigMap("a", ""))) // 4
				// 3 is the new cache's list; 2 is before the restart.
				if w, err := s.Watch(metav1.ListOptions{ResourceVersion: "3"}); err != nil {
					t.Fatalf("Watch(3) = %v, want a resume", err)
				} else {
					if diff := cmp.Diff([]string{"MODIFIED a@4"}, next(t, w, 1)); diff != "" {
						t.Errorf("resume from 3 (-want +got):\n%s", diff)
					}
					w.Stop()
				}
				w, err := s.Watch(metav1.ListOptions{ResourceVersion: "2"})
				if tt.openErr {
					if !apierrors.IsResourceExpired(err) {
						t.Errorf("Watch(2) = %v, want a 410 on the open", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("Watch(2) = %v, want HTTP 200 and an ERROR event", err)
				}
				if diff := cmp.Diff(tt.want, rest(w)); diff != "" {
					t.Errorf("watch from an expired cursor (-want +got):\n%s", diff)
				}
			})
		})
	}
}

func TestServerWatchCacheWindowEvicts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{WatchCacheSize: 2, WatchCacheWindow: time.Minute})
		for i := range 5 {
			ok(t)(s.Create(watchtest.ConfigMap(fmt.Sprint("o", i), ""))) // rv 2..6
		}
		// Young events are all kept, however many.
		if w, err := s.Watch(metav1.ListOptions{ResourceVersion: "2"}); err != nil {
			t.Fatal(err)
		} else {
			if got := next(t, w, 4); len(got) != 4 {
				t.Errorf("resume from 2 got %v", got)
			}
			w.Stop()
		}
		time.Sleep(2 * time.Minute)
		ok(t)(s.Create(watchtest.ConfigMap("late", ""))) // rv 7; evicts down to 2 events
		w, err := s.Watch(metav1.ListOptions{ResourceVersion: "4"})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"ERROR 410"}, rest(w)); diff != "" {
			t.Errorf("resume from an evicted cursor (-want +got):\n%s", diff)
		}
		w, err = s.Watch(metav1.ListOptions{ResourceVersion: "5"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if diff := cmp.Diff([]string{"ADDED o4@6", "ADDED late@7"}, next(t, w, 2)); diff != "" {
			t.Errorf("resume from the window's edge (-want +got):\n%s", diff)
		}
	})
}

func TestServerTimeoutsAndBookmarks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{})
		ok(t)(s.Create(watchtest.ConfigMap("a", "")))
		start := time.Now()
		w, err := s.Watch(metav1.ListOptions{ResourceVersion: "2", AllowWatchBookmarks: true})
		if err != nil {
			t.Fatal(err)
		}
		s.AdvanceRevision(3)
		// Other resources keep being written: etcd's revision moves.
		stopWrites := make(chan struct{})
		go func() {
			for {
				select {
				case <-stopWrites:
					return
				case <-time.After(7 * time.Second):
					s.AdvanceRevision(1)
				}
			}
		}()
		got := rest(w)
		close(stopWrites)
		lived := time.Since(start)
		if lived < 30*time.Minute || lived >= time.Hour {
			t.Errorf("watch without timeoutSeconds lived %v, want 30m..60m", lived)
		}
		// One a minute, and one 2s before the deadline.
		if n := len(got); n < 30 || n > 61 {
			t.Errorf("got %d bookmarks in %v, want one a minute", n, lived)
		}
		if len(got) > 0 && got[0] != "BOOKMARK @13" {
			t.Errorf("first bookmark = %q, want the current resourceVersion 13", got[0])
		}
		start = time.Now()
		w, err = s.Watch(metav1.ListOptions{ResourceVersion: s.ResourceVersion(), TimeoutSeconds: ptr.To[int64](7)})
		if err != nil {
			t.Fatal(err)
		}
		if got := rest(w); len(got) != 0 || time.Since(start) != 7*time.Second {
			t.Errorf("watch with timeoutSeconds=7 and no bookmarks: %v after %v, want nothing after 7s", got, time.Since(start))
		}
	})
}

func TestServerFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{})
		ok(t)(s.Create(watchtest.ConfigMap("a", "")))
		open, err := s.Watch(metav1.ListOptions{ResourceVersion: "2"})
		if err != nil {
			t.Fatal(err)
		}
		s.SetFaults(watchtest.Faults{Err: watchtest.Forbidden()})
		if _, err := s.Watch(metav1.ListOptions{ResourceVersion: "2"}); !apierrors.IsForbidden(err) {
			t.Errorf("Watch() with a Forbidden fault = %v", err)
		}
		if _, err := s.List(metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("List() with a Forbidden fault = %v", err)
		}
		// RBAC is checked when a watch opens: the open one goes on.
		ok(t)(s.Update(watchtest.ConfigMap("a", "")))
		if diff := cmp.Diff([]string{"MODIFIED a@3"}, next(t, open, 1)); diff != "" {
			t.Errorf("watch opened before the fault (-want +got):\n%s", diff)
		}
		s.SetFaults(watchtest.Faults{Refuse: true})
		if _, err := s.List(metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "refused") {
			t.Errorf("List() with Refuse = %v, want connection refused", err)
		}
		// As client-go returns it: the dial error in a *url.Error naming
		// the request, resourceVersion and all.
		_, err = s.Watch(metav1.ListOptions{ResourceVersion: "3"})
		var ue *url.Error
		if !errors.As(err, &ue) || !utilnet.IsConnectionRefused(err) || !strings.Contains(ue.URL, "resourceVersion=3") || !strings.Contains(ue.URL, "watch=true") {
			t.Errorf("Watch() with Refuse = %#v, want a refused dial in a *url.Error whose URL has resourceVersion=3&watch=true", err)
		}
		s.SetFaults(watchtest.Faults{StaleProxy: true})
		stale, err := s.Watch(metav1.ListOptions{ResourceVersion: "3"})
		if err != nil {
			t.Fatal(err)
		}
		if got := rest(stale); len(got) != 0 {
			t.Errorf("stale proxy watch delivered %v, want a close at once", got)
		}
		s.SetFaults(watchtest.Faults{WatchLifetime: 300 * time.Millisecond})
		start := time.Now()
		flap, err := s.Watch(metav1.ListOptions{ResourceVersion: "3"})
		if err != nil {
			t.Fatal(err)
		}
		rest(flap)
		if d := time.Since(start); d != 300*time.Millisecond {
			t.Errorf("hot flap watch lived %v, want 300ms", d)
		}
		s.SetFaults(watchtest.Faults{})
		s.CloseWatches()
		if got := rest(open); len(got) != 0 {
			t.Errorf("CloseWatches left %v", got)
		}
		if n := s.OpenWatches(); n != 0 {
			t.Errorf("OpenWatches() = %d after CloseWatches, want 0", n)
		}
	})
}

func TestServerTooLargeResourceVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{})
		start := time.Now()
		_, err := s.List(metav1.ListOptions{ResourceVersion: "50"})
		if !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) || time.Since(start) != 3*time.Second {
			t.Errorf("List(rv 50 of 1) = %v after %v, want too large after 3s", err, time.Since(start))
		}
		// A plain watch from the future waits, silently, for the server.
		w, err := s.Watch(metav1.ListOptions{ResourceVersion: "3"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		for range 3 {
			ok(t)(s.Create(watchtest.ConfigMap(fmt.Sprint("o", s.ResourceVersion()), "")))
		}
		if diff := cmp.Diff([]string{"ADDED o3@4"}, next(t, w, 1)); diff != "" {
			t.Errorf("watch from a future cursor (-want +got):\n%s", diff)
		}
	})
}

func TestServerPaginationAndExpiredContinue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{})
		for i := range 5 {
			ok(t)(s.Create(watchtest.ConfigMap(fmt.Sprint("o", i), "")))
		}
		first, err := s.List(metav1.ListOptions{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		lm, _ := meta.ListAccessor(first)
		if lm.GetContinue() == "" {
			t.Fatalf("List(limit 2 of 5) has no continue token")
		}
		ok(t)(s.Create(watchtest.ConfigMap("late", ""))) // not in the list at 6
		second, err := s.List(metav1.ListOptions{Limit: 2, Continue: lm.GetContinue()})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"o2@4", "o3@5"}, names(second)); diff != "" {
			t.Errorf("second page (-want +got):\n%s", diff)
		}
		lm2, _ := meta.ListAccessor(second)
		s.Compact()
		time.Sleep(15 * time.Second) // the cacher's compactor sees it
		if _, err := s.List(metav1.ListOptions{Limit: 2, Continue: lm2.GetContinue()}); !apierrors.IsResourceExpired(err) {
			t.Errorf("List(continue after compaction) = %v, want 410 Expired", err)
		}
		// client-go's pager falls back to a full list, as the reflector's does.
		p := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return s.ListWithContext(ctx, o)
		})
		p.PageSize = 2
		all, _, err := p.List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(names(all)); n != 6 {
			t.Errorf("pager.List() has %d items, want 6", n)
		}
	})
}

// TestServerUnderInformer runs a client-go informer over the server
// through an expiry, a restart and deletes made while no watch was open:
// its store ends up equal to the server's collection.
func TestServerUnderInformer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{})
		for i := range 3 {
			ok(t)(s.Create(watchtest.ConfigMap(fmt.Sprint("o", i), "")))
		}
		inf := cache.NewSharedIndexInformer(s, &corev1.ConfigMap{}, 0, cache.Indexers{})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { inf.RunWithContext(ctx); close(done) }()
		for !inf.HasSynced() {
			time.Sleep(time.Millisecond)
		}
		s.SetFaults(watchtest.Faults{Refuse: true})
		s.Restart()
		if err := s.Delete("default", "o1"); err != nil {
			t.Fatal(err)
		}
		ok(t)(s.Create(watchtest.ConfigMap("new", "")))
		time.Sleep(5 * time.Second)
		s.SetFaults(watchtest.Faults{})
		time.Sleep(time.Minute)
		var got []string
		for _, o := range inf.GetStore().List() {
			m, _ := meta.Accessor(o)
			got = append(got, m.GetName()+"@"+m.GetResourceVersion())
		}
		want := names(&corev1.ConfigMapList{Items: []corev1.ConfigMap{}})
		for _, o := range s.Objects() {
			m, _ := meta.Accessor(o)
			want = append(want, m.GetName()+"@"+m.GetResourceVersion())
		}
		if diff := cmp.Diff(want, got, cmpSorted); diff != "" {
			t.Errorf("informer store after the restart (-want +got):\n%s", diff)
		}
		cancel()
		<-done
	})
}

var cmpSorted = cmp.Transformer("sort", func(in []string) []string {
	out := append([]string(nil), in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
})
