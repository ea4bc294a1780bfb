package watchtest_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// watchList is a watch-list request's options.
func watchList(rv string) metav1.ListOptions {
	return metav1.ListOptions{ResourceVersion: rv, SendInitialEvents: ptr.To(true),
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true}
}

// watchFrom opens a plain watch from rv, failing t on an error.
func watchFrom(t *testing.T, s *watchtest.Server, rv string) watch.Interface {
	t.Helper()
	w, err := s.Watch(metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatalf("Watch(%s) = %v", rv, err)
	}
	return w
}

// pending reads what w delivers now, without waiting for more.
func pending(w watch.Interface) (got []string, closed bool) {
	synctest.Wait()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return got, true
			}
			got = append(got, event(ev))
			synctest.Wait()
		default:
			return got, false
		}
	}
}

func retryAfter(err error) int {
	if s, ok := err.(apierrors.APIStatus); ok && s.Status().Details != nil {
		return int(s.Status().Details.RetryAfterSeconds)
	}
	return -1
}

// TestServerRestartExpiresEveryCursor: after a restart, a resume from any
// cursor taken before it is expired, a caught-up one and a bookmark's
// too; while the cache initialises, requests get the cacher's 429.
func TestServerRestartExpiresEveryCursor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{RestartNotReady: 90 * time.Second})
		ok(t)(s.Create(watchtest.ConfigMap("a", ""))) // 2: the last event's cursor
		caughtUp := s.ResourceVersion()
		s.AdvanceRevision(3) // 5: a bookmark's cursor
		bookmark := s.ResourceVersion()
		s.Restart()
		for _, at := range []struct {
			after time.Duration
			retry int
		}{{0, 1}, {20 * time.Second, 3}, {40 * time.Second, 30}} {
			time.Sleep(at.after)
			_, err := s.Watch(metav1.ListOptions{ResourceVersion: bookmark})
			if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "storage is (re)initializing") || retryAfter(err) != at.retry {
				t.Errorf("Watch() %v into the restart = %v (Retry-After %d), want 429 storage is (re)initializing, Retry-After %d", at.after, err, retryAfter(err), at.retry)
			}
		}
		if _, err := s.List(metav1.ListOptions{ResourceVersion: "0"}); !apierrors.IsTooManyRequests(err) {
			t.Errorf("List(rv 0, no limit) while initialising = %v, want 429", err)
		}
		if l, err := s.List(metav1.ListOptions{Limit: 500}); err != nil || len(names(l)) != 1 {
			t.Errorf("List(limit 500) while initialising = %v, %v; want it served from etcd", names(l), err)
		}
		time.Sleep(time.Minute)
		for _, rv := range []string{caughtUp, bookmark} {
			w := watchFrom(t, s, rv)
			if diff := cmp.Diff([]string{"ERROR 410"}, rest(w)); diff != "" {
				t.Errorf("resume from %s after the restart (-want +got):\n%s", rv, diff)
			}
		}
		// The new cache's own list is a valid cursor.
		w := watchFrom(t, s, s.ResourceVersion())
		ok(t)(s.Update(watchtest.ConfigMap("a", "")))
		if diff := cmp.Diff([]string{"MODIFIED a@7"}, next(t, w, 1)); diff != "" {
			t.Errorf("resume from the new cache's revision (-want +got):\n%s", diff)
		}
		w.Stop()
	})
}

// TestServerRestartUncachedExpiresNothing: with the watch cache off,
// cursors live until a compaction.
func TestServerRestartUncachedExpiresNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{DisableWatchCache: true})
		ok(t)(s.Create(watchtest.ConfigMap("a", "")))
		s.Restart()
		w := watchFrom(t, s, "2")
		ok(t)(s.Update(watchtest.ConfigMap("a", "")))
		if diff := cmp.Diff([]string{"MODIFIED a@4"}, next(t, w, 1)); diff != "" {
			t.Errorf("uncached resume across a restart (-want +got):\n%s", diff)
		}
		w.Stop()
	})
}

