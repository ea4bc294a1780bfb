package watch

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Stage is the part of a session in which it ended.
type Stage string

const (
	// StageList: the paginated LIST of a LIST+WATCH replay.
	StageList Stage = "List"
	// StageOpen: the Watch call that resumes from a cursor.
	StageOpen Stage = "Open"
	// StageReplay: a watch-list replay, from its Watch call until the
	// initial-events-end bookmark.
	StageReplay Stage = "Replay"
	// StageStream: live events after the open or the replay.
	StageStream Stage = "Stream"
)

// Cause says how a session ended.
type Cause string

const (
	// CauseClosed: the result channel closed without an error. The server's
	// own timeout, a server shutdown, a GOAWAY and a connection reset all
	// look like this to a client.
	CauseClosed Cause = "Closed"
	// CauseError: the List or Watch call returned an error, or an ERROR
	// event arrived. [Ending.Err] holds it.
	CauseError Cause = "Error"
	// CauseBadEvent: an event the stream cannot use arrived: no object, no
	// resourceVersion, or an unknown type.
	CauseBadEvent Cause = "BadEvent"
	// CauseHandler: the consumer's [Handler] returned [Ending.Err].
	CauseHandler Cause = "Handler"
	// CauseReplayDeadline: a watch-list replay did not reach its
	// initial-events-end bookmark in time.
	CauseReplayDeadline Cause = "ReplayDeadline"
)

// Ending describes one session ending and the stream's recent history: all
// that [Grade] needs to decide what it means.
type Ending struct {
	// OwnerDone is true when the owner's context was done when the session
	// ended. It wins over everything else: a close that races a teardown is a
	// teardown.
	OwnerDone bool
	// Stage is where the session ended.
	Stage Stage
	// Cause is how it ended.
	Cause Cause
	// Err is the error, for CauseError, CauseBadEvent and CauseHandler.
	Err error
	// Duration is how long the session lasted.
	Duration time.Duration
	// Events is the number of objects delivered in the session.
	Events int
	// CursorMoved is true when the session advanced the cursor (an event or
	// a bookmark).
	CursorMoved bool

	// Failures counts the sessions in a row before this one that were not
	// healthy (see [Verdict.Healthy]).
	Failures int
	// Trouble is how long the current run of unhealthy sessions has lasted:
	// from the end of its first session until this ending. Zero when
	// Failures is zero.
	Trouble time.Duration
	// ShortCloses counts the short, empty closes in a row before this one.
	ShortCloses int
	// FlapReplayed is true when a replay was already tried during the
	// current run of short closes.
	FlapReplayed bool
}

// Policy holds the thresholds of [Grade]. Its zero value uses the defaults.
type Policy struct {
	// ShortSession is the duration under which a clean close that delivered
	// nothing and left the cursor where it was counts as short.
	// Defaults to 1s.
	ShortSession time.Duration
	// FlapAfter is the number of short closes in a row, a replay having been
	// tried among them, after which the stream is Blocked with
	// ReasonFlapping. Defaults to 3.
	FlapAfter int
	// TransientGrace is how long transient failures may last before the
	// stream is published as Blocked. Defaults to 30s.
	TransientGrace time.Duration
	// HumanGrace is how long failures that need a human may last before
	// they are published: a Role, RoleBinding or CRD applied together with
	// the controller takes seconds to take effect, and a fresh install must
	// not raise a Warning. Defaults to 15s.
	HumanGrace time.Duration
	// ProgressDeadline is how long a stream may go without a healthy
	// session, whatever the cause, before it needs a human.
	// Defaults to 5m.
	ProgressDeadline time.Duration
	// ReplayGrace is how long the replay after an expiry may take before
	// the stream is published as Replaying. Every apiserver restart expires
	// every cursor (the new watch cache starts after them); a replay that
	// is done within the grace loses nothing and is not news.
	// Defaults to 10s.
	ReplayGrace time.Duration
}

// Policy defaults.
const (
	DefaultShortSession     = time.Second
	DefaultFlapAfter        = 3
	DefaultTransientGrace   = 30 * time.Second
	DefaultHumanGrace       = 15 * time.Second
	DefaultProgressDeadline = 5 * time.Minute
	DefaultReplayGrace      = 10 * time.Second
)

func (p Policy) withDefaults() Policy {
	if p.ShortSession <= 0 {
		p.ShortSession = DefaultShortSession
	}
	if p.FlapAfter <= 0 {
		p.FlapAfter = DefaultFlapAfter
	}
	if p.TransientGrace <= 0 {
		p.TransientGrace = DefaultTransientGrace
	}
	if p.HumanGrace <= 0 {
		p.HumanGrace = DefaultHumanGrace
	}
	if p.ProgressDeadline <= 0 {
		p.ProgressDeadline = DefaultProgressDeadline
	}
	if p.ReplayGrace <= 0 {
		p.ReplayGrace = DefaultReplayGrace
	}
	return p
}

