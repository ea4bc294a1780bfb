package watch

import (
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// stopper is a timer that can be stopped.
type stopper interface{ Stop() bool }

// afterFunc calls f in its own goroutine after d on c (a fake clock's
// AfterFunc holds its lock while it calls).
func afterFunc(c clock.Clock, d time.Duration, f func()) stopper {
	if rc, ok := c.(clock.RealClock); ok {
		return rc.AfterFunc(d, f)
	}
	if dc, ok := c.(clock.WithDelayedExecution); ok {
		return dc.AfterFunc(d, func() { go f() })
	}
	t := c.NewTimer(d)
	stop := make(chan struct{})
	go func() {
		select {
		case <-t.C():
			f()
		case <-stop:
		}
	}()
	return &goroutineTimer{t: t, stop: stop}
}

// flagTimer is a timer whose firing is read with one atomic load; c is
// closed when it fires.
type flagTimer struct {
	fired atomic.Bool
	c     chan struct{}
	t     stopper
}

func newFlagTimer(c clock.Clock, d time.Duration) *flagTimer {
	f := &flagTimer{c: make(chan struct{})}
	f.t = afterFunc(c, d, func() {
		f.fired.Store(true)
		close(f.c)
	})
	return f
}

// Stop stops the timer; it reports whether that kept it from firing.
func (f *flagTimer) Stop() bool { return f.t.Stop() }

type goroutineTimer struct {
	t    clock.Timer
	stop chan struct{}
	once sync.Once
}

func (g *goroutineTimer) Stop() bool {
	stopped := g.t.Stop()
	g.once.Do(func() { close(g.stop) })
	return stopped
}
