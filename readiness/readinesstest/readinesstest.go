// Package readinesstest checks an object's conditions offline against the
// rules of the kstatus trio, for controller authors' table-driven tests, and
// provides go-cmp options to compare conditions.
//
// [Check] returns an error naming every rule broken, joined with
// errors.Join; match one with errors.Is and a [Rule], or read its details
// with errors.As and a *[Violation]. [Verify] reports the same through a
// testing.TB. Unlike kstatus it needs no object, client or cluster: it reads
// the conditions, metadata.generation and status.observedGeneration, which
// is all kstatus and kubectl wait read. It does not evaluate kstatus's
// rules for built-in kinds, nor deletionTimestamp.
package readinesstest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchgrade/watchgrade/readiness"
)

// Rule is one rule that conditions must follow; its value says it in
// words. A Rule is an error, so errors.Is(err, RuleBothPresent) tells
// whether [Check] found that rule broken. The set is closed; [Rules] lists
// it.
type Rule string

// Error returns the rule in words.
func (r Rule) Error() string { return string(r) }

// Rules of the trio (checked on Ready, Reconciling and Stalled).
const (
	RuleReadyMissing               Rule = "Ready is missing"
	RuleBothPresent                Rule = "Reconciling and Stalled are both present"
	RuleNotTruePresent             Rule = "Reconciling or Stalled is present but not True: remove it instead"
	RuleUnknownWithoutReconciling  Rule = "Ready is Unknown without Reconciling=True"
	RuleStalledWithoutReadyFalse   Rule = "Stalled is True but Ready is not False"
	RuleNotReadyWithoutTrio        Rule = "Ready is not True but neither Reconciling nor Stalled is True"
	RuleReadyWhileAbnormal         Rule = "Ready is True while Reconciling or Stalled is True"
	RuleConditionGenerationStale   Rule = "the condition's observedGeneration is not metadata.generation"
	RuleObservedGenerationMissing  Rule = "status.observedGeneration is missing: kstatus cannot tell stale status"
	RuleObservedGenerationMismatch Rule = "status.observedGeneration is not metadata.generation: kstatus reports InProgress and kubectl wait waits"
)

// Rules of the API schema (checked on every condition).
const (
	RuleDuplicateType         Rule = "the condition type appears more than once"
	RuleInvalidStatus         Rule = "the status is not True, False or Unknown"
	RuleInvalidReason         Rule = "the reason does not match the CRD reason pattern"
	RuleMessageTooLong        Rule = "the message is longer than 32768 bytes"
	RuleTransitionTimeMissing Rule = "lastTransitionTime is missing"
)

// Rules of a transition (checked by [CheckTransition]).
const (
	RuleTransitionTimeMoved Rule = "lastTransitionTime moved but the status did not"
	RuleTransitionTimeStuck Rule = "the status moved but lastTransitionTime did not"
)

// Rules returns every Rule, in the order Check reports them.
func Rules() []Rule {
	return []Rule{
		RuleDuplicateType, RuleInvalidStatus, RuleInvalidReason, RuleMessageTooLong, RuleTransitionTimeMissing,
		RuleReadyMissing, RuleBothPresent, RuleNotTruePresent, RuleUnknownWithoutReconciling,
		RuleStalledWithoutReadyFalse, RuleNotReadyWithoutTrio, RuleReadyWhileAbnormal,
		RuleConditionGenerationStale, RuleObservedGenerationMissing, RuleObservedGenerationMismatch,
		RuleTransitionTimeMoved, RuleTransitionTimeStuck,
	}
}

// Violation is one broken rule, with where it was broken.
type Violation struct {
	// Rule is the rule broken.
	Rule Rule
	// Condition is the type of the condition that broke it, "" for a rule
	// about the object.
	Condition string
	// Detail says what was found.
	Detail string
}

// Error names the condition, the rule and what was found.
func (v *Violation) Error() string {
	s := string(v.Rule)
	if v.Condition != "" {
		s = v.Condition + ": " + s
	}
	if v.Detail != "" {
		s += " (" + v.Detail + ")"
	}
	return s
}

// Unwrap returns the Rule, for errors.Is.
func (v *Violation) Unwrap() error { return v.Rule }

// Status is what Check reads from an object.
type Status struct {
	// Generation is metadata.generation.
	Generation int64
	// ObservedGeneration is status.observedGeneration, nil when the object
	// has none.
	ObservedGeneration *int64
	// Conditions is status.conditions.
	Conditions []metav1.Condition
}