// TestServerExpiryThresholdWithRevisionGaps: the cacher expires a cursor
// below the oldest event it holds less one, even when no event after the
// cursor was evicted.
func TestServerExpiryThresholdWithRevisionGaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{WatchCacheSize: 1, WatchCacheWindow: time.Second})
		ok(t)(s.Create(watchtest.ConfigMap("a", ""))) // 2
		s.AdvanceRevision(10)                         // 12
		time.Sleep(2 * time.Second)
		ok(t)(s.Create(watchtest.ConfigMap("b", ""))) // 13: evicts 2
		s.AdvanceRevision(10)                         // 23
		time.Sleep(2 * time.Second)
		ok(t)(s.Create(watchtest.ConfigMap("c", ""))) // 24: evicts 13
		for _, tt := range []struct {
			rv   string
			want []string
		}{
			{"13", nil}, // nothing after it is lost, but 13 < 24-1
			{"22", nil}, // still below the threshold
			{"23", []string{"ADDED c@24"}},
		} {
			w := watchFrom(t, s, tt.rv)
			got, _ := pending(w)
			w.Stop()
			want := tt.want
			if want == nil {
				want = []string{"ERROR 410"}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("resume from %s (-want +got):\n%s", tt.rv, diff)
			}
		}
	})
}

// TestServerBookmarksDoNotAdvanceWhenNothingMoved: a bookmark at or below
// what the watch delivered is dropped.
func TestServerBookmarksDoNotAdvanceWhenNothingMoved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{})
		ok(t)(s.Create(watchtest.ConfigMap("a", "")))
		w := watchFrom(t, s, "2")
		time.Sleep(5 * time.Minute)
		if got, _ := pending(w); len(got) != 0 {
			t.Errorf("quiet watch at the server's revision got %v, want no bookmark", got)
		}
		s.AdvanceRevision(1)
		time.Sleep(time.Minute)
		if diff := cmp.Diff([]string{"BOOKMARK @3"}, first(pending(w))); diff != "" {
			t.Errorf("after the revision moved (-want +got):\n%s", diff)
		}
		time.Sleep(3 * time.Minute)
		if got, _ := pending(w); len(got) != 0 {
			t.Errorf("no bookmark repeats a resourceVersion; got %v", got)
		}
		w.Stop()
	})
}

func first(got []string, _ bool) []string { return got }

// TestServerWatchListWithoutBookmarks: the server accepts it and sends the
// initial events without the end bookmark.
func TestServerWatchListWithoutBookmarks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{})
		ok(t)(s.Create(watchtest.ConfigMap("a", "")))
		opts := watchList("")
		opts.AllowWatchBookmarks = false
		w, err := s.Watch(opts)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Minute)
		if diff := cmp.Diff([]string{"ADDED a@2"}, first(pending(w))); diff != "" {
			t.Errorf("watch-list without bookmarks (-want +got):\n%s", diff)
		}
		w.Stop()
		// sendInitialEvents=false: from now on.
		opts.SendInitialEvents = ptr.To(false)
		w, err = s.Watch(opts)
		if err != nil {
			t.Fatal(err)
		}
		ok(t)(s.Create(watchtest.ConfigMap("b", "")))
		if diff := cmp.Diff([]string{"ADDED b@3"}, first(pending(w))); diff != "" {
			t.Errorf("sendInitialEvents=false (-want +got):\n%s", diff)
		}
		w.Stop()
	})
}

// TestServerWatchListUnsupported: HTTP 200, then a 500 ERROR event.
func TestServerWatchListUnsupported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{})
		s.SetFaults(watchtest.Faults{WatchListUnsupported: true})
		w, err := s.Watch(watchList(""))
		if err != nil {
			t.Fatal(err)
		}
		ev := <-w.ResultChan()
		st, isStatus := ev.Object.(*metav1.Status)
		if ev.Type != watch.Error || !isStatus || st.Code != 500 || !strings.Contains(st.Message, "RequestWatchProgress") {
			t.Errorf("watch-list on an etcd without progress = %v %+v, want ERROR 500", ev.Type, ev.Object)
		}
		if _, open := <-w.ResultChan(); open {
			t.Error("watch stayed open after the ERROR")
		}
		// A plain watch is fine.
		w = watchFrom(t, s, "")
		w.Stop()
	})
}

