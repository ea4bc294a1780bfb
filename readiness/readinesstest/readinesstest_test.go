package readinesstest_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/watchgrade/watchgrade/readiness/readinesstest"
)

var t0 = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

func c(typ string, status metav1.ConditionStatus) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: "Because", ObservedGeneration: 3, LastTransitionTime: t0}
}

const (
	T = metav1.ConditionTrue
	F = metav1.ConditionFalse
	U = metav1.ConditionUnknown
)

func TestCheck(t *testing.T) {
	long := c("Ready", T)
	long.Message = strings.Repeat("x", 32769)
	badReason := c("Ready", T)
	badReason.Reason = "not valid"
	noTime := c("Ready", T)
	noTime.LastTransitionTime = metav1.Time{}
	stale := c("Ready", T)
	stale.ObservedGeneration = 2

	tests := []struct {
		name     string
		conds    []metav1.Condition
		observed *int64
		missing  bool
		want     []readinesstest.Rule
	}{
		{name: "ready", conds: []metav1.Condition{c("Ready", T)}},
		{name: "progressing, never established", conds: []metav1.Condition{c("Ready", U), c("Reconciling", T)}},
		{name: "progressing", conds: []metav1.Condition{c("Ready", F), c("Reconciling", T)}},
		{name: "stalled", conds: []metav1.Condition{c("Stalled", T), c("Ready", F)}},
		{name: "other conditions are free", conds: []metav1.Condition{c("Ready", T), c("Synced", F)}},
		{name: "no Ready", conds: []metav1.Condition{c("Reconciling", T)},
			want: []readinesstest.Rule{readinesstest.RuleReadyMissing}},
		{name: "both present", conds: []metav1.Condition{c("Ready", F), c("Reconciling", T), c("Stalled", T)},
			want: []readinesstest.Rule{readinesstest.RuleBothPresent}},
		{name: "written False", conds: []metav1.Condition{c("Ready", T), c("Reconciling", F)},
			want: []readinesstest.Rule{readinesstest.RuleNotTruePresent}},
		{name: "Unknown alone", conds: []metav1.Condition{c("Ready", U)},
			want: []readinesstest.Rule{readinesstest.RuleUnknownWithoutReconciling, readinesstest.RuleNotReadyWithoutTrio}},
		{name: "Stalled with Ready Unknown", conds: []metav1.Condition{c("Ready", U), c("Stalled", T)},
			want: []readinesstest.Rule{readinesstest.RuleUnknownWithoutReconciling, readinesstest.RuleStalledWithoutReadyFalse}},
		{name: "Ready False alone", conds: []metav1.Condition{c("Ready", F)},
			want: []readinesstest.Rule{readinesstest.RuleNotReadyWithoutTrio}},
		{name: "Ready True while reconciling", conds: []metav1.Condition{c("Ready", T), c("Reconciling", T)},
			want: []readinesstest.Rule{readinesstest.RuleReadyWhileAbnormal}},
		{name: "Ready True while stalled", conds: []metav1.Condition{c("Ready", T), c("Stalled", T)},
			want: []readinesstest.Rule{readinesstest.RuleStalledWithoutReadyFalse, readinesstest.RuleReadyWhileAbnormal}},
		{name: "duplicate", conds: []metav1.Condition{c("Ready", T), c("Ready", T)},
			want: []readinesstest.Rule{readinesstest.RuleDuplicateType}},
		{name: "lower-case status", conds: []metav1.Condition{c("Ready", "true")},
			want: []readinesstest.Rule{readinesstest.RuleInvalidStatus, readinesstest.RuleNotReadyWithoutTrio}},
		{name: "bad reason", conds: []metav1.Condition{badReason},
			want: []readinesstest.Rule{readinesstest.RuleInvalidReason}},
		{name: "long message", conds: []metav1.Condition{long},
			want: []readinesstest.Rule{readinesstest.RuleMessageTooLong}},
		{name: "no lastTransitionTime", conds: []metav1.Condition{noTime},
			want: []readinesstest.Rule{readinesstest.RuleTransitionTimeMissing}},
		{name: "condition generation stale", conds: []metav1.Condition{stale},
			want: []readinesstest.Rule{readinesstest.RuleConditionGenerationStale}},
		{name: "observedGeneration missing", conds: []metav1.Condition{c("Ready", T)}, missing: true,
			want: []readinesstest.Rule{readinesstest.RuleObservedGenerationMissing}},
		{name: "observedGeneration behind", conds: []metav1.Condition{c("Ready", T)}, observed: ptr.To[int64](2),
			want: []readinesstest.Rule{readinesstest.RuleObservedGenerationMismatch}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := readinesstest.Status{Generation: 3, ObservedGeneration: ptr.To[int64](3), Conditions: tt.conds}
			if tt.observed != nil {
				s.ObservedGeneration = tt.observed
			}
			if tt.missing {
				s.ObservedGeneration = nil
			}
			err := readinesstest.Check(s)
			var got []readinesstest.Rule
			for _, r := range readinesstest.Rules() {
				if errors.Is(err, r) {
					got = append(got, r)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Check() rules mismatch (-want +got):\n%s\nerror: %v", diff, err)
			}
			if err != nil {
				var v *readinesstest.Violation
				if !errors.As(err, &v) || v.Rule != tt.want[0] {
					t.Errorf("errors.As(Check(), *Violation) = %v, want rule %q", v, tt.want[0])
				}
			}
		})
	}
}

