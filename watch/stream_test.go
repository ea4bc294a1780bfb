package watch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/watchgrade/watchgrade/watch/watchtest"
)

func TestMain(m *testing.M) {
	// Informers run inside synctest bubbles here.
	watchtest.DisableHandleErrorBackoff()
	// The reflector's warnings say nothing the tests do not check.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	goleak.VerifyTestMain(m)
}

var configmaps = schema.GroupResource{Resource: "configmaps"}

// recorder is a Handler and an Observer that writes down what it sees, in
// one log, so tests can assert order across both.
type recorder struct {
	mu        sync.Mutex
	log       []string
	states    []State
	stateAt   []time.Time // when each state came, by package time
	endings   []SessionEnd
	failEvent map[string]int // event key ("ADDED a@2") -> failures left
	failSnap  int
	onState   func() // called on every state change, if set
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, s)
}

func (r *recorder) Snapshot(_ context.Context, snap Snapshot) error {
	r.mu.Lock()
	fail := r.failSnap > 0
	if fail {
		r.failSnap--
	}
	r.mu.Unlock()
	var names []string
	for _, o := range snap.Objects {
		m, _ := meta.Accessor(o)
		names = append(names, m.GetName())
	}
	if fail {
		r.add("snapshot failed")
		return errors.New("snapshot store unavailable")
	}
	r.add(fmt.Sprintf("snapshot [%s]@%s", strings.Join(names, " "), snap.ResourceVersion))
	return nil
}

func (r *recorder) Event(_ context.Context, ev apiwatch.Event) error {
	m, _ := meta.Accessor(ev.Object)
	key := fmt.Sprintf("%s %s@%s", ev.Type, m.GetName(), m.GetResourceVersion())
	r.mu.Lock()
	fail := r.failEvent[key] > 0
	if fail {
		r.failEvent[key]--
	}
	r.mu.Unlock()
	if fail {
		r.add(key + " failed")
		return errors.New("handler: database unavailable")
	}
	r.add(key)
	return nil
}

func (r *recorder) StateChanged(s State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, s)
	r.stateAt = append(r.stateAt, time.Now())
	r.log = append(r.log, fmt.Sprintf("state %s/%s human=%v", s.Phase, s.Reason, s.NeedsHuman))
	if r.onState != nil {
		r.onState()
	}
}

func (r *recorder) SessionEnded(e SessionEnd) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endings = append(r.endings, e)
	r.log = append(r.log, fmt.Sprintf("end %s %s", e.Verdict.Outcome, e.Stage))
}

func (r *recorder) Log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log...)
}

// run starts s on its own goroutine inside a synctest bubble and returns a
// function that tears it down and waits for Run to return.
func run(t *testing.T, s *Stream) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil after teardown", err)
		}
	}
}

// newTestStream builds a stream whose backoff always waits its full cap, so
// that virtual times in tests are exact. Scripted ListerWatchers answer
// a List with the next script, whatever its options: unless a test sets
// CursorCheck, the stream does not check its cursor.
func newTestStream(t *testing.T, lw cache.ListerWatcher, rec *recorder, opts StreamOptions) *Stream {
	t.Helper()
	opts.Resource = configmaps
	opts.Observer = rec
	if opts.CursorCheck == 0 {
		opts.CursorCheck = -1
	}
	s, err := NewStream(lw, rec, opts)
	if err != nil {
		t.Fatalf("NewStream() = %v", err)
	}
	s.backoff.Rand = func() float64 { return 1 }
	return s
}

// watchOptions returns the options of each Watch call, in a compact form.
func watchCalls(lw *watchtest.ListerWatcher) []string {
	var out []string
	for _, c := range lw.Calls() {
		switch {
		case c.Kind == watchtest.CallList:
			out = append(out, "list")
		case c.Options.SendInitialEvents != nil && *c.Options.SendInitialEvents:
			out = append(out, "watch-list")
		default:
			out = append(out, "watch from "+c.Options.ResourceVersion)
		}
	}
	return out
}

var cm = watchtest.ConfigMap

// settle lets virtual time run on until every goroutine of the bubble is
// blocked for good: backoffs and deadlines within an hour have passed.
func settle() {
	time.Sleep(time.Hour)
	synctest.Wait()
}

