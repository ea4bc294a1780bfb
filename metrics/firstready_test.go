package metrics_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	wgmetrics "github.com/watchgrade/watchgrade/metrics"
)

var widgets = schema.GroupResource{Group: "example.com", Resource: "widgets"}

func newFirstReady(t testing.TB, opts wgmetrics.FirstReadyOptions) (*wgmetrics.FirstReady, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	if opts.Clock == nil {
		opts.Clock = clk
	}
	f, err := wgmetrics.NewFirstReady(prometheus.NewPedanticRegistry(), opts)
	if err != nil {
		t.Fatalf("NewFirstReady() error = %v", err)
	}
	return f, clk
}

// object is a widget created at t0 whose last status write, by the API
// server's clock, was at t0+written (none when written is negative).
func object(uid types.UID, written time.Duration) *metav1.ObjectMeta {
	obj := &metav1.ObjectMeta{Name: "w", Namespace: "ns", UID: uid, CreationTimestamp: metav1.NewTime(t0)}
	if written >= 0 {
		at := metav1.NewTime(t0.Add(written))
		obj.ManagedFields = []metav1.ManagedFieldsEntry{{
			Manager: "myctl", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &at,
		}}
	}
	return obj
}

func ready(status metav1.ConditionStatus) *metav1.Condition {
	return &metav1.Condition{Type: "Ready", Status: status, Reason: "Test", LastTransitionTime: metav1.NewTime(t0)}
}

// sighting is one call to Observe.
type sighting struct {
	obj   *metav1.ObjectMeta
	ready *metav1.Condition
}

const (
	uidA = types.UID("6f1c2a3e-0b7d-4c55-9a51-0d2b8e3f4a10")
	uidB = types.UID("not-a-uuid-but-a-uid")
)

func TestFirstReadyObserve(t *testing.T) {
	tests := []struct {
		name      string
		sightings []sighting
		want      []wgmetrics.FirstReadyResult
	}{{
		name: "Ready Unknown, then True: observed once",
		sightings: []sighting{
			{object(uidA, 1*time.Second), ready(metav1.ConditionUnknown)},
			{object(uidA, 42*time.Second), ready(metav1.ConditionTrue)},
			{object(uidA, 50*time.Second), ready(metav1.ConditionTrue)},
		},
		want: []wgmetrics.FirstReadyResult{wgmetrics.FirstReadyPending, wgmetrics.FirstReadyObserved, wgmetrics.FirstReadyDone},
	}, {
		name: "no Ready, stalled, then True: the first Ready is still observed",
		sightings: []sighting{
			{object(uidB, -1), nil},
			{object(uidB, 10*time.Second), ready(metav1.ConditionFalse)},
			{object(uidB, 42*time.Second), ready(metav1.ConditionTrue)},
		},
		want: []wgmetrics.FirstReadyResult{wgmetrics.FirstReadyPending, wgmetrics.FirstReadyPending, wgmetrics.FirstReadyObserved},
	}, {
		name: "a recovery is never observed",
		sightings: []sighting{
			{object(uidA, 0), ready(metav1.ConditionUnknown)},
			{object(uidA, 42*time.Second), ready(metav1.ConditionTrue)},
			{object(uidA, 100*time.Second), ready(metav1.ConditionFalse)},
			{object(uidA, 200*time.Second), ready(metav1.ConditionTrue)},
		},
		want: []wgmetrics.FirstReadyResult{wgmetrics.FirstReadyPending, wgmetrics.FirstReadyObserved, wgmetrics.FirstReadyDone, wgmetrics.FirstReadyDone},
	}, {
		name: "after a restart, an object first seen Ready is not observed",
		sightings: []sighting{
			{object(uidA, 42*time.Second), ready(metav1.ConditionTrue)},
			{object(uidA, 42*time.Second), ready(metav1.ConditionTrue)},
		},
		want: []wgmetrics.FirstReadyResult{wgmetrics.FirstReadyDone, wgmetrics.FirstReadyDone},
	}, {
		name: "after a restart, an object first seen stalled is not observed (undercount)",
		sightings: []sighting{
			{object(uidA, 10*time.Second), ready(metav1.ConditionFalse)},
			{object(uidA, 42*time.Second), ready(metav1.ConditionTrue)},
		},
		want: []wgmetrics.FirstReadyResult{wgmetrics.FirstReadyDone, wgmetrics.FirstReadyDone},
	}, {
		name: "an empty status counts as Unknown",
		sightings: []sighting{
			{object(uidA, 0), &metav1.Condition{Type: "Ready"}},
			{object(uidA, 42*time.Second), ready(metav1.ConditionTrue)},
		},
		want: []wgmetrics.FirstReadyResult{wgmetrics.FirstReadyPending, wgmetrics.FirstReadyObserved},
	}, {
		name: "unusable timestamps are rejected, once",
		sightings: []sighting{
			{object(uidA, 0), nil},
			{&metav1.ObjectMeta{UID: uidA}, ready(metav1.ConditionTrue)},
			{&metav1.ObjectMeta{UID: uidA}, ready(metav1.ConditionTrue)},
		},
		want: []wgmetrics.FirstReadyResult{wgmetrics.FirstReadyPending, wgmetrics.FirstReadyRejected, wgmetrics.FirstReadyDone},
	}, {
		name: "an object without a UID is ignored",
		sightings: []sighting{
			{object("", 0), nil},
			{object("", 42*time.Second), ready(metav1.ConditionTrue)},
		},
		want: []wgmetrics.FirstReadyResult{wgmetrics.FirstReadyIgnored, wgmetrics.FirstReadyIgnored},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _ := newFirstReady(t, wgmetrics.FirstReadyOptions{})
			var got []wgmetrics.FirstReadyResult
			for _, s := range tt.sightings {
				got = append(got, f.Observe(widgets, s.obj, s.ready))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Observe results (-want +got):\n%s", diff)
			}
		})
	}
}

