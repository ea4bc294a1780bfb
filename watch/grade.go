package watch

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	// CauseClosed: the result channel closed without an error.
	CauseClosed Cause = "Closed"
	// CauseError: the List or Watch call returned an error, or an ERROR
	// event arrived. [Ending.Err] holds it.
	CauseError Cause = "Error"
	// CauseBadEvent: an event whose object is missing or has no metadata,
	// or a list without metadata or a resourceVersion.
	CauseBadEvent Cause = "BadEvent"
	// CauseHandler: the consumer's [Handler] returned [Ending.Err].
	CauseHandler Cause = "Handler"
	// CauseReplayDeadline: a watch-list replay did not reach its
	// initial-events-end bookmark in time.
	CauseReplayDeadline Cause = "ReplayDeadline"
)

// Ending describes one session ending and the stream's history: all that
// [Grade] needs to decide what it means.
type Ending struct {
	// OwnerDone is true when the owner's context was done when the session
	// ended. It wins over everything else.
	OwnerDone bool
	// Stage is where the session ended.
	Stage Stage
	// Cause is how it ended.
	Cause Cause
	// Err is the error, for CauseError, CauseBadEvent and CauseHandler.
	Err error
	// Duration is how long the session lasted.
	Duration time.Duration
	// Events is the number of objects delivered in the session, a replay's
	// included.
	Events int
	// Live is true when the session went live (see "When a session is
	// live" in the package doc).
	Live bool

	// Failures counts the sessions in a row before this one that did not
	// go live.
	Failures int
	// Trouble is how long since the last live session ended, or the stream
	// started. Zero when this session was live.
	Trouble time.Duration
	// NeedsHumanFor is how long the failures that need a human have gone
	// on in a row; zero when there were none just before.
	NeedsHumanFor time.Duration
	// ExpiredFor is how long ago the cursor first expired since the
	// stream was last live. Zero when no earlier ending was an expiry.
	ExpiredFor time.Duration
	// Replays counts the replays started since the stream was last live,
	// this session's included.
	Replays int
	// ShortCloses counts the short closes in a row before this one.
	ShortCloses int
}

