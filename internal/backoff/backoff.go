// Package backoff computes jittered exponential waits.
package backoff

import (
	"math/rand/v2"
	"time"
)

// MaxRetryAfter bounds the floor a server's Retry-After may set, so that a
// corrupt or hostile value cannot park a stream for hours.
const MaxRetryAfter = 5 * time.Minute

// Backoff is exponential backoff with full jitter: the n-th wait in a row is
// drawn uniformly from [0, min(Max, Initial·2ⁿ)]. Its zero value is not
// usable; set Initial and Max. It is not safe for concurrent use.
type Backoff struct {
	// Initial is the cap of the first wait.
	Initial time.Duration
	// Max caps every wait (Retry-After aside).
	Max time.Duration
	// Rand draws a float in [0, 1). Nil uses math/rand/v2.
	Rand func() float64

	attempt int
}

// Next returns the next wait. floor, typically the server's Retry-After, is
// a lower bound (itself bounded by MaxRetryAfter): a wait drawn below it is
// drawn again above it, from [floor, floor+min(step, floor)), so that the
// clients told the same Retry-After do not all return at once. With slow
// set the wait is drawn from the upper half of [0, Max], for failures that
// will not heal sooner.
func (b *Backoff) Next(floor time.Duration, slow bool) time.Duration {
	limit := b.Max
	if !slow && b.attempt < 62 {
		if step := b.Initial << b.attempt; step > 0 && step < b.Max {
			limit = step
		}
	}
	b.attempt++
	r := rand.Float64
	if b.Rand != nil {
		r = b.Rand
	}
	wait := time.Duration(r() * float64(limit))
	if slow {
		wait = limit/2 + wait/2
	}
	if floor > MaxRetryAfter {
		floor = MaxRetryAfter
	}
	if wait < floor {
		// Drawn above the floor, not collapsed onto it: every client a
		// re-initialising apiserver tells "Retry-After: 1" would
		// otherwise come back in the same instant.
		wait = floor + time.Duration(r()*float64(min(limit, floor)))
	}
	return wait
}

// Reset starts the curve over; call it after a healthy session.
func (b *Backoff) Reset() { b.attempt = 0 }
