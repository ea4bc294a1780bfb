package watch

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Phase is where a stream stands, as published to an [Observer]. A
// routine session ending does not change it: a stream that reconnects
// from its cursor never leaves Streaming.
type Phase string

const (
	// PhaseStarting: the stream is running but has not opened a session yet.
	PhaseStarting Phase = "Starting"
	// PhaseReplaying: the stream is rebuilding its snapshot of the
	// collection; the consumer's view may miss changes until it is delivered.
	PhaseReplaying Phase = "Replaying"
	// PhaseStreaming: the consumer's view is complete and live events flow.
	PhaseStreaming Phase = "Streaming"
	// PhaseBlocked: sessions keep failing; see [State.NeedsHuman] for whether
	// it is expected to heal by itself.
	PhaseBlocked Phase = "Blocked"
)

// Reason says why a stream is in its phase. Every value is a valid
// Kubernetes condition reason, to be copied into a condition as it is.
type Reason string

const (
	// ReasonStarting goes with PhaseStarting.
	ReasonStarting Reason = "Starting"
	// ReasonInitialSync goes with PhaseReplaying: the first replay of a
	// stream that started without a cursor.
	ReasonInitialSync Reason = "InitialSync"
	// ReasonExpiredResourceVersion: the cursor expired (HTTP 410, reason
	// Expired or Gone) and the stream is replaying.
	ReasonExpiredResourceVersion Reason = "ExpiredResourceVersion"
	// ReasonResourceVersionTooLarge: the server has not reached the cursor
	// (see [ErrCursorAhead]) and the stream is replaying.
	ReasonResourceVersionTooLarge Reason = "ResourceVersionTooLarge"
	// ReasonWatching goes with PhaseStreaming.
	ReasonWatching Reason = "Watching"
	// ReasonFlapping: sessions keep closing before they go live.
	ReasonFlapping Reason = "Flapping"
	// ReasonReplayTimedOut: a watch-list replay did not finish within
	// [StreamOptions.ReplayTimeout].
	ReasonReplayTimedOut Reason = "ReplayTimedOut"
	// ReasonNoLiveSession: no session has gone live for longer than
	// [Policy.TransientGrace] since a live one closed cleanly, or since a
	// stream resuming from a cursor started.
	ReasonNoLiveSession Reason = "NoLiveSession"
	// ReasonProgressDeadlineExceeded: no live session, or a stalled handler,
	// for longer than [Policy.ProgressDeadline]. Always needs a human.
	ReasonProgressDeadlineExceeded Reason = "ProgressDeadlineExceeded"
	// ReasonHandlerFailed: the consumer's [Handler] returned an error.
	ReasonHandlerFailed Reason = "HandlerFailed"
	// ReasonHandlerStalled: the consumer's [Handler] has been behind its
	// watch for longer than [Policy.TransientGrace]: a call has not
	// returned, or its calls have not once found the watch with nothing
	// waiting (a backlog it does not drain).
	ReasonHandlerStalled Reason = "HandlerStalled"
	// ReasonBadEvent: the server sent an event or a list the stream cannot
	// use (see [CauseBadEvent]).
	ReasonBadEvent Reason = "BadEvent"

	// ReasonUnauthorized: HTTP 401. Needs a human.
	ReasonUnauthorized Reason = "Unauthorized"
	// ReasonForbidden: HTTP 403, usually missing RBAC. Needs a human.
	ReasonForbidden Reason = "Forbidden"
	// ReasonResourceNotFound: HTTP 404 on the collection, usually a CRD that
	// is not installed. Needs a human.
	ReasonResourceNotFound Reason = "ResourceNotFound"
	// ReasonInvalidRequest: HTTP 400, 405 or 422, such as a bad selector.
	// Needs a human.
	ReasonInvalidRequest Reason = "InvalidRequest"
	// ReasonCertificateInvalid: the client refused the server's TLS
	// certificate, or the server does not speak TLS. Needs a human.
	ReasonCertificateInvalid Reason = "CertificateInvalid"

	// ReasonTooManyRequests: HTTP 429. Transient.
	ReasonTooManyRequests Reason = "TooManyRequests"
	// ReasonServerError: HTTP 500, 503 or another 5xx. Transient.
	ReasonServerError Reason = "ServerError"
	// ReasonTimeout: HTTP 504 or a client-side timeout. Transient.
	ReasonTimeout Reason = "Timeout"
	// ReasonConnectionFailed: a connection refused, reset or cut. Transient.
	ReasonConnectionFailed Reason = "ConnectionFailed"
	// ReasonWatchFailed: any other error. Transient.
	ReasonWatchFailed Reason = "WatchFailed"
)