// Check returns nil when s follows every rule of the trio and the schema,
// and otherwise an error joining one *[Violation] per rule broken and
// condition, in the order of [Rules].
func Check(s Status) error {
	var errs []error
	add := func(r Rule, cond, format string, args ...any) {
		errs = append(errs, &Violation{Rule: r, Condition: cond, Detail: fmt.Sprintf(format, args...)})
	}
	seen := map[string]bool{}
	for _, c := range s.Conditions {
		if seen[c.Type] {
			add(RuleDuplicateType, c.Type, "")
		}
		seen[c.Type] = true
		switch c.Status {
		case metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown:
		default:
			add(RuleInvalidStatus, c.Type, "status %q", c.Status)
		}
		if !readiness.ValidReason(c.Reason) {
			add(RuleInvalidReason, c.Type, "reason %q", c.Reason)
		}
		if len(c.Message) > readiness.MaxMessageBytes {
			add(RuleMessageTooLong, c.Type, "%d bytes", len(c.Message))
		}
		if c.LastTransitionTime.IsZero() {
			add(RuleTransitionTimeMissing, c.Type, "")
		}
	}

	ready := meta.FindStatusCondition(s.Conditions, readiness.ConditionReady)
	rec := meta.FindStatusCondition(s.Conditions, readiness.ConditionReconciling)
	stalled := meta.FindStatusCondition(s.Conditions, readiness.ConditionStalled)
	isTrue := func(c *metav1.Condition) bool { return c != nil && c.Status == metav1.ConditionTrue }
	if ready == nil {
		add(RuleReadyMissing, readiness.ConditionReady, "")
	}
	if rec != nil && stalled != nil {
		add(RuleBothPresent, "", "Reconciling=%s, Stalled=%s", rec.Status, stalled.Status)
	}
	for _, c := range []*metav1.Condition{rec, stalled} {
		if c != nil && c.Status != metav1.ConditionTrue {
			add(RuleNotTruePresent, c.Type, "status %s", c.Status)
		}
	}
	if ready != nil {
		if ready.Status == metav1.ConditionUnknown && !isTrue(rec) {
			add(RuleUnknownWithoutReconciling, readiness.ConditionReady, "")
		}
		if isTrue(stalled) && ready.Status != metav1.ConditionFalse {
			add(RuleStalledWithoutReadyFalse, readiness.ConditionReady, "Ready=%s", ready.Status)
		}
		if ready.Status != metav1.ConditionTrue && !isTrue(rec) && !isTrue(stalled) {
			add(RuleNotReadyWithoutTrio, readiness.ConditionReady, "Ready=%s", ready.Status)
		}
		if ready.Status == metav1.ConditionTrue && (isTrue(rec) || isTrue(stalled)) {
			add(RuleReadyWhileAbnormal, readiness.ConditionReady, "")
		}
	}
	for _, c := range []*metav1.Condition{ready, rec, stalled} {
		if c != nil && c.ObservedGeneration != s.Generation {
			add(RuleConditionGenerationStale, c.Type, "observedGeneration %d, generation %d", c.ObservedGeneration, s.Generation)
		}
	}
	switch {
	case s.ObservedGeneration == nil:
		add(RuleObservedGenerationMissing, "", "")
	case *s.ObservedGeneration != s.Generation:
		add(RuleObservedGenerationMismatch, "", "observedGeneration %d, generation %d", *s.ObservedGeneration, s.Generation)
	}
	return errors.Join(errs...)
}

// CheckTransition returns nil when every condition present both before and
// after a write kept its lastTransitionTime if and only if its status stayed
// the same (apimachinery meta.SetStatusCondition semantics), and otherwise
// an error joining one *[Violation] per condition.
func CheckTransition(before, after []metav1.Condition) error {
	var errs []error
	for _, a := range after {
		b := meta.FindStatusCondition(before, a.Type)
		if b == nil {
			continue
		}
		moved := !a.LastTransitionTime.Equal(&b.LastTransitionTime)
		switch {
		case a.Status == b.Status && moved:
			errs = append(errs, &Violation{Rule: RuleTransitionTimeMoved, Condition: a.Type,
				Detail: fmt.Sprintf("status %s", a.Status)})
		case a.Status != b.Status && !moved:
			errs = append(errs, &Violation{Rule: RuleTransitionTimeStuck, Condition: a.Type,
				Detail: fmt.Sprintf("%s to %s", b.Status, a.Status)})
		}
	}
	return errors.Join(errs...)
}

// Verify reports through t.Errorf every rule that s breaks (see [Check]).
func Verify(t testing.TB, s Status) {
	t.Helper()
	if err := Check(s); err != nil {
		t.Errorf("conditions break the kstatus trio's rules:\n%v", err)
	}
}

// IgnoreLastTransitionTime is a go-cmp option that ignores the
// lastTransitionTime of metav1.Condition values.
func IgnoreLastTransitionTime() cmp.Option {
	return cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")
}

// SortConditions is a go-cmp option that compares []metav1.Condition
// regardless of order, by type.
func SortConditions() cmp.Option {
	return cmpopts.SortSlices(func(a, b metav1.Condition) bool { return a.Type < b.Type })
}

// EquateConditions is a go-cmp option that compares conditions the way a
// test usually means: in any order and ignoring lastTransitionTime.
func EquateConditions() cmp.Option {
	return cmp.Options{IgnoreLastTransitionTime(), SortConditions()}
}
