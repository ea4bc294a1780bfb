package watch_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// The tests in this file are about health over time: each holds one way a
// stream used to break the promise over a longer history than a scripted
// scenario covers.

func newServer(t *testing.T, opts watchtest.ServerOptions, names ...string) *watchtest.Server {
	t.Helper()
	s := watchtest.NewServer(opts)
	for _, n := range names {
		if _, err := s.Create(watchtest.ConfigMap(n, "")); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func newStream(t *testing.T, lw cache.ListerWatcher, p *probe, opts wgwatch.StreamOptions) *wgwatch.Stream {
	t.Helper()
	opts.Resource = configmaps
	opts.Observer = p
	s, err := wgwatch.NewStream(lw, p, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// replays counts the full replays a server served: first pages of LISTs
// and watch-lists.
func replays(reqs []watchtest.Request) int {
	return len(replayTimes(reqs, time.Time{}))
}

// A proxy that ends every watch at once, after the replay's snapshot, used
// to make every replay count as a healthy session: hundreds of replays,
// Streaming all along.
func TestReplayLoopIsNotHealthy(t *testing.T) {
	for _, disable := range []bool{false, true} {
		t.Run(fmt.Sprintf("DisableWatchList=%v", disable), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newServer(t, watchtest.ServerOptions{}, "a", "b", "c")
				srv.SetFaults(watchtest.Faults{WatchLifetime: time.Millisecond})
				p := newProbe()
				stop := runStream(t, newStream(t, srv, p, wgwatch.StreamOptions{DisableWatchList: disable}))
				time.Sleep(10 * time.Minute)
				stop()
				// At most 3 at once, then one per MaxBackoff.
				if n, bound := replays(srv.Requests()), 3+10; n > bound {
					t.Errorf("%d replays in 10 minutes, want at most %d", n, bound)
				}
				if n := p.published(wgwatch.PhaseStreaming); n != 0 {
					t.Errorf("Streaming published %d times though no session ever went live:%s", n, p.stateLog())
				}
				if st := p.stateAt(10 * time.Minute); st.Phase != wgwatch.PhaseBlocked || !st.NeedsHuman {
					t.Errorf("state after 10 minutes of futile replays = %s/%s human=%v, want Blocked needing a human:%s", st.Phase, st.Reason, st.NeedsHuman, p.stateLog())
				}
			})
		})
	}
}

// A LIST+WATCH replay whose watch gets a 410 at once used to loop without
// backoff (the 410 came at StageOpen, which backed off only for replays)
// and never escalate (expired endings were exempt from the deadline).
func TestListWatchReplayWhoseWatchExpiresBacksOffAndEscalates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := watchtest.New()
		lw.RefuseWatchList = true
		for range 500 {
			lw.AddSessions(watchtest.Session{Events: []apiwatch.Event{watchtest.ErrorEvent(watchtest.Expired())}})
		}
		p := newProbe()
		stop := runStream(t, newStream(t, lw, p, wgwatch.StreamOptions{}))
		time.Sleep(30 * time.Minute)
		stop()
		lists := 0
		for _, c := range lw.Calls() {
			// A LIST of one object with a timeoutSeconds is a check of
			// the cursor, not a replay.
			if c.Kind == watchtest.CallList && c.Options.TimeoutSeconds == nil {
				lists++
			}
		}
		if bound := 3 + 30; lists > bound {
			t.Errorf("%d LISTs in 30 minutes, want at most %d", lists, bound)
		}
		if n := p.published(wgwatch.PhaseStreaming); n != 0 {
			t.Errorf("Streaming published %d times, but no watch ever went live:%s", n, p.stateLog())
		}
		if at := p.firstNeedsHuman(); at < 0 || at > wgwatch.DefaultProgressDeadline+time.Second {
			t.Errorf("NeedsHuman first published at %v, want by the progress deadline (%v):%s", at, wgwatch.DefaultProgressDeadline, p.stateLog())
		}
	})
}

// Sessions that stream live for 40 minutes and then end in an error (an
// HTTP/2 stream reset) used to count as failures in a row: Trouble grew
// from the first one, past the progress deadline, and the backoff never
// reset.
func TestProductiveSessionsEndingInErrorStayHealthy(t *testing.T) {
	reset := apierrors.NewInternalError(errors.New("unable to decode an event from the watch stream: stream error: stream ID 5; INTERNAL_ERROR"))
	script := func(t *testing.T, srv *watchtest.Server) (failedAt []time.Time) {
		for minute := 1; minute <= 130; minute++ {
			time.Sleep(time.Minute)
			if _, err := srv.Update(watchtest.ConfigMap("a", "")); err != nil {
				t.Fatal(err)
			}
			if minute%40 == 0 {
				srv.FailWatches(reset)
				failedAt = append(failedAt, time.Now())
			}
		}
		return failedAt
	}
	t.Run("Stream", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := newServer(t, watchtest.ServerOptions{}, "a")
			p := newProbe()
			stop := runStream(t, newStream(t, srv, p, wgwatch.StreamOptions{}))
			failedAt := script(t, srv)
			stop()
			if n := p.published(wgwatch.PhaseBlocked); n != 0 {
				t.Errorf("Blocked published %d times:%s", n, p.stateLog())
			}
			// After each reset the backoff starts over: the next watch opens
			// within InitialBackoff.
			for _, at := range failedAt {
				next := time.Time{}
				for _, r := range srv.Requests() {
					if r.Kind == watchtest.CallWatch && r.At.After(at) {
						next = r.At
						break
					}
				}
				if next.IsZero() || next.Sub(at) > wgwatch.DefaultInitialBackoff {
					t.Errorf("after the reset at %v the next watch opened %v later, want within %v", at.Sub(p.start), next.Sub(at), wgwatch.DefaultInitialBackoff)
				}
			}
		})
	})
	t.Run("Instrument", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := newServer(t, watchtest.ServerOptions{}, "a")
			p := newProbe()
			stop, _, _ := runInformer(t, srv, p)
			script(t, srv)
			stop()
			if at := p.firstNeedsHuman(); at >= 0 {
				t.Errorf("NeedsHuman published at %v:%s", at, p.stateLog())
			}
		})
	})
}

