package metrics_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wgmetrics "github.com/watchgrade/watchgrade/metrics"
)

// conds are an owner's conditions with Ready of status ready ("" for
// none) and Stalled=True when stalled.
func conds(ready metav1.ConditionStatus, stalled bool) []metav1.Condition {
	var out []metav1.Condition
	if ready != "" {
		out = append(out, metav1.Condition{Type: "Ready", Status: ready, Reason: "Test", LastTransitionTime: metav1.NewTime(t0.Add(5 * time.Second))})
	}
	if stalled {
		out = append(out, metav1.Condition{Type: "Stalled", Status: metav1.ConditionTrue, Reason: "Test", LastTransitionTime: metav1.NewTime(t0.Add(5 * time.Second))})
	}
	return out
}

// TestFirstOutcomes: one first outcome per object, Ready or Stalled,
// whichever comes first, through the claim that times its first Ready:
// never for an object decided before this process saw it, never twice.
func TestFirstOutcomes(t *testing.T) {
	tests := []struct {
		name string
		// sightings are the object's conditions, in order.
		sightings [][]metav1.Condition
		// ready, stalled are the first outcomes counted; timed is the
		// time-to-first-Ready observations.
		ready, stalled, timed int
	}{{
		name:      "new, then Ready",
		sightings: [][]metav1.Condition{nil, conds(metav1.ConditionUnknown, false), conds(metav1.ConditionTrue, false)},
		ready:     1, timed: 1,
	}, {
		name:      "new, Reconciling, then Ready, seen again",
		sightings: [][]metav1.Condition{nil, conds(metav1.ConditionFalse, false), conds(metav1.ConditionTrue, false), conds(metav1.ConditionTrue, false)},
		ready:     1, timed: 1,
	}, {
		name:      "new, Stalled, then Ready: Stalled first, Ready still timed",
		sightings: [][]metav1.Condition{nil, conds(metav1.ConditionFalse, true), conds(metav1.ConditionFalse, true), conds(metav1.ConditionTrue, false)},
		stalled:   1, timed: 1,
	}, {
		name:      "new, Stalled, not Stalled, Stalled again",
		sightings: [][]metav1.Condition{nil, conds(metav1.ConditionFalse, true), conds(metav1.ConditionFalse, false), conds(metav1.ConditionFalse, true)},
		stalled:   1,
	}, {
		name:      "Ready, then Stalled: Ready first",
		sightings: [][]metav1.Condition{nil, conds(metav1.ConditionTrue, false), conds(metav1.ConditionFalse, true)},
		ready:     1, timed: 1,
	}, {
		name:      "first seen Stalled (decided before this process)",
		sightings: [][]metav1.Condition{conds(metav1.ConditionFalse, true), conds(metav1.ConditionTrue, false)},
	}, {
		name:      "first seen Ready (decided before this process)",
		sightings: [][]metav1.Condition{conds(metav1.ConditionTrue, false)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, clk := newFirstReady(t, wgmetrics.FirstReadyOptions{})
			for _, c := range tt.sightings {
				clk.Step(time.Second)
				f.ObserveConditions(widgets, object(uidA, 10*time.Second), c)
			}
			got := map[string]int{
				"ready":   firstOutcomes(t, f, wgmetrics.FirstOutcomeReady),
				"stalled": firstOutcomes(t, f, wgmetrics.FirstOutcomeStalled),
				"timed":   timed(t, f),
			}
			want := map[string]int{"ready": tt.ready, "stalled": tt.stalled, "timed": tt.timed}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("first outcomes (-want +got):\n%s", diff)
			}
		})
	}
}

// Observe, which is given Ready alone, never counts a Stalled outcome: an
// object it saw stall is counted Ready when it becomes Ready.
func TestObserveCountsReadyOnly(t *testing.T) {
	f, _ := newFirstReady(t, wgmetrics.FirstReadyOptions{})
	f.Observe(widgets, object(uidA, 0), nil)
	f.Observe(widgets, object(uidA, 0), ready(metav1.ConditionFalse))
	f.Observe(widgets, object(uidA, 9*time.Second), ready(metav1.ConditionTrue))
	if got := firstOutcomes(t, f, wgmetrics.FirstOutcomeReady); got != 1 {
		t.Errorf("first_outcomes_total{outcome=ready} = %v, want 1", got)
	}
}

// firstOutcomes is first_outcomes_total of widgets for outcome.
func firstOutcomes(t *testing.T, f *wgmetrics.FirstReady, outcome string) int {
	t.Helper()
	m := widgetsMetric(t, f, "watchgrade_first_outcomes_total", "outcome", outcome)
	if m == nil {
		return -1
	}
	return int(m.GetCounter().GetValue())
}

// timed is how many times to first Ready of widgets were observed.
func timed(t *testing.T, f *wgmetrics.FirstReady) int {
	t.Helper()
	m := widgetsMetric(t, f, "watchgrade_time_to_first_ready_seconds", "", "")
	if m == nil {
		return -1
	}
	return int(m.GetHistogram().GetSampleCount())
}

// widgetsMetric is the sample of family for widgets (with label = value,
// for a label given) that f collects, or nil.
func widgetsMetric(t *testing.T, f *wgmetrics.FirstReady, family, label, value string) *dto.Metric {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(f)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range families {
		if fam.GetName() != family {
			continue
		}
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["resource"] == "widgets.example.com" && (label == "" || labels[label] == value) {
				return m
			}
		}
	}
	return nil
}
