package watch

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// TestWhenASessionIsLive is the package doc's table "When a session is
// live", row by row; the rows here and the doc's are the same set. The
// first five are played on the liveness a session and an instrumented
// informer's watch share, the last two on a Stream, whose session alone
// watches its handler and checks its cursor.
func TestWhenASessionIsLive(t *testing.T) {
	const short = DefaultShortSession
	ev := func(typ apiwatch.EventType) apiwatch.Event {
		return apiwatch.Event{Type: typ, Object: watchtest.ConfigMap("a", "")}
	}
	// ranOut is a liveness whose count has run out, and its results.
	ranOut := func() (*liveness, chan apiwatch.Event) {
		l := &liveness{clock: clock.RealClock{}, short: short}
		l.count()
		time.Sleep(short)
		synctest.Wait()
		l.poll()
		return l, make(chan apiwatch.Event, 8)
	}
	tests := []struct {
		row  string
		play func(t *testing.T)
	}{{
		row: "no event within a millisecond (quiet)",
		play: func(t *testing.T) {
			l, results := ranOut()
			if _, _, got, _, live := l.take(results); got || !live {
				t.Errorf("take() of a quiet watch: got %v, live %v; want nothing, live", got, live)
			}
		},
	}, {
		row: "an event, not a close or an ERROR, after ShortSession more",
		play: func(t *testing.T) {
			l, results := ranOut()
			// Nothing waiting when the consumer asks; an event half a
			// millisecond later: caught up, not live yet.
			go func() { time.Sleep(settleWait / 2); results <- ev(apiwatch.Modified) }()
			if _, _, got, _, live := l.take(results); !got || live {
				t.Fatalf("take() of an event that came within the millisecond: got %v, live %v; want it, not live", got, live)
			}
			for range 3 {
				time.Sleep(short / 2)
				results <- ev(apiwatch.Modified)
				_, _, got, _, live := l.take(results)
				if !got {
					t.Fatal("take() lost an event")
				}
				if live {
					if since := time.Since(l.openedAt); since < short {
						t.Errorf("live %v after the count ran out, want ShortSession (%v) more", since, short)
					}
					return
				}
			}
			t.Errorf("not live after %v of events a consumer keeps up with", 3*short/2)
		},
	}, {
		row: "an event the consumer found waiting every time it asked",
		play: func(t *testing.T) {
			l, results := ranOut()
			for range 20 {
				results <- ev(apiwatch.Modified)
				results <- ev(apiwatch.Modified)
				if _, _, _, _, live := l.take(results); live {
					t.Fatalf("live %v after the count ran out with a backlog every time the consumer asked", time.Since(l.openedAt))
				}
				time.Sleep(short / 4)
				<-results
			}
		},
	}, {
		row: "a close or an ERROR",
		play: func(t *testing.T) {
			for _, last := range []string{"close", "ERROR"} {
				l, results := ranOut()
				go func() { time.Sleep(settleWait / 2); results <- ev(apiwatch.Modified) }()
				l.take(results) // caught up
				time.Sleep(short)
				if last == "close" {
					close(results)
				} else {
					results <- ev(apiwatch.Error)
				}
				if _, _, got, _, live := l.take(results); !got || live {
					t.Errorf("take() of a %s ShortSession after catching up: got %v, live %v; want it, not live", last, got, live)
				}
			}
		},
	}, {
		row: "the consumer held an event ShortSession or more",
		play: func(t *testing.T) {
			l, results := ranOut()
			held := time.Now()
			time.Sleep(short)
			l.held(held)
			if l.opened || l.timer == nil {
				t.Fatalf("after a held event: opened %v, counting %v; want counting again", l.opened, l.timer != nil)
			}
			time.Sleep(short - time.Millisecond)
			synctest.Wait()
			if l.poll(); l.opened {
				t.Fatal("the count ran out before ShortSession from the held event's return")
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			if l.poll(); !l.opened {
				t.Fatal("the count has not run out ShortSession after the held event's return")
			}
			if _, _, _, _, live := l.take(results); !live {
				t.Error("not live once the count ran out again, quiet")
			}
		},
	}, {
		row: "a stream's consumer stall was published",
		play: func(t *testing.T) {
			srv := watchtest.NewServer(watchtest.ServerOptions{})
			release := make(chan struct{})
			rec := &recorder{}
			h := HandlerFuncs{
				SnapshotFunc: func(context.Context, Snapshot) error { return nil },
				EventFunc: func(context.Context, apiwatch.Event) error {
					<-release
					return nil
				},
			}
			s, err := NewStream(srv, h, StreamOptions{Resource: configmaps, Observer: rec})
			if err != nil {
				t.Fatal(err)
			}
			stop := run(t, s)
			time.Sleep(time.Minute)
			if _, err := srv.Create(watchtest.ConfigMap("a", "")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(DefaultTransientGrace + time.Minute)
			returned := time.Now()
			close(release)
			time.Sleep(time.Minute)
			stop()
			var got []string
			for _, st := range rec.states {
				got = append(got, string(st.Phase)+"/"+string(st.Reason))
			}
			if want := []string{"Starting/Starting", "Replaying/InitialSync", "Streaming/Watching", "Blocked/HandlerStalled", "Streaming/Watching"}; !cmp.Equal(want, got) {
				t.Fatalf("states %v, want %v", got, want)
			}
			backAt := rec.stateAt[len(rec.stateAt)-1].Sub(returned)
			if backAt < short || backAt > short+10*time.Millisecond {
				t.Errorf("Streaming again %v after the stalled call returned, want ShortSession (%v)", backAt, short)
			}
		},
	}, {
		row: "in doubt, resumed from a cursor the server has not confirmed",
		play: func(t *testing.T) {
			// No bookmarks: the event confirms it.
			srv := watchtest.NewServer(watchtest.ServerOptions{BookmarkInterval: -1})
			if _, err := srv.Create(watchtest.ConfigMap("a", "")); err != nil {
				t.Fatal(err)
			}
			// Nor an answer to the check of the cursor: its LIST fails.
			lw := &cache.ListWatch{
				ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
					return nil, apierrors.NewServiceUnavailable("not now")
				},
				WatchFunc: srv.Watch,
			}
			rec := &recorder{}
			s, err := NewStream(lw, rec, StreamOptions{Resource: configmaps, Observer: rec, Cursor: srv.ResourceVersion(), CursorCheck: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			stop := run(t, s)
			time.Sleep(20 * time.Second)
			if _, err := srv.Update(watchtest.ConfigMap("a", "")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			stop()
			if n := len(rec.states); n == 0 || rec.states[n-1].Phase != PhaseStreaming {
				t.Fatalf("states %v, want Streaming last", rec.states)
			}
			if at := rec.stateAt[len(rec.stateAt)-1].Sub(start); at < 20*time.Second || at > 20*time.Second+10*time.Millisecond {
				t.Errorf("Streaming %v after the start from a cursor in doubt, want when the server confirmed it (an event at 20s)", at)
			}
		},
	}}
	var rows []string
	for _, tt := range tests {
		rows = append(rows, tt.row)
		t.Run(tt.row, func(t *testing.T) { synctest.Test(t, tt.play) })
	}
	if diff := cmp.Diff(docTable(t, "once the count has run out", 1), rows); diff != "" {
		t.Errorf("rows of the doc's table \"When a session is live\" (-doc +test):\n%s", diff)
	}
}