// timed wraps lw to record, for each call, how long after start it came.
func timed(lw *watchtest.ListerWatcher) (*cache.ListWatch, func() []time.Duration) {
	var mu sync.Mutex
	var at []time.Duration
	start := time.Now()
	note := func() {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Since(start))
	}
	return &cache.ListWatch{
			ListFunc:  func(o metav1.ListOptions) (runtime.Object, error) { note(); return lw.List(o) },
			WatchFunc: func(o metav1.ListOptions) (apiwatch.Interface, error) { note(); return lw.Watch(o) },
		}, func() []time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return append([]time.Duration(nil), at...)
		}
}

func TestStreamResumesFromCursorAfterRoutineClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := watchtest.New(
			watchtest.Session{Events: []apiwatch.Event{
				watchtest.Added(cm("a", "2")), watchtest.Added(cm("b", "3")), watchtest.InitialEventsEnd("4"),
				watchtest.Modified(cm("a", "5")),
			}, Lasts: time.Minute},
			watchtest.Session{Events: []apiwatch.Event{watchtest.Bookmark("9")}, Lasts: time.Minute},
			watchtest.Session{Events: []apiwatch.Event{watchtest.Deleted(cm("b", "10"))}, Lasts: time.Minute},
		)
		rec := &recorder{}
		s := newTestStream(t, lw, rec, StreamOptions{})
		stop := run(t, s)
		settle()
		if got := s.Cursor(); got != "10" {
			t.Errorf("Cursor() = %q, want %q", got, "10")
		}
		stop()

		want := []string{
			"state Starting/Starting human=false",
			"state Replaying/InitialSync human=false",
			"snapshot [a b]@4",
			// Live once open for ShortSession after the replay.
			"MODIFIED a@5",
			"state Streaming/Watching human=false",
			"end closed Stream",
			"end closed Stream",
			"DELETED b@10",
			"end closed Stream",
			"end teardown Stream",
		}
		if diff := cmp.Diff(want, rec.Log()); diff != "" {
			t.Errorf("log mismatch (-want +got):\n%s", diff)
		}
		wantCalls := []string{"watch-list", "watch from 5", "watch from 9", "watch from 10"}
		if diff := cmp.Diff(wantCalls, watchCalls(lw)); diff != "" {
			t.Errorf("calls mismatch (-want +got):\n%s", diff)
		}
		for _, c := range lw.Calls() {
			if !c.Options.AllowWatchBookmarks {
				t.Errorf("call %+v does not ask for bookmarks", c.Options)
			}
		}
		if n := lw.Open(); n != 0 {
			t.Errorf("after teardown %d watches are still open, want 0", n)
		}
	})
}

func TestStreamStartsFromGivenCursor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := watchtest.New(watchtest.Session{Hang: true, Events: []apiwatch.Event{watchtest.Added(cm("c", "43"))}})
		rec := &recorder{}
		s := newTestStream(t, lw, rec, StreamOptions{Cursor: "42"})
		stop := run(t, s)
		settle()
		stop()
		if diff := cmp.Diff([]string{"watch from 42"}, watchCalls(lw)); diff != "" {
			t.Errorf("calls mismatch (-want +got):\n%s", diff)
		}
		want := []string{"state Starting/Starting human=false", "ADDED c@43", "state Streaming/Watching human=false", "end teardown Stream"}
		if diff := cmp.Diff(want, rec.Log()); diff != "" {
			t.Errorf("log mismatch (-want +got):\n%s", diff)
		}
	})
}