func TestCheckTransition(t *testing.T) {
	t1 := metav1.NewTime(t0.Add(time.Minute))
	at := func(cond metav1.Condition, tm metav1.Time) metav1.Condition {
		cond.LastTransitionTime = tm
		return cond
	}
	tests := []struct {
		name          string
		before, after []metav1.Condition
		want          []readinesstest.Rule
	}{
		{name: "status moved, time moved", before: []metav1.Condition{c("Ready", U)}, after: []metav1.Condition{at(c("Ready", T), t1)}},
		{name: "same status, same time", before: []metav1.Condition{c("Ready", T)}, after: []metav1.Condition{c("Ready", T)}},
		{name: "new condition", after: []metav1.Condition{c("Ready", T)}},
		{name: "time moved alone", before: []metav1.Condition{c("Ready", T)}, after: []metav1.Condition{at(c("Ready", T), t1)},
			want: []readinesstest.Rule{readinesstest.RuleTransitionTimeMoved}},
		{name: "status moved alone", before: []metav1.Condition{c("Ready", U)}, after: []metav1.Condition{c("Ready", T)},
			want: []readinesstest.Rule{readinesstest.RuleTransitionTimeStuck}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := readinesstest.CheckTransition(tt.before, tt.after)
			var got []readinesstest.Rule
			for _, r := range readinesstest.Rules() {
				if errors.Is(err, r) {
					got = append(got, r)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("CheckTransition() rules mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// recordingTB captures Errorf.
type recordingTB struct {
	testing.TB
	errors []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func TestVerify(t *testing.T) {
	tb := &recordingTB{TB: t}
	readinesstest.Verify(tb, readinesstest.Status{Generation: 3, ObservedGeneration: ptr.To[int64](3),
		Conditions: []metav1.Condition{c("Ready", U)}})
	if len(tb.errors) != 1 || !strings.Contains(tb.errors[0], string(readinesstest.RuleUnknownWithoutReconciling)) {
		t.Errorf("Verify() reported %q, want one error naming %q", tb.errors, readinesstest.RuleUnknownWithoutReconciling)
	}
	tb = &recordingTB{TB: t}
	readinesstest.Verify(tb, readinesstest.Status{Generation: 3, ObservedGeneration: ptr.To[int64](3),
		Conditions: []metav1.Condition{c("Ready", T)}})
	if len(tb.errors) != 0 {
		t.Errorf("Verify() reported %q, want nothing", tb.errors)
	}
}

func TestCmpOptions(t *testing.T) {
	a := []metav1.Condition{c("Ready", F), c("Reconciling", T)}
	b := []metav1.Condition{c("Reconciling", T), c("Ready", F)}
	b[1].LastTransitionTime = metav1.NewTime(t0.Add(time.Hour))
	if diff := cmp.Diff(a, b, readinesstest.EquateConditions()); diff != "" {
		t.Errorf("cmp.Diff(EquateConditions) mismatch (-want +got):\n%s", diff)
	}
	if cmp.Equal(a, b, readinesstest.IgnoreLastTransitionTime()) {
		t.Errorf("cmp.Equal(IgnoreLastTransitionTime) = true for different orders, want false")
	}
	b[0].Reason = "Other"
	if cmp.Equal(a, b, readinesstest.EquateConditions()) {
		t.Errorf("cmp.Equal(EquateConditions) = true for different reasons, want false")
	}
}