var firstReadyLes = []string{"1", "2", "5", "10", "15", "30", "60", "120", "300", "600", "900", "1800", "3600"}

const firstReadyHeader = `# HELP watchgrade_time_to_first_ready_seconds Time from an object's creationTimestamp to its first Ready=True, by resource; one observation per object.
# TYPE watchgrade_time_to_first_ready_seconds histogram
`

func TestFirstReadyPublishes(t *testing.T) {
	f, _ := newFirstReady(t, wgmetrics.FirstReadyOptions{})
	f.AddResource(schema.GroupResource{Resource: "configmaps"})
	// Observed from managedFields: 42 s.
	f.Observe(widgets, object(uidA, 0), nil)
	f.Observe(widgets, object(uidA, 42*time.Second), ready(metav1.ConditionTrue))
	// Observed from lastTransitionTime: 7 s.
	f.Observe(widgets, object(uidB, -1), nil)
	f.Observe(widgets, object(uidB, -1), &metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(t0.Add(7 * time.Second))})
	// Rejected: the status write is before the creation.
	const uidC = types.UID("c")
	f.Observe(widgets, object(uidC, 0), nil)
	reversed := object(uidC, 0)
	reversed.ManagedFields[0].Time = &metav1.Time{Time: t0.Add(-2 * time.Second)}
	f.Observe(widgets, reversed, ready(metav1.ConditionTrue))

	want := firstReadyHeader +
		histogram("watchgrade_time_to_first_ready_seconds", `resource="configmaps"`, firstReadyLes, make([]int, 13), 0, "0") +
		histogram("watchgrade_time_to_first_ready_seconds", `resource="widgets.example.com"`, firstReadyLes,
			[]int{0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2}, 2, "49") +
		`# HELP watchgrade_time_to_first_ready_rejected_total First Ready=True transitions not observed because their timestamps were missing, reversed or implausible, by resource and reason.
# TYPE watchgrade_time_to_first_ready_rejected_total counter
watchgrade_time_to_first_ready_rejected_total{reason="missing_creation_timestamp",resource="configmaps"} 0
watchgrade_time_to_first_ready_rejected_total{reason="missing_ready_time",resource="configmaps"} 0
watchgrade_time_to_first_ready_rejected_total{reason="not_witnessed",resource="configmaps"} 0
watchgrade_time_to_first_ready_rejected_total{reason="reversed",resource="configmaps"} 0
watchgrade_time_to_first_ready_rejected_total{reason="too_long",resource="configmaps"} 0
watchgrade_time_to_first_ready_rejected_total{reason="missing_creation_timestamp",resource="widgets.example.com"} 0
watchgrade_time_to_first_ready_rejected_total{reason="missing_ready_time",resource="widgets.example.com"} 0
watchgrade_time_to_first_ready_rejected_total{reason="not_witnessed",resource="widgets.example.com"} 0
watchgrade_time_to_first_ready_rejected_total{reason="reversed",resource="widgets.example.com"} 1
watchgrade_time_to_first_ready_rejected_total{reason="too_long",resource="widgets.example.com"} 0
# HELP watchgrade_first_outcomes_total Objects by their first outcome since creation, Ready (first Ready=True) or Stalled (Stalled=True before any Ready=True), by resource; one per object.
# TYPE watchgrade_first_outcomes_total counter
watchgrade_first_outcomes_total{outcome="ready",resource="configmaps"} 0
watchgrade_first_outcomes_total{outcome="stalled",resource="configmaps"} 0
watchgrade_first_outcomes_total{outcome="ready",resource="widgets.example.com"} 3
watchgrade_first_outcomes_total{outcome="stalled",resource="widgets.example.com"} 0
`
	if err := testutil.CollectAndCompare(f, strings.NewReader(want)); err != nil {
		t.Errorf("CollectAndCompare (-got +want):\n%v", err)
	}

	f.DeleteResource(widgets)
	if got, want := testutil.CollectAndCount(f), 8; got != want {
		t.Errorf("CollectAndCount() after DeleteResource = %d, want %d", got, want)
	}
}