// The objects deleted while the cursor was expired reach the consumer as
// absence from the snapshot; the expiry is routine: a replay done within
// ReplayGrace publishes nothing.
func TestStreamExpiryReplaysAndSnapshotOmitsDeletes(t *testing.T) {
	for _, tt := range []struct {
		name    string
		expired watchtest.Session
	}{
		{"as an ERROR event", watchtest.Session{Events: []apiwatch.Event{watchtest.ErrorEvent(watchtest.Expired())}}},
		{"as an ERROR event with reason Gone", watchtest.Session{Events: []apiwatch.Event{watchtest.ErrorEvent(watchtest.Gone())}}},
		{"from the open", watchtest.Session{OpenErr: watchtest.Expired()}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lw := watchtest.New(
					watchtest.Session{Events: []apiwatch.Event{
						watchtest.Added(cm("a", "2")), watchtest.Added(cm("b", "3")), watchtest.InitialEventsEnd("3"),
						watchtest.Bookmark("4"),
					}, Lasts: time.Minute},
					tt.expired,
					// b was deleted while the cursor was expired.
					watchtest.Session{Hang: true, Events: []apiwatch.Event{
						watchtest.Added(cm("a", "2")), watchtest.Added(cm("c", "7")), watchtest.InitialEventsEnd("8"),
					}},
				)
				rec := &recorder{}
				s := newTestStream(t, lw, rec, StreamOptions{})
				stop := run(t, s)
				settle()
				stop()
				want := []string{
					"state Starting/Starting human=false",
					"state Replaying/InitialSync human=false",
					"snapshot [a b]@3",
					"state Streaming/Watching human=false",
					"end closed Stream",
					"end expired " + string(rec.endings[1].Stage),
					// A replay within ReplayGrace is not news: no state.
					"snapshot [a c]@8",
					"end teardown Stream",
				}
				if diff := cmp.Diff(want, rec.Log()); diff != "" {
					t.Errorf("log mismatch (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]string{"watch-list", "watch from 4", "watch-list"}, watchCalls(lw)); diff != "" {
					t.Errorf("calls mismatch (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// The grace of an expiry's replay runs even while the handler takes its
// time over the snapshot: the consumer's view is not whole until it returns.
func TestStreamReplayGraceCoversSlowSnapshotHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := watchtest.New(
			watchtest.Session{Events: []apiwatch.Event{watchtest.Bookmark("4"), watchtest.ErrorEvent(watchtest.Expired())}},
			watchtest.Session{Hang: true, Events: []apiwatch.Event{watchtest.Added(cm("a", "7")), watchtest.InitialEventsEnd("8")}},
		)
		var states []string
		start := time.Now()
		obs := ObserverFuncs{StateChangedFunc: func(st State) {
			states = append(states, fmt.Sprintf("%v %s/%s", time.Since(start), st.Phase, st.Reason))
		}}
		s, err := NewStream(lw, HandlerFuncs{SnapshotFunc: func(context.Context, Snapshot) error {
			time.Sleep(15 * time.Second) // a slow store
			return nil
		}}, StreamOptions{Resource: configmaps, Cursor: "3", Observer: obs, ReplaySpread: -1})
		if err != nil {
			t.Fatal(err)
		}
		stop := run(t, s)
		settle()
		stop()
		// The first session expired before it went live. Live
		// ShortSession after the snapshot (the handler returned at 15s),
		// once the watch has been quiet for a moment.
		want := []string{"0s Starting/Starting", "10s Replaying/ExpiredResourceVersion", "16.001s Streaming/Watching"}
		if diff := cmp.Diff(want, states); diff != "" {
			t.Errorf("states mismatch (-want +got):\n%s", diff)
		}
	})
}

// A stream started from a cursor that has expired replays quietly: it is
// not an initial sync, and a replay within ReplayGrace is not news.
func TestStreamStartingFromExpiredCursor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := watchtest.New(
			watchtest.Session{OpenErr: watchtest.Expired()},
			watchtest.Session{Hang: true, Events: []apiwatch.Event{watchtest.Added(cm("a", "7")), watchtest.InitialEventsEnd("8")}},
		)
		rec := &recorder{}
		stop := run(t, newTestStream(t, lw, rec, StreamOptions{Cursor: "5"}))
		settle()
		stop()
		var got []string
		for _, st := range rec.states {
			got = append(got, fmt.Sprintf("%s/%s", st.Phase, st.Reason))
		}
		if diff := cmp.Diff([]string{"Starting/Starting", "Streaming/Watching"}, got); diff != "" {
			t.Errorf("states mismatch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"watch from 5", "watch-list"}, watchCalls(lw)); diff != "" {
			t.Errorf("calls mismatch (-want +got):\n%s", diff)
		}
	})
}

// A replay after an expiry that outlasts ReplayGrace is published as
// Replaying, at the grace, and ends in Streaming.
func TestStreamSlowReplayAfterExpiryPublishesReplaying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The first replay never ends (no end bookmark) and times out at
		// 2 minutes; the one after it succeeds.
		lw := watchtest.New(
			watchtest.Session{Events: []apiwatch.Event{watchtest.Bookmark("1"), watchtest.ErrorEvent(watchtest.Expired())}},
			watchtest.Session{Hang: true, Events: []apiwatch.Event{watchtest.Added(cm("a", "2"))}},
			watchtest.Session{Hang: true},
		)
		lw.AddLists(watchtest.List{ResourceVersion: "9", Objects: []runtime.Object{cm("a", "2")}})
		rec := &recorder{}
		tlw, at := timed(lw)
		var publishedAt []time.Duration
		start := time.Now()
		rec.onState = func() { publishedAt = append(publishedAt, time.Since(start)) }
		s := newTestStream(t, tlw, rec, StreamOptions{Cursor: "1"})
		stop := run(t, s)
		settle()
		stop()
		var got []string
		for _, st := range rec.states {
			got = append(got, fmt.Sprintf("%s/%s", st.Phase, st.Reason))
		}
		want := []string{"Starting/Starting", "Replaying/ExpiredResourceVersion", "Blocked/ReplayTimedOut", "Streaming/Watching"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("states mismatch (-want +got):\n%s", diff)
		}
		if len(publishedAt) > 1 && publishedAt[1] != DefaultReplayGrace {
			t.Errorf("Replaying published at %v, want at the %v grace", publishedAt[1], DefaultReplayGrace)
		}
		if calls := at(); len(calls) != 4 {
			t.Errorf("calls at %v, want watch, watch-list, list, watch", calls)
		}
	})
}

func TestStreamFallsBackToListWhenWatchListRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := watchtest.New(watchtest.Session{Hang: true})
		lw.RefuseWatchList = true
		lw.AddLists(watchtest.List{ResourceVersion: "20", Objects: []runtime.Object{cm("z", "11"), cm("y", "12")}})
		rec := &recorder{}
		s := newTestStream(t, lw, rec, StreamOptions{})
		stop := run(t, s)
		settle()
		stop()
		if diff := cmp.Diff([]string{"watch-list", "list", "watch from 20"}, watchCalls(lw)); diff != "" {
			t.Errorf("calls mismatch (-want +got):\n%s", diff)
		}
		want := []string{
			"state Starting/Starting human=false",
			"state Replaying/InitialSync human=false",
			"snapshot [y z]@20",
			"state Streaming/Watching human=false",
			"end teardown Stream",
		}
		if diff := cmp.Diff(want, rec.Log()); diff != "" {
			t.Errorf("log mismatch (-want +got):\n%s", diff)
		}
		if got := lw.Calls()[1].Options.Limit; got != DefaultListPageSize {
			t.Errorf("list Limit = %d, want %d", got, DefaultListPageSize)
		}
	})
}

func TestStreamListExpiredReplaysAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := watchtest.New(watchtest.Session{Hang: true})
		lw.AddLists(watchtest.List{Err: watchtest.Expired()}, watchtest.List{ResourceVersion: "30", Objects: []runtime.Object{cm("a", "29")}})
		rec := &recorder{}
		s := newTestStream(t, lw, rec, StreamOptions{DisableWatchList: true})
		stop := run(t, s)
		settle()
		stop()
		if diff := cmp.Diff([]string{"list", "list", "watch from 30"}, watchCalls(lw)); diff != "" {
			t.Errorf("calls mismatch (-want +got):\n%s", diff)
		}
		if got := rec.endings[0]; got.Verdict.Outcome != OutcomeExpired || got.Stage != StageList {
			t.Errorf("first ending = %s at %s, want expired at List", got.Verdict.Outcome, got.Stage)
		}
	})
}

// A handler error ends the session; the same event is delivered again, from
// the cursor before it, after a backoff.
func TestStreamRedeliversAfterHandlerError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := watchtest.New(
			watchtest.Session{Events: []apiwatch.Event{watchtest.InitialEventsEnd("1"),
				watchtest.Added(cm("a", "2")), watchtest.Added(cm("b", "3")), watchtest.Added(cm("c", "4"))}},
			watchtest.Session{Hang: true, Events: []apiwatch.Event{watchtest.Added(cm("b", "3")), watchtest.Added(cm("c", "4"))}},
		)
		rec := &recorder{failEvent: map[string]int{"ADDED b@3": 1}}
		tlw, at := timed(lw)
		s := newTestStream(t, tlw, rec, StreamOptions{})
		stop := run(t, s)
		settle()
		stop()
		want := []string{
			"state Starting/Starting human=false",
			"state Replaying/InitialSync human=false",
			"snapshot []@1",
			"ADDED a@2",
			"ADDED b@3 failed",
			"end error Stream",
			"ADDED b@3",
			"ADDED c@4",
			// Live once the session that redelivered has been open for
			// ShortSession.
			"state Streaming/Watching human=false",
			"end teardown Stream",
		}
		if diff := cmp.Diff(want, rec.Log()); diff != "" {
			t.Errorf("log mismatch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"watch-list", "watch from 2"}, watchCalls(lw)); diff != "" {
			t.Errorf("calls mismatch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]time.Duration{0, DefaultInitialBackoff}, at()); diff != "" {
			t.Errorf("call times mismatch, want redelivery after one backoff step (-want +got):\n%s", diff)
		}
	})
}

