package watch

import (
	"sync"
	"sync/atomic"
	"time"
)

// stallWatch notices a consumer that does not keep up while its session
// is live (the "behind" rows of "What is published when"): a
// [Handler] call that does not return, or calls back to back that never
// once find the watch with nothing waiting (a backlog the handler does not
// drain, however fast each call returns). A timer looks every
// TransientGrace/stallSteps: a call arms it, and it disarms itself when it
// finds the consumer caught up and no call in progress.
type stallWatch struct {
	// calls counts entries and exits: odd while a call is in progress.
	calls atomic.Uint64
	// idles counts the times the consumer asked for the next event and
	// found nothing waiting: it had caught up. busy is false from then
	// until the next call, which sets busyFrom (UnixNano) to its start:
	// when the consumer fell behind, if it does not catch up again. Both
	// are written on the stream's goroutine only.
	idles    atomic.Uint64
	busy     atomic.Bool
	busyFrom atomic.Int64
	// armed is true while the timer is armed.
	armed atomic.Bool
	// stalled is true while a stall is published.
	stalled atomic.Bool
	mu      sync.Mutex
	running bool
	timer   stopper
	// seen and seenIdles are calls and idles at the last look; since is
	// when the consumer fell behind, as a look found it, and sinceCalls
	// calls then.
	seen, seenIdles, sinceCalls uint64
	since                       time.Time
}

// from records a look that found calls and idles, the consumer behind
// since behindSince. Called with w.mu held.
func (w *stallWatch) from(calls, idles uint64) {
	w.seen, w.seenIdles, w.sinceCalls, w.since = calls, idles, calls, w.behindSince()
}

// stallSteps is how many times within TransientGrace the timer looks.
const stallSteps = 6

// lookOffset keeps the timer's looks off the instants of the stream's own
// timers (whole and half seconds from a session's open, a call's start):
// a look at the instant the stream acts could see it before or after, and
// under a simulated clock a history would not replay exactly.
const lookOffset = 1013 * time.Microsecond

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
	if !w.busy.Load() {
		w.busy.Store(true)
		w.busyFrom.Store(s.clock.Now().UnixNano())
	}
	w.calls.Add(1)
	if !w.armed.Load() {
		w.arm(s)
	}
}

// idle is called when the consumer asks for the next event and finds
// nothing waiting.
func (w *stallWatch) idle() {
	w.idles.Add(1)
	w.busy.Store(false)
}

// behindSince is the start of the first call since the consumer last
// caught up.
func (w *stallWatch) behindSince() time.Time { return time.Unix(0, w.busyFrom.Load()) }

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
	w.from(w.calls.Load(), w.idles.Load())
	// The consumer may have fallen behind before this call: the first
	// look comes a moment later if a threshold is past.
	w.timer = afterFunc(s.clock, w.nextLook(s, true), func() { w.check(s) })
}

// nextLook is when the timer looks next: a step later, or as a threshold
// is reached, so that a stall is found when it is due; with first, a
// moment later for a threshold already past. Called with w.mu held.
func (w *stallWatch) nextLook(s *Stream, first bool) time.Duration {
	p := s.opts.Policy
	next := p.TransientGrace/stallSteps + lookOffset
	for _, th := range []time.Duration{p.TransientGrace, p.ProgressDeadline} {
		d := w.since.Add(th + lookOffset).Sub(s.clock.Now())
		if first {
			d = max(d, lookOffset)
		}
		if d < next && (d > 0 || first) {
			next = d
		}
	}
	return next
}

// check looks at the consumer: one that has been busy since the last look
// without once catching up (a call in progress throughout, or calls one
// after another with events waiting) is behind since w.since, and a stall
// once that has lasted (the fold decides); one that caught up counts
// again; the timer is armed again unless the consumer is idle.
func (w *stallWatch) check(s *Stream) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.running {
		return
	}
	calls, idles := w.calls.Load(), w.idles.Load()
	busy := calls%2 == 1 || calls != w.seen
	switch {
	case !busy || (idles != w.seenIdles && calls%2 == 0):
		// Idle: no call since the last look, or caught up and not in one.
		w.armed.Store(false)
		w.timer = nil
		if w.calls.Load()%2 == 0 {
			return
		}
		// A call entered while the timer was being disarmed.
		w.armed.Store(true)
		w.from(w.calls.Load(), w.idles.Load())
	case idles != w.seenIdles:
		// Caught up since the last look, and in a call again.
		w.from(calls, idles)
	default:
		// Set before the last look, so that a call returning now either
		// is seen here or finds the stall (earlier ones too) in leave.
		was := w.stalled.Swap(true)
		// Hung: in the call it was in when it fell behind.
		hung := calls == w.sinceCalls
		w.seen = calls
		switch {
		case w.idles.Load() != idles:
			w.from(w.calls.Load(), w.idles.Load())
		case s.pub.stuck(w.since, hung):
			was = true
		}
		if !was {
			w.stalled.Store(false)
		}
	}
	w.timer = afterFunc(s.clock, w.nextLook(s, false), func() { w.check(s) })
}
