package watch

import (
	"time"

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
