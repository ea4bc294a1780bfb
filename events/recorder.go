package events

import (
	"errors"
	"fmt"
	"reflect"
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

// Limits the API server puts on Events (k8s.io/kubernetes validation of
// events.k8s.io/v1 Events, and of core/v1 Events that carry an eventTime).
// A Recorder keeps within them, so that an Event is never rejected for its
// size: client-go only logs a rejected Event, and the Warning is lost.
const (
	// MaxNoteBytes is the longest note an events.k8s.io/v1 Event may carry.
	MaxNoteBytes = 1024
	// MaxReasonBytes is the longest reason an Event may carry.
	MaxReasonBytes = 128
	// MaxActionBytes is the longest action an events.k8s.io/v1 Event may
	// carry.
	MaxActionBytes = 128
)

// DefaultAction is the action of events.k8s.io/v1 Events; see
// [EventsOptions.Action].
const DefaultAction = "Reconcile"

// Errors returned by [NewRecorder] and [NewEventsRecorder]. Match them with
// errors.Is.
var (
	// ErrNilRecorder: the client-go recorder is nil.
	ErrNilRecorder = errors.New("watchgrade/events: nil recorder")
	// ErrInvalidAction: EventsOptions.Action is longer than
	// MaxActionBytes.
	ErrInvalidAction = errors.New("watchgrade/events: invalid action")
)

// EventsOptions configures a [Recorder] made by [NewEventsRecorder]. The
// zero value works.
type EventsOptions struct {
	// Action is the Event's action: what the controller did regarding the
	// object, at most MaxActionBytes. Defaults to DefaultAction.
	Action string
}

// Recorder records an Event when a status write changed Ready or Stalled,
// and nothing otherwise (see [Transition]). Make one with [NewRecorder] for
// client-go's core/v1 recorder (tools/record, what controller-runtime's
// GetEventRecorderFor returns) or [NewEventsRecorder] for its
// events.k8s.io/v1 recorder (tools/events). Reasons are cut to
// MaxReasonBytes, and events.k8s.io notes to MaxNoteBytes ending with "…".
// It is safe for concurrent use if the recorder it wraps is (client-go's
// are).
type Recorder struct {
	// emit records e, cut to the API's limits, and returns it as recorded.
	emit func(obj runtime.Object, e Event) Event
}

// NewRecorder returns a Recorder that records through a core/v1 recorder,
// or an error wrapping ErrNilRecorder.
func NewRecorder(r CoreV1Recorder) (*Recorder, error) {
	if isNil(r) {
		return nil, fmt.Errorf("NewRecorder: %w", ErrNilRecorder)
	}
	return &Recorder{emit: func(obj runtime.Object, e Event) Event {
		e.Reason = cut(e.Reason, MaxReasonBytes)
		r.Event(obj, string(e.Type), e.Reason, e.Message)
		return e
	}}, nil
}

// NewEventsRecorder returns a Recorder that records through an
// events.k8s.io/v1 recorder, or an error wrapping ErrNilRecorder or
// ErrInvalidAction.
func NewEventsRecorder(r EventsV1Recorder, opts EventsOptions) (*Recorder, error) {
	if isNil(r) {
		return nil, fmt.Errorf("NewEventsRecorder: %w", ErrNilRecorder)
	}
	action := opts.Action
	if action == "" {
		action = DefaultAction
	}
	if len(action) > MaxActionBytes {
		return nil, fmt.Errorf("NewEventsRecorder: %w: %d bytes, at most %d", ErrInvalidAction, len(action), MaxActionBytes)
	}
	return &Recorder{emit: func(obj runtime.Object, e Event) Event {
		e.Reason, e.Message = cut(e.Reason, MaxReasonBytes), truncate(e.Message, MaxNoteBytes)
		// The note is passed as an argument: a message may hold '%'.
		r.Eventf(obj, nil, string(e.Type), e.Reason, action, "%s", e.Message)
		return e
	}}, nil
}

// isNil reports whether v is nil, or an interface holding a nil pointer.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice:
		return rv.IsNil()
	}
	return false
}

// Record records the Event that [Transition] decides for obj, if any,
// and returns it as recorded: its reason cut to MaxReasonBytes and, for
// events.k8s.io/v1, its message cut to MaxNoteBytes. Call it once per successful status write, with the
// conditions as they were read before the reconcile and as they were
// written: after a failed write nothing has changed, and a reconcile that
// changes nothing records nothing, so the client-go spam filter's budget
// (25 Events per object) is spent only on transitions.
func (r *Recorder) Record(obj runtime.Object, before, after []metav1.Condition) (Event, bool) {
	e, ok := Transition(before, after)
	if !ok {
		return Event{}, false
	}
	return r.emit(obj, e), true
}

// cut cuts s to at most n bytes on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
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
