package watch

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
