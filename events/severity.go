package events

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types this package reads.
const (
	conditionReady       = "Ready"
	conditionReconciling = "Reconciling"
	conditionStalled     = "Stalled"
)

// Severity is an Event's type. The set is closed: [SeverityNormal],
// [SeverityWarning], the two types Kubernetes accepts (corev1.EventTypeNormal
// and corev1.EventTypeWarning).
type Severity string

const (
	// SeverityNormal: nothing for a human to do.
	SeverityNormal Severity = "Normal"
	// SeverityWarning: a human must act.
	SeverityWarning Severity = "Warning"
)

// SeverityOf decides the severity of an Event about an object with these
// conditions. Rows are checked from top to bottom; the first that matches
// decides:
//
//	conditions                                     severity
//	---------------------------------------------  --------
//	Stalled=True                                   Warning
//	Reconciling or Stalled present (the trio)      Normal
//	Ready present and not True, without the trio   Warning
//	otherwise (Ready=True, or no Ready)            Normal
//
// An object that carries the trio says itself whether a human must act:
// Stalled. A Ready that is False or Unknown on such an object means
// progressing (a replay, a restart, a transient failure being retried),
// which is routine. An object with Ready but neither Reconciling nor Stalled
// cannot say so, so a Ready that is not True stays a Warning rather than
// being silently downgraded.
func SeverityOf(conditions []metav1.Condition) Severity {
	if meta.IsStatusConditionTrue(conditions, conditionStalled) {
		return SeverityWarning
	}
	if meta.FindStatusCondition(conditions, conditionReconciling) != nil ||
		meta.FindStatusCondition(conditions, conditionStalled) != nil {
		return SeverityNormal
	}
	if r := meta.FindStatusCondition(conditions, conditionReady); r != nil && r.Status != metav1.ConditionTrue {
		return SeverityWarning
	}
	return SeverityNormal
}

// Event is what a Ready transition records.
type Event struct {
	// Type is the severity, from the conditions after the write.
	Type Severity
	// Reason is Ready's reason after the write.
	Reason string
	// Message is Ready's message after the write, or "Ready is now
	// <status>" when it has none.
	Message string
}

// ReadyTransition decides whether a status write deserves an Event, given
// the conditions before it and after it (as written). Only Ready's status
// and reason are compared:
//
//	Ready before   Ready after                     records
//	-------------  ------------------------------  ---------------------
//	absent         present                         an Event (it appeared)
//	present        same status and reason          nothing
//	present        another status or reason        an Event
//	any            absent                          nothing
//
// A message-only change records nothing: messages may name other gates and
// change more often than anyone should be told. The Event's type is
// [SeverityOf] the conditions after, so a recovery to Ready=True is Normal,
// and its reason and message are Ready's.
func ReadyTransition(before, after []metav1.Condition) (Event, bool) {
	now := meta.FindStatusCondition(after, conditionReady)
	if now == nil {
		return Event{}, false
	}
	if was := meta.FindStatusCondition(before, conditionReady); was != nil && was.Status == now.Status && was.Reason == now.Reason {
		return Event{}, false
	}
	msg := now.Message
	if msg == "" {
		msg = "Ready is now " + string(now.Status)
	}
	return Event{Type: SeverityOf(after), Reason: now.Reason, Message: msg}, true
}
