package events_test

import (
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	wgevents "github.com/watchgrade/watchgrade/events"
)

func ownerKey() types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: "o"} }

// SeverityOf reads Stalled: a progressing object is Normal, a stalled one
// Warning.
func ExampleSeverityOf() {
	progressing := []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionFalse, Reason: "InitialSync"},
		{Type: "Reconciling", Status: metav1.ConditionTrue, Reason: "InitialSync"},
	}
	stalled := []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Forbidden"},
		{Type: "Stalled", Status: metav1.ConditionTrue, Reason: "Forbidden"},
	}
	withoutTrio := []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Broken"},
	}
	fmt.Println(wgevents.SeverityOf(progressing))
	fmt.Println(wgevents.SeverityOf(stalled))
	fmt.Println(wgevents.SeverityOf(withoutTrio))
	// Output:
	// Normal
	// Warning
	// Warning
}

// Transition decides whether a status write deserves an Event.
func ExampleTransition() {
	before := []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Established"}}
	after := []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Forbidden", Message: "nodes: forbidden"},
		{Type: "Stalled", Status: metav1.ConditionTrue, Reason: "Forbidden", Message: "nodes: forbidden"},
	}
	if e, ok := wgevents.Transition(before, after); ok {
		fmt.Println(e.Type, e.Reason, e.Message)
	}
	_, ok := wgevents.Transition(after, after)
	fmt.Println(ok)

	// A gate that gives up keeping its reason: Ready does not move, Stalled
	// does, and that is the one moment a human must hear of it.
	waiting := []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionFalse, Reason: "WaitingForPath", Message: "path: not accepted yet"},
		{Type: "Reconciling", Status: metav1.ConditionTrue, Reason: "WaitingForPath", Message: "path: not accepted yet"},
	}
	gaveUp := []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionFalse, Reason: "WaitingForPath", Message: "path: not accepted in time"},
		{Type: "Stalled", Status: metav1.ConditionTrue, Reason: "WaitingForPath", Message: "path: not accepted in time"},
	}
	if e, ok := wgevents.Transition(waiting, gaveUp); ok {
		fmt.Println(e.Type, e.Reason, e.Message)
	}
	// Output:
	// Warning Forbidden nodes: forbidden
	// false
	// Warning WaitingForPath path: not accepted in time
}

// A Recorder records after each successful status write, only when Ready
// or Stalled changed. With client-go, pass the manager's or broadcaster's recorder
// (record.EventRecorder, or events.EventRecorder to NewEventsRecorder).
func ExampleRecorder() {
	rec, err := wgevents.NewRecorder(coreV1Func(func(eventtype, reason, message string) {
		fmt.Println(eventtype, reason, message)
	}))
	if err != nil {
		panic(err)
	}
	replaying := []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionUnknown, Reason: "InitialSync", Message: "pods: replaying"},
		{Type: "Reconciling", Status: metav1.ConditionTrue, Reason: "InitialSync", Message: "pods: replaying"},
	}
	ready := []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Established", Message: "all gates are established"}}

	rec.Record(nil, nil, replaying)   // Ready appears
	rec.Record(nil, replaying, ready) // first Ready
	rec.Record(nil, ready, ready)     // nothing changed
	// Output:
	// Normal InitialSync pods: replaying
	// Normal Established all gates are established
}

// NewEventsRecorder wraps client-go's events.k8s.io/v1 recorder. It keeps
// to the API server's limits: an action it would reject is refused here,
// at start-up, and a reason longer than MaxReasonBytes is cut.
func ExampleNewEventsRecorder() {
	show := eventsV1Func(func(eventtype, reason, action, note string) {
		fmt.Println(eventtype, len(reason), action, note)
	})
	_, err := wgevents.NewEventsRecorder(show, wgevents.EventsOptions{Action: strings.Repeat("x", 129)})
	fmt.Println(errors.Is(err, wgevents.ErrInvalidAction))

	rec, err := wgevents.NewEventsRecorder(show, wgevents.EventsOptions{Action: "Reconcile"})
	if err != nil {
		panic(err)
	}
	stalled := []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionFalse, Reason: strings.Repeat("R", 200), Message: "pods: forbidden"},
		{Type: "Stalled", Status: metav1.ConditionTrue, Reason: strings.Repeat("R", 200), Message: "pods: forbidden"},
	}
	rec.Record(nil, nil, stalled)
	// Output:
	// true
	// Warning 128 Reconcile pods: forbidden
}

// eventsV1Func adapts a function to an EventsV1Recorder.
type eventsV1Func func(eventtype, reason, action, note string)

func (f eventsV1Func) Eventf(_, _ runtime.Object, eventtype, reason, action, note string, args ...any) {
	f(eventtype, reason, action, fmt.Sprintf(note, args...))
}

// coreV1Func adapts a function to a CoreV1Recorder.
type coreV1Func func(eventtype, reason, message string)

func (f coreV1Func) Event(_ runtime.Object, eventtype, reason, message string) {
	f(eventtype, reason, message)
}
