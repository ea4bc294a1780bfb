package readiness_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	"github.com/watchgrade/watchgrade/readiness/readinesstest"
)

func TestApply(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 := t0.Add(time.Minute + 300*time.Millisecond)
	at := func(tm time.Time) metav1.Time { return metav1.NewTime(tm.Truncate(time.Second)) }
	withTime := func(c metav1.Condition, tm time.Time) metav1.Condition {
		c.LastTransitionTime = at(tm)
		return c
	}
	other := metav1.Condition{Type: "Synced", Status: metav1.ConditionFalse, Reason: "Mine", LastTransitionTime: at(t0)}
	const streamsMsg = "apps/deployments: replaying the collection"

	tests := []struct {
		name        string
		before      []metav1.Condition
		gates       []wgreadiness.Gate
		generation  int64
		opts        wgreadiness.Options
		want        []metav1.Condition
		wantChanged bool
	}{
		{
			name:       "first write stamps now, to the second",
			gates:      []wgreadiness.Gate{progressingGate},
			generation: gen,
			want: []metav1.Condition{
				withTime(cond("Ready", metav1.ConditionUnknown, "InitialSync", streamsMsg), t1),
				withTime(cond("Reconciling", metav1.ConditionTrue, "InitialSync", streamsMsg), t1),
			},
			wantChanged: true,
		},
		{
			name: "same input: nothing changes",
			before: []metav1.Condition{
				withTime(cond("Ready", metav1.ConditionUnknown, "InitialSync", streamsMsg), t0),
				withTime(cond("Reconciling", metav1.ConditionTrue, "InitialSync", streamsMsg), t0),
			},
			gates:      []wgreadiness.Gate{progressingGate},
			generation: gen,
			want: []metav1.Condition{
				withTime(cond("Ready", metav1.ConditionUnknown, "InitialSync", streamsMsg), t0),
				withTime(cond("Reconciling", metav1.ConditionTrue, "InitialSync", streamsMsg), t0),
			},
		},
		{
			name: "reason, message and generation move; lastTransitionTime does not",
			before: []metav1.Condition{
				withTime(cond("Ready", metav1.ConditionUnknown, "Starting", "old"), t0),
				withTime(cond("Reconciling", metav1.ConditionTrue, "Starting", "old"), t0),
			},
			gates:      []wgreadiness.Gate{progressingGate},
			generation: gen + 1,
			want: func() []metav1.Condition {
				r := withTime(cond("Ready", metav1.ConditionUnknown, "InitialSync", streamsMsg), t0)
				c := withTime(cond("Reconciling", metav1.ConditionTrue, "InitialSync", streamsMsg), t0)
				r.ObservedGeneration, c.ObservedGeneration = gen+1, gen+1
				return []metav1.Condition{r, c}
			}(),
			wantChanged: true,
		},
		{
			name: "established: Reconciling removed, Ready moves, other conditions kept",
			before: []metav1.Condition{
				other,
				withTime(cond("Ready", metav1.ConditionUnknown, "InitialSync", streamsMsg), t0),
				withTime(cond("Reconciling", metav1.ConditionTrue, "InitialSync", streamsMsg), t0),
			},
			gates:      []wgreadiness.Gate{establishedGate},
			generation: gen,
			want: []metav1.Condition{
				other,
				withTime(cond("Ready", metav1.ConditionTrue, "Established", "all gates are established"), t1),
			},
			wantChanged: true,
		},
		{
			name: "progressing to stalled: Reconciling removed, Stalled added, Ready keeps its time",
			before: []metav1.Condition{
				withTime(cond("Ready", metav1.ConditionFalse, "InitialSync", streamsMsg), t0),
				withTime(cond("Reconciling", metav1.ConditionTrue, "InitialSync", streamsMsg), t0),
			},
			gates:      []wgreadiness.Gate{stalledGate},
			generation: gen,
			want: []metav1.Condition{
				withTime(cond("Ready", metav1.ConditionFalse, "Unreachable", "SourceCluster: the cluster refuses our credentials"), t0),
				withTime(cond("Stalled", metav1.ConditionTrue, "Unreachable", "SourceCluster: the cluster refuses our credentials"), t1),
			},
			wantChanged: true,
		},
		{
			name: "a Stalled written False by someone else is removed",
			before: []metav1.Condition{
				withTime(cond("Ready", metav1.ConditionTrue, "Established", "all gates are established"), t0),
				withTime(cond("Stalled", metav1.ConditionFalse, "Fine", ""), t0),
			},
			gates:      []wgreadiness.Gate{establishedGate},
			generation: gen,
			want: []metav1.Condition{
				withTime(cond("Ready", metav1.ConditionTrue, "Established", "all gates are established"), t0),
			},
			wantChanged: true,
		},
		{
			name:       "StreamsCondition removed only when configured",
			before:     []metav1.Condition{withTime(cond("StreamsRunning", metav1.ConditionTrue, "Established", "x"), t0)},
			gates:      []wgreadiness.Gate{establishedGate},
			generation: gen,
			want: []metav1.Condition{
				withTime(cond("StreamsRunning", metav1.ConditionTrue, "Established", "x"), t0),
				withTime(cond("Ready", metav1.ConditionTrue, "Established", "all gates are established"), t1),
			},
			wantChanged: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := append([]metav1.Condition(nil), tt.before...)
			changed := wgreadiness.Apply(&got, tt.gates, tt.generation, t1, tt.opts)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Apply() conditions mismatch (-want +got):\n%s", diff)
			}
			if changed != tt.wantChanged {
				t.Errorf("Apply() = %v, want %v", changed, tt.wantChanged)
			}
			if err := readinesstest.CheckTransition(tt.before, got); err != nil {
				t.Errorf("CheckTransition() = %v", err)
			}
		})
	}
}

func TestApplyNil(t *testing.T) {
	if wgreadiness.Apply(nil, nil, gen, time.Now(), wgreadiness.Options{}) {
		t.Errorf("Apply(nil) = true, want false")
	}
}

// TestRestartNeverUnknown: an owner that was Ready before a controller
// restart goes Ready=False, not Unknown, while its streams replay, and an
// owner that stalled before it was ever Ready counts as established too.
func TestRestartNeverUnknown(t *testing.T) {
	now := time.Unix(1e9, 0)
	replaying := []wgreadiness.Gate{wgreadiness.StreamGate(streamState("core/pods", "Starting", "Starting", false))}
	tests := []struct {
		name  string
		gates []wgreadiness.Gate
		want  metav1.ConditionStatus
	}{
		{"was Ready, now replaying", []wgreadiness.Gate{establishedGate}, metav1.ConditionFalse},
		{"was stalled, never Ready, now replaying", []wgreadiness.Gate{stalledGate}, metav1.ConditionFalse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var conds []metav1.Condition
			wgreadiness.Apply(&conds, tt.gates, gen, now, wgreadiness.Options{})
			// The controller restarts: only the persisted conditions remain.
			wgreadiness.Apply(&conds, replaying, gen, now.Add(time.Hour), wgreadiness.Options{})
			if got := conds[0]; got.Type != "Ready" || got.Status != tt.want {
				t.Errorf("after restart Ready = %s, want %s", got.Status, tt.want)
			}
		})
	}
}

var ignoreTime = readinesstest.IgnoreLastTransitionTime()