// Many goroutines see the same first Ready=True at once (the reconciler's
// write response, informer events): exactly one observes it.
func TestFirstReadyOneWinner(t *testing.T) {
	f, _ := newFirstReady(t, wgmetrics.FirstReadyOptions{})
	const objects, racers = 20, 64
	for i := range objects {
		f.Observe(widgets, object(types.UID(fmt.Sprint(i)), 0), ready(metav1.ConditionUnknown))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[wgmetrics.FirstReadyResult]int{}
	start := make(chan struct{})
	for i := range objects {
		for range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r := f.Observe(widgets, object(types.UID(fmt.Sprint(i)), 30*time.Second), ready(metav1.ConditionTrue))
				mu.Lock()
				got[r]++
				mu.Unlock()
			}()
		}
	}
	close(start)
	wg.Wait()
	want := map[wgmetrics.FirstReadyResult]int{
		wgmetrics.FirstReadyObserved: objects,
		wgmetrics.FirstReadyDone:     objects * (racers - 1),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Observe results by kind (-want +got):\n%s", diff)
	}
	wantText := firstReadyHeader + histogram("watchgrade_time_to_first_ready_seconds", `resource="widgets.example.com"`, firstReadyLes,
		[]int{0, 0, 0, 0, 0, 20, 20, 20, 20, 20, 20, 20, 20}, 20, "600")
	if err := testutil.CollectAndCompare(f, strings.NewReader(wantText), "watchgrade_time_to_first_ready_seconds"); err != nil {
		t.Errorf("CollectAndCompare (-got +want):\n%v", err)
	}
}

