package watch

import (
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/watchgrade/watchgrade/internal/backoff"
)

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
