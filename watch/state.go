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
	// PhaseReplaying: the stream is rebuilding its snapshot of the collection,
	// at start without a cursor or after its cursor expired. Events may be
	// missing from the consumer's view until the snapshot is delivered.
	PhaseReplaying Phase = "Replaying"
	// PhaseStreaming: the consumer's view is complete and live events flow.
	PhaseStreaming Phase = "Streaming"
	// PhaseBlocked: sessions keep failing; see [State.NeedsHuman] for whether
	// it is expected to heal by itself.
	PhaseBlocked Phase = "Blocked"
)

// Reason says why a stream is in its phase. Every value is a valid
// Kubernetes condition reason (CamelCase, matching the CRD reason pattern), so
// it can be copied into a condition as it is.
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
	// ReasonResourceVersionTooLarge: the server has no such resourceVersion
	// as the cursor (504 with cause ResourceVersionTooLarge: an etcd
	// restored from a backup, a cluster rebuilt behind the same address),
	// and the stream is replaying.
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
	// ReasonProgressDeadlineExceeded: the stream has not had a live
	// session for longer than [Policy.ProgressDeadline]; the message names
	// the last cause. Always needs a human.
	ReasonProgressDeadlineExceeded Reason = "ProgressDeadlineExceeded"
	// ReasonHandlerFailed: the consumer's [Handler] returned an error.
	ReasonHandlerFailed Reason = "HandlerFailed"
	// ReasonHandlerStalled: a call of the consumer's [Handler] has not
	// returned for longer than [Policy.TransientGrace], while events wait.
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
	// certificate (an unknown authority, an expired certificate, a wrong
	// host name), or the server does not speak TLS. Needs a human.
	ReasonCertificateInvalid Reason = "CertificateInvalid"

	// ReasonTooManyRequests: HTTP 429. Transient.
	ReasonTooManyRequests Reason = "TooManyRequests"
	// ReasonServerError: HTTP 500 or 503, and other server-side failures.
	// Transient.
	ReasonServerError Reason = "ServerError"
	// ReasonTimeout: HTTP 504 or a client-side timeout. Transient.
	ReasonTimeout Reason = "Timeout"
	// ReasonConnectionFailed: the connection was refused, reset or cut short.
	// Transient.
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
	// Message is a human-readable sentence; it may quote the server's error.
	Message string
	// NeedsHuman is true for PhaseBlocked when the stream will not heal by
	// itself: missing RBAC, a missing CRD, an invalid request, or trouble
	// that outlasted the progress deadline.
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
	// OutcomeError: the session failed. Whether that matters is for the
	// next session to tell, see [Grade].
	OutcomeError Outcome = "error"
	// OutcomeTeardown: the owner's context ended the session.
	OutcomeTeardown Outcome = "teardown"
)

// Outcomes returns every Outcome, in a fixed order, for code that must
// initialise one series per value.
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

// Observer is told about state changes and session endings. Streams and
// [Instrument]ed ListerWatchers call it synchronously, from the goroutine
// that runs the session or from a timer (one call at a time per stream, in
// order), so its methods must be safe for concurrent use (one observer
// usually serves many streams) and must not block.
type Observer interface {
	// StateChanged is called when a stream's State changes.
	StateChanged(State)
	// SessionEnded is called once for every session that ends.
	SessionEnded(SessionEnd)
}

// Observers returns an Observer that calls each non-nil observer in turn, in
// the order given.
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

// ObserverFuncs adapts two functions to an [Observer]. A nil function is
// skipped.
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