// TestServerListLimitAndResourceVersion holds the 1.37 semantics of a
// LIST's limit, resourceVersion and resourceVersionMatch.
func TestServerListLimitAndResourceVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{})
		for i := range 4 {
			ok(t)(s.Create(watchtest.ConfigMap(fmt.Sprint("o", i), ""))) // 2..5
		}
		if err := s.Delete("default", "o0"); err != nil { // 6
			t.Fatal(err)
		}
		list := func(o metav1.ListOptions) (string, []string, error) {
			l, err := s.List(o)
			if err != nil {
				return "", nil, err
			}
			lm, _ := meta.ListAccessor(l)
			return lm.GetResourceVersion(), names(l), nil
		}
		for _, tt := range []struct {
			name   string
			opts   metav1.ListOptions
			rv     string
			want   []string
			status int32
		}{
			{"limit and rv: exact", metav1.ListOptions{ResourceVersion: "3", Limit: 10}, "3", []string{"o0@2", "o1@3"}, 0},
			{"rv without limit: not older than", metav1.ListOptions{ResourceVersion: "3"}, "6", []string{"o1@3", "o2@4", "o3@5"}, 0},
			{"rv 0 ignores limit", metav1.ListOptions{ResourceVersion: "0", Limit: 1}, "6", []string{"o1@3", "o2@4", "o3@5"}, 0},
			{"not older than with limit", metav1.ListOptions{ResourceVersion: "3", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Limit: 2}, "6", []string{"o1@3", "o2@4"}, 0},
			{"exact", metav1.ListOptions{ResourceVersion: "4", ResourceVersionMatch: metav1.ResourceVersionMatchExact}, "4", []string{"o0@2", "o1@3", "o2@4"}, 0},
			{"exact 0 is invalid", metav1.ListOptions{ResourceVersion: "0", ResourceVersionMatch: metav1.ResourceVersionMatchExact}, "", nil, 422},
			{"match without rv is invalid", metav1.ListOptions{ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, "", nil, 422},
		} {
			rv, got, err := list(tt.opts)
			var code int32
			if s, ok := err.(apierrors.APIStatus); ok {
				code = s.Status().Code
			} else if err != nil {
				code = -1
			}
			if code != tt.status || rv != tt.rv || !cmp.Equal(tt.want, got) {
				t.Errorf("%s: List(%+v) = %s %v (status %d), want %s %v (status %d)", tt.name, tt.opts, rv, got, code, tt.rv, tt.want, tt.status)
			}
		}
		s.Compact()
		// The watch cache's snapshots serve it until the cacher's
		// compactor sees the compaction (it polls every 15 s).
		if _, got, err := list(metav1.ListOptions{ResourceVersion: "3", Limit: 10}); err != nil || len(got) != 2 {
			t.Errorf("exact list just after a compaction = %v, %v; want it served from the cache", got, err)
		}
		time.Sleep(15 * time.Second)
		_, _, err := list(metav1.ListOptions{ResourceVersion: "3", Limit: 10})
		if !apierrors.IsResourceExpired(err) || !strings.Contains(err.Error(), "The resourceVersion for the provided list is too old") {
			t.Errorf("exact list of a compacted revision = %v, want 410 too old", err)
		}
	})
}

// TestServerContinueAfterCompaction: etcd's "inconsistent continue" 410,
// whose token lists the rest at the current state.
func TestServerContinueAfterCompaction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{})
		for i := range 5 {
			ok(t)(s.Create(watchtest.ConfigMap(fmt.Sprint("o", i), "")))
		}
		l, err := s.List(metav1.ListOptions{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		lm, _ := meta.ListAccessor(l)
		ok(t)(s.Create(watchtest.ConfigMap("o9", "")))
		ok(t)(s.Update(watchtest.ConfigMap("o3", "")))
		s.Compact()
		if _, err := s.List(metav1.ListOptions{Limit: 2, Continue: lm.GetContinue()}); err != nil {
			t.Errorf("continue just after a compaction = %v, want it served from the cache", err)
		}
		time.Sleep(15 * time.Second)
		_, err = s.List(metav1.ListOptions{Limit: 2, Continue: lm.GetContinue()})
		st, isStatus := err.(apierrors.APIStatus)
		if !apierrors.IsResourceExpired(err) || !isStatus || st.Status().Continue == "" || !strings.Contains(err.Error(), "inconsistent list") {
			t.Fatalf("continue after compaction = %v, want 410 inconsistent continue with a token", err)
		}
		rest, err := s.List(metav1.ListOptions{Limit: 10, Continue: st.Status().Continue})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"o2@4", "o3@8", "o4@6", "o9@7"}, names(rest)); diff != "" {
			t.Errorf("the rest at the current state (-want +got):\n%s", diff)
		}
		if _, err := s.List(metav1.ListOptions{Continue: "garbage"}); !apierrors.IsBadRequest(err) {
			t.Errorf("List(bad continue) = %v, want 400", err)
		}
	})
}