// State is what an [Observer] is told when a stream's phase, reason or
// NeedsHuman changes. Message holds no counters or timestamps.
type State struct {
	// Stream names the stream ([StreamOptions.Name]).
	Stream string
	// Resource is the watched collection's group and resource.
	Resource schema.GroupResource
	// Phase is where the stream stands.
	Phase Phase
	// Reason says why, in CamelCase.
	Reason Reason
	// Message is a human-readable sentence; it may quote the server's
	// error. It says what is wrong, not which request or stage of a
	// session met it (a denial's verb reads "list/watch"), so the same
	// cause reads the same before and after a controller restart, and a
	// condition quoting it is not rewritten.
	Message string
	// NeedsHuman is true for PhaseBlocked when the stream will not heal by
	// itself ([ClassNeedsHuman], or past the progress deadline).
	NeedsHuman bool
}

// Outcome is the label of a session ending: the metric label, and the first
// thing to read in a log line. The set is closed.
type Outcome string

const (
	// OutcomeClosed: the server closed the session without an error. Routine.
	OutcomeClosed Outcome = "closed"
	// OutcomeExpired: the cursor expired (410); the stream replays. Routine.
	OutcomeExpired Outcome = "expired"
	// OutcomeError: the session failed; whether that matters, see [Grade].
	OutcomeError Outcome = "error"
	// OutcomeTeardown: the owner's context ended the session.
	OutcomeTeardown Outcome = "teardown"
)

// Outcomes returns every Outcome, in a fixed order.
func Outcomes() []Outcome {
	return []Outcome{OutcomeClosed, OutcomeExpired, OutcomeError, OutcomeTeardown}
}

// Phases returns every Phase, in a fixed order.
func Phases() []Phase {
	return []Phase{PhaseStarting, PhaseReplaying, PhaseStreaming, PhaseBlocked}
}

// SessionEnd is what an [Observer] is told each time a session ends.
type SessionEnd struct {
	// Stream names the stream.
	Stream string
	// Resource is the watched collection's group and resource.
	Resource schema.GroupResource
	// Verdict is what [Grade] decided.
	Verdict Verdict
	// Stage is where in the session it ended.
	Stage Stage
	// Duration is how long the session lasted: from the List or Watch call
	// to its end.
	Duration time.Duration
	// Events is the number of objects the session delivered (bookmarks not
	// counted).
	Events int
	// Err is the error that ended the session, nil for a clean close and for
	// teardown.
	Err error
}

// Observer is told about state changes and session endings, synchronously,
// one call at a time per stream, in order, from the session's goroutine or
// a timer: its methods must be safe for concurrent use (one observer
// usually serves many streams) and must not block.
type Observer interface {
	// StateChanged is called when a stream's State changes.
	StateChanged(State)
	// SessionEnded is called once for every session that ends.
	SessionEnded(SessionEnd)
}

// Observers returns an Observer that calls each non-nil observer in turn.
func Observers(observers ...Observer) Observer {
	var fan fanOut
	for _, o := range observers {
		if o != nil {
			fan = append(fan, o)
		}
	}
	return fan
}

type fanOut []Observer

func (f fanOut) StateChanged(s State) {
	for _, o := range f {
		o.StateChanged(s)
	}
}

func (f fanOut) SessionEnded(e SessionEnd) {
	for _, o := range f {
		o.SessionEnded(e)
	}
}

// ObserverFuncs adapts two functions to an [Observer]; nil ones are skipped.
type ObserverFuncs struct {
	StateChangedFunc func(State)
	SessionEndedFunc func(SessionEnd)
}

// StateChanged calls StateChangedFunc if it is set.
func (f ObserverFuncs) StateChanged(s State) {
	if f.StateChangedFunc != nil {
		f.StateChangedFunc(s)
	}
}

// SessionEnded calls SessionEndedFunc if it is set.
func (f ObserverFuncs) SessionEnded(e SessionEnd) {
	if f.SessionEndedFunc != nil {
		f.SessionEndedFunc(e)
	}
}
