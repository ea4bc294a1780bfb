package watch_test

import (
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// The judge's invariants. Each is stated in the watch package doc; the
// bounds below are derived from the defaults of Policy and StreamOptions.

const (
	shortSession   = wgwatch.DefaultShortSession
	maxBackoff     = wgwatch.DefaultMaxBackoff
	humanGrace     = wgwatch.DefaultHumanGrace
	transientGrace = wgwatch.DefaultTransientGrace
	deadline       = wgwatch.DefaultProgressDeadline
	// stallStep is how often a stream looks at a handler call in
	// progress.
	stallStep = transientGrace / 6
	// slack covers what the simulation itself takes: the server's 3 s
	// block on a resourceVersion it has not reached, a Retry-After,
	// latency, same-instant ordering.
	slack = 4 * time.Second
	// recallHuman: a cause that needs a human is published within its
	// grace plus one maximum backoff of the first request it failed.
	recallHuman = humanGrace + maxBackoff + slack
	// recallDeadline: no live session for the progress deadline is
	// published within a second of it (it has its own timer).
	recallDeadline = deadline + time.Second
	// clearBound: once the server is healthy again, the stream is
	// Streaming within one maximum backoff (its wait), one more if it must
	// replay and has used its replays (or, for an informer, the
	// reflector's backoff before the watch that gets the 410 and before
	// its relist), and one short session.
	clearBound = 2*maxBackoff + shortSession + slack
	// staleBound: a stream with no live session for the transient grace
	// no longer says it is Streaming.
	staleBound = transientGrace + slack
	// bridge: a healthy gap shorter than this may pass unseen while a
	// stream waits out a backoff, so it does not end the trouble.
	bridge = maxBackoff + shortSession
	// convergeBound: while a stream says Streaming, every change the
	// server makes is in its consumer's view within this: a stream not
	// live for TransientGrace is no longer Streaming, a handler stuck
	// that long in a live session is Blocked within a stall step, and a
	// cursor the server has not reached is found within CursorCheck and
	// the server's 3 s answer. Slack covers a slow handler's backlog.
	convergeBound = transientGrace + stallStep + slack + 4*time.Second
	// stallBound: a change not in the consumer's view this long after it
	// was made is a stall, and the stream needs a human by then.
	stallBound = deadline + convergeBound
	// maxPublications is the most states a stream publishes while the
	// faults in force do not change (no fault starts or ends, no instant
	// action): for instance Streaming, Blocked at TransientGrace, then
	// needing a human at the deadline. A state that flips back and forth
	// under a fault that does not change is a Ready flip, a status write
	// and an Event each time in a controller.
	maxPublications = 3
)

// replayBound is the most full replays a stream makes in any window of
// length d: a burst of 3, then one per MaxBackoff.
func replayBound(d time.Duration) int { return 3 + int(d/maxBackoff) }

// verdict is what the judge found in one schedule.
type verdict struct {
	falseNeedsHuman, missed, lost, ghosts, dup, cursorBack, dishonest, flapping, replays int
	// openWatches counts watches the server still had open after the
	// consumer stopped; badOptions, option sets that were not refused
	// (or were refused after a request).
	openWatches, badOptions      int
	replaysPerHour, publications int
	notes                        []string
	// trace is what the consumer observed (see traceOf).
	trace []string
}

func (v *verdict) add(counter *int, format string, args ...any) {
	*counter++
	if len(v.notes) < 8 {
		v.notes = append(v.notes, fmt.Sprintf(format, args...))
	}
}

func (v verdict) failed() bool {
	return v.falseNeedsHuman+v.missed+v.lost+v.ghosts+v.dup+v.cursorBack+v.dishonest+v.flapping+v.replays+v.openWatches+v.badOptions > 0
}

// sum adds u's counts to v, and keeps the maxima.
func (v *verdict) sum(u verdict) {
	v.falseNeedsHuman += u.falseNeedsHuman
	v.missed += u.missed
	v.lost += u.lost
	v.ghosts += u.ghosts
	v.dup += u.dup
	v.cursorBack += u.cursorBack
	v.dishonest += u.dishonest
	v.flapping += u.flapping
	v.replays += u.replays
	v.openWatches += u.openWatches
	v.badOptions += u.badOptions
	v.replaysPerHour = max(v.replaysPerHour, u.replaysPerHour)
	v.publications = max(v.publications, u.publications)
}

// span is a stretch of virtual time.
type span struct{ from, to time.Duration }

// liveSpans returns when the server had a live watch of the client's:
// open (once the open took its latency), and past its replay (if it was a
// watch-list) by ShortSession. What the watch delivered does not count: a
// session is live by staying open.
func liveSpans(reqs []watchtest.Request, start time.Time, end time.Duration, opened time.Duration, doubtAt func(time.Time) bool) []span {
	// A watch from a cursor the server had not reached was silent, and
	// never live: the stream's check of that cursor, made while the watch
	// was open, says so.
	var checks []watchtest.Request
	for _, r := range reqs {
		if isCursorCheck(r) {
			checks = append(checks, r)
		}
	}
	// checksIn returns the checks of w's cursor made while w was open,
	// and whether the stream was in doubt then: it checks at once, and
	// goes live once a check is answered.
	// A check is a consistent LIST of one object whose resourceVersion
	// the stream compares with its cursor, or (for resourceVersions that
	// do not compare) a LIST at the cursor.
	checksIn := func(w watchtest.Request) (in []watchtest.Request, inDoubt bool) {
		for _, c := range checks {
			if (c.Options.ResourceVersion == "" || c.Options.ResourceVersion == w.Options.ResourceVersion) && !c.At.Before(w.At.Add(opened)) && (w.Closed.IsZero() || c.At.Before(w.Closed)) {
				in = append(in, c)
			}
		}
		// A watch-list is a replay, not a resume, even at a
		// resourceVersion (the first replay after a 410 asks for the
		// collection not older than the expired cursor): its
		// initial-events-end bookmark confirms it.
		return in, w.Options.ResourceVersion != "" && w.Options.SendInitialEvents == nil && doubtAt(w.At)
	}
	saysAhead := func(c, w watchtest.Request) bool {
		if c.Options.ResourceVersion == "" {
			cmp, err := resourceversion.CompareResourceVersion(c.ResourceVersion, w.Options.ResourceVersion)
			return c.Err == nil && err == nil && cmp < 0
		}
		return apierrors.HasStatusCause(c.Err, metav1.CauseTypeResourceVersionTooLarge)
	}
	wasAhead := func(w watchtest.Request) bool {
		in, _ := checksIn(w)
		return len(in) > 0 && w.FirstEvent.IsZero() && saysAhead(in[len(in)-1], w)
	}
	var out []span
	for _, r := range reqs {
		if r.Kind != watchtest.CallWatch || r.Err != nil || wasAhead(r) {
			continue
		}
		replayEnd := r.At.Add(opened)
		if r.Options.SendInitialEvents != nil {
			if r.InitialEventsEnd.IsZero() {
				continue
			}
			replayEnd = r.InitialEventsEnd
		}
		closed := end
		if !r.Closed.IsZero() {
			closed = r.Closed.Sub(start)
		}
		// ShortSession, and the moment the watch must stay quiet.
		live := replayEnd.Add(shortSession + time.Millisecond)
		if in, atOpen := checksIn(r); atOpen {
			// Confirmed by a check's answer (when the server returned
			// it, after the LIST's latency and its one object's), or by
			// an event or a bookmark from the cursor, whichever came
			// first; a check that failed confirms nothing.
			var confirmed time.Time
			for _, c := range in {
				if c.Err == nil && !c.Answered.IsZero() && !saysAhead(c, r) {
					confirmed = c.Answered
					break
				}
			}
			if !r.FirstEvent.IsZero() && (confirmed.IsZero() || r.FirstEvent.Before(confirmed)) {
				confirmed = r.FirstEvent
			}
			if confirmed.IsZero() {
				continue
			}
			if confirmed.After(live) {
				live = confirmed
			}
		}
		if l := live.Sub(start); l < closed {
			out = append(out, span{l, closed})
		}
	}
	return union(out, 0)
}

// union merges spans, bridging gaps shorter than gap.
func union(spans []span, gap time.Duration) []span {
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

// gapStart returns when the no-live stretch holding t began, or -1 if t is
// inside a live span.
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

// minus returns what of spans lies outside every one of cut.
func minus(spans, cut []span) []span {
	out := slices.Clone(spans)
	for _, c := range cut {
		var next []span
		for _, s := range out {
			if c.to <= s.from || s.to <= c.from {
				next = append(next, s)
				continue
			}
			if s.from < c.from {
				next = append(next, span{s.from, c.from})
			}
			if c.to < s.to {
				next = append(next, span{c.to, s.to})
			}
		}
		out = next
	}
	return out
}

func covered(spans []span, from, to time.Duration) bool {
	for _, s := range spans {
		if s.from <= from && to <= s.to {
			return true
		}
	}
	return false
}

func overlaps(spans []span, from, to time.Duration) bool {
	for _, s := range spans {
		if s.from <= to && from <= s.to {
			return true
		}
	}
	return false
}

// views holds the server's and the consumer's view of every name over
// time, and answers whether the consumer had caught up with a change.
type views struct {
	server []serverView
	// consumer holds, by name, the consumer's changes in order.
	consumer map[string][]seenChange
}

// change is one change of the server's view of one name.
type change struct {
	at   time.Duration
	name string
}

func newViews(server []serverView, seen []seenChange) *views {
	v := &views{server: server, consumer: map[string][]seenChange{}}
	for _, c := range seen {
		v.consumer[c.name] = append(v.consumer[c.name], c)
	}
	return v
}

// changes lists every change of the server's view.
func (v *views) changes() []change {
	var out []change
	prev := map[string]string{}
	for _, sv := range v.server {
		for name, version := range sv.view {
			if prev[name] != version {
				out = append(out, change{sv.at, name})
			}
		}
		for name := range prev {
			if _, ok := sv.view[name]; !ok {
				out = append(out, change{sv.at, name})
			}
		}
		prev = sv.view
	}
	return out
}

// consumerAt is the consumer's version of name at t, "" if it has none.
func (v *views) consumerAt(name string, t time.Duration) string {
	version := ""
	for _, c := range v.consumer[name] {
		if c.at > t {
			break
		}
		version = c.version
	}
	return version
}

// caughtUp reports whether, at t, the consumer holds a version of c's
// name (or its absence) that the server held at some moment from c.at to
// t: it has the change, or one that came after it.
func (v *views) caughtUp(c change, t time.Duration) bool {
	have := v.consumerAt(c.name, t)
	for i, sv := range v.server {
		if sv.at > t {
			break
		}
		next := time.Duration(1 << 62)
		if i+1 < len(v.server) {
			next = v.server[i+1].at
		}
		if next <= c.at {
			continue // superseded before the change
		}
		if sv.view[c.name] == have {
			return true
		}
	}
	return false
}

func judge(v *verdict, p *probe, w *world, reqs []watchtest.Request, sc schedule, quiet, end time.Duration) {
	opened := time.Millisecond // the simulated server's default latency of a request
	if l := sc.server.Latency; l.Off {
		opened = 0
	} else if l.Request > 0 {
		opened = l.Request
	}
	// A stream is in doubt after a session that did not go live, and at
	// its start from a cursor (see the watch package).
	doubtAt := func(at time.Time) bool {
		if sc.informer {
			return false
		}
		t := at.Sub(w.start)
		doubt := sc.stream.Cursor != "" && sc.stream.Cursor != "0"
		for _, e := range p.counts().endings {
			if e.at > t {
				break
			}
			doubt = !e.v.Verdict.Healthy
		}
		return doubt
	}
	live := liveSpans(reqs, w.start, end, opened, doubtAt)
	var trouble, human, stalls []span
	for _, iv := range w.intervals {
		to := iv.end
		if to < 0 {
			to = end
		}
		if iv.slot.trouble() {
			trouble = append(trouble, span{iv.start, to})
		}
		if iv.human {
			human = append(human, span{iv.start, to})
		}
		if iv.slot == slotStall {
			stalls = append(stalls, span{iv.start, to})
		}
	}
	// A stream sees the server only when it asks: a healthy gap shorter
	// than one backoff may pass unseen, and does not end the trouble.
	trouble = union(trouble, bridge)
	human = union(human, bridge)
	const eps = 10 * time.Millisecond
	// noticeLive is how long after a session is live by the server's
	// account the stream may take to see it live: the moment of quiet
	// after the backlog, and the hand-off of the last events.
	const noticeLive = 100 * time.Millisecond

	c := p.counts()
	states := c.states
	stateAt := func(t time.Duration) wgwatch.State { return p.stateAt(t) }
	vw := newViews(w.server, c.seen)
	changes := vw.changes()

	// noticed is when a stream can know that its session ended at t: a
	// handler call that does not return keeps it from reading the close,
	// until the call returns or has been stuck long enough to be a stall
	// of its own (TransientGrace and a step).
	noticed := func(t time.Duration) time.Duration {
		for _, iv := range w.intervals {
			to := iv.end
			if to < 0 {
				to = end
			}
			if iv.slot == slotStuck && iv.start <= t && t < to {
				return min(to, t+transientGrace+stallStep)
			}
		}
		return t
	}

	// The consumer's truth. While a stream says Streaming, every change
	// is in its consumer's view within convergeBound; a change missing
	// for stallBound is a stall that needs a human. A watch cache that
	// stops following etcd under an open session cannot be told from a
	// quiet collection without listing it whole (see the package doc):
	// changes made while one is stalled are only held to arrive once it
	// catches up, at the end.
	behind := func(t time.Duration) bool { // some change missing for the deadline at t
		for _, ch := range changes {
			if t-ch.at >= deadline-eps && ch.at < t && !vw.caughtUp(ch, t) && !overlaps(stalls, ch.at, t) {
				return true
			}
		}
		return false
	}
	for _, ch := range changes {
		if overlaps(stalls, ch.at-convergeBound, ch.at+stallBound) {
			continue
		}
		// A stuck handler holds back what follows it, until it returns
		// or is a stall of its own.
		from := noticed(ch.at)
		if t := from + convergeBound; t < end && !vw.caughtUp(ch, t) {
			if st := stateAt(t); st.Phase == wgwatch.PhaseStreaming {
				v.add(&v.dishonest, "dishonest: %s changed at %v, not in the consumer's view at %v (it has %q), while Streaming", ch.name, ch.at, t, vw.consumerAt(ch.name, t))
			}
		}
		if t := from + stallBound; t < end && !vw.caughtUp(ch, t) {
			if st := stateAt(t); !st.NeedsHuman {
				v.add(&v.missed, "missed stall: %s changed at %v, not in the consumer's view at %v, state %s/%s", ch.name, ch.at, t, st.Phase, st.Reason)
			}
		}
	}

	// Precision: NeedsHuman only for a cause a human must fix that has
	// lasted HumanGrace, no live progress for ProgressDeadline, or a
	// consumer that has been missing a change for it. A stream cannot see
	// a session live while its handler is stuck, nor before a slow one
	// has taken the backlog: what the server held open meanwhile does not
	// count.
	var stuck []span
	for _, iv := range w.intervals {
		if iv.slot == slotStuck || iv.slot == slotSlow {
			to := iv.end
			if to < 0 {
				to = end
			}
			// The stream counts ShortSession again once the call returns.
			stuck = append(stuck, span{iv.start, to + shortSession})
		}
	}
	seenLive := minus(live, stuck)
	for _, s := range states {
		if !s.v.NeedsHuman {
			continue
		}
		t := s.at
		g := gapStart(seenLive, t)
		// A session that goes live a moment before the deadline is
		// published is one the stream could not have seen live yet: it
		// knows once the watch has been quiet for a moment after the
		// backlog it took (noticeLive).
		gn := gapStart(seenLive, t-noticeLive)
		// The evidence is the requests' answers: a request made while the
		// cause was in force is answered a request's latency later.
		justified := covered(human, t-humanGrace-opened, t-eps-opened) ||
			(g >= 0 && t-g >= deadline-eps) ||
			(gn >= 0 && t-noticeLive-gn >= deadline-eps) ||
			covered(trouble, t-deadline+eps, t-eps) ||
			behind(t)
		if !justified {
			v.add(&v.falseNeedsHuman, "false NeedsHuman at %v: %s/%s %q", t, s.v.Phase, s.v.Reason, s.v.Message)
			if *judgeVerbose {
				v.notes = append(v.notes, fmt.Sprintf("  seen live before it: %v", spansBefore(seenLive, t, 3)))
			}
		}
	}

	// Recall, human causes: from the first request a human cause failed,
	// while every request fails with it, published within recallHuman.
	// A stream's check of its cursor is not a session: a failed one ends
	// nothing.
	for _, iv := range w.intervals {
		if !iv.human || iv.slot != slotErr {
			continue
		}
		to := iv.end
		if to < 0 {
			to = end
		}
		first := time.Duration(-1)
		clean := true
		for _, r := range reqs {
			at := r.At.Sub(w.start)
			if at < iv.start || at >= to || isCursorCheck(r) {
				continue
			}
			if first < 0 {
				if r.Err != nil && r.Err.Error() == iv.err.Error() {
					first = at
				}
				continue
			}
			if at <= first+recallHuman && (r.Err == nil || r.Err.Error() != iv.err.Error()) {
				clean = false
			}
		}
		if first < 0 || !clean || to <= first+recallHuman {
			continue
		}
		if st := stateAt(first + recallHuman); !st.NeedsHuman {
			v.add(&v.missed, "missed: %v from %v not NeedsHuman at %v (state %s/%s)", iv.err, first, first+recallHuman, st.Phase, st.Reason)
		}
	}

	// Recall, the deadline: no live watch for ProgressDeadline is
	// NeedsHuman within a second of it.
	from := time.Duration(0)
	for _, s := range append(live, span{end, end}) {
		seen := noticed(from)
		if overlaps(stalls, from, s.from) {
			// A stalled watch cache is not seen (see the package doc).
			from = s.to
			continue
		}
		if t := seen + recallDeadline; t < s.from && t < end {
			if st := stateAt(t); !st.NeedsHuman {
				v.add(&v.missed, "missed: no live watch from %v, not NeedsHuman at %v (state %s/%s)", from, t, st.Phase, st.Reason)
				if *judgeVerbose {
					v.notes = append(v.notes, fmt.Sprintf("  live before it: %v", spansBefore(live, t, 3)))
				}
			}
		}
		// Honest Streaming: not Streaming once no watch has been live for
		// the transient grace.
		if t := seen + staleBound; t < s.from && t < end {
			if st := stateAt(t); st.Phase == wgwatch.PhaseStreaming {
				v.add(&v.dishonest, "dishonest: no live watch from %v, still Streaming at %v", from, t)
			}
		}
		from = s.to
	}

	// Honest Streaming: published only while a watch is live.
	for _, s := range states {
		if s.v.Phase == wgwatch.PhaseStreaming && gapStart(live, s.at) >= 0 {
			v.add(&v.dishonest, "dishonest: Streaming published at %v with no live watch", s.at)
		}
	}

	// Clearing: healthy for clearBound (no fault, no instant action) means
	// Streaming.
	var busy []span
	for _, iv := range w.intervals {
		if iv.slot.trouble() {
			to := iv.end
			if to < 0 {
				to = end
			}
			busy = append(busy, span{iv.start, to})
		}
	}
	for _, a := range w.actions {
		busy = append(busy, span{a, a})
	}
	busy = append(busy, w.notReady...)
	busy = union(busy, 0)
	from = 0
	clear := clearBound + w.replayServed()
	for _, s := range append(busy, span{end, end}) {
		if t := from + clear; t < s.from {
			if st := stateAt(t); st.Phase != wgwatch.PhaseStreaming {
				v.add(&v.missed, "not cleared: healthy from %v, state %s/%s at %v", from, st.Phase, st.Reason, t)
			}
		}
		from = max(from, s.to)
	}

	// Steadiness: under faults that do not change, the state changes at
	// most maxPublications times, however long they last.
	bounds := []time.Duration{0, quiet, end}
	for _, iv := range w.intervals {
		bounds = append(bounds, iv.start)
		if iv.end >= 0 {
			bounds = append(bounds, iv.end)
		}
	}
	bounds = append(bounds, w.actions...)
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	for i := 0; i+1 < len(bounds); i++ {
		a, b := bounds[i], bounds[i+1]
		n := 0
		for _, s := range states {
			if s.at > a && s.at < b {
				n++
			}
		}
		v.publications = max(v.publications, n)
		if n > maxPublications {
			v.add(&v.flapping, "flapping: %d states published from %v to %v, under faults that did not change", n, a, b)
		}
	}
}

// spansBefore returns the last n spans that start before t.
func spansBefore(spans []span, t time.Duration, n int) []span {
	i := 0
	for i < len(spans) && spans[i].from < t {
		i++
	}
	return spans[max(i-n, 0):i]
}

// replayServed is how long the server takes to serve one replay of the
// largest collection the history had, page by page (the stream's
// ListPageSize, the reflector's 500), and the watch after it: the bound
// on clearing counts the stream's waits, not the server's own time.
func (w *world) replayServed() time.Duration {
	if w.latency.Off {
		return 0
	}
	n := 0
	for _, sv := range w.server {
		n = max(n, len(sv.view))
	}
	page := w.pageSize
	if page <= 0 {
		page = 500
	}
	pages := (int64(n) + page - 1) / page
	return time.Duration(pages+1)*w.latency.Request + time.Duration(n)*w.latency.PerObject
}
