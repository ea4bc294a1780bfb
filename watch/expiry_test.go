package watch_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// A 410 leads to the same verdict in every shape it takes: an ERROR event
// opening a resume (what the kube-apiserver sends), the same with reason
// Gone (servers up to 1.17), HTTP 410 on the open (aggregated servers,
// some proxies), and an ERROR event later in a live session (etcd
// compaction under an uncached watch); a watch-list replay or a LIST
// next, at once: expired, Replay, no wait; for a stream (with and
// without watch-lists) and for an informer over Instrument alike. (The 410 as the first event
// of a watch-list is TestStreamWatchListExpiredInStreamIsGraded.)
func TestExpiryGradedAlikeInEveryShape(t *testing.T) {
	type shape struct {
		name   string
		expiry watchtest.ExpiryShape
		live   bool // the 410 comes in a live session
	}
	shapes := []shape{
		{"error-event", watchtest.ExpiryErrorEvent, false},
		{"gone-event", watchtest.ExpiryGoneEvent, false},
		{"http-410", watchtest.ExpiryOpenError, false},
		{"error-event-live", watchtest.ExpiryErrorEvent, true},
	}
	for _, sh := range shapes {
		for _, consumer := range []string{"stream", "stream-watchlist", "informer"} {
			t.Run(sh.name+"/"+consumer, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					srv := newServer(t, watchtest.ServerOptions{Expiry: sh.expiry}, "a")
					p := newProbe()
					var stop func()
					if consumer == "informer" {
						stop = runInstrumented(t, srv, p)
					} else {
						stop = runStream(t, newStream(t, srv, p, wgwatch.StreamOptions{DisableWatchList: consumer == "stream"}))
					}
					defer stop()
					time.Sleep(10 * time.Second)
					if sh.live {
						srv.FailWatches(watchtest.Expired())
					} else {
						srv.Restart() // the new watch cache holds no cursor from before
					}
					time.Sleep(time.Minute)
					synctest.Wait()
					var got []string
					for _, e := range p.counts().endings {
						if e.v.Verdict.Outcome == wgwatch.OutcomeExpired {
							v := e.v.Verdict
							got = append(got, fmt.Sprintf("%s %s/%s healthy=%v", v.Class, v.Next, v.Wait, v.Healthy))
						}
					}
					want := fmt.Sprintf("expired Replay/None healthy=%v", sh.live)
					if len(got) != 1 || got[0] != want {
						t.Errorf("expired endings %q, want one %q:%s", got, want, p.endingLog(8))
					}
					if st := p.stateAt(p.now()); st.Phase != wgwatch.PhaseStreaming {
						t.Errorf("state %s/%s after the replay, want Streaming:%s", st.Phase, st.Reason, p.stateLog())
					}
				})
			})
		}
	}
}