func TestFirstReadyClaimLifetime(t *testing.T) {
	f, clk := newFirstReady(t, wgmetrics.FirstReadyOptions{ClaimTTL: time.Hour})
	const (
		kept    = types.UID("kept")
		deleted = types.UID("deleted")
		missedR = types.UID("missed-ready")
		missedP = types.UID("missed-pending")
	)
	var got []wgmetrics.FirstReadyResult
	observe := func(uid types.UID, status metav1.ConditionStatus) {
		got = append(got, f.Observe(widgets, object(uid, 90*time.Second), ready(status)))
	}
	observe(kept, metav1.ConditionUnknown)
	observe(deleted, metav1.ConditionUnknown)
	observe(missedR, metav1.ConditionTrue)
	observe(missedP, metav1.ConditionUnknown)
	f.Delete(deleted)
	f.Delete(deleted)
	claims := []int{f.Claims()}

	// Two sweeps apart, the objects not seen since are forgotten.
	clk.Step(61 * time.Minute)
	observe(kept, metav1.ConditionUnknown)
	claims = append(claims, f.Claims())
	clk.Step(61 * time.Minute)
	observe(kept, metav1.ConditionUnknown)
	claims = append(claims, f.Claims())

	// Forgotten objects start over from their persisted Ready: the Ready
	// one is not observed again, the pending one still is.
	observe(missedR, metav1.ConditionTrue)
	observe(missedP, metav1.ConditionUnknown)
	observe(missedP, metav1.ConditionTrue)
	observe(kept, metav1.ConditionTrue)

	wantClaims := []int{3, 3, 1}
	if diff := cmp.Diff(wantClaims, claims); diff != "" {
		t.Errorf("Claims() over time (-want +got):\n%s", diff)
	}
	want := []wgmetrics.FirstReadyResult{
		wgmetrics.FirstReadyPending, wgmetrics.FirstReadyPending, wgmetrics.FirstReadyDone, wgmetrics.FirstReadyPending,
		wgmetrics.FirstReadyPending, wgmetrics.FirstReadyPending,
		wgmetrics.FirstReadyDone, wgmetrics.FirstReadyPending, wgmetrics.FirstReadyObserved, wgmetrics.FirstReadyObserved,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Observe results (-want +got):\n%s", diff)
	}
}

// Many objects leave the number of series where one object leaves it.
func TestFirstReadySeriesDoNotGrowWithObjects(t *testing.T) {
	count := func(objects int) int {
		f, _ := newFirstReady(t, wgmetrics.FirstReadyOptions{})
		for i := range objects {
			uid := types.UID(fmt.Sprint(i))
			f.Observe(widgets, object(uid, 0), nil)
			f.Observe(widgets, object(uid, time.Duration(i)*time.Second), ready(metav1.ConditionTrue))
		}
		return testutil.CollectAndCount(f)
	}
	one, many := count(1), count(10000)
	if one != 8 || many != one {
		t.Errorf("series for 1 object = %d, for 10000 objects = %d, want 8 for both", one, many)
	}
}

func TestFirstReadyNativeHistogram(t *testing.T) {
	tests := []struct {
		name       string
		opts       wgmetrics.FirstReadyOptions
		wantNative bool
	}{
		{name: "classic buckets by default", opts: wgmetrics.FirstReadyOptions{}, wantNative: false},
		{name: "native buckets when asked", opts: wgmetrics.FirstReadyOptions{NativeHistogramBucketFactor: 1.1}, wantNative: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			tt.opts.Clock = clocktesting.NewFakeClock(t0)
			f, err := wgmetrics.NewFirstReady(reg, tt.opts)
			if err != nil {
				t.Fatalf("NewFirstReady() error = %v", err)
			}
			f.Observe(widgets, object(uidA, 0), nil)
			f.Observe(widgets, object(uidA, 42*time.Second), ready(metav1.ConditionTrue))
			families, err := reg.Gather()
			if err != nil {
				t.Fatalf("Gather() error = %v", err)
			}
			for _, mf := range families {
				if mf.GetName() != "watchgrade_time_to_first_ready_seconds" {
					continue
				}
				h := mf.GetMetric()[0].GetHistogram()
				if got := h.Schema != nil; got != tt.wantNative {
					t.Errorf("native schema set = %v, want %v", got, tt.wantNative)
				}
				if got := len(h.GetBucket()); got != 13 {
					t.Errorf("classic buckets = %d, want 13", got)
				}
			}
		})
	}
}

