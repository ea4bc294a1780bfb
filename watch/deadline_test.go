package watch

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// The progress deadline used to be checked only when a session ended, so
// with waits near MaxBackoff a stream turned Stalled up to a minute after
// it. It has a timer of its own now: NeedsHuman is published within a
// second of the deadline, whatever the backoff is doing.
func TestProgressDeadlineHasItsOwnTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := watchtest.NewServer(watchtest.ServerOptions{})
		deadline := 5*time.Minute + 30*time.Second
		var mu sync.Mutex
		var humanAt time.Time
		obs := ObserverFuncs{StateChangedFunc: func(s State) {
			mu.Lock()
			defer mu.Unlock()
			if s.NeedsHuman && humanAt.IsZero() {
				humanAt = time.Now()
			}
		}}
		s, err := NewStream(srv, HandlerFuncs{}, StreamOptions{Resource: configmaps, Observer: obs,
			Policy: Policy{ProgressDeadline: deadline}})
		if err != nil {
			t.Fatal(err)
		}
		s.backoff.Rand = func() float64 { return 1 } // every wait its full cap
		stop := run(t, s)
		time.Sleep(time.Minute)
		// A 503 on every request from now on (transient: only the deadline
		// makes it a human's job), and the open watch ends.
		srv.SetFaults(watchtest.Faults{Err: watchtest.ServiceUnavailable()})
		srv.CloseWatches()
		troubleStart := time.Now()
		time.Sleep(10 * time.Minute)
		stop()
		mu.Lock()
		defer mu.Unlock()
		if humanAt.IsZero() {
			t.Fatalf("NeedsHuman never published after %v of 503s", 10*time.Minute)
		}
		if late := humanAt.Sub(troubleStart) - deadline; late < 0 || late > time.Second {
			t.Errorf("NeedsHuman published %v after trouble began, want within 1s of the deadline %v", humanAt.Sub(troubleStart), deadline)
		}
	})
}
