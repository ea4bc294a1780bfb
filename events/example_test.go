package events_test

import (
	"fmt"

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

// ReadyTransition decides whether a status write deserves an Event.
func ExampleReadyTransition() {
	before := []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Established"}}
	after := []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Forbidden", Message: "nodes: forbidden"},
		{Type: "Stalled", Status: metav1.ConditionTrue, Reason: "Forbidden", Message: "nodes: forbidden"},
	}
	if e, ok := wgevents.ReadyTransition(before, after); ok {
		fmt.Println(e.Type, e.Reason, e.Message)
	}
	_, ok := wgevents.ReadyTransition(after, after)
	fmt.Println(ok)
	// Output:
	// Warning Forbidden nodes: forbidden
	// false
}

// A Recorder records after each successful status write, only when Ready
// changed. With client-go, pass the manager's or broadcaster's recorder
// (record.EventRecorder, or events.EventRecorder to NewEventsRecorder).
func ExampleRecorder() {
	rec := wgevents.NewRecorder(coreV1Func(func(eventtype, reason, message string) {
		fmt.Println(eventtype, reason, message)
	}))
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

// coreV1Func adapts a function to a CoreV1Recorder.
type coreV1Func func(eventtype, reason, message string)

func (f coreV1Func) Event(_ runtime.Object, eventtype, reason, message string) {
	f(eventtype, reason, message)
}