// Objects that existed before the controller first ran with this library,
// never seen unready by it, used to be measured from their creation: a
// 10-day-old object landed in the histogram, or in too_long, which the
// docs say to alert on. They are counted as not_witnessed instead. An
// object whose persisted Ready=Unknown says the library saw it unready is
// still measured, however old; so is one created while the tracker ran.
func TestFirstReadyAdoption(t *testing.T) {
	f, clk := newFirstReady(t, wgmetrics.FirstReadyOptions{MaxDuration: 365 * 24 * time.Hour})
	old := func(uid types.UID) *metav1.ObjectMeta {
		o := object(uid, 10*24*time.Hour)
		o.CreationTimestamp = metav1.NewTime(t0.Add(-10 * 24 * time.Hour))
		o.ManagedFields[0].Time = &metav1.Time{Time: t0.Add(time.Second)}
		return o
	}
	adopted, witnessed := old("adopted"), old("unknown-before")
	if got := f.Observe(widgets, adopted, nil); got != wgmetrics.FirstReadyPending {
		t.Errorf("first sighting of an adopted object = %v, want Pending", got)
	}
	if got := f.Observe(widgets, adopted, ready(metav1.ConditionTrue)); got != wgmetrics.FirstReadyRejected {
		t.Errorf("first Ready of an adopted object = %v, want Rejected", got)
	}
	if got := f.Observe(widgets, witnessed, ready(metav1.ConditionUnknown)); got != wgmetrics.FirstReadyPending {
		t.Errorf("first sighting of an old object with Ready=Unknown = %v, want Pending", got)
	}
	if got := f.Observe(widgets, witnessed, ready(metav1.ConditionTrue)); got != wgmetrics.FirstReadyObserved {
		t.Errorf("first Ready of an old object once seen Unknown = %v, want Observed", got)
	}
	clk.Step(time.Hour)
	fresh := object("fresh", time.Hour+5*time.Second)
	fresh.CreationTimestamp = metav1.NewTime(t0.Add(time.Hour))
	f.Observe(widgets, fresh, nil)
	if got := f.Observe(widgets, fresh, ready(metav1.ConditionTrue)); got != wgmetrics.FirstReadyObserved {
		t.Errorf("first Ready of an object created while the tracker ran = %v, want Observed", got)
	}
	if got := rejectedCount(t, f, wgmetrics.RejectNotWitnessed); got != 1 {
		t.Errorf("rejected{not_witnessed} = %v, want 1", got)
	}
	if got := rejectedCount(t, f, wgmetrics.RejectTooLong); got != 0 {
		t.Errorf("rejected{too_long} = %v, want 0", got)
	}
}

// A dynamic client returns a typed nil beside an error; Observe ignores it
// as its doc says, rather than panic.
func TestFirstReadyIgnoresTypedNil(t *testing.T) {
	f, _ := newFirstReady(t, wgmetrics.FirstReadyOptions{})
	var u *unstructured.Unstructured
	var m *metav1.ObjectMeta
	for _, obj := range []metav1.Object{nil, u, m} {
		if got := f.Observe(widgets, obj, ready(metav1.ConditionTrue)); got != wgmetrics.FirstReadyIgnored {
			t.Errorf("Observe(%T nil) = %v, want Ignored", obj, got)
		}
	}
}

// Unsorted buckets used to make the first Observe panic while holding the
// tracker's mutex, so every later call blocked forever. They are an error
// at construction now.
func TestNewFirstReadyRefusesBadBuckets(t *testing.T) {
	for _, b := range [][]float64{{5, 1}, {1, 1}, {1, math.NaN()}, {math.Inf(-1), 1}, {1, math.Inf(1), 2}} {
		if _, err := wgmetrics.NewFirstReady(prometheus.NewRegistry(), wgmetrics.FirstReadyOptions{Buckets: b}); !errors.Is(err, wgmetrics.ErrInvalidBuckets) {
			t.Errorf("NewFirstReady(Buckets: %v) = %v, want ErrInvalidBuckets", b, err)
		}
	}
	if _, err := wgmetrics.NewFirstReady(prometheus.NewRegistry(), wgmetrics.FirstReadyOptions{Buckets: []float64{1, 10, math.Inf(1)}}); err != nil {
		t.Errorf("NewFirstReady(1, 10, +Inf) = %v", err)
	}
}

// rejectedCount is the rejection counter of widgets for reason.
func rejectedCount(t *testing.T, f *wgmetrics.FirstReady, reason wgmetrics.RejectReason) float64 {
	t.Helper()
	return widgetsMetric(t, f, "watchgrade_time_to_first_ready_rejected_total", "reason", string(reason)).GetCounter().GetValue()
}
