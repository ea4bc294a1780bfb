package events

import (
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// CoreV1Recorder is the one method a [Recorder] needs from client-go's
// core/v1 recorder: k8s.io/client-go/tools/record.EventRecorder (what
// controller-runtime's GetEventRecorderFor returns) and its FakeRecorder
// have it.
type CoreV1Recorder interface {
	Event(object runtime.Object, eventtype, reason, message string)
}

// EventsV1Recorder is the one method a [Recorder] needs from client-go's
// events.k8s.io/v1 recorder: k8s.io/client-go/tools/events.EventRecorder
// and its FakeRecorder have it.
type EventsV1Recorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

// MaxNoteBytes is the longest note an events.k8s.io/v1 Event may carry;
// the API server rejects longer ones.
const MaxNoteBytes = 1024

// DefaultAction is the action of events.k8s.io/v1 Events; see
// [EventsOptions.Action].
const DefaultAction = "Reconcile"

// EventsOptions configures a [Recorder] made by [NewEventsRecorder]. The
// zero value works.
type EventsOptions struct {
	// Action is the Event's action: what the controller did regarding the
	// object. Defaults to DefaultAction.
	Action string
}

// Recorder records an Event when a status write changed Ready, and nothing
// otherwise (see [ReadyTransition]). Make one with [NewRecorder] for
// client-go's core/v1 recorder (tools/record, what controller-runtime's
// GetEventRecorderFor returns) or [NewEventsRecorder] for its
// events.k8s.io/v1 recorder (tools/events). It is safe for concurrent use if
// the recorder it wraps is (client-go's are).
type Recorder struct {
	emit func(obj runtime.Object, e Event)
}

// NewRecorder returns a Recorder that records through a core/v1 recorder.
func NewRecorder(r CoreV1Recorder) *Recorder {
	return &Recorder{emit: func(obj runtime.Object, e Event) {
		r.Event(obj, string(e.Type), e.Reason, e.Message)
	}}
}

// NewEventsRecorder returns a Recorder that records through an
// events.k8s.io/v1 recorder. Notes are cut to [MaxNoteBytes] on a rune
// boundary, ending with "…".
func NewEventsRecorder(r EventsV1Recorder, opts EventsOptions) *Recorder {
	action := opts.Action
	if action == "" {
		action = DefaultAction
	}
	return &Recorder{emit: func(obj runtime.Object, e Event) {
		// The note is passed as an argument: a message may hold '%'.
		r.Eventf(obj, nil, string(e.Type), e.Reason, action, "%s", truncate(e.Message, MaxNoteBytes))
	}}
}

// Record records the Event that [ReadyTransition] decides for obj, if any,
// and reports it. Call it once per successful status write, with the
// conditions as they were read before the reconcile and as they were
// written: after a failed write nothing has changed, and a reconcile that
// changes nothing records nothing, so the client-go spam filter's budget
// (25 Events per object) is spent only on transitions.
func (r *Recorder) Record(obj runtime.Object, before, after []metav1.Condition) (Event, bool) {
	e, ok := ReadyTransition(before, after)
	if ok {
		r.emit(obj, e)
	}
	return e, ok
}

// truncate cuts s to at most n bytes on a rune boundary, ending it with
// "…" when it cut anything.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	n -= len(ellipsis)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + ellipsis
}
