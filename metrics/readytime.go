package metrics

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RejectReason says why an object's time to first Ready was not observed.
// It is the value of LabelReason on the rejection counter; the set is
// closed.
type RejectReason string

const (
	// RejectMissingCreation: the object has no creationTimestamp.
	RejectMissingCreation RejectReason = "missing_creation_timestamp"
	// RejectMissingReadyTime: the object has no managedFields entry for the
	// status subresource with a time, and the Ready condition has no
	// lastTransitionTime.
	RejectMissingReadyTime RejectReason = "missing_ready_time"
	// RejectReversed: the Ready time is before the creationTimestamp. With
	// API-server times this cannot happen; with a lastTransitionTime it
	// means the writer's clock is behind the API server's.
	RejectReversed RejectReason = "reversed"
	// RejectTooLong: the duration is longer than
	// [FirstReadyOptions.MaxDuration], which a zero-ish or corrupted
	// timestamp produces (kubernetes#130432, karpenter#2403).
	RejectTooLong RejectReason = "too_long"
	// RejectNotWitnessed: the object was created before the tracker could
	// see creations, was first seen with no Ready condition, and no object
	// of its namespace carried a Ready older than it (see [FirstReady]):
	// an object already there when its controller first ran with this
	// library, or, rarely, created during an outage as the first object
	// of its namespace. Its creationTimestamp is no start to measure from.
	// Routine: do not alert on it.
	RejectNotWitnessed RejectReason = "not_witnessed"
)

// RejectReasons returns every RejectReason, in a fixed order.
func RejectReasons() []RejectReason {
	return []RejectReason{RejectMissingCreation, RejectMissingReadyTime, RejectReversed, RejectTooLong, RejectNotWitnessed}
}

// readyDuration is how long obj took from creation to Ready, on the API
// server's clock where it can be. It is pure. Rows are checked from top to
// bottom; the first that matches decides.
//
//	what obj and ready carry                                   result
//	---------------------------------------------------------  --------------------------------------
//	creationTimestamp missing or zero                          rejected: missing_creation_timestamp
//	a managedFields entry with subresource "status" and a      end = the latest such time
//	  time                                                       (API server's clock)
//	else ready.lastTransitionTime set                          end = lastTransitionTime
//	                                                             (the condition writer's clock)
//	else                                                       rejected: missing_ready_time
//	end before creationTimestamp                               rejected: reversed
//	end − creationTimestamp > maxDuration                      rejected: too_long
//	otherwise                                                  end − creationTimestamp
//
// Every one of these times has a resolution of one second, so durations
// are whole seconds and an object that became Ready within the second of
// its creation takes 0 s.
func readyDuration(obj metav1.Object, ready *metav1.Condition, maxDuration time.Duration) (time.Duration, RejectReason) {
	start := obj.GetCreationTimestamp()
	if start.IsZero() {
		return 0, RejectMissingCreation
	}
	var end time.Time
	for _, f := range obj.GetManagedFields() {
		if f.Subresource != "status" || f.Time == nil || f.Time.IsZero() {
			continue
		}
		if f.Time.After(end) {
			end = f.Time.Time
		}
	}
	if end.IsZero() && ready != nil && !ready.LastTransitionTime.IsZero() {
		end = ready.LastTransitionTime.Time
	}
	if end.IsZero() {
		return 0, RejectMissingReadyTime
	}
	d := end.Sub(start.Time)
	switch {
	case d < 0:
		return 0, RejectReversed
	case d > maxDuration:
		return 0, RejectTooLong
	}
	return d, ""
}