// TestServerCursorAheadIsSilent: a plain watch from a cursor ahead of the
// server gets nothing, bookmarks included, until the server passes it.
func TestServerCursorAheadIsSilent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{})
		w := watchFrom(t, s, "5")
		for i := range 4 {
			ok(t)(s.Create(watchtest.ConfigMap(fmt.Sprint("o", i), ""))) // 2..5
			time.Sleep(2 * time.Minute)
		}
		if got, _ := pending(w); len(got) != 0 {
			t.Errorf("watch ahead of the server got %v, want nothing", got)
		}
		ok(t)(s.Create(watchtest.ConfigMap("o4", ""))) // 6
		if diff := cmp.Diff([]string{"ADDED o4@6"}, first(pending(w))); diff != "" {
			t.Errorf("once the server passed the cursor (-want +got):\n%s", diff)
		}
		w.Stop()
		// A watch-list from there is refused in the stream.
		wl, err := s.Watch(watchList("50"))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"ERROR 504"}, rest(wl)); diff != "" {
			t.Errorf("watch-list ahead of the server (-want +got):\n%s", diff)
		}
	})
}

// TestServerSlowConsumerIsCut: a consumer that leaves the cacher's
// buffers full is closed, with what the result buffer held; a consumer
// that keeps up with a burst is not.
func TestServerSlowConsumerIsCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{})
		fast := watchFrom(t, s, "1")
		var fastGot int
		done := make(chan struct{})
		go func() {
			for range fast.ResultChan() {
				fastGot++
			}
			close(done)
		}()
		slow := watchFrom(t, s, "1")
		for i := range 100 {
			ok(t)(s.Create(watchtest.ConfigMap(fmt.Sprint("o", i), "")))
		}
		time.Sleep(time.Second)
		got, closed := pending(slow)
		if !closed || len(got) != 10 {
			t.Errorf("slow consumer got %d events, closed %v; want the 10 of its result buffer, then a close", len(got), closed)
		}
		var cut []bool
		for _, r := range s.Requests() {
			cut = append(cut, r.CutOff)
		}
		if diff := cmp.Diff([]bool{false, true}, cut); diff != "" {
			t.Errorf("Requests().CutOff (-want +got):\n%s", diff)
		}
		fast.Stop()
		<-done
		if fastGot != 100 {
			t.Errorf("fast consumer got %d events, want 100", fastGot)
		}
	})
}

// TestServerStalledCache: events stop, bookmarks freeze, a watch-list is
// answered "too large" in the stream; clearing the stall catches up.
func TestServerStalledCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{})
		ok(t)(s.Create(watchtest.ConfigMap("a", ""))) // 2
		w := watchFrom(t, s, "2")
		s.SetFaults(watchtest.Faults{StallCache: true})
		ok(t)(s.Create(watchtest.ConfigMap("b", ""))) // 3
		s.AdvanceRevision(5)
		time.Sleep(3 * time.Minute)
		if got, _ := pending(w); len(got) != 0 {
			t.Errorf("watch on a stalled cache got %v, want nothing", got)
		}
		start := time.Now()
		wl, err := s.Watch(watchList(""))
		if err != nil {
			t.Fatal(err)
		}
		if got := rest(wl); !cmp.Equal(got, []string{"ERROR 504"}) || time.Since(start) != 3*time.Second {
			t.Errorf("watch-list on a stalled cache = %v after %v, want ERROR 504 after 3s", got, time.Since(start))
		}
		start = time.Now()
		if l, err := s.List(metav1.ListOptions{}); err != nil || len(names(l)) != 2 || time.Since(start) < 3*time.Second {
			t.Errorf("consistent list on a stalled cache = %v, %v after %v; want etcd's after 3s", names(l), err, time.Since(start))
		}
		if l, err := s.List(metav1.ListOptions{ResourceVersion: "0"}); err != nil || len(names(l)) != 1 {
			t.Errorf("list from the stalled cache = %v, %v; want its stale state", names(l), err)
		}
		s.SetFaults(watchtest.Faults{})
		time.Sleep(time.Minute)
		if diff := cmp.Diff([]string{"ADDED b@3", "BOOKMARK @8"}, first(pending(w))); diff != "" {
			t.Errorf("after the stall (-want +got):\n%s", diff)
		}
		w.Stop()
	})
}