// Policy holds the thresholds of [Grade]. Its zero value uses the defaults.
type Policy struct {
	// ShortSession is how long a session must stay open, after its replay
	// if it had one, to count as live; a clean close that comes sooner is
	// short, whatever it delivered. Defaults to 1s.
	ShortSession time.Duration
	// FlapAfter is the number of short closes in a row, with a replay tried,
	// after which the stream is Blocked with ReasonFlapping. Defaults to 3.
	FlapAfter int
	// TransientGrace is how long a stream may go without a live session
	// before it is published as Blocked, whatever the cause. Defaults to
	// 30s.
	TransientGrace time.Duration
	// HumanGrace is how long failures that need a human may go on before
	// they are published: a RoleBinding or CRD applied with the controller
	// takes seconds to take effect. Defaults to 15s.
	HumanGrace time.Duration
	// ProgressDeadline is how long a stream may go without a live session,
	// whatever the cause, before it needs a human; it is published on a
	// timer, not at the next ending. Defaults to 5m.
	ProgressDeadline time.Duration
	// ReplayGrace is how long a stream whose cursor expired may go without
	// a live session before it is published as Replaying: every apiserver
	// restart expires every cursor. Defaults to 10s.
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

// Validate reports, as an error wrapping [ErrInvalidOptions], thresholds
// that cannot all be honoured once defaults are applied: a ProgressDeadline
// shorter than TransientGrace, or a ShortSession not shorter than it.
// [NewStream] and [Instrument] refuse such a Policy; [Grade] raises
// ProgressDeadline to TransientGrace.
func (p Policy) Validate() error {
	p = p.filled()
	var problems []string
	if p.ProgressDeadline < p.TransientGrace {
		problems = append(problems, fmt.Sprintf("ProgressDeadline %s is shorter than TransientGrace %s", p.ProgressDeadline, p.TransientGrace))
	}
	if p.ShortSession >= p.TransientGrace {
		problems = append(problems, fmt.Sprintf("ShortSession %s is not shorter than TransientGrace %s", p.ShortSession, p.TransientGrace))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidOptions, strings.Join(problems, "; "))
}

func (p Policy) withDefaults() Policy {
	p = p.filled()
	// Validate refuses this; Grade cannot.
	p.ProgressDeadline = max(p.ProgressDeadline, p.TransientGrace)
	return p
}

// filled returns p with each zero or negative threshold at its default.
func (p Policy) filled() Policy {
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
	// WaitSlow: wait from the upper half of the backoff cap; for failures
	// that need a human.
	WaitSlow Wait = "Slow"
)

// Verdict is what [Grade] decides about one session ending.
type Verdict struct {
	// Outcome is the ending's label.
	Outcome Outcome
	// Class is the class of the error that ended the session.
	Class Class
	// Healthy is true when the session went live ([Ending.Live]).
	Healthy bool
	// ShortClose is true when the session was a short clean close.
	ShortClose bool
	// Publish is true when the stream must publish State now.
	Publish bool
	// State is the state to publish; Stream and Resource are left unset.
	State State
	// Escalations are the states to publish if the stream is still not live
	// that long after this ending, latest last. A live session cancels
	// them; the next ending replaces them.
	Escalations []Escalation
	// Next is what to do next.
	Next Next
	// Wait is how long to wait before doing it.
	Wait Wait
	// RetryAfter is the server's Retry-After, a floor for the wait.
	RetryAfter time.Duration
}

// Escalation is a state a stream publishes if it has still not gone live
// After its last ending: what it is not yet sure enough of to publish now.
type Escalation struct {
	After time.Duration
	State State
}

// Grade decides what a session ending means. It is pure: no I/O, no clock;
// everything it needs is in the [Ending]. The first row that matches
// decides; why each row is what it is, see "The grading table" in the
// package doc.
//
//	how it ended                                   outcome   publishes now                     next
//	---------------------------------------------  --------  --------------------------------  ---------------------------
//	owner's context done, whatever else            teardown  nothing                           stop
//	a live session, however it ended:
//	  clean close (the server's timeout)           closed    nothing                           resume at once
//	  410, or too large resourceVersion            expired   nothing                           replay at once
//	  any other error (a stream reset, the         error     nothing                           resume after backoff,
//	    handler)                                                                                 which starts over
//	not live, 410 or too large resourceVersion:    expired   Replaying once ExpiredFor ≥       replay: at once if no
//	                                                           ReplayGrace (or Trouble ≥         replay since live,
//	                                                           TransientGrace)                   else after backoff
//	not live, a clean close:
//	  short, the first, no replay since live       closed    nothing                           resume at once
//	  short, no replay since live                  closed    nothing                           replay after backoff
//	  short, FlapAfter in a row                    closed    Blocked/Flapping                  resume (replay if it was
//	                                                                                             one) after backoff
//	  short, otherwise                             closed    nothing                           as above
//	  a replay cut before it was complete          closed    nothing                           replay (after backoff if
//	                                                                                             it keeps happening)
//	not live, needs a human: 401, 403, 404, 400,   error     Blocked, needs human, once        resume (replay if the
//	  405, 422, a refused TLS certificate, met                 NeedsHumanFor ≥ HumanGrace;       replay failed) after
//	  by the stream's requests or its handler's                slow retries from then on         backoff
//	not live, transient: 429, 5xx, timeouts,       error     nothing                           as above
//	  connection errors, bad events, handler
//	  errors of no such class, a replay past its
//	  deadline
//
// Whatever the row, an ending that is not live publishes Blocked (with the
// ending's reason; NeedsHuman only once the needs-a-human row says so) if
// Trouble has reached TransientGrace, and Blocked with NeedsHuman and
// [ReasonProgressDeadlineExceeded] if it has reached ProgressDeadline,
// unless the needs-a-human row publishes the ending's own cause: an
// outage past the deadline that ends in a denial is the denial.
// The thresholds not reached yet are [Verdict.Escalations] (after an
// expiry: Replaying at ReplayGrace from the expiry, or at TransientGrace
// if that comes first, then the deadline). A 410 is graded the same in
// every shape (on the open, an ERROR event anywhere, a LIST continue
// token). A short close is a clean close before the session went live,
// with [ReasonFlapping]. A handler error takes the class of its error
// ([Classify]), with [ReasonHandlerFailed]: a handler whose own requests
// are denied (its status writes forbidden, say) makes no progress until
// someone acts, as a stream whose watch is denied does, so it counts
// towards HumanGrace as the stream's requests do. The server's Retry-After
// ([Verdict.RetryAfter]) is a floor for any wait.
func Grade(e Ending, p Policy) Verdict {
	p = p.withDefaults()
	if e.OwnerDone {
		return Verdict{Outcome: OutcomeTeardown, Class: ClassNone, Next: NextStop, Wait: WaitNone}
	}
	class, reason := classOf(e)
	if e.Cause == CauseClosed && !e.Live {
		reason = ReasonFlapping
	}
	v := Verdict{Outcome: OutcomeError, Class: class, Healthy: e.Live, RetryAfter: retryAfter(e.Err)}
	switch {
	case e.Cause == CauseClosed:
		v.Outcome = OutcomeClosed
	case class == ClassExpired:
		v.Outcome = OutcomeExpired
	}
	replayStage := e.Stage == StageReplay || e.Stage == StageList
	// Not short: a replay that took its time and was cut before its end.
	short := e.Cause == CauseClosed && !e.Live &&
		(e.Stage != StageReplay || (e.Duration < p.ShortSession && e.Events == 0))
	switch {
	case e.Live:
		v.Next, v.Wait = NextResume, WaitNone
		if class == ClassExpired {
			v.Next = NextReplay
		} else if v.Outcome == OutcomeError {
			v.Wait = WaitBackoff
		}
	case class == ClassExpired:
		// Only replays that keep failing back off.
		v.Next, v.Wait = NextReplay, WaitNone
		if e.Replays > 0 {
			v.Wait = WaitBackoff
		}
	case short:
		v.ShortClose = true
		v.Next, v.Wait = gradeShortClose(e, p, replayStage, &v)
	case e.Cause == CauseClosed:
		// A replay cut before its end: no snapshot, no cursor.
		v.Next, v.Wait = NextReplay, WaitNone
		if e.Failures > 0 {
			v.Wait = WaitBackoff
		}
	default:
		v.Next, v.Wait = NextResume, WaitBackoff
		if replayStage {
			v.Next = NextReplay
		}
	}
	if e.Live {
		v.Escalations = escalations(e, class, reason, p)
		return v
	}
	switch {
	case class == ClassNeedsHuman && e.NeedsHumanFor >= p.HumanGrace:
		// A cause of its own that needs a human says more than the
		// deadline: an outage past ProgressDeadline that ends in a
		// denial is the denial, or the stall would name the outage's
		// connection refused while RBAC denies.
		v.Publish = true
		v.State = State{Phase: PhaseBlocked, Reason: reason, NeedsHuman: true, Message: describe(e)}
	case e.Trouble >= p.ProgressDeadline:
		v.Publish, v.State = true, deadlineState(e, p)
	case class == ClassExpired && (e.ExpiredFor >= p.ReplayGrace || e.Trouble >= p.TransientGrace):
		v.Publish, v.State = true, replayingState(reason)
	case v.Publish:
		// Flapping, from gradeShortClose.
	case class != ClassExpired && e.Trouble >= p.TransientGrace:
		v.Publish = true
		v.State = State{Phase: PhaseBlocked, Reason: reason, Message: describe(e)}
	}
	if v.Publish && class == ClassNeedsHuman && v.State.NeedsHuman {
		// It heals when someone fixes it, not sooner.
		v.Wait = WaitSlow
	}
	v.Escalations = escalations(e, class, reason, p)
	return v
}

// gradeShortClose decides what follows a short clean close, and
// sets v's Flapping state when the run is long enough.
func gradeShortClose(e Ending, p Policy, replayStage bool, v *Verdict) (Next, Wait) {
	again := NextResume
	if replayStage {
		// A replay cut short starts over: its snapshot was not delivered.
		again = NextReplay
	}
	n := e.ShortCloses + 1
	tried := e.Replays > 0
	switch {
	case n == 1 && !tried:
		return NextResume, WaitNone
	case !tried:
		// A stale cursor can look like this (proxies, resources without a
		// watch cache): try the collection afresh once.
		return NextReplay, WaitBackoff
	case n >= p.FlapAfter:
		v.Publish = true
		v.State = State{Phase: PhaseBlocked, Reason: ReasonFlapping,
			Message: "watch sessions keep closing before they go live, even after a replay"}
	}
	return again, WaitBackoff
}

// escalations lists the thresholds of Trouble this ending has not reached,
// and what the stream publishes if it is still not live then.
func escalations(e Ending, class Class, reason Reason, p Policy) []Escalation {
	var out []Escalation
	at := func(threshold time.Duration, st State) {
		if threshold > e.Trouble {
			out = append(out, Escalation{After: threshold - e.Trouble, State: st})
		}
	}
	switch {
	case class == ClassExpired:
		// ReplayGrace counts from the expiry; trouble before it (the
		// outage of an apiserver's restart) has its own grace.
		if after := min(p.ReplayGrace-e.ExpiredFor, p.TransientGrace-e.Trouble); after > 0 {
			out = append(out, Escalation{After: after, State: replayingState(reason)})
		}
	case e.Live && e.Cause == CauseClosed:
		at(p.TransientGrace, State{Phase: PhaseBlocked, Reason: ReasonNoLiveSession,
			Message: fmt.Sprintf("no watch session has gone live for over %s since the last one closed", p.TransientGrace)})
	case !e.Live && e.Cause == CauseClosed:
		at(p.TransientGrace, State{Phase: PhaseBlocked, Reason: ReasonFlapping, Message: describe(e)})
	default:
		// Once the evidence says a human must act, later escalations say
		// so too.
		human := class == ClassNeedsHuman && e.NeedsHumanFor >= p.HumanGrace
		at(p.TransientGrace, State{Phase: PhaseBlocked, Reason: reason, NeedsHuman: human, Message: describe(e)})
	}
	at(p.ProgressDeadline, deadlineState(e, p))
	return out
}

// startEscalations are the escalations armed at a start (the "start" rows
// of "What is published when").
func startEscalations(p Policy, resuming bool) []Escalation {
	p = p.withDefaults()
	var out []Escalation
	if resuming {
		out = append(out, Escalation{After: p.TransientGrace, State: State{Phase: PhaseBlocked, Reason: ReasonNoLiveSession,
			Message: fmt.Sprintf("no watch session has gone live for over %s since the stream started", p.TransientGrace)}})
	}
	return append(out, Escalation{After: p.ProgressDeadline, State: State{Phase: PhaseBlocked, Reason: ReasonProgressDeadlineExceeded, NeedsHuman: true,
		Message: fmt.Sprintf("no live watch session for over %s since the start", p.ProgressDeadline)}})
}

func replayingState(reason Reason) State {
	msg := "the resourceVersion expired; replaying the collection"
	if reason == ReasonResourceVersionTooLarge {
		msg = "the server has no such resourceVersion (too large); replaying the collection"
	}
	return State{Phase: PhaseReplaying, Reason: reason, Message: msg}
}

func deadlineState(e Ending, p Policy) State {
	return State{
		Phase: PhaseBlocked, Reason: ReasonProgressDeadlineExceeded, NeedsHuman: true,
		Message: fmt.Sprintf("no live watch session for over %s; last: %s", p.ProgressDeadline, describe(e)),
	}
}

// classOf is the class and reason of how a session ended.
func classOf(e Ending) (Class, Reason) {
	switch e.Cause {
	case CauseClosed:
		return ClassNone, ""
	case CauseReplayDeadline:
		return ClassTransient, ReasonReplayTimedOut
	case CauseBadEvent:
		return ClassTransient, ReasonBadEvent
	}
	class, reason := Classify(e.Err)
	if e.Cause == CauseHandler {
		if class != ClassNeedsHuman {
			class = ClassTransient
		}
		reason = ReasonHandlerFailed
	}
	if class == ClassNone {
		// An error cause with no error: nothing to go on but that it failed.
		class, reason = ClassTransient, ReasonWatchFailed
	}
	return class, reason
}

// describe says in one bounded sentence what ended the session: what is
// wrong, never which request or stage of the session met it, so that the
// same cause reads the same before and after a restart (a stream resumed
// from a cursor meets a denial when its watch opens, one started afresh
// when it lists), and a condition that quotes it is not rewritten.
func describe(e Ending) string {
	var what string
	switch e.Cause {
	case CauseClosed:
		return "watch sessions keep closing before they go live"
	case CauseReplayDeadline:
		return "the replay did not reach its initial-events-end bookmark in time"
	case CauseHandler:
		what = "the handler failed"
	case CauseBadEvent:
		what = "the server sent an unusable event"
	default:
		what = "requests to the API server fail"
	}
	if e.Err == nil {
		return what
	}
	return what + ": " + truncate(errorText(e.Err), maxErrText)
}

// deniedVerb rewrites the verb of a denial's message, which names the
// request that met it (kube-apiserver: "User %q cannot list resource %q
// ..."; "watch" for a watch), as the pair a stream needs.
var deniedVerb = strings.NewReplacer(" cannot list resource ", " cannot list/watch resource ", " cannot watch resource ", " cannot list/watch resource ")

// errorText is err's text with any request URL cut to its path, so that
// the resourceVersion in a *url.Error's URL does not vary the message, and
// a denial's verb the same for a list and a watch.
func errorText(err error) string {
	if apierrors.IsForbidden(err) {
		return deniedVerb.Replace(err.Error())
	}
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