// Next is what a stream does after a session ends.
type Next string

const (
	// NextStop: the stream stops (teardown).
	NextStop Next = "Stop"
	// NextResume: open the next session from the cursor.
	NextResume Next = "Resume"
	// NextReplay: drop the cursor and replay the collection.
	NextReplay Next = "Replay"
)

// Wait is how long a stream waits before its next session.
type Wait string

const (
	// WaitNone: go on at once.
	WaitNone Wait = "None"
	// WaitBackoff: wait the next step of the exponential backoff.
	WaitBackoff Wait = "Backoff"
	// WaitSlow: wait a full backoff cap; for failures that need a human,
	// which heal when fixed but not sooner.
	WaitSlow Wait = "Slow"
)

// Verdict is what [Grade] decides about one session ending.
type Verdict struct {
	// Outcome is the ending's label.
	Outcome Outcome
	// Class is the class of the error that ended the session, ClassNone for
	// a clean close or a teardown.
	Class Class
	// Healthy is true when the session counts as healthy: it resets the
	// backoff and the failure history.
	Healthy bool
	// ShortClose is true when the session was a short, empty clean close; it
	// extends the run that [Ending.ShortCloses] counts.
	ShortClose bool
	// Publish is true when the stream must publish State.
	Publish bool
	// PublishAfter, when positive, defers the publication: the stream
	// publishes State only if the replay it starts has not delivered its
	// snapshot by then.
	PublishAfter time.Duration
	// State is the state to publish when Publish is true; its Stream and
	// Resource are left for the caller to fill in.
	State State
	// Next is what to do next.
	Next Next
	// Wait is how long to wait before doing it.
	Wait Wait
	// RetryAfter is the server's Retry-After, a floor for the wait.
	RetryAfter time.Duration
}

// Grade decides what a session ending means. It is pure: no I/O, no clock;
// everything it needs is in the [Ending]. Rows are checked from top to
// bottom; the first that matches decides.
//
//	how it ended                                 outcome   publishes                         next
//	-------------------------------------------  --------  --------------------------------  -----------------------
//	owner's context done, whatever else          teardown  nothing                           stop
//	410 Expired/Gone: open, ERROR event, replay,  expired   Replaying/ExpiredResourceVersion  replay at once (after
//	  or LIST                                       if the replay outlasts                    backoff if a replay
//	                                                ReplayGrace                               keeps expiring)
//	clean close, healthy (≥ ShortSession, or an  closed    nothing                           resume at once
//	  event, or the cursor moved)
//	clean close of a replay, not short           closed    nothing                           replay at once
//	short empty close, the first in a row        closed    nothing                           resume at once
//	short empty close, no replay tried yet       closed    nothing                           replay after backoff
//	short empty close, FlapAfter in a row, a     closed    Blocked/Flapping                  resume (replay if it was
//	  replay tried (or this one a replay)                                                       a replay) after backoff
//	short empty close, otherwise                 closed    nothing                           as above, after backoff
//	replay deadline passed                       error     Blocked/ReplayTimedOut            replay after backoff
//	needs a human: 401, 403, 404, 400, 405, 422  error     Blocked, needs human, once        resume (replay if the
//	                                                         Trouble ≥ HumanGrace              replay failed) after
//	                                                                                            backoff; slow once
//	                                                                                            published
//	transient: 429, 5xx, timeouts, connection    error     Blocked once Trouble ≥            resume (replay if the
//	  errors, bad events, handler errors                    TransientGrace                    replay failed) after
//	                                                                                            backoff
//
// Whatever the row, an unhealthy ending whose Trouble has reached
// ProgressDeadline is published as Blocked with NeedsHuman set and
// [ReasonProgressDeadlineExceeded]: a stream that has not streamed for that
// long is stalled, whatever the cause. A handler error takes the class of the
// error it returned ([Classify]), so a handler that reports a Forbidden from
// its own API call needs a human too.
//
// Retry-After from the server ([Verdict.RetryAfter]) is a floor for any wait.
func Grade(e Ending, p Policy) Verdict {
	p = p.withDefaults()
	if e.OwnerDone {
		return Verdict{Outcome: OutcomeTeardown, Class: ClassNone, Next: NextStop, Wait: WaitNone}
	}
	var v Verdict
	switch e.Cause {
	case CauseClosed:
		v = gradeClose(e, p)
	case CauseReplayDeadline:
		v = Verdict{
			Outcome: OutcomeError, Class: ClassTransient,
			Publish: true,
			State: State{Phase: PhaseBlocked, Reason: ReasonReplayTimedOut,
				Message: "the replay did not reach its initial-events-end bookmark in time; replaying again"},
			Next: NextReplay, Wait: WaitBackoff,
		}
	default:
		v = gradeError(e, p)
	}
	if !v.Healthy && v.Outcome != OutcomeExpired && e.Failures > 0 && e.Trouble >= p.ProgressDeadline {
		cause := v.State.Message
		if !v.Publish {
			cause = describe(e)
		}
		v.Publish = true
		v.State = State{
			Phase: PhaseBlocked, Reason: ReasonProgressDeadlineExceeded, NeedsHuman: true,
			Message: fmt.Sprintf("no healthy watch session for over %s; last: %s", p.ProgressDeadline, cause),
		}
	}
	return v
}

