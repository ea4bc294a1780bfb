package watch

import (
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/watchgrade/watchgrade/internal/backoff"
)

// history is what Grade needs to know about the sessions before this one.
// Health is judged over time: from when the stream was last live, not from
// how the last session ended.
type history struct {
	// lastLive is when the last live session ended, or when the stream
	// started.
	lastLive time.Time
	// failures counts the sessions since then that did not go live.
	failures int
	// replays counts the replays started since then.
	replays int
	// humanSince is when the current run of failures that need a human
	// began; zero when the last ending was not one.
	humanSince time.Time
	// humanHandler is true when the last ending of that run was the
	// handler's failure.
	humanHandler bool
	// expiredSince is when the cursor first expired since then.
	expiredSince time.Time
	shortCloses  int
}

func newHistory(now time.Time) history { return history{lastLive: now} }

// fill completes e, which ended at now, from the history; replayed says
// whether its session started a replay.
func (h *history) fill(e *Ending, now time.Time, replayed bool) {
	e.Failures = h.failures
	e.ShortCloses = h.shortCloses
	e.Replays = h.replays
	if replayed {
		e.Replays++
	}
	if e.Live {
		return
	}
	e.Trouble = now.Sub(h.lastLive)
	if !h.humanSince.IsZero() {
		e.NeedsHumanFor = now.Sub(h.humanSince)
	}
	if !h.expiredSince.IsZero() {
		e.ExpiredFor = now.Sub(h.expiredSince)
	}
}

// record adds the ending graded v, at now, to the history.
func (h *history) record(e Ending, v Verdict, now time.Time) {
	if e.Live {
		*h = history{lastLive: now}
		return
	}
	h.failures++
	h.replays = e.Replays
	switch {
	case v.Class == ClassNeedsHuman:
		if h.humanSince.IsZero() {
			h.humanSince = now
		}
		h.humanHandler = e.Cause == CauseHandler
	case v.Class == ClassExpired && h.humanHandler:
		// A cursor that expired while the handler kept failing says
		// nothing of the handler: the run goes on into the replay.
	default:
		h.humanSince, h.humanHandler = time.Time{}, false
	}
	if v.Class == ClassExpired && h.expiredSince.IsZero() {
		h.expiredSince = now
	}
	if v.ShortClose {
		h.shortCloses++
	} else {
		h.shortCloses = 0
	}
}

// backoffWait is how long a stream, or an instrumented informer retrying a
// refused open, waits after a failure graded v, drawing from b and rand.
//
// A backoff wait that would outlast the verdict's next escalation is
// shortened: the stream looks again before it publishes, early enough to
// go live by then. Backoff doubles with every failure, so after an outage
// of a few seconds (an apiserver restarting) the next wait could be drawn
// from up to a minute: the stream would sit out the transient grace while
// the server was back, and publish Blocked for an outage that had healed.
// lead is the time it leaves itself to go live. A wait that would end
// later than lead before the escalation is drawn again from the lead
// before that (the server's Retry-After kept), so that streams in trouble
// since the same moment do not come back in the same instant: from 20 to
// 25 s into the trouble at the defaults and a lead of 5 s, so an outage
// over before 20 s publishes nothing. A look that fails backs off as
// before: one request more per escalation.
func backoffWait(v Verdict, b *backoff.Backoff, lead time.Duration, rand func() float64) time.Duration {
	switch v.Wait {
	case WaitSlow:
		return b.Next(v.RetryAfter, true)
	case WaitBackoff:
	default:
		return min(v.RetryAfter, backoff.MaxRetryAfter)
	}
	d := b.Next(v.RetryAfter, false)
	if len(v.Escalations) == 0 {
		return d
	}
	latest := v.Escalations[0].After - lead
	if d <= latest || latest <= lead || latest < v.RetryAfter {
		// In time; or the look is due now, or was taken: draws from
		// what little is left would come ever closer to the escalation,
		// and never reach it.
		return d
	}
	earliest := max(latest-lead, v.RetryAfter)
	return earliest + time.Duration(rand()*float64(latest-earliest))
}

// escalator publishes states for a stream or an instrumented informer: at
// once, and on a timer a verdict's escalations, which a session going live
// or the next verdict cancels. Its mutex serialises every publication, so
// an escalation can never land after the Streaming that cancelled it.
//
// It owns no goroutine: an armed escalation is a timer (clock.AfterFunc
// where the clock has it), whose callback runs only when it fires.
type escalator struct {
	clock clock.Clock
	// publish makes a state current and tells observers; called with mu
	// held, never concurrently.
	publish func(State)

	mu    sync.Mutex
	gen   uint64
	timer stopper
}

