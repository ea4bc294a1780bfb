package watch_test

import (
	"fmt"
	"slices"
	"time"

	"github.com/watchgrade/watchgrade/internal/judgekit"
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
	// live for TransientGrace is no longer Streaming, a consumer behind
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
		for _, name := range sortedNames(sv.view) {
			if version := sv.view[name]; prev[name] != version {
				out = append(out, change{sv.at, name})
			}
		}
		for _, name := range sortedNames(prev) {
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
	opened := judgekit.Opened(sc.server.Latency)
	// A stream is in doubt after a session that did not go live, and at
	// its start from a cursor (see the watch package); an informer never.
	var doubtAt func(time.Time) bool
	if !sc.informer {
		var endings []judgekit.Ended
		for _, e := range p.counts().endings {
			endings = append(endings, judgekit.Ended{At: e.at, End: e.v})
		}
		fromCursor := sc.stream.Cursor != "" && sc.stream.Cursor != "0"
		doubtAt = func(at time.Time) bool { return judgekit.Doubt(fromCursor, endings, at.Sub(w.start)) }
	}
	live := judgekit.LiveSpans(reqs, w.start, end, opened, doubtAt)
	var trouble, human, stalls []span
	for _, iv := range w.intervals {
		to := iv.end
		if to < 0 {
			to = end
		}
		if iv.slot.Trouble() {
			trouble = append(trouble, span{From: iv.start, To: to})
		}
		if iv.human {
			human = append(human, span{From: iv.start, To: to})
		}
		if iv.slot == slotStall {
			stalls = append(stalls, span{From: iv.start, To: to})
		}
	}
	// A stream sees the server only when it asks: a healthy gap shorter
	// than one backoff may pass unseen, and does not end the trouble.
	trouble = judgekit.Union(trouble, bridge)
	human = judgekit.Union(human, bridge)
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
			// A slow handler's call in progress at t returns a delay
			// later at most.
			if iv.slot == slotSlow && iv.start <= t && t < to+iv.delay {
				return min(t+iv.delay, t+transientGrace+stallStep)
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
			if t-ch.at >= deadline-eps && ch.at < t && !vw.caughtUp(ch, t) && !judgekit.Overlaps(stalls, ch.at, t) {
				return true
			}
		}
		return false
	}
	for _, ch := range changes {
		if judgekit.Overlaps(stalls, ch.at-convergeBound, ch.at+stallBound) {
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
			// The stream counts ShortSession again once the call returns
			// (a slow handler's last call a delay after the fault ends).
			stuck = append(stuck, span{From: iv.start, To: to + iv.delay + shortSession})
		}
	}
	seenLive := judgekit.Minus(live, stuck)
	for _, s := range states {
		if !s.v.NeedsHuman {
			continue
		}
		t := s.at
		g := judgekit.GapStart(seenLive, t)
		// A session that goes live a moment before the deadline is
		// published is one the stream could not have seen live yet: it
		// knows once the watch has been quiet for a moment after the
		// backlog it took (noticeLive).
		gn := judgekit.GapStart(seenLive, t-noticeLive)
		// The evidence is the requests' answers: a request made while the
		// cause was in force is answered a request's latency later.
		justified := judgekit.Covered(human, t-humanGrace-opened, t-eps-opened) ||
			(g >= 0 && t-g >= deadline-eps) ||
			(gn >= 0 && t-noticeLive-gn >= deadline-eps) ||
			judgekit.Covered(trouble, t-deadline+eps, t-eps) ||
			behind(t)
		if !justified {
			v.add(&v.falseNeedsHuman, "false NeedsHuman at %v: %s/%s %q", t, s.v.Phase, s.v.Reason, s.v.Message)
			if *judgeVerbose {
				v.notes = append(v.notes, fmt.Sprintf("  seen live before it: %v", judgekit.SpansBefore(seenLive, t, 3)))
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
	for _, s := range append(live, span{From: end, To: end}) {
		seen := noticed(from)
		if judgekit.Overlaps(stalls, from, s.From) {
			// A stalled watch cache is not seen (see the package doc).
			from = s.To
			continue
		}
		if t := seen + recallDeadline; t < s.From && t < end {
			if st := stateAt(t); !st.NeedsHuman {
				v.add(&v.missed, "missed: no live watch from %v, not NeedsHuman at %v (state %s/%s)", from, t, st.Phase, st.Reason)
				if *judgeVerbose {
					v.notes = append(v.notes, fmt.Sprintf("  live before it: %v", judgekit.SpansBefore(live, t, 3)))
				}
			}
		}
		// Honest Streaming: not Streaming once no watch has been live for
		// the transient grace.
		if t := seen + staleBound; t < s.From && t < end {
			if st := stateAt(t); st.Phase == wgwatch.PhaseStreaming {
				v.add(&v.dishonest, "dishonest: no live watch from %v, still Streaming at %v", from, t)
			}
		}
		from = s.To
	}

	// Honest Streaming: published only while a watch is live.
	for _, s := range states {
		if s.v.Phase == wgwatch.PhaseStreaming && judgekit.GapStart(live, s.at) >= 0 {
			v.add(&v.dishonest, "dishonest: Streaming published at %v with no live watch", s.at)
		}
	}

	// Clearing: healthy for clearBound (no fault, no instant action) means
	// Streaming.
	var busy []span
	for _, iv := range w.intervals {
		to := iv.end
		if to < 0 {
			to = end
		}
		switch {
		case iv.slot.Trouble():
			busy = append(busy, span{From: iv.start, To: to})
		case iv.slot == slotSlow && iv.delay > judgekit.MaxSlowCall:
			// A handler slower than keeps up: behind a backlog until its
			// last call returns.
			busy = append(busy, span{From: iv.start, To: to + iv.delay})
		}
	}
	for _, a := range w.actions {
		busy = append(busy, span{From: a, To: a})
	}
	busy = append(busy, w.notReady...)
	busy = judgekit.Union(busy, 0)
	from = 0
	clear := clearBound + w.replayServed()
	for _, s := range append(busy, span{From: end, To: end}) {
		if t := from + clear; t < s.From {
			if st := stateAt(t); st.Phase != wgwatch.PhaseStreaming {
				v.add(&v.missed, "not cleared: healthy from %v, state %s/%s at %v", from, st.Phase, st.Reason, t)
			}
		}
		from = max(from, s.To)
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
	bounds = append(bounds, w.loads...)
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
