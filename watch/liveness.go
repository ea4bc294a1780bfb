package watch

import (
	"time"

	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
)

// liveness decides when a session goes live, for a Stream's session and an
// instrumented informer's watch alike: the package doc's table "When a
// session is live", with settleWait as its millisecond. It belongs to the
// goroutine that reads the session.
type liveness struct {
	clock clock.Clock
	short time.Duration
	// timer counts ShortSession; nil when no count runs.
	timer *flagTimer
	// opened is true from when the count ran out (openedAt) until live.
	opened   bool
	openedAt time.Time
	// caughtUp is true once, since then, the consumer found nothing waiting.
	caughtUp bool
	// idle, if set, is called whenever the consumer finds nothing waiting.
	idle func()
}

// count starts the count of ShortSession, again if one ran.
func (l *liveness) count() {
	l.stop()
	l.timer, l.opened = newFlagTimer(l.clock, l.short), false
}

// stop stops the count.
func (l *liveness) stop() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
}

// counting reports whether the count of ShortSession is running.
func (l *liveness) counting() bool { return l.timer != nil }

// pending reports whether the session is not live and counts towards it.
func (l *liveness) pending() bool { return l.timer != nil || l.opened }

// ran is closed when the count runs out, for a select; nil without one.
func (l *liveness) ran() <-chan struct{} {
	if l.timer == nil {
		return nil
	}
	return l.timer.c
}

// poll notices a count that has run out (one atomic load).
func (l *liveness) poll() {
	if l.timer != nil && l.timer.fired.Load() {
		l.timer = nil
		l.opened, l.openedAt, l.caughtUp = true, l.clock.Now(), false
	}
}

// take reads results while opened: the next event if one comes within
// settleWait (got), stamped at, and whether the session went live first.
func (l *liveness) take(results <-chan apiwatch.Event) (ev apiwatch.Event, ok, got bool, at time.Time, live bool) {
	ev, ok, got, waited := settled(results)
	if got {
		at = l.clock.Now()
	}
	l.caughtUp = l.caughtUp || waited
	if waited && l.idle != nil {
		l.idle()
	}
	ending := got && (!ok || ev.Type == apiwatch.Error)
	if !got || (!ending && l.caughtUp && at.Sub(l.openedAt) >= l.short) {
		l.opened = false
		return ev, ok, got, at, true
	}
	return ev, ok, got, at, false
}

// held is told that the consumer held an event from began (zero: while
// live) until now; ShortSession or more starts the count again.
func (l *liveness) held(began time.Time) {
	if began.IsZero() || (l.timer != nil && !l.timer.fired.Load()) {
		return
	}
	if l.clock.Since(began) >= l.short {
		l.count()
	}
}

// settleWait is how long a watch must stay quiet for the stream to know
// it has taken what the server sent.
const settleWait = time.Millisecond

// settled takes the next item of results if one comes within settleWait
// (got); waited is true if nothing was ready when it asked. It waits on
// package time: a scheduling pause, not a policy. An item ready as the
// wait ends counts as within it, rather than a select picking between the
// two at random.
func settled(results <-chan apiwatch.Event) (ev apiwatch.Event, ok, got, waited bool) {
	select {
	case ev, ok = <-results:
		return ev, ok, true, false
	default:
	}
	t := time.NewTimer(settleWait)
	defer t.Stop()
	select {
	case ev, ok = <-results:
		return ev, ok, true, true
	case <-t.C:
		select {
		case ev, ok = <-results:
			return ev, ok, true, true
		default:
			return ev, false, false, true
		}
	}
}