func gradeClose(e Ending, p Policy) Verdict {
	v := Verdict{Outcome: OutcomeClosed, Class: ClassNone}
	// A replay that was cut short starts over: its snapshot was not
	// delivered, so the cursor is of no use.
	again := NextResume
	if e.Stage == StageReplay || e.Stage == StageList {
		again = NextReplay
	}
	short := e.Duration < p.ShortSession && e.Events == 0 && !e.CursorMoved
	if !short {
		v.Healthy = again == NextResume
		v.Next, v.Wait = again, WaitNone
		return v
	}
	v.ShortClose = true
	n := e.ShortCloses + 1
	tried := e.FlapReplayed || again == NextReplay
	switch {
	case n == 1 && again == NextResume:
		v.Next, v.Wait = NextResume, WaitNone
	case !tried:
		// A stale cursor can look like this (proxies, resources without a
		// watch cache): try the collection afresh once.
		v.Next, v.Wait = NextReplay, WaitBackoff
	case n >= p.FlapAfter:
		v.Next, v.Wait = again, WaitBackoff
		v.Publish = true
		v.State = State{Phase: PhaseBlocked, Reason: ReasonFlapping,
			Message: "watch sessions keep closing at once without events, even after a replay"}
	default:
		v.Next, v.Wait = again, WaitBackoff
	}
	return v
}

func gradeError(e Ending, p Policy) Verdict {
	class, reason := Classify(e.Err)
	switch e.Cause {
	case CauseBadEvent:
		class, reason = ClassTransient, ReasonBadEvent
	case CauseHandler:
		if class != ClassNeedsHuman {
			class = ClassTransient
		}
		reason = ReasonHandlerFailed
	}
	v := Verdict{Outcome: OutcomeError, Class: class, Wait: WaitBackoff, RetryAfter: retryAfter(e.Err)}
	if class == ClassExpired {
		v.Outcome = OutcomeExpired
		v.Publish = true
		v.State = State{Phase: PhaseReplaying, Reason: ReasonExpiredResourceVersion,
			Message: "the resourceVersion expired; replaying the collection"}
		v.PublishAfter = p.ReplayGrace
		v.Next = NextReplay
		// Resuming from an expired cursor is answered by a replay at once;
		// only a replay that itself keeps expiring backs off.
		if e.Failures == 0 || (e.Stage != StageReplay && e.Stage != StageList) {
			v.Wait = WaitNone
		}
		return v
	}
	v.Next = NextResume
	if e.Stage == StageReplay || e.Stage == StageList {
		v.Next = NextReplay
	}
	grace := p.TransientGrace
	if class == ClassNeedsHuman {
		grace = p.HumanGrace
	}
	if e.Failures > 0 && e.Trouble >= grace {
		v.Publish = true
		v.State = State{Phase: PhaseBlocked, Reason: reason, NeedsHuman: class == ClassNeedsHuman,
			Message: describe(e)}
		if class == ClassNeedsHuman {
			v.Wait = WaitSlow
		}
	}
	return v
}

// describe says in one bounded sentence what ended the session.
func describe(e Ending) string {
	var what string
	switch e.Cause {
	case CauseClosed:
		return "watch sessions keep closing at once without events"
	case CauseHandler:
		what = "the handler failed"
	case CauseBadEvent:
		what = "the server sent an unusable event"
	default:
		switch e.Stage {
		case StageList:
			what = "list failed"
		case StageReplay:
			what = "replay failed"
		case StageOpen:
			what = "watch failed to open"
		default:
			what = "watch failed"
		}
	}
	if e.Err == nil {
		return what
	}
	return what + ": " + truncate(errorText(e.Err), maxErrText)
}

// errorText is err's text with any request URL cut to its path: client-go
// wraps transport errors in a *url.Error whose URL carries the
// resourceVersion, which would make every message different.
func errorText(err error) string {
	var ue *url.Error
	if !errors.As(err, &ue) || ue.Err == nil {
		return err.Error()
	}
	where := ue.URL
	if u, perr := url.Parse(ue.URL); perr == nil {
		u.RawQuery, u.Fragment = "", ""
		where = u.String()
	}
	return ue.Op + " " + where + ": " + ue.Err.Error()
}

// maxErrText bounds the error text quoted in a State message.
const maxErrText = 512

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary.
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
