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
	// Reason is Ready's reason after the write (Stalled's, when only
	// Stalled moved to True).
	Reason string
	// Message is that condition's message, or "<type> is now <status>"
	// when it has none.
	Message string
}

// Transition decides whether a status write deserves an Event, given the
// conditions before it and after it (as written). Ready's status and
// reason, and Stalled's status, are compared; the first row that matches
// decides:
//
//	before → after                                 records
//	---------------------------------------------  ------------------------------------
//	Ready absent after                             nothing
//	Stalled True before and after                  nothing, whatever else moved
//	Ready appeared, or its status or reason moved  an Event with Ready's reason
//	Stalled became True, Ready as it was           a Warning with Stalled's reason: the
//	                                                 escalation of a gate that kept its
//	                                                 reason
//	Stalled is no longer True, Ready as it was     a Normal Event with Ready's reason
//	otherwise                                      nothing
//
// A message-only change records nothing: messages may name other gates and
// change more often than anyone should be told. Neither does a change of
// reason while Stalled stays True: the reason of a stalled owner moves
// when one of two stalled gates heals and the other's reason surfaces, or
// when a stream's cause turns into its progress deadline, and neither is
// news to the human already paged; the conditions show the new reason.
// The Event's type is [SeverityOf] the conditions after, so Stalled going
// True is always exactly one Warning, never more until Stalled clears,
// and a recovery (Stalled cleared, Ready back to True) is Normal.
// Its message is the message of the condition whose reason it carries.
func Transition(before, after []metav1.Condition) (Event, bool) {
	now := meta.FindStatusCondition(after, conditionReady)
	if now == nil {
		return Event{}, false
	}
	was := meta.FindStatusCondition(before, conditionReady)
	stalledBefore := meta.IsStatusConditionTrue(before, conditionStalled)
	stalledAfter := meta.IsStatusConditionTrue(after, conditionStalled)
	carrier := now
	switch {
	case stalledBefore && stalledAfter:
		return Event{}, false
	case was == nil || was.Status != now.Status || was.Reason != now.Reason:
	case stalledAfter && !stalledBefore:
		carrier = meta.FindStatusCondition(after, conditionStalled)
	case stalledBefore && !stalledAfter:
	default:
		return Event{}, false
	}
	msg := carrier.Message
	if msg == "" {
		msg = carrier.Type + " is now " + string(carrier.Status)
	}
	return Event{Type: SeverityOf(after), Reason: carrier.Reason, Message: msg}, true
}
