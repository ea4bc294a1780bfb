package metrics_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	wgmetrics "github.com/watchgrade/watchgrade/metrics"
)

// Defect 7 of issue 19: an object with no creationTimestamp, first seen
// with no Ready, was filed as not_witnessed (routine, "do not alert")
// instead of missing_creation_timestamp (broken timestamps).
func TestFirstReadyZeroCreationIsMissing(t *testing.T) {
	for _, first := range []*metav1.Condition{nil, ready(metav1.ConditionUnknown)} {
		f, _ := newFirstReady(t, wgmetrics.FirstReadyOptions{})
		obj := object(uidA, 30*time.Second)
		obj.CreationTimestamp = metav1.Time{}
		f.Observe(widgets, obj, first)
		if got := f.Observe(widgets, obj, ready(metav1.ConditionTrue)); got != wgmetrics.FirstReadyRejected {
			t.Errorf("first sighting %v: first Ready=True = %v, want Rejected", first, got)
		}
		if got := rejectedCount(t, f, wgmetrics.RejectMissingCreation); got != 1 {
			t.Errorf("first sighting %v: rejected{missing_creation_timestamp} = %v, want 1", first, got)
		}
		if got := rejectedCount(t, f, wgmetrics.RejectNotWitnessed); got != 0 {
			t.Errorf("first sighting %v: rejected{not_witnessed} = %v, want 0", first, got)
		}
	}
}

