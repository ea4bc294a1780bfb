package watch

import (
	"time"

	"github.com/watchgrade/watchgrade/internal/backoff"
)

// backoffWait is how long to wait after a failure graded v. A wait that
// would end later than lead before the next escalation is drawn again
// from the lead before that, Retry-After kept (see Backoff in the package
// doc).
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
		// In time; or the look is due now, or was taken.
		return d
	}
	earliest := max(latest-lead, v.RetryAfter)
	return earliest + time.Duration(rand()*float64(latest-earliest))
}
