package watch

import (
	"time"
)

// history is what Grade needs to know about the sessions since the stream
// was last live.
type history struct {
	// lastLive is when the last live session ended, or the stream started.
	lastLive time.Time
	// failures counts the sessions since then that did not go live.
	failures int
	// replays counts the replays started since then.
	replays int
	// humanSince is when the current run of failures that need a human
	// began; zero when the last ending was not one.
	humanSince time.Time
	// humanHandler: the last of that run was the handler's.
	humanHandler bool
	// expiredSince is when the cursor first expired since then.
	expiredSince time.Time
	shortCloses  int
}

func newHistory(now time.Time) history { return history{lastLive: now} }

// fill completes e, which ended at now, from the history.
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
		// An expiry does not end a run of the handler's failures.
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
