package watch_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"

	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// What a replay asks the server for: the resourceVersion and match of the
// request that starts it (a watch-list, or a LIST's first page).
type replayAsk struct {
	Call            string // "watch-list" or "list"
	ResourceVersion string
	Match           metav1.ResourceVersionMatch
}

func replayAsks(calls []watchtest.Call) []replayAsk {
	var out []replayAsk
	for _, c := range calls {
		o := c.Options
		switch {
		case c.Kind == watchtest.CallList && o.Limit == 1 && o.TimeoutSeconds != nil:
			// A check of the cursor, not a replay.
		case c.Kind == watchtest.CallList && o.Continue == "":
			out = append(out, replayAsk{"list", o.ResourceVersion, o.ResourceVersionMatch})
		case c.Kind == watchtest.CallWatch && o.SendInitialEvents != nil && *o.SendInitialEvents:
			out = append(out, replayAsk{"watch-list", o.ResourceVersion, o.ResourceVersionMatch})
		}
	}
	return out
}

func TestReplayAfterExpiryAsksTheWatchCache(t *testing.T) {
	live410 := watchtest.Session{Events: []apiwatch.Event{watchtest.Bookmark("4"), watchtest.ErrorEvent(watchtest.Expired())}}
	replayed := watchtest.Session{Hang: true, Events: []apiwatch.Event{watchtest.Added(rlCM("a", "7")), watchtest.InitialEventsEnd("8")}}
	notOlder := metav1.ResourceVersionMatchNotOlderThan
	tests := []struct {
		name     string
		sessions []watchtest.Session
		opts     wgwatch.StreamOptions
		want     []replayAsk
	}{{
		name:     "after a 410 the replay asks for a state not older than the expired cursor",
		sessions: []watchtest.Session{live410, replayed},
		want:     []replayAsk{{"watch-list", "4", notOlder}},
	}, {
		name: "a 410 with reason Gone is the same",
		sessions: []watchtest.Session{
			{Events: []apiwatch.Event{watchtest.Bookmark("4"), watchtest.ErrorEvent(watchtest.Gone())}}, replayed},
		want: []replayAsk{{"watch-list", "4", notOlder}},
	}, {
		name:     "a 410 at open, from the starting cursor",
		sessions: []watchtest.Session{{OpenErr: watchtest.Expired()}, replayed},
		want:     []replayAsk{{"watch-list", "3", notOlder}},
	}, {
		name:     "ConsistentReplays asks for the latest",
		sessions: []watchtest.Session{live410, replayed},
		opts:     wgwatch.StreamOptions{ConsistentReplays: true},
		want:     []replayAsk{{"watch-list", "", notOlder}},
	}, {
		name: "a cursor ahead of the server (504 too large) replays from the latest",
		sessions: []watchtest.Session{
			{Events: []apiwatch.Event{watchtest.Bookmark("4"), watchtest.ErrorEvent(watchtest.TooLargeResourceVersion())}}, replayed},
		want: []replayAsk{{"watch-list", "", notOlder}},
	}, {
		name: "a replay from the watch cache that fails is followed by one from the latest",
		sessions: []watchtest.Session{live410,
			{OpenErr: watchtest.TooLargeResourceVersion()},
			replayed},
		want: []replayAsk{{"watch-list", "4", notOlder}, {"watch-list", "", notOlder}},
	}, {
		name: "a replay from the watch cache refused for load (429) asks the watch cache again",
		sessions: []watchtest.Session{live410,
			{OpenErr: watchtest.TooManyRequests(1)},
			{OpenErr: watchtest.ConnectionRefused()},
			replayed},
		want: []replayAsk{{"watch-list", "4", notOlder}, {"watch-list", "4", notOlder}, {"watch-list", "4", notOlder}},
	}, {
		name: "a replay from the watch cache cut before its end asks the watch cache again",
		sessions: []watchtest.Session{live410,
			{Events: []apiwatch.Event{watchtest.Added(rlCM("a", "7"))}},
			replayed},
		want: []replayAsk{{"watch-list", "4", notOlder}, {"watch-list", "4", notOlder}},
	}, {
		name: "a replay from the watch cache that the server refuses is followed by one from the latest",
		sessions: []watchtest.Session{live410,
			{OpenErr: watchtest.Forbidden()},
			replayed},
		want: []replayAsk{{"watch-list", "4", notOlder}, {"watch-list", "", notOlder}},
	}, {
		name: "a transient failure after the replay's snapshot: the next expiry asks from the new cursor",
		sessions: []watchtest.Session{live410,
			{Events: []apiwatch.Event{watchtest.Added(rlCM("a", "7")), watchtest.InitialEventsEnd("8"), watchtest.ErrorEvent(watchtest.ServiceUnavailable())}},
			{OpenErr: watchtest.Expired()},
			replayed},
		want: []replayAsk{{"watch-list", "4", notOlder}, {"watch-list", "8", notOlder}},
	}, {
		name: "only the first replay after the 410: a second expiry of the replayed cursor asks from it",
		sessions: []watchtest.Session{live410,
			{Events: []apiwatch.Event{watchtest.Added(rlCM("a", "7")), watchtest.InitialEventsEnd("8"), watchtest.Bookmark("9"), watchtest.ErrorEvent(watchtest.Expired())}},
			replayed},
		want: []replayAsk{{"watch-list", "4", notOlder}, {"watch-list", "9", notOlder}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lw := watchtest.New(tt.sessions...)
				opts := tt.opts
				opts.Resource, opts.Cursor = rlConfigMaps, "3"
				s, err := wgwatch.NewStream(lw, wgwatch.HandlerFuncs{}, opts)
				if err != nil {
					t.Fatal(err)
				}
				stop := runStream(t, s)
				time.Sleep(time.Hour)
				synctest.Wait()
				stop()
				if diff := cmp.Diff(tt.want, replayAsks(lw.Calls())); diff != "" {
					t.Errorf("replays asked (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// A LIST+WATCH replay after a 410 asks the watch cache on its first page
// only: the pages after it follow their continue token, which must not
// carry a resourceVersion.
func TestListReplayAfterExpiryAsksTheWatchCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := watchtest.NewServer(watchtest.ServerOptions{})
		for i := range 5 {
			if _, err := srv.Create(rlCM(fmt.Sprintf("cm-%d", i), "")); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		var snaps []int
		s, err := wgwatch.NewStream(srv, wgwatch.HandlerFuncs{SnapshotFunc: func(_ context.Context, snap wgwatch.Snapshot) error {
			mu.Lock()
			defer mu.Unlock()
			snaps = append(snaps, len(snap.Objects))
			return nil
		}}, wgwatch.StreamOptions{Resource: rlConfigMaps, DisableWatchList: true, ListPageSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		stop := runStream(t, s)
		time.Sleep(time.Minute)
		synctest.Wait()
		cursor := s.Cursor()
		srv.AdvanceRevision(1)
		srv.Restart()
		time.Sleep(time.Minute)
		synctest.Wait()
		stop()

		var got []string
		for _, r := range srv.Requests() {
			if r.Kind == watchtest.CallList && !(r.Options.Limit == 1 && r.Options.TimeoutSeconds != nil) { // not a check of the cursor
				got = append(got, fmt.Sprintf("rv=%q match=%q continue=%t", r.Options.ResourceVersion, r.Options.ResourceVersionMatch, r.Options.Continue != ""))
			}
		}
		first := `rv="" match="" continue=false`
		next := `rv="" match="" continue=true`
		want := []string{first, next, next, fmt.Sprintf("rv=%q match=%q continue=false", cursor, metav1.ResourceVersionMatchNotOlderThan), next, next}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("LIST requests (-want +got):\n%s", diff)
		}
		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff([]int{5, 5}, snaps); diff != "" {
			t.Errorf("snapshot sizes (-want +got):\n%s", diff)
		}
	})
}

// An apiserver restart expires every cursor at once. The streams replay
// spread over ReplaySpread, each from the watch cache, and all are live
// again well within ReplayGrace, publishing nothing; with ReplaySpread
// off they all replay in the same instant.
func TestReplaysAfterRestartAreSpread(t *testing.T) {
	const streams = 300
	tests := []struct {
		name   string
		spread time.Duration
		// The replays start in [from, to) after the restart, at random:
		// about half of them in each half of it.
		from, to time.Duration
	}{
		{name: "default", spread: 0, from: wgwatch.DefaultReplaySpread / 2, to: 3 * wgwatch.DefaultReplaySpread / 2},
		{name: "3s", spread: 3 * time.Second, from: 1500 * time.Millisecond, to: 4500 * time.Millisecond},
		// Off: all in the same instant, the simulated server's 1 ms to
		// answer the resume with a 410.
		{name: "off", spread: -1, from: 0, to: 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// No not-ready phase: the spread alone. (With one, every
				// stream is told the same Retry-After; see issue 22's
				// note.)
				srv := watchtest.NewServer(watchtest.ServerOptions{RestartNotReady: -1})
				if _, err := srv.Create(rlCM("a", "")); err != nil {
					t.Fatal(err)
				}
				var mu sync.Mutex
				var published []string
				var stops []func()
				for i := range streams {
					name := "s" + strconv.Itoa(i)
					s, err := wgwatch.NewStream(srv, wgwatch.HandlerFuncs{}, wgwatch.StreamOptions{
						Resource: rlConfigMaps, Name: name, ReplaySpread: tt.spread,
						Observer: wgwatch.ObserverFuncs{StateChangedFunc: func(st wgwatch.State) {
							mu.Lock()
							defer mu.Unlock()
							published = append(published, fmt.Sprintf("%s %s/%s", name, st.Phase, st.Reason))
						}},
					})
					if err != nil {
						t.Fatal(err)
					}
					stops = append(stops, runStream(t, s))
				}
				time.Sleep(time.Minute)
				synctest.Wait()
				cursor := srv.ResourceVersion()
				mu.Lock()
				published = nil
				mu.Unlock()

				srv.AdvanceRevision(1)
				restart := time.Now()
				srv.Restart()
				time.Sleep(time.Minute)
				synctest.Wait()
				for _, stop := range stops {
					stop()
				}

				var starts []time.Duration
				for _, r := range srv.Requests() {
					o := r.Options
					if r.At.Before(restart) || r.Kind != watchtest.CallWatch || o.SendInitialEvents == nil || !*o.SendInitialEvents {
						continue
					}
					if o.ResourceVersion != cursor || o.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan {
						t.Errorf("replay asked for resourceVersion %q (%s), want %q (NotOlderThan): the expired cursor", o.ResourceVersion, o.ResourceVersionMatch, cursor)
					}
					starts = append(starts, r.At.Sub(restart))
				}
				if len(starts) != streams {
					t.Fatalf("%d replays after the restart, want %d", len(starts), streams)
				}
				late := 0
				for _, d := range starts {
					// The spread, plus the simulated server's 1 ms to
					// answer the resume with a 410 first.
					if d < tt.from || d >= tt.to+2*time.Millisecond {
						t.Errorf("a replay started %v after the restart, want in [%v, %v)", d, tt.from, tt.to)
						break
					}
					if d >= (tt.from+tt.to)/2 {
						late++
					}
				}
				// Uniform over the spread, a half holds about half the
				// replays: fewer than a quarter is not spread.
				if tt.spread >= 0 && (late < streams/4 || late > 3*streams/4) {
					t.Errorf("%d of %d replays started in the second half of [%v, %v), want about half", late, streams, tt.from, tt.to)
				}
				mu.Lock()
				defer mu.Unlock()
				if len(published) > 0 {
					t.Errorf("published after the restart: %v, want nothing (every stream live again within ReplayGrace)", published[:min(len(published), 5)])
				}
			})
		})
	}
}

// The first replay of a stream that starts without a cursor is not
// delayed: the spread is for replays that many streams make at once
// after an expiry, and time to the first snapshot is what a starting
// controller waits for.
func TestFirstReplayIsNotDelayed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := watchtest.NewServer(watchtest.ServerOptions{})
		start := time.Now()
		s, err := wgwatch.NewStream(srv, wgwatch.HandlerFuncs{}, wgwatch.StreamOptions{Resource: rlConfigMaps})
		if err != nil {
			t.Fatal(err)
		}
		stop := runStream(t, s)
		time.Sleep(time.Minute)
		synctest.Wait()
		stop()
		reqs := srv.Requests()
		if len(reqs) == 0 {
			t.Fatal("no request")
		}
		if got := reqs[0].At.Sub(start); got != 0 {
			t.Errorf("first replay %v after the start, want at once", got)
		}
		if got := reqs[0].Options.ResourceVersion; got != "" {
			t.Errorf("first replay from resourceVersion %q, want the latest", got)
		}
	})
}

var (
	rlCM         = watchtest.ConfigMap
	rlConfigMaps = schema.GroupResource{Resource: "configmaps"}
)
