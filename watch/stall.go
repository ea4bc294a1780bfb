package watch

import (
	"sync"
	"sync/atomic"
	"time"
)

// stallWatch notices a [Handler] call that does not return while its
// session is live (the "handler stuck" rows of "What is published when").
// A timer looks every TransientGrace/stallSteps: a call arms it, and it
// disarms itself when it finds no call in progress.
type stallWatch struct {
	// calls counts entries and exits: odd while a call is in progress.
	calls atomic.Uint64
	// armed is true while the timer is armed.
	armed atomic.Bool
	// stalled is true while a stall is published.
	stalled atomic.Bool
	mu      sync.Mutex
	running bool
	timer   stopper
	// seen is calls when the call in progress was first seen, at since.
	seen  uint64
	since time.Time
}

// stallSteps is how many times within TransientGrace the timer looks.
const stallSteps = 6

// start lets the timer run; stop stops it, and nothing is published after
// it returns.
func (w *stallWatch) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running = true
}

func (w *stallWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running = false
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	w.armed.Store(false)
	w.stalled.Store(false)
}

// enter is called before each handler call.
func (w *stallWatch) enter(s *Stream) {
	w.calls.Add(1)
	if !w.armed.Load() {
		w.arm(s)
	}
}

// leave is called after each handler call. It reports whether a stall was
// published meanwhile: the session's count must then start again.
func (w *stallWatch) leave() bool {
	w.calls.Add(1)
	if !w.stalled.Load() {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stalled.CompareAndSwap(true, false)
}

func (w *stallWatch) arm(s *Stream) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.running || w.armed.Load() {
		return
	}
	w.armed.Store(true)
	w.seen, w.since = w.calls.Load(), s.clock.Now()
	w.timer = afterFunc(s.clock, s.opts.Policy.TransientGrace/stallSteps, func() { w.check(s) })
}

// check looks at the call in progress, publishes a stall if it has
// lasted, and arms the timer again unless no call is in progress.
func (w *stallWatch) check(s *Stream) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.running {
		return
	}
	p := s.opts.Policy
	calls, now := w.calls.Load(), s.clock.Now()
	switch {
	case calls%2 == 0:
		w.armed.Store(false)
		w.timer = nil
		if w.calls.Load()%2 == 0 {
			return
		}
		// A call entered while the timer was being disarmed.
		w.armed.Store(true)
		w.seen, w.since = w.calls.Load(), now
	case calls != w.seen:
		w.seen, w.since = calls, now
	default:
		// Set before the last look, so that a call returning now either
		// is seen here or finds the stall (earlier ones too) in leave.
		was := w.stalled.Swap(true)
		switch {
		case w.calls.Load() != calls:
			w.seen, w.since = w.calls.Load(), now
		case s.pub.stuck(w.since):
			was = true
		}
		if !was {
			w.stalled.Store(false)
		}
	}
	w.timer = afterFunc(s.clock, p.TransientGrace/stallSteps, func() { w.check(s) })
}
