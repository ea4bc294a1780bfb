package readiness_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	"github.com/watchgrade/watchgrade/readiness/readinesstest"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// owner builds a custom resource carrying conditions, the way kstatus reads
// it from the API server.
func owner(t *testing.T, generation int64, observed *int64, conds []metav1.Condition) *unstructured.Unstructured {
	t.Helper()
	var list []any
	for _, c := range conds {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&c)
		if err != nil {
			t.Fatalf("ToUnstructured(%v): %v", c, err)
		}
		list = append(list, m)
	}
	st := map[string]any{"conditions": list}
	if observed != nil {
		st["observedGeneration"] = *observed
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.watchgrade.dev/v1",
		"kind":       "Target",
		"metadata":   map[string]any{"name": "t", "namespace": "ns", "generation": generation},
		"status":     st,
	}}
}

// TestKstatusConformance runs every stream state and gate combination,
// from every persisted Ready, through kstatus's own status.Compute and
// through the offline checker.
func TestKstatusConformance(t *testing.T) {
	streams := []struct {
		state wgwatch.State
		level wgreadiness.Level
	}{
		{streamState("s", wgwatch.PhaseStarting, wgwatch.ReasonStarting, false), wgreadiness.LevelProgressing},
		{streamState("s", wgwatch.PhaseReplaying, wgwatch.ReasonInitialSync, false), wgreadiness.LevelProgressing},
		{streamState("s", wgwatch.PhaseReplaying, wgwatch.ReasonExpiredResourceVersion, false), wgreadiness.LevelProgressing},
		{streamState("s", wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false), wgreadiness.LevelEstablished},
		{streamState("s", wgwatch.PhaseBlocked, wgwatch.ReasonServerError, false), wgreadiness.LevelProgressing},
		{streamState("s", wgwatch.PhaseBlocked, wgwatch.ReasonFlapping, false), wgreadiness.LevelProgressing},
		{streamState("s", wgwatch.PhaseBlocked, wgwatch.ReasonReplayTimedOut, false), wgreadiness.LevelProgressing},
		{streamState("s", wgwatch.PhaseBlocked, wgwatch.ReasonForbidden, true), wgreadiness.LevelStalled},
		{streamState("s", wgwatch.PhaseBlocked, wgwatch.ReasonResourceNotFound, true), wgreadiness.LevelStalled},
		{streamState("s", wgwatch.PhaseBlocked, wgwatch.ReasonProgressDeadlineExceeded, true), wgreadiness.LevelStalled},
	}
	others := []*wgreadiness.Gate{nil, &establishedGate, &progressingGate, &stalledGate}
	priors := []struct {
		name  string
		conds []metav1.Condition
	}{
		{"Ready absent", nil},
		{"Ready Unknown", ready(metav1.ConditionUnknown)},
		{"Ready True", ready(metav1.ConditionTrue)},
		{"Ready False", ready(metav1.ConditionFalse)},
	}
	expected := map[wgreadiness.Level]status.Status{
		wgreadiness.LevelEstablished: status.CurrentStatus,
		wgreadiness.LevelProgressing: status.InProgressStatus,
		wgreadiness.LevelStalled:     status.FailedStatus,
	}
	now := time.Unix(1e9, 0)
	for _, s := range streams {
		for _, other := range others {
			for _, prior := range priors {
				for _, behind := range []bool{false, true} {
					gates := []wgreadiness.Gate{wgreadiness.StreamGate(s.state)}
					worst := s.level
					otherName := "none"
					if other != nil {
						gates = append(gates, *other)
						otherName = string(other.Level)
						if rank(other.Level) > rank(worst) {
							worst = other.Level
						}
					}
					want := expected[worst]
					observed := int64(gen)
					if behind {
						observed = gen - 1
						want = status.InProgressStatus
					}
					name := fmt.Sprintf("%s/%s/other=%s/%s/behind=%v", s.state.Phase, s.state.Reason, otherName, prior.name, behind)
					t.Run(name, func(t *testing.T) {
						conds := append([]metav1.Condition(nil), prior.conds...)
						wgreadiness.Apply(&conds, gates, gen, now, wgreadiness.Options{StreamsCondition: "StreamsRunning"})
						res, err := status.Compute(owner(t, gen, &observed, conds))
						if err != nil {
							t.Fatalf("status.Compute: %v", err)
						}
						if res.Status != want {
							t.Errorf("status.Compute() = %s (%s), want %s; conditions %v", res.Status, res.Message, want, conds)
						}
						err = readinesstest.Check(readinesstest.Status{Generation: gen, ObservedGeneration: ptr.To(observed), Conditions: conds})
						if behind {
							if !errors.Is(err, readinesstest.RuleObservedGenerationMismatch) {
								t.Errorf("Check() = %v, want %v", err, readinesstest.RuleObservedGenerationMismatch)
							}
							return
						}
						if err != nil {
							t.Errorf("Check() = %v", err)
						}
					})
				}
			}
		}
	}
}

func rank(l wgreadiness.Level) int {
	switch l {
	case wgreadiness.LevelEstablished:
		return 0
	case wgreadiness.LevelStalled:
		return 2
	}
	return 1
}