// Defect 8 of issue 19: objects created while the controller was down were
// filed as not_witnessed, so an object created four minutes into an outage
// and Ready ten seconds after the restart was never measured. The
// persisted Ready of the other objects of its namespace witnesses that the
// controller watched that namespace before the object was created: it is
// measured, from its creation, outage included. Without such a witness it
// is still not_witnessed.
func TestFirstReadyCreatedWhileDown(t *testing.T) {
	const (
		outage = 10 * time.Minute
		prior  = 2 * time.Hour // the previous process wrote Ready this long before the restart
	)
	// sighting of an object of gr named name in namespace ns, created
	// created after t0 (the restart; negative is before), whose last
	// status write was at written after t0, with Ready in status (none
	// when status is ""), stamped at ltt after t0.
	type sighting struct {
		gr              schema.GroupResource
		ns, name        string
		created         time.Duration
		status          metav1.ConditionStatus
		ltt, written    time.Duration
		want            wgmetrics.FirstReadyResult
		wantObservedSec float64
	}
	const noWrite = time.Duration(-1 << 62) // no status write yet
	other := schema.GroupResource{Group: "example.com", Resource: "gadgets"}
	late := func(ns string, st metav1.ConditionStatus, want wgmetrics.FirstReadyResult) sighting {
		return sighting{gr: widgets, ns: ns, name: "late", created: -outage + 4*time.Minute, status: st, ltt: 10 * time.Second, written: 10 * time.Second, want: want}
	}
	sibling := func(ns string, st metav1.ConditionStatus) sighting {
		want := wgmetrics.FirstReadyDone
		if st == metav1.ConditionUnknown {
			want = wgmetrics.FirstReadyPending
		}
		return sighting{gr: widgets, ns: ns, name: "sibling", created: -prior - time.Hour, status: st, ltt: -prior, written: -prior, want: want}
	}
	lateSeen := func(ns string) sighting {
		s := late(ns, "", wgmetrics.FirstReadyPending)
		s.ltt, s.written = 0, noWrite
		return s
	}
	tests := []struct {
		name      string
		sightings []sighting
	}{{
		name: "witnessed by a sibling seen first",
		sightings: []sighting{
			sibling("ns", metav1.ConditionTrue),
			lateSeen("ns"),
			late("ns", metav1.ConditionTrue, wgmetrics.FirstReadyObserved),
		},
	}, {
		name: "witnessed by a sibling seen after it, before its first Ready",
		sightings: []sighting{
			lateSeen("ns"),
			sibling("ns", metav1.ConditionFalse),
			late("ns", metav1.ConditionTrue, wgmetrics.FirstReadyObserved),
		},
	}, {
		name: "a sibling never Ready witnesses too (Ready=Unknown is the library's)",
		sightings: []sighting{
			sibling("ns", metav1.ConditionUnknown),
			lateSeen("ns"),
			late("ns", metav1.ConditionTrue, wgmetrics.FirstReadyObserved),
		},
	}, {
		name: "alone in its namespace: not witnessed",
		sightings: []sighting{
			lateSeen("ns"),
			late("ns", metav1.ConditionTrue, wgmetrics.FirstReadyRejected),
		},
	}, {
		name: "a sibling in another namespace does not witness",
		sightings: []sighting{
			sibling("elsewhere", metav1.ConditionTrue),
			lateSeen("ns"),
			late("ns", metav1.ConditionTrue, wgmetrics.FirstReadyRejected),
		},
	}, {
		name: "an object of another resource does not witness",
		sightings: []sighting{
			func() sighting { s := sibling("ns", metav1.ConditionTrue); s.gr = other; return s }(),
			lateSeen("ns"),
			late("ns", metav1.ConditionTrue, wgmetrics.FirstReadyRejected),
		},
	}, {
		name: "created before the sibling's Ready: not witnessed",
		sightings: []sighting{
			sibling("ns", metav1.ConditionTrue),
			{gr: widgets, ns: "ns", name: "older", created: -prior - time.Minute, written: noWrite, want: wgmetrics.FirstReadyPending},
			{gr: widgets, ns: "ns", name: "older", created: -prior - time.Minute, status: metav1.ConditionTrue, ltt: 10 * time.Second, written: 10 * time.Second, want: wgmetrics.FirstReadyRejected},
		},
	}, {
		name: "a Ready first seen after the tracker saw the object without one is no witness",
		sightings: []sighting{
			// A sibling created in the outage too, whose Ready this process
			// wrote with a lagging clock, stamped before the late one's
			// creation: it says nothing about the past.
			func() sighting { s := lateSeen("ns"); s.name, s.created = "sibling", -prior-time.Hour; return s }(),
			func() sighting {
				s := sibling("ns", metav1.ConditionUnknown)
				s.ltt, s.want = -outage, wgmetrics.FirstReadyPending
				return s
			}(),
			lateSeen("ns"),
			late("ns", metav1.ConditionTrue, wgmetrics.FirstReadyRejected),
		},
	}, {
		name: "its own Ready is no witness of its own creation, whatever its stamp",
		sightings: []sighting{
			lateSeen("ns"),
			func() sighting {
				s := late("ns", metav1.ConditionUnknown, wgmetrics.FirstReadyPending)
				s.ltt = -outage // written with a clock that lags
				return s
			}(),
			late("ns", metav1.ConditionTrue, wgmetrics.FirstReadyRejected),
		},
	}, {
		name: "its own Ready is no witness of its creation",
		sightings: []sighting{
			late("ns", metav1.ConditionUnknown, wgmetrics.FirstReadyPending),
			late("ns", metav1.ConditionTrue, wgmetrics.FirstReadyObserved), // seen unready: measured as before
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _ := newFirstReady(t, wgmetrics.FirstReadyOptions{})
			var got, want []wgmetrics.FirstReadyResult
			for _, s := range tt.sightings {
				obj := &metav1.ObjectMeta{Namespace: s.ns, Name: s.name, UID: types.UID(s.gr.Resource + "/" + s.ns + "/" + s.name),
					CreationTimestamp: metav1.NewTime(t0.Add(s.created))}
				if s.written != noWrite {
					at := metav1.NewTime(t0.Add(s.written))
					obj.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "myctl", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &at}}
				}
				var r *metav1.Condition
				if s.status != "" {
					r = &metav1.Condition{Type: "Ready", Status: s.status, Reason: "Test", LastTransitionTime: metav1.NewTime(t0.Add(s.ltt))}
				}
				got = append(got, f.Observe(s.gr, obj, r))
				want = append(want, s.want)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Observe results (-want +got):\n%s", diff)
			}
		})
	}
	// The duration measured runs from the creation, through the outage.
	f, _ := newFirstReady(t, wgmetrics.FirstReadyOptions{})
	s := tests[0].sightings
	for _, x := range s {
		obj := &metav1.ObjectMeta{Namespace: x.ns, Name: x.name, UID: types.UID(x.name), CreationTimestamp: metav1.NewTime(t0.Add(x.created))}
		at := metav1.NewTime(t0.Add(x.written))
		obj.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "myctl", Subresource: "status", Time: &at}}
		var r *metav1.Condition
		if x.status != "" {
			r = &metav1.Condition{Type: "Ready", Status: x.status, LastTransitionTime: metav1.NewTime(t0.Add(x.ltt))}
		}
		f.Observe(widgets, obj, r)
	}
	if got, want := histogramSum(t, f), (outage - 4*time.Minute + 10*time.Second).Seconds(); got != want {
		t.Errorf("time to first Ready observed = %vs, want %vs (from the creation, four minutes into the outage)", got, want)
	}
}

// histogramSum is the sum of the time-to-first-Ready histogram of widgets.
func histogramSum(t *testing.T, f *wgmetrics.FirstReady) float64 {
	t.Helper()
	return widgetsMetric(t, f, "watchgrade_time_to_first_ready_seconds", "", "").GetHistogram().GetSampleSum()
}