func TestStreamRedeliversSnapshotAfterHandlerError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := watchtest.New(
			watchtest.Session{Events: []apiwatch.Event{watchtest.Added(cm("a", "2")), watchtest.InitialEventsEnd("2")}},
			watchtest.Session{Hang: true, Events: []apiwatch.Event{watchtest.Added(cm("a", "2")), watchtest.InitialEventsEnd("3")}},
		)
		rec := &recorder{failSnap: 1}
		s := newTestStream(t, lw, rec, StreamOptions{})
		stop := run(t, s)
		settle()
		stop()
		if diff := cmp.Diff([]string{"watch-list", "watch-list"}, watchCalls(lw)); diff != "" {
			t.Errorf("calls mismatch (-want +got):\n%s", diff)
		}
		if got, want := s.Cursor(), "3"; got != want {
			t.Errorf("Cursor() = %q, want %q", got, want)
		}
		log := rec.Log()
		if !contains(log, "snapshot failed") || !contains(log, "snapshot [a]@3") {
			t.Errorf("log = %q, want a failed snapshot then a delivered one", log)
		}
	})
}

// A Forbidden that heals within the grace (a RoleBinding applied with the
// controller) publishes nothing; one that persists publishes Blocked and
// needs a human; fixing it brings Streaming back.
func TestStreamNeedsHumanOnlyPastGrace(t *testing.T) {
	forbidden := watchtest.Session{OpenErr: watchtest.Forbidden()}
	t.Run("heals within the grace", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// Waits 1+2+4 s: trouble is 7 s when the fourth open succeeds.
			lw := watchtest.New(forbidden, forbidden, forbidden, watchtest.Session{Hang: true, Events: []apiwatch.Event{watchtest.InitialEventsEnd("5")}})
			rec := &recorder{}
			stop := run(t, newTestStream(t, lw, rec, StreamOptions{}))
			settle()
			stop()
			for _, st := range rec.states {
				if st.Phase == PhaseBlocked {
					t.Errorf("published %+v during a fresh-install grace, want no Blocked", st)
				}
			}
		})
	})
	t.Run("persists", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			lw := watchtest.New(forbidden, forbidden, forbidden, forbidden, forbidden, forbidden,
				watchtest.Session{Hang: true, Events: []apiwatch.Event{watchtest.InitialEventsEnd("5")}})
			rec := &recorder{}
			stop := run(t, newTestStream(t, lw, rec, StreamOptions{}))
			settle()
			stop()
			var got []string
			for _, st := range rec.states {
				got = append(got, fmt.Sprintf("%s/%s human=%v", st.Phase, st.Reason, st.NeedsHuman))
			}
			want := []string{"Starting/Starting human=false", "Replaying/InitialSync human=false",
				"Blocked/Forbidden human=true", "Streaming/Watching human=false"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("states mismatch (-want +got):\n%s", diff)
			}
			if !strings.Contains(rec.states[2].Message, "cannot list/watch resource") {
				t.Errorf("Blocked message = %q, want the server's reason", rec.states[2].Message)
			}
		})
	})
}

// refusedSessions returns n sessions whose watch fails to open: connection
// refused.
func refusedSessions(n int) []watchtest.Session {
	var out []watchtest.Session
	for range n {
		out = append(out, watchtest.Session{OpenErr: watchtest.ConnectionRefused()})
	}
	return out
}

