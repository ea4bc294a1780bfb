package watch_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watchgrade/watchgrade/internal/judgekit"
	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// TestEveryWayAnInformerSessionEndsIsReported is
// TestEveryWaySessionEndsIsReported for an informer over Instrument: each
// way its watch can end, played on the simulated server a minute after the
// informer synced, ends in one graded SessionEnd per attempt of the
// reflector, in order (a run of the same ending is its retries, shown
// once). A watch-list that fails and that the reflector answers by listing
// in the same attempt ends no session: the LIST does.
func TestEveryWayAnInformerSessionEndsIsReported(t *testing.T) {
	for5s := func(f watchtest.Faults) func(*watchtest.Server) {
		return func(srv *watchtest.Server) {
			srv.SetFaults(f)
			srv.CloseWatches()
			time.Sleep(5 * time.Second)
			srv.SetFaults(watchtest.Faults{})
		}
	}
	tests := []struct {
		name string
		do   func(*watchtest.Server)
		want []string
	}{
		{"the server's timeout", func(srv *watchtest.Server) { srv.CloseWatches() },
			[]string{"Stream closed Resume/None", "Stream teardown Stop/None"}},
		{"an ERROR event, a 500", func(srv *watchtest.Server) { srv.FailWatches(watchtest.ServiceUnavailable()) },
			[]string{"Stream error Resume/Backoff", "Stream teardown Stop/None"}},
		{"an apiserver restart: its cache initialising (429), then the cursor expired", func(srv *watchtest.Server) { srv.Restart() },
			[]string{"Stream closed Resume/None", "Open error Resume/Backoff", "Stream expired Replay/None", "Stream teardown Stop/None"}},
		{"a 503 for 5 s: the resume fails, then the watch-list and the LIST of each attempt", for5s(watchtest.Faults{Err: watchtest.ServiceUnavailable()}),
			[]string{"Stream closed Resume/None", "Open error Resume/Backoff", "List error Replay/Backoff", "Stream teardown Stop/None"}},
		{"denied for 5 s", for5s(watchtest.Faults{Err: watchtest.Forbidden()}),
			[]string{"Stream closed Resume/None", "Open error Resume/Backoff", "List error Replay/Backoff", "Stream teardown Stop/None"}},
		{"connections refused for 5 s: retried by Instrument", for5s(watchtest.Faults{Refuse: true}),
			[]string{"Stream closed Resume/None", "Open error Resume/Backoff", "Stream teardown Stop/None"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newServer(t, watchtest.ServerOptions{RestartNotReady: 2 * time.Second}, "a")
				p := newProbe()
				stop, _, _ := runInformer(t, srv, p)
				time.Sleep(time.Minute)
				tt.do(srv)
				time.Sleep(2 * time.Minute)
				stop()
				var got []string
				for _, e := range p.counts().endings {
					got = append(got, fmt.Sprintf("%s %s %s/%s", e.v.Stage, e.v.Verdict.Outcome, e.v.Verdict.Next, e.v.Verdict.Wait))
				}
				if got = slices.Compact(got); !slices.Equal(got, tt.want) {
					t.Errorf("session endings\n  %q\nwant\n  %q", got, tt.want)
				}
			})
		})
	}
}

// After an outage of refused connections (an apiserver restarting) an
// informer over Instrument catches up within 2 s of the server accepting
// connections again (the package doc, Informers): Instrument's own retries
// of a refused call wait no longer than that, where a doubling backoff had
// the informer catch up 1 to 13 s after the outage, by its draws (5.2 s
// for seed 1 here).
func TestInformerCatchesUpSoonAfterRefusedConnections(t *testing.T) {
	const bound = 2 * time.Second
	worst := time.Duration(0)
	for seed := range uint64(20) {
		synctest.Test(t, func(t *testing.T) {
			srv := newServer(t, watchtest.ServerOptions{}, "a")
			p := newProbe()
			stop, _, _ := runSeededInformer(t, srv, p, rand.New(rand.NewPCG(seed, 9)).Float64, p, nil, nil)
			time.Sleep(time.Minute)
			srv.SetFaults(watchtest.Faults{Refuse: true})
			srv.CloseWatches()
			time.Sleep(20 * time.Second)
			srv.SetFaults(watchtest.Faults{})
			healed := time.Now()
			time.Sleep(time.Minute)
			stop()
			caughtUp := time.Duration(-1)
			for _, r := range srv.Requests() {
				if r.At.After(healed) && r.Err == nil {
					caughtUp = r.At.Sub(healed)
					break
				}
			}
			if caughtUp < 0 || caughtUp > bound {
				t.Errorf("seed %d: the informer's first request after the outage %v after it healed, want within %v", seed, caughtUp, bound)
			}
			worst = max(worst, caughtUp)
			if n := p.published(wgwatch.PhaseBlocked); n > 0 {
				t.Errorf("seed %d: Blocked published %d times for a 20 s outage:%s", seed, n, p.stateLog())
			}
		})
	}
	t.Logf("slowest catch-up after the outage: %v", worst)
}

// An apiserver restart seen as an outage of reset connections (behind a
// proxy or a load balancer), its new watch cache empty so that the
// informer's resume expires: for an outage within the package doc's bound
// (TransientGrace less twice the time to go live again: 20 s) the informer
// publishes nothing. The reflector's own backoff, doubling through the
// outage, kept it away from the server that was back, and from 17 s on it
// published Blocked (or Replaying for the relist); Instrument now retries
// a reset connection inside the call, as a refused one. (The simulated
// server answers a reset at once; client-go's REST client would first
// retry it itself, 10 times a second apart: the e2e test
// TestInformerThroughResetsAndARestart plays that on a real server.)
func TestInformerQuietThroughResetsAndARestart(t *testing.T) {
	reset := judgekit.TransportErr(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET})
	for outage := 5 * time.Second; outage < 20*time.Second; outage += 3 * time.Second {
		for seed := range uint64(4) {
			synctest.Test(t, func(t *testing.T) {
				srv := newServer(t, watchtest.ServerOptions{}, "a")
				p := newProbe()
				stop, store, _ := runSeededInformer(t, srv, p, rand.New(rand.NewPCG(seed, 11)).Float64, p, nil, nil)
				time.Sleep(time.Minute)
				srv.SetFaults(watchtest.Faults{Err: reset})
				srv.CloseWatches()
				time.Sleep(outage)
				srv.Restart()
				srv.SetFaults(watchtest.Faults{})
				_, _ = srv.Create(watchtest.ConfigMap("b", ""))
				time.Sleep(2 * time.Minute)
				stop()
				if c := p.counts(); len(c.states) > 2 {
					t.Errorf("outage %v, seed %d: published %d states, want the first sync's 2 only:%s", outage, seed, len(c.states), p.stateLog())
				}
				if n := len(store.List()); n != 2 {
					t.Errorf("outage %v, seed %d: the informer's store has %d objects, want 2", outage, seed, n)
				}
			})
		}
	}
}
