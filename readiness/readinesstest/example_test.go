package readinesstest_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/watchgrade/watchgrade/readiness/readinesstest"
)

// Check names every rule a set of conditions breaks.
func ExampleCheck() {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	err := readinesstest.Check(readinesstest.Status{
		Generation:         2,
		ObservedGeneration: ptr.To[int64](2),
		Conditions: []metav1.Condition{
			{Type: "Ready", Status: metav1.ConditionUnknown, Reason: "InitialSync", ObservedGeneration: 2, LastTransitionTime: now},
			{Type: "Reconciling", Status: metav1.ConditionFalse, Reason: "Done", ObservedGeneration: 2, LastTransitionTime: now},
		},
	})
	fmt.Println(err)
	fmt.Println(errors.Is(err, readinesstest.RuleUnknownWithoutReconciling))
	// Output:
	// Reconciling: Reconciling or Stalled is present but not True: remove it instead (status False)
	// Ready: Ready is Unknown without Reconciling=True
	// Ready: Ready is not True but neither Reconciling nor Stalled is True (Ready=Unknown)
	// true
}

// EquateConditions compares conditions in any order, ignoring
// lastTransitionTime.
func ExampleEquateConditions() {
	want := []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Forbidden"},
		{Type: "Stalled", Status: metav1.ConditionTrue, Reason: "Forbidden"},
	}
	got := []metav1.Condition{
		{Type: "Stalled", Status: metav1.ConditionTrue, Reason: "Forbidden", LastTransitionTime: metav1.Now()},
		{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Forbidden", LastTransitionTime: metav1.Now()},
	}
	fmt.Println(cmp.Diff(want, got, readinesstest.EquateConditions()) == "")
	// Output:
	// true
}
