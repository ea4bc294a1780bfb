package pipeline_test

import (
	"slices"
	"time"

	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// span is a stretch of virtual time since the history began, [from, to).
type span struct{ from, to time.Duration }

// union merges spans, bridging gaps shorter than gap.
func union(spans []span, gap time.Duration) []span {
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b span) int { return int(a.from - b.from) })
	var out []span
	for _, s := range spans {
		if n := len(out); n > 0 && s.from <= out[n-1].to+gap {
			out[n-1].to = max(out[n-1].to, s.to)
			continue
		}
		out = append(out, s)
	}
	return out
}

// covered reports whether one of spans holds all of [from, to].
func covered(spans []span, from, to time.Duration) bool {
	for _, s := range spans {
		if s.from <= from && to <= s.to {
			return true
		}
	}
	return false
}

// gapStart returns when the stretch without a live span that holds t
// began, or -1 if t is inside a live span.
func gapStart(live []span, t time.Duration) time.Duration {
	from := time.Duration(0)
	for _, s := range live {
		if s.from > t {
			break
		}
		if t < s.to {
			return -1
		}
		from = s.to
	}
	return from
}

// liveSpans returns when the server had a live watch open, as the watch
// judge defines it: past its replay, and having delivered an event or a
// bookmark or stayed open for ShortSession. Every process's watches
// count.
func liveSpans(reqs []watchtest.Request, start time.Time, end time.Duration) []span {
	var out []span
	for _, r := range reqs {
		if r.Kind != watchtest.CallWatch || r.Err != nil {
			continue
		}
		replayEnd := r.At
		if r.Options.SendInitialEvents != nil {
			if r.InitialEventsEnd.IsZero() {
				continue
			}
			replayEnd = r.InitialEventsEnd
		}
		live := replayEnd.Add(shortSession)
		if !r.FirstEvent.IsZero() && r.FirstEvent.Before(live) {
			live = r.FirstEvent
		}
		closed := end
		if !r.Closed.IsZero() {
			closed = r.Closed.Sub(start)
		}
		if l := live.Sub(start); l < closed {
			out = append(out, span{l, closed})
		}
	}
	return union(out, 0)
}