func TestStreamTransientBlockedAfterGraceThenProgressDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := watchtest.New(append(refusedSessions(12), watchtest.Session{Hang: true, Events: []apiwatch.Event{watchtest.InitialEventsEnd("5")}})...)
		rec := &recorder{}
		stop := run(t, newTestStream(t, lw, rec, StreamOptions{}))
		settle()
		stop()
		var got []string
		for _, st := range rec.states {
			got = append(got, fmt.Sprintf("%s/%s human=%v", st.Phase, st.Reason, st.NeedsHuman))
		}
		// Full-cap waits 1, 2, 4, 8, 16, 32, 60, 60 ...: the 7th failure is
		// 63 s after the first (past the 30 s grace), the 10th 243 s, the
		// 12th 363 s (past the 5 min progress deadline).
		want := []string{"Starting/Starting human=false", "Replaying/InitialSync human=false",
			"Blocked/ConnectionFailed human=false", "Blocked/ProgressDeadlineExceeded human=true",
			"Streaming/Watching human=false"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("states mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestStreamHonoursRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw, at := timed(watchtest.New(watchtest.Session{OpenErr: watchtest.TooManyRequests(7)}, watchtest.Session{Hang: true}))
		rec := &recorder{}
		stop := run(t, newTestStream(t, lw, rec, StreamOptions{Cursor: "1"}))
		settle()
		stop()
		// After 7 s, by as much as the first backoff step (these tests
		// draw the largest jitter): streams told the same Retry-After do
		// not all come back at once.
		if diff := cmp.Diff([]time.Duration{0, 8 * time.Second}, at()); diff != "" {
			t.Errorf("watch call times mismatch (-want +got):\n%s", diff)
		}
	})
}

// Short empty closes at an unchanged cursor: one is routine, the second tries
// a replay, and when replays close the same way the stream is Flapping.
func TestStreamFlapping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		empty := watchtest.Session{}
		lw := watchtest.New(
			watchtest.Session{Events: []apiwatch.Event{watchtest.InitialEventsEnd("5"), watchtest.Modified(cm("a", "6"))}, Lasts: time.Minute},
			empty, empty, empty, empty,
			watchtest.Session{Hang: true, Events: []apiwatch.Event{watchtest.InitialEventsEnd("9")}},
		)
		rec := &recorder{}
		s := newTestStream(t, lw, rec, StreamOptions{})
		stop := run(t, s)
		settle()
		stop()
		// The first session went live (open for ShortSession after its
		// replay); then: a short close (resume at once), a second (replay),
		// a replay closing empty (Flapping), another, and, watch-lists
		// being cut twice in a row, a LIST+WATCH that works.
		wantCalls := []string{"watch-list", "watch from 6", "watch from 6", "watch-list", "watch-list", "list", "watch from 1"}
		if diff := cmp.Diff(wantCalls, watchCalls(lw)); diff != "" {
			t.Errorf("calls mismatch (-want +got):\n%s", diff)
		}
		var got []string
		for _, st := range rec.states {
			got = append(got, fmt.Sprintf("%s/%s", st.Phase, st.Reason))
		}
		want := []string{"Starting/Starting", "Replaying/InitialSync", "Streaming/Watching", "Blocked/Flapping", "Streaming/Watching"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("states mismatch (-want +got):\n%s", diff)
		}
	})
}

// A replay whose watch closes at once, however often, is not a healthy
// session: the stream resumes from the snapshot's cursor rather than
// replaying again, and is Flapping by the third.
func TestStreamReplayThatNeverGoesLiveFlaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sessions := []watchtest.Session{{Events: []apiwatch.Event{watchtest.Added(cm("a", "2")), watchtest.InitialEventsEnd("5")}}}
		for range 30 {
			sessions = append(sessions, watchtest.Session{})
		}
		lw := watchtest.New(sessions...)
		rec := &recorder{}
		stop := run(t, newTestStream(t, lw, rec, StreamOptions{}))
		time.Sleep(time.Minute)
		stop()
		var got []string
		for _, st := range rec.states {
			got = append(got, fmt.Sprintf("%s/%s", st.Phase, st.Reason))
		}
		want := []string{"Starting/Starting", "Replaying/InitialSync", "Blocked/Flapping"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("states mismatch (-want +got):\n%s", diff)
		}
		// One replay; every later watch resumes from its snapshot's cursor.
		if diff := cmp.Diff([]string{"watch-list", "watch from 5", "watch from 5", "watch from 5"}, watchCalls(lw)[:4]); diff != "" {
			t.Errorf("calls mismatch (-want +got):\n%s", diff)
		}
	})
}

