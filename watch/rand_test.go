package watch_test

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// countingSource is a math/rand/v2 source that counts its draws.
type countingSource struct{ n atomic.Int64 }

func (c *countingSource) Uint64() uint64 { c.n.Add(1); return 1 << 52 } // Float64: 0.5

// A Stream draws the jitter of its backoff from StreamOptions.Rand when it
// is set, so that a test can replay a stream's history from a seed.
func TestStreamDrawsFromOptionsRand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, watchtest.ServerOptions{}, "a")
		srv.SetFaults(watchtest.Faults{Refuse: true})
		var r countingSource
		s := newStream(t, srv, newProbe(), wgwatch.StreamOptions{Rand: rand.New(&r)})
		stop := runStream(t, s)
		time.Sleep(2 * time.Minute)
		stop()
		if r.n.Load() == 0 {
			t.Error("the stream backed off for two minutes and drew nothing from StreamOptions.Rand")
		}
	})
}

// An informer's Instrument draws the wait before a refused call is made
// again from InstrumentOptions.Rand when it is set.
func TestInstrumentDrawsFromOptionsRand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, watchtest.ServerOptions{}, "a")
		srv.SetFaults(watchtest.Faults{Refuse: true})
		var r countingSource
		ilw, err := wgwatch.Instrument(srv, wgwatch.InstrumentOptions{Resource: configmaps, Rand: rand.New(&r)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if _, err := ilw.ListWithContext(ctx, metav1.ListOptions{}); err == nil {
			t.Fatal("List succeeded on a server that refuses every connection")
		}
		if r.n.Load() == 0 {
			t.Error("Instrument retried a refused List for a minute and drew nothing from InstrumentOptions.Rand")
		}
	})
}