// TestServerRestore: without a bump, resourceVersions go back and a cursor
// from after the snapshot is ahead of the server; with one, it expires.
func TestServerRestore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{})
		ok(t)(s.Create(watchtest.ConfigMap("a", ""))) // 2
		snap := s.Snapshot()
		for i := range 5 {
			ok(t)(s.Create(watchtest.ConfigMap(fmt.Sprint("o", i), ""))) // 3..7
		}
		cursor := s.ResourceVersion()
		s.Restore(snap, 0)
		time.Sleep(3 * time.Second)
		if got := s.ResourceVersion(); got != "3" || len(s.Objects()) != 1 {
			t.Errorf("after a restore without bump: rv %s, %d objects; want 3 (the snapshot's, plus the restart's write), 1", got, len(s.Objects()))
		}
		w := watchFrom(t, s, cursor)
		ok(t)(s.Create(watchtest.ConfigMap("z", ""))) // 4: a ghost rv, below the cursor
		time.Sleep(2 * time.Minute)
		if got, _ := pending(w); len(got) != 0 {
			t.Errorf("cursor ahead after a restore got %v, want silence", got)
		}
		w.Stop()
		if _, err := s.List(metav1.ListOptions{ResourceVersion: cursor}); !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
			t.Errorf("List(cursor) after a restore = %v, want too large", err)
		}

		s.Restore(snap, 1000)
		time.Sleep(3 * time.Second)
		w = watchFrom(t, s, cursor)
		if diff := cmp.Diff([]string{"ERROR 410"}, rest(w)); diff != "" {
			t.Errorf("cursor after a restore with bump (-want +got):\n%s", diff)
		}
	})
}

// TestServerLatency: a LIST takes time in proportion to its size; a
// watch-list's initial events can be cut part-way by the watch's end.
func TestServerLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{Latency: watchtest.Latency{Request: 5 * time.Millisecond, PerObject: time.Millisecond}})
		for i := range 1000 {
			ok(t)(s.Create(watchtest.ConfigMap(fmt.Sprintf("o%04d", i), "")))
		}
		start := time.Now()
		if _, err := s.List(metav1.ListOptions{Limit: 500}); err != nil || time.Since(start) != 505*time.Millisecond {
			t.Errorf("List(500 of 1000) took %v (%v), want 505ms", time.Since(start), err)
		}
		if reqs := s.Requests(); reqs[len(reqs)-1].Answered.Sub(start) != 505*time.Millisecond {
			t.Errorf("Request.Answered = %v after the call, want 505ms", reqs[len(reqs)-1].Answered.Sub(start))
		}
		s.SetFaults(watchtest.Faults{WatchLifetime: 300 * time.Millisecond})
		w, err := s.Watch(watchList(""))
		if err != nil {
			t.Fatal(err)
		}
		got := rest(w)
		if len(got) < 250 || len(got) > 300 || strings.Contains(strings.Join(got, " "), "end@") {
			t.Errorf("watch-list cut at 300ms delivered %d events (end bookmark: %v), want about 290 and no end", len(got), strings.Contains(strings.Join(got, " "), "end@"))
		}
		// A reset mid-replay cuts it too: what was produced, then the ERROR.
		s.SetFaults(watchtest.Faults{})
		w, err = s.Watch(watchList(""))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		s.FailWatches(apierrors.NewInternalError(fmt.Errorf("stream error: INTERNAL_ERROR")))
		got = rest(w)
		if n := len(got); n < 80 || n > 110 || got[n-1] != "ERROR 500" {
			t.Errorf("watch-list reset at 100ms delivered %d events ending %q, want about 95 then ERROR 500", n, got[n-1])
		}
	})
}