// Leaving Blocked needs a sign of health: a session that stays open for
// ShortSession, even without events.
func TestStreamLeavesBlockedAfterQuietHealthySession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := watchtest.New(append(refusedSessions(7), watchtest.Session{Hang: true})...)
		rec := &recorder{}
		s := newTestStream(t, lw, rec, StreamOptions{Cursor: "5"})
		s.rand = func() float64 { return 1 }
		stop := run(t, s)
		// Failures at 0, 1, 3, 7 and 15 s, a look before the transient
		// grace at 25 s (drawn from the 5 s before the grace less 5 s:
		// three ShortSessions and two ReplaySpreads), 57 s (Blocked from
		// 30 s), then a wait of 60 s: the quiet session opens at 117 s.
		time.Sleep(117*time.Second + time.Second/2)
		synctest.Wait()
		if got := s.State().Phase; got != PhaseBlocked {
			t.Fatalf("State().Phase = %v after the quiet session opened, want Blocked until ShortSession passes", got)
		}
		time.Sleep(DefaultShortSession)
		synctest.Wait()
		if got := s.State().Phase; got != PhaseStreaming {
			t.Errorf("State().Phase = %v after a quiet ShortSession, want Streaming", got)
		}
		stop()
	})
}

// The look before the transient grace is one request: against a server
// that stays down the stream backs off as before. (Drawn again and again
// from what is left before the escalation, waits would come ever closer to
// it, ever shorter, and never reach it.) With every draw at its lowest for
// the look and its highest for backoff: failures at 0, 1, 3, 7 and 15 s,
// the look at 20 s (the earliest of its window: 30 s less twice 5 s), then
// backoff, 32 and 60 s.
func TestStreamLooksOnceBeforeTheGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := watchtest.New(refusedSessions(20)...)
		rec := &recorder{}
		tlw, at := timed(lw)
		s := newTestStream(t, tlw, rec, StreamOptions{Cursor: "5"})
		s.rand = func() float64 { return 0 }
		stop := run(t, s)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		stop()
		want := []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second, 15 * time.Second, 20 * time.Second, 52 * time.Second, 112 * time.Second}
		if diff := cmp.Diff(want, at()); diff != "" {
			t.Errorf("call times mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestStreamReplayDeadlineFallsBackToList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A server that ignores sendInitialEvents: events, never the end.
		lw := watchtest.New(watchtest.Session{Hang: true, Events: []apiwatch.Event{watchtest.Bookmark("3")}}, watchtest.Session{Hang: true})
		lw.AddLists(watchtest.List{ResourceVersion: "4", Objects: []runtime.Object{cm("a", "4")}})
		rec := &recorder{}
		tlw, at := timed(lw)
		s := newTestStream(t, tlw, rec, StreamOptions{ReplayTimeout: 10 * time.Second})
		stop := run(t, s)
		settle()
		stop()
		if diff := cmp.Diff([]string{"watch-list", "list", "watch from 4"}, watchCalls(lw)); diff != "" {
			t.Errorf("calls mismatch (-want +got):\n%s", diff)
		}
		// The list comes after the replay timeout plus one backoff step.
		if diff := cmp.Diff([]time.Duration{0, 11 * time.Second, 11 * time.Second}, at()); diff != "" {
			t.Errorf("call times mismatch (-want +got):\n%s", diff)
		}
		// Within the transient grace: still Replaying, then Streaming once
		// the watch after the LIST is live.
		var got []string
		for _, st := range rec.states {
			got = append(got, fmt.Sprintf("%s/%s", st.Phase, st.Reason))
		}
		want := []string{"Starting/Starting", "Replaying/InitialSync", "Streaming/Watching"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("states mismatch (-want +got):\n%s", diff)
		}
	})
}

