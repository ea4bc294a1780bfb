package judgekit

import (
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// ShortSession is how long a session must stay open, past its replay, to
// be live: the default of Policy.ShortSession, which both judges run with.
const ShortSession = wgwatch.DefaultShortSession

// Opened is how long the simulated server with latency l takes to open a
// watch: its request latency, 1 ms by default, none when it is off.
func Opened(l watchtest.Latency) time.Duration {
	switch {
	case l.Off:
		return 0
	case l.Request > 0:
		return l.Request
	}
	return time.Millisecond
}

// IsCursorCheck reports whether r is a stream's check of its cursor (a
// LIST of one object with a timeoutSeconds, either way it is asked): not
// a replay, and no session of its own. A replay's first page after a 410
// is NotOlderThan the expired cursor, and may be of one object.
func IsCursorCheck(r watchtest.Request) bool {
	return r.Kind == watchtest.CallList && r.Options.Limit == 1 && r.Options.TimeoutSeconds != nil
}

// Ended is a session ending a judge's observer saw, when it saw it
// (since the history began).
type Ended struct {
	At  time.Duration
	End wgwatch.SessionEnd
}

// Doubt reports whether a Stream whose session endings are endings (in
// order) is in doubt at t, as the watch package defines it: from its start
// if it started from a cursor (fromCursor), and from any session ending
// that did not go live until one that did. A teardown changes nothing.
// An informer over Instrument is never in doubt.
func Doubt(fromCursor bool, endings []Ended, t time.Duration) bool {
	doubt := fromCursor
	for _, e := range endings {
		if e.At > t {
			break
		}
		if e.End.Verdict.Next == wgwatch.NextStop {
			continue
		}
		doubt = !e.End.Verdict.Healthy
	}
	return doubt
}

// LiveSpans returns when the server had a live watch of its clients', as
// the watch package defines a live session: open (once the open took
// opened, the server's latency), and past its replay (if it was a
// watch-list) by ShortSession. What the watch delivered does not count: a
// session is live by staying open, and a first event before ShortSession
// does not make it live sooner. end closes the watches still open. A
// watch from a cursor is never live if the stream's check of that cursor
// said the server had not reached it and the watch delivered nothing; one
// opened while its stream was in doubt (doubtAt, which may be nil for
// never) is live only once the check's answer or an event from the cursor
// confirmed it. Every client's watches count.
func LiveSpans(reqs []watchtest.Request, start time.Time, end, opened time.Duration, doubtAt func(time.Time) bool) []Span {
	if doubtAt == nil {
		doubtAt = func(time.Time) bool { return false }
	}
	// A watch from a cursor the server had not reached was silent, and
	// never live: the stream's check of that cursor, made while the watch
	// was open, says so.
	var checks []watchtest.Request
	for _, r := range reqs {
		if IsCursorCheck(r) {
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
	var out []Span
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
		live := replayEnd.Add(ShortSession + time.Millisecond)
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
			out = append(out, Span{l, closed})
		}
	}
	return Union(out, 0)
}