// TestServerLegacyWatchIsDefaultedToWatchList: a watch from "" or "0" with
// bookmarks ends its synthetic ADDED events with the annotated bookmark,
// as the API server defaults it to sendInitialEvents=true; not with the
// WatchList feature off.
func TestServerLegacyWatchIsDefaultedToWatchList(t *testing.T) {
	for _, rv := range []string{"", "0"} {
		synctest.Test(t, func(t *testing.T) {
			s := watchtest.NewServer(watchtest.ServerOptions{})
			ok(t)(s.Create(watchtest.ConfigMap("a", "")))
			w := watchFrom(t, s, rv)
			time.Sleep(100 * time.Millisecond) // initial events take time
			if diff := cmp.Diff([]string{"ADDED a@2", "BOOKMARK end@2"}, first(pending(w))); diff != "" {
				t.Errorf("watch from %q with bookmarks (-want +got):\n%s", rv, diff)
			}
			w.Stop()
			s.SetFaults(watchtest.Faults{RefuseWatchList: true})
			w = watchFrom(t, s, rv)
			time.Sleep(100 * time.Millisecond)
			if diff := cmp.Diff([]string{"ADDED a@2"}, first(pending(w))); diff != "" {
				t.Errorf("watch from %q with the WatchList feature off (-want +got):\n%s", rv, diff)
			}
			w.Stop()
		})
	}
}

// TestServerRestartExpiresCaughtUpCursor (defect 10): a cursor at the
// server's revision, taken just before a restart, is expired once the new
// watch cache is up. It uses only API that main has, to show it fails
// there.
func TestServerRestartExpiresCaughtUpCursor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{})
		ok(t)(s.Create(watchtest.ConfigMap("a", "")))
		cursor := s.ResourceVersion()
		s.Restart()
		time.Sleep(30 * time.Second)
		w, err := s.Watch(metav1.ListOptions{ResourceVersion: cursor})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := pending(w)
		w.Stop()
		if diff := cmp.Diff([]string{"ERROR 410"}, got); diff != "" {
			t.Errorf("resume from the caught-up cursor %s after a restart (-want +got):\n%s", cursor, diff)
		}
	})
}

// TestServerLongReplayUnderWritesIsCut: live events that pile up behind a
// slow watch-list's initial events fill the cacher's input buffer, and the
// watch is cut off before its end bookmark.
func TestServerLongReplayUnderWritesIsCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{Latency: watchtest.Latency{PerObject: time.Millisecond}})
		for i := range 500 {
			ok(t)(s.Create(watchtest.ConfigMap(fmt.Sprintf("o%03d", i), "")))
		}
		w, err := s.Watch(watchList(""))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			ok(t)(s.Create(watchtest.ConfigMap(fmt.Sprint("live", i), "")))
		}
		got := rest(w)
		if strings.Contains(strings.Join(got, " "), "end@") || len(got) >= 500 {
			t.Errorf("watch-list with 20 writes during its 0.5 s replay delivered %d events, end bookmark %v; want a cut before the end",
				len(got), strings.Contains(strings.Join(got, " "), "end@"))
		}
		// With fewer writes than the buffer holds, it completes.
		w, err = s.Watch(watchList(""))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			ok(t)(s.Create(watchtest.ConfigMap(fmt.Sprint("more", i), "")))
		}
		got = next(t, w, 520+1+5)
		if !strings.Contains(got[520], "end@") {
			t.Errorf("event 521 = %s, want the end bookmark", got[520])
		}
		w.Stop()
	})
}

// TestServerRestartTwiceAnHourApart: the second restart expires the
// cursors taken after the first, and its not-ready phase starts afresh.
func TestServerRestartTwiceAnHourApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{RestartNotReady: 20 * time.Second})
		ok(t)(s.Create(watchtest.ConfigMap("a", "")))
		s.Restart()
		time.Sleep(time.Hour)
		ok(t)(s.Update(watchtest.ConfigMap("a", "")))
		cursor := s.ResourceVersion()
		w := watchFrom(t, s, cursor) // valid after the first restart
		s.Restart()
		if got := rest(w); len(got) != 0 {
			t.Errorf("open watch at the second restart got %v, want a clean close", got)
		}
		time.Sleep(19 * time.Second)
		if _, err := s.Watch(metav1.ListOptions{ResourceVersion: cursor}); !apierrors.IsTooManyRequests(err) || retryAfter(err) != 3 {
			t.Errorf("Watch() 19s into the second restart = %v (Retry-After %d), want 429 with Retry-After 3", err, retryAfter(err))
		}
		time.Sleep(time.Second)
		w = watchFrom(t, s, cursor)
		if diff := cmp.Diff([]string{"ERROR 410"}, rest(w)); diff != "" {
			t.Errorf("cursor from between the restarts (-want +got):\n%s", diff)
		}
	})
}