// What a stream does with input a real server never sends. Bad input is
// graded, never panics, and never moves the cursor: the next session
// resumes from the last good resourceVersion. What fakes send is tolerated,
// as client-go's reflector tolerates it: an object without a
// resourceVersion (client-go's fake clientset stores them so) is delivered
// and moves nothing; a bookmark without one and an event of an unknown
// type are skipped, and the session goes on.
func TestStreamOnInputNoServerSends(t *testing.T) {
	noRV := cm("x", "")
	tests := []struct {
		name string
		ev   apiwatch.Event
		// want is the first ending's outcome, calls the watches' cursors.
		want      Outcome
		calls     []string
		delivered bool
	}{
		{"nil object", apiwatch.Event{Type: apiwatch.Added}, OutcomeError, []string{"watch from 5", "watch from 6"}, false},
		{"object without metadata", apiwatch.Event{Type: apiwatch.Added, Object: &runtime.Unknown{}}, OutcomeError, []string{"watch from 5", "watch from 6"}, false},
		{"ERROR with a non-Status object", apiwatch.Event{Type: apiwatch.Error, Object: cm("x", "9")}, OutcomeError, []string{"watch from 5", "watch from 6"}, false},
		{"ERROR with nil object", apiwatch.Event{Type: apiwatch.Error}, OutcomeError, []string{"watch from 5", "watch from 6"}, false},
		{"no resourceVersion", watchtest.Modified(noRV), OutcomeClosed, []string{"watch from 5", "watch from 7"}, true},
		{"bookmark without resourceVersion", apiwatch.Event{Type: apiwatch.Bookmark, Object: noRV}, OutcomeClosed, []string{"watch from 5", "watch from 7"}, false},
		{"unknown type", apiwatch.Event{Type: "SURPRISE", Object: cm("x", "9")}, OutcomeClosed, []string{"watch from 5", "watch from 7"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lw := watchtest.New(
					watchtest.Session{Events: []apiwatch.Event{watchtest.Added(cm("a", "6")), tt.ev, watchtest.Added(cm("b", "7"))}},
					watchtest.Session{Hang: true},
				)
				rec := &recorder{}
				s := newTestStream(t, lw, rec, StreamOptions{Cursor: "5"})
				stop := run(t, s)
				settle()
				stop()
				if diff := cmp.Diff(tt.calls, watchCalls(lw)); diff != "" {
					t.Errorf("calls mismatch (-want +got):\n%s", diff)
				}
				e := rec.endings[0]
				if e.Verdict.Outcome != tt.want || (tt.want == OutcomeError) != (e.Err != nil) {
					t.Errorf("first ending = %s (err %v), want %s", e.Verdict.Outcome, e.Err, tt.want)
				}
				if tt.want == OutcomeError && e.Verdict.Class != ClassTransient {
					t.Errorf("ending class = %s, want %s", e.Verdict.Class, ClassTransient)
				}
				if got := contains(rec.Log(), "MODIFIED x@"); got != tt.delivered {
					t.Errorf("delivered the event: %v, want %v", got, tt.delivered)
				}
			})
		})
	}
}

func TestStreamTeardownDuringBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := watchtest.New(watchtest.Session{OpenErr: watchtest.ConnectionRefused()})
		rec := &recorder{}
		s := newTestStream(t, lw, rec, StreamOptions{Cursor: "5", InitialBackoff: time.Hour, MaxBackoff: time.Hour})
		stop := run(t, s)
		synctest.Wait()
		stop() // returns without waiting out the hour
		if n := len(lw.Calls()); n != 1 {
			t.Errorf("%d calls, want 1", n)
		}
	})
}

func TestStreamRunTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStream(t, watchtest.New(), &recorder{}, StreamOptions{Cursor: "1"})
		stop := run(t, s)
		synctest.Wait()
		if err := s.Run(t.Context()); !errors.Is(err, ErrAlreadyRunning) {
			t.Errorf("second Run() = %v, want ErrAlreadyRunning", err)
		}
		stop()
		// Stopped: it may run again, from its cursor.
		stop = run(t, s)
		settle()
		stop()
	})
}

func TestNewStreamRejectsBadInput(t *testing.T) {
	lw := watchtest.New()
	h := HandlerFuncs{}
	tests := []struct {
		name string
		lw   cache.ListerWatcher
		h    Handler
		opts StreamOptions
		want error
	}{
		{"nil ListerWatcher", nil, h, StreamOptions{Resource: configmaps}, ErrNilListerWatcher},
		{"nil Handler", lw, nil, StreamOptions{Resource: configmaps}, ErrNilHandler},
		{"no Resource", lw, h, StreamOptions{}, ErrNoResource},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewStream(tt.lw, tt.h, tt.opts)
			if !errors.Is(err, tt.want) || s != nil {
				t.Errorf("NewStream() = %v, %v; want nil, %v", s, err, tt.want)
			}
		})
	}
}

func TestStreamCursorIsSafeForConcurrentUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var events []apiwatch.Event
		for i := range 100 {
			events = append(events, watchtest.Added(cm(fmt.Sprint("o", i), fmt.Sprint(10+i))))
		}
		lw := watchtest.New(watchtest.Session{Hang: true, Events: events})
		s := newTestStream(t, lw, &recorder{}, StreamOptions{Cursor: "1"})
		stop := run(t, s)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 100 {
				_ = s.Cursor()
				_ = s.State()
			}
		}()
		<-done
		synctest.Wait()
		if got := s.Cursor(); got != "109" {
			t.Errorf("Cursor() = %q, want 109", got)
		}
		stop()
	})
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}