// now publishes st at once, keeping any armed escalations.
func (x *escalator) now(st State) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.publish(st)
}

// verdict cancels what is armed, publishes v's state if it says so, and
// arms v's escalations; they are dropped once done is closed (nil: never).
func (x *escalator) verdict(v Verdict, done <-chan struct{}) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.cancelLocked()
	if v.Publish {
		x.publish(v.State)
	}
	x.armLocked(v.Escalations, x.clock.Now(), done)
}

// armLocked arms the first of escalations, due After start; when it fires
// it publishes and arms the next.
func (x *escalator) armLocked(escalations []Escalation, start time.Time, done <-chan struct{}) {
	if len(escalations) == 0 {
		return
	}
	gen, e := x.gen, escalations[0]
	x.timer = afterFunc(x.clock, e.After-x.clock.Since(start), func() {
		x.mu.Lock()
		defer x.mu.Unlock()
		if x.gen != gen || isDone(done) {
			return
		}
		x.publish(e.State)
		x.armLocked(escalations[1:], start, done)
	})
}

// live cancels what is armed and publishes st (Streaming) unless current
// says it is the state already.
func (x *escalator) live(st State, current func() bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.cancelLocked()
	if !current() {
		x.publish(st)
	}
}

// stop cancels what is armed: nothing is published after it returns.
func (x *escalator) stop() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.cancelLocked()
}

func (x *escalator) cancelLocked() {
	x.gen++
	if x.timer != nil {
		x.timer.Stop()
		x.timer = nil
	}
}

func isDone(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// stopper is a timer that can be stopped.
type stopper interface{ Stop() bool }

// afterFunc calls f in its own goroutine after d on c: with c's AfterFunc
// where it has one, else with a goroutine waiting on a timer until it fires
// or is stopped.
func afterFunc(c clock.Clock, d time.Duration, f func()) stopper {
	if dc, ok := c.(clock.WithDelayedExecution); ok {
		return dc.AfterFunc(d, f)
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

// flagTimer is a timer whose firing is read with one atomic load: a
// session polls it at every event until it goes live, which a poll of a
// timer's channel (a lock and a read of the clock) would make cost a
// tenth more per event on the real decode path. c is closed when it
// fires, for a select.
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

// steadiness keeps a stream's published state steady under a fault that
// does not change: its sessions may end in different ways (a cut session,
// then a replay after an expiry, then a handler's error), and publishing
// each would make the state, and a Ready condition built on it, flip back
// and forth. Streaming, and needing a human, always go through. It is not
// safe for concurrent use: its owner's lock guards it.
type steadiness struct {
	// pending is the Blocked reason the stream would switch to, and
	// seen how many times in a row it was asked to.
	pending Reason
	seen    int
}

// switchAfter is how many times in a row a blocked stream must be asked
// to publish another reason before it does: a fault that changes shows
// in every ending, one that ends sessions in different ways does not.
const switchAfter = 3

// keep reports whether a stream in state cur keeps it rather than publish
// next: next differs only in its message (then nothing changes, so State
// and observers agree); next is Replaying while cur is Blocked (a stream
// that is blocked and replays has made no progress); next is the progress
// deadline while cur already needs a human for a cause of its own (it
// still does); or both are Blocked without needing a human and next's
// reason has not been asked for switchAfter times in a row.
func (k *steadiness) keep(cur, next State) bool {
	if next.Phase != PhaseBlocked || cur.Phase != PhaseBlocked || next.NeedsHuman || cur.NeedsHuman {
		k.pending, k.seen = "", 0
	}
	switch {
	case cur.Phase == next.Phase && cur.Reason == next.Reason && cur.NeedsHuman == next.NeedsHuman:
		return true
	case next.Phase == PhaseReplaying && cur.Phase == PhaseBlocked:
		return true
	case next.Reason == ReasonProgressDeadlineExceeded && cur.NeedsHuman:
		return true
	case next.Phase == PhaseBlocked && cur.Phase == PhaseBlocked && !next.NeedsHuman && !cur.NeedsHuman:
		if k.pending != next.Reason {
			k.pending, k.seen = next.Reason, 0
		}
		k.seen++
		if k.seen < switchAfter {
			return true
		}
		k.pending, k.seen = "", 0
	}
	return false
}