// TestServerCompactsEveryFiveMinutes: the apiserver's compactor compacts
// at the revision it saw one interval before; an uncached resume from an
// older cursor, and an exact list there, then expire.
func TestServerCompactsEveryFiveMinutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := watchtest.NewServer(watchtest.ServerOptions{DisableWatchCache: true})
		ok(t)(s.Create(watchtest.ConfigMap("a", ""))) // 2
		time.Sleep(time.Minute)
		ok(t)(s.Create(watchtest.ConfigMap("b", ""))) // 3
		time.Sleep(8 * time.Minute)                   // tick 1 (5m) saw 3; tick 2 (10m) compacts at 3
		if _, err := s.List(metav1.ListOptions{ResourceVersion: "2", ResourceVersionMatch: metav1.ResourceVersionMatchExact}); err != nil {
			t.Errorf("exact list at 2 before the second tick = %v, want it served", err)
		}
		time.Sleep(2 * time.Minute)
		w := watchFrom(t, s, "2")
		if diff := cmp.Diff([]string{"ERROR 410"}, rest(w)); diff != "" {
			t.Errorf("uncached resume from 2 after the compaction at 3 (-want +got):\n%s", diff)
		}
		w = watchFrom(t, s, "3")
		ok(t)(s.Create(watchtest.ConfigMap("c", "")))
		if diff := cmp.Diff([]string{"ADDED c@4"}, next(t, w, 1)); diff != "" {
			t.Errorf("uncached resume from 3 (-want +got):\n%s", diff)
		}
		w.Stop()
		if _, err := s.List(metav1.ListOptions{ResourceVersion: "2", ResourceVersionMatch: metav1.ResourceVersionMatchExact}); !apierrors.IsResourceExpired(err) {
			t.Errorf("exact list at 2 after the compaction = %v, want 410", err)
		}
	})
}

// TestServerSizesWatchBuffersAsTheCacher: a watch's buffers are a second
// of the watch cache's history (what it holds over 75 s), from 10 to 100,
// or to 1000 with a watch index: a slow consumer opened while the cache
// holds 3,000 recent events is cut off after the 40 of its result buffer
// (3,000 / 75), and one of an indexed resource whose cache holds 90,000
// after 1000; with the cache quiet, after 10.
func TestServerSizesWatchBuffersAsTheCacher(t *testing.T) {
	for _, tt := range []struct {
		name    string
		opts    watchtest.ServerOptions
		history int
		want    int
	}{
		{"a quiet cache", watchtest.ServerOptions{}, 0, 10},
		{"3,000 events in the window", watchtest.ServerOptions{}, 3000, 40},
		{"90,000 events, no watch index", watchtest.ServerOptions{}, 90000, 100},
		{"90,000 events, a watch index", watchtest.ServerOptions{WatchIndexed: true}, 90000, 1000},
		{"set by the option", watchtest.ServerOptions{WatchChannelSize: 3}, 3000, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tt.opts.Latency.Off = true
				s := watchtest.NewServer(tt.opts)
				for i := range tt.history {
					ok(t)(s.Create(watchtest.ConfigMap(fmt.Sprint("h", i), "")))
				}
				slow := watchFrom(t, s, s.ResourceVersion())
				for i := range 2500 {
					ok(t)(s.Create(watchtest.ConfigMap(fmt.Sprint("o", i), "")))
				}
				time.Sleep(time.Second)
				got, closed := pending(slow)
				if !closed || len(got) != tt.want {
					t.Errorf("slow consumer got %d events, closed %v; want the %d of its result buffer, then a close", len(got), closed, tt.want)
				}
			})
		})
	}
}
