package judgekit

import (
	"slices"
	"time"
)

// Span is a stretch of virtual time since a history began, [From, To).
type Span struct{ From, To time.Duration }

// Union merges spans (in any order; spans itself is left as it is) into
// spans in order, bridging gaps shorter than gap.
func Union(spans []Span, gap time.Duration) []Span {
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b Span) int { return int(a.From - b.From) })
	var out []Span
	for _, s := range spans {
		if n := len(out); n > 0 && s.From <= out[n-1].To+gap {
			out[n-1].To = max(out[n-1].To, s.To)
			continue
		}
		out = append(out, s)
	}
	return out
}

// Covered reports whether one of spans holds all of [from, to].
func Covered(spans []Span, from, to time.Duration) bool {
	for _, s := range spans {
		if s.From <= from && to <= s.To {
			return true
		}
	}
	return false
}

// Overlaps reports whether one of spans meets [from, to].
func Overlaps(spans []Span, from, to time.Duration) bool {
	for _, s := range spans {
		if s.From <= to && from <= s.To {
			return true
		}
	}
	return false
}

// GapStart returns when the stretch outside live (spans in order, as
// Union returns them) that holds t began, or -1 if t is inside a span.
func GapStart(live []Span, t time.Duration) time.Duration {
	from := time.Duration(0)
	for _, s := range live {
		if s.From > t {
			break
		}
		if t < s.To {
			return -1
		}
		from = s.To
	}
	return from
}

// Minus returns what of spans lies outside every one of cut.
func Minus(spans, cut []Span) []Span {
	out := slices.Clone(spans)
	for _, c := range cut {
		var next []Span
		for _, s := range out {
			if c.To <= s.From || s.To <= c.From {
				next = append(next, s)
				continue
			}
			if s.From < c.From {
				next = append(next, Span{s.From, c.From})
			}
			if c.To < s.To {
				next = append(next, Span{c.To, s.To})
			}
		}
		out = next
	}
	return out
}

// SpansBefore returns the last n of spans (in order) that start before t.
func SpansBefore(spans []Span, t time.Duration, n int) []Span {
	i := 0
	for i < len(spans) && spans[i].From < t {
		i++
	}
	return spans[max(i-n, 0):i]
}