// runInformer runs a client-go informer over an instrumented lw until the
// returned stop is called, which waits for it to return; it returns the
// informer's store and the instrumented ListerWatcher's State too.
func runInformer(t *testing.T, lw cache.ListerWatcher, p *probe) (stop func(), store cache.Store, state func() wgwatch.State) {
	t.Helper()
	return runSeededInformer(t, lw, p, nil, p, nil, nil)
}

// client-go's reflector tries a watch-list on every ListAndWatch; a server
// that refuses it answers 422, and the reflector lists instead. Instrument
// used to grade that routine fallback as an error that needs a human.
func TestInstrumentWatchListRefusalIsRoutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, watchtest.ServerOptions{}, "a")
		srv.SetFaults(watchtest.Faults{RefuseWatchList: true})
		p := newProbe()
		stop, _, _ := runInformer(t, srv, p)
		for minute := 1; minute <= 30; minute++ {
			time.Sleep(time.Minute)
			if _, err := srv.Update(watchtest.ConfigMap("a", "")); err != nil {
				t.Fatal(err)
			}
			if minute == 20 {
				srv.Restart() // every cursor expires: the reflector relists
			}
		}
		stop()
		for _, e := range p.counts().endings {
			if e.v.Verdict.Class == wgwatch.ClassNeedsHuman {
				t.Errorf("at %v a session ending graded %s/%s (%v), want the watch-list refusal routine", e.at, e.v.Verdict.Outcome, e.v.Verdict.Class, e.v.Err)
			}
		}
		if at := p.firstNeedsHuman(); at >= 0 {
			t.Errorf("NeedsHuman published at %v:%s", at, p.stateLog())
		}
	})
}

// A resume answered "too large resource version" (an etcd restore, a
// rebuilt cluster behind the same address) can never succeed from that
// cursor; the reflector relists, and so must a stream.
func TestTooLargeResourceVersionReplays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := watchtest.New(
			watchtest.Session{OpenErr: watchtest.TooLargeResourceVersion()},
			watchtest.Session{Events: []apiwatch.Event{watchtest.InitialEventsEnd("12")}, Hang: true},
		)
		p := newProbe()
		s := newStream(t, lw, p, wgwatch.StreamOptions{Cursor: "900"})
		stop := runStream(t, s)
		time.Sleep(10 * time.Second)
		stop()
		calls := lw.Calls()
		if len(calls) < 2 {
			t.Fatalf("calls = %+v, want a resume and then a replay", calls)
		}
		if next := calls[1]; next.Options.ResourceVersion == "900" || next.Options.SendInitialEvents == nil {
			t.Errorf("after too large resource version the stream called %s %+v, want a replay without the cursor", next.Kind, next.Options)
		}
		if st := p.stateAt(10 * time.Second); st.Phase != wgwatch.PhaseStreaming {
			t.Errorf("state after the replay = %s/%s, want Streaming:%s", st.Phase, st.Reason, p.stateLog())
		}
	})
}

// A watch from "0" sends a synthetic ADDED for every object in key order;
// taken as a position, the stream delivered them as events (no snapshot, so
// deletes were never signalled) and its cursor went backwards. "0" and ""
// mean "any": they replay.
func TestCursorZeroReplays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, watchtest.ServerOptions{}, "b", "a") // b@2, a@3
		p := newProbe()
		s := newStream(t, srv, p, wgwatch.StreamOptions{Cursor: "0"})
		stop := runStream(t, s)
		time.Sleep(5 * time.Second)
		cursor := s.Cursor()
		stop()
		if c := p.counts(); c.eventsBeforeSnapshot != 0 || c.snapshots == 0 {
			t.Errorf("%d events before the first of %d snapshots, want a snapshot first", c.eventsBeforeSnapshot, c.snapshots)
		}
		if cursor != srv.ResourceVersion() {
			t.Errorf("Cursor() = %q, want the server's %q", cursor, srv.ResourceVersion())
		}
		if diff := cmp.Diff(viewOfObjects(srv.Objects()), p.viewOf()); diff != "" {
			t.Errorf("handler's view (-server +handler):\n%s", diff)
		}
	})
}
