package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	apiwatch "k8s.io/apimachinery/pkg/watch"

	wgmetrics "github.com/watchgrade/watchgrade/metrics"
	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// printSeries prints the samples of c, in the text format and sorted by
// name, whose line starts with one of the given prefixes.
func printSeries(c prometheus.Collector, prefixes ...string) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		panic(err)
	}
	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	var text strings.Builder
	for _, mf := range families {
		if _, err := expfmt.MetricFamilyToText(&text, mf); err != nil {
			panic(err)
		}
	}
	for _, line := range strings.Split(text.String(), "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				fmt.Println(line)
				break
			}
		}
	}
}

// Register with the registry your /metrics endpoint serves; with
// controller-runtime that is sigs.k8s.io/controller-runtime/pkg/metrics'
// Registry. A second registration of the same set is an error that hands
// back the first set, to reuse.
func ExampleNewWatchMetrics() {
	reg := prometheus.NewRegistry()
	wm, err := wgmetrics.NewWatchMetrics(reg, wgmetrics.WatchOptions{Namespace: "myctl"})
	if err != nil {
		panic(err)
	}
	wm.AddResource(schema.GroupResource{Group: "apps", Resource: "deployments"})

	// Later, a restarted manager asks again.
	again, err := wgmetrics.NewWatchMetrics(reg, wgmetrics.WatchOptions{Namespace: "myctl"})
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		again, err = are.ExistingCollector.(*wgmetrics.WatchMetrics), nil
	}
	fmt.Println("reused:", again == wm, err)
	printSeries(wm, "myctl_watch_sessions_ended_total")
	// Output:
	// reused: true <nil>
	// myctl_watch_sessions_ended_total{outcome="closed",resource="deployments.apps"} 0
	// myctl_watch_sessions_ended_total{outcome="error",resource="deployments.apps"} 0
	// myctl_watch_sessions_ended_total{outcome="expired",resource="deployments.apps"} 0
	// myctl_watch_sessions_ended_total{outcome="teardown",resource="deployments.apps"} 0
}

// WatchMetrics observes a stream: two routine closes are counted as
// closed, and the stream stands in Streaming until it is stopped.
func ExampleWatchMetrics() {
	wm, err := wgmetrics.NewWatchMetrics(prometheus.NewRegistry(), wgmetrics.WatchOptions{Namespace: "myctl"})
	if err != nil {
		panic(err)
	}
	lw := watchtest.New(
		watchtest.Session{Events: []apiwatch.Event{
			watchtest.Added(watchtest.ConfigMap("a", "10")),
			watchtest.InitialEventsEnd("11"),
		}, Lasts: 1500 * time.Millisecond}, // live after ShortSession (1s), then closed by the server
		watchtest.Session{Events: []apiwatch.Event{watchtest.Bookmark("15")}},
	)
	ctx, cancel := context.WithCancel(context.Background())
	stop := wgwatch.ObserverFuncs{SessionEndedFunc: func(wgwatch.SessionEnd) {
		if lw.Remaining() == 0 {
			cancel() // the script is played: stop the example
		}
	}}
	stream, err := wgwatch.NewStream(lw, wgwatch.HandlerFuncs{}, wgwatch.StreamOptions{
		Name:     "configmaps",
		Resource: schema.GroupResource{Resource: "configmaps"},
		Observer: wgwatch.Observers(wm, stop),
	})
	if err != nil {
		panic(err)
	}
	_ = stream.Run(ctx)
	printSeries(wm, "myctl_watch_replay_duration_seconds_count",
		`myctl_watch_sessions_ended_total{outcome="closed"`, `myctl_watch_streams{phase="Streaming"`)

	// The stream's context ended between sessions, so it reported no
	// teardown: count it out.
	wm.StreamStopped("configmaps")
	printSeries(wm, `myctl_watch_streams{phase="Streaming"`)
	// Output:
	// myctl_watch_replay_duration_seconds_count{resource="configmaps"} 1
	// myctl_watch_sessions_ended_total{outcome="closed",resource="configmaps"} 2
	// myctl_watch_streams{phase="Streaming",resource="configmaps"} 1
	// myctl_watch_streams{phase="Streaming",resource="configmaps"} 0
}

// A reconciler calls Observe with the object it reads and with the object
// its status write returns; only the first Ready=True is observed, on the
// API server's clock.
func ExampleFirstReady_Observe() {
	widgets := schema.GroupResource{Group: "example.com", Resource: "widgets"}
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// The controller has been running since before the widget's creation.
	since := created.Add(-time.Hour)
	fr, err := wgmetrics.NewFirstReady(prometheus.NewRegistry(), wgmetrics.FirstReadyOptions{Namespace: "myctl", WitnessedSince: since})
	if err != nil {
		panic(err)
	}
	widget := func(written time.Duration) *metav1.ObjectMeta {
		at := metav1.NewTime(created.Add(written))
		return &metav1.ObjectMeta{
			Name: "w", UID: "0d6c1e7a-4b7e-4d1a-9c43-5f0a2e8b9d11", CreationTimestamp: metav1.NewTime(created),
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "myctl", Subresource: "status", Time: &at}},
		}
	}
	ready := func(s metav1.ConditionStatus) *metav1.Condition {
		return &metav1.Condition{Type: "Ready", Status: s}
	}
	fmt.Println(fr.Observe(widgets, widget(0), nil))                                        // read from the cache
	fmt.Println(fr.Observe(widgets, widget(5*time.Second), ready(metav1.ConditionUnknown))) // still progressing
	fmt.Println(fr.Observe(widgets, widget(95*time.Second), ready(metav1.ConditionTrue)))   // the write that set Ready
	fmt.Println(fr.Observe(widgets, widget(95*time.Second), ready(metav1.ConditionTrue)))   // the informer's copy
	fmt.Println(fr.Observe(widgets, widget(99*time.Second), ready(metav1.ConditionFalse)))
	fmt.Println(fr.Observe(widgets, widget(120*time.Second), ready(metav1.ConditionTrue))) // a recovery

	// After a restart, the persisted Ready is the witness.
	restarted, _ := wgmetrics.NewFirstReady(prometheus.NewRegistry(), wgmetrics.FirstReadyOptions{Namespace: "myctl", WitnessedSince: since})
	fmt.Println(restarted.Observe(widgets, widget(120*time.Second), ready(metav1.ConditionTrue)))

	// A widget that was there long before the controller first ran with the
	// library, never seen unready: not measured from its creation.
	adopted := widget(0)
	adopted.UID, adopted.CreationTimestamp = "6f1b2c3d-0000-4000-8000-000000000001", metav1.NewTime(created.Add(-240*time.Hour))
	fmt.Println(fr.Observe(widgets, adopted, nil))
	fmt.Println(fr.Observe(widgets, adopted, ready(metav1.ConditionTrue)))

	printSeries(fr, "myctl_time_to_first_ready_seconds_sum", "myctl_time_to_first_ready_seconds_count")
	// Output:
	// Pending
	// Pending
	// Observed
	// Done
	// Done
	// Done
	// Done
	// Pending
	// Rejected
	// myctl_time_to_first_ready_seconds_sum{resource="widgets.example.com"} 95
	// myctl_time_to_first_ready_seconds_count{resource="widgets.example.com"} 1
}

// ObserveConditions, given the whole condition list, also counts each
// object's first outcome: one that stalls before it is ever Ready counts
// as stalled (its later Ready is still timed), one Ready first as ready.
// The share provisioned without a human is ready over both.
func ExampleFirstReady_ObserveConditions() {
	widgets := schema.GroupResource{Group: "example.com", Resource: "widgets"}
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	fr, err := wgmetrics.NewFirstReady(prometheus.NewRegistry(), wgmetrics.FirstReadyOptions{Namespace: "myctl", WitnessedSince: created.Add(-time.Hour)})
	if err != nil {
		panic(err)
	}
	widget := func(uid string, written time.Duration) *metav1.ObjectMeta {
		at := metav1.NewTime(created.Add(written))
		return &metav1.ObjectMeta{
			Name: uid, UID: types.UID(uid), CreationTimestamp: metav1.NewTime(created),
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "myctl", Subresource: "status", Time: &at}},
		}
	}
	conds := func(ready metav1.ConditionStatus, stalled bool) []metav1.Condition {
		c := []metav1.Condition{{Type: "Ready", Status: ready}}
		if stalled {
			c = append(c, metav1.Condition{Type: "Stalled", Status: metav1.ConditionTrue})
		}
		return c
	}
	// One Ready after a minute.
	fmt.Println(fr.ObserveConditions(widgets, widget("a", 0), nil))
	fmt.Println(fr.ObserveConditions(widgets, widget("a", time.Minute), conds(metav1.ConditionTrue, false)))
	// One Stalled first (RBAC denied), Ready once a human fixed it.
	fmt.Println(fr.ObserveConditions(widgets, widget("b", 0), nil))
	fmt.Println(fr.ObserveConditions(widgets, widget("b", time.Minute), conds(metav1.ConditionFalse, true)))
	fmt.Println(fr.ObserveConditions(widgets, widget("b", time.Hour), conds(metav1.ConditionTrue, false)))

	printSeries(fr, "myctl_first_outcomes_total", "myctl_time_to_first_ready_seconds_count")
	// Output:
	// Pending
	// Observed
	// Pending
	// Pending
	// Observed
	// myctl_first_outcomes_total{outcome="ready",resource="widgets.example.com"} 1
	// myctl_first_outcomes_total{outcome="stalled",resource="widgets.example.com"} 1
	// myctl_time_to_first_ready_seconds_count{resource="widgets.example.com"} 2
}

// Native buckets are added only when asked for; the classic ones stay.
// AddResource shows a resource at zero before its first object is Ready.
func ExampleNewFirstReady() {
	reg := prometheus.NewRegistry()
	fr, err := wgmetrics.NewFirstReady(reg, wgmetrics.FirstReadyOptions{
		Namespace:                   "myctl",
		NativeHistogramBucketFactor: 1.1,
	})
	if err != nil {
		panic(err)
	}
	fr.AddResource(schema.GroupResource{Group: "example.com", Resource: "widgets"})
	printSeries(fr, "myctl_time_to_first_ready_seconds_count", "myctl_time_to_first_ready_rejected_total")
	// Output:
	// myctl_time_to_first_ready_rejected_total{reason="missing_creation_timestamp",resource="widgets.example.com"} 0
	// myctl_time_to_first_ready_rejected_total{reason="missing_ready_time",resource="widgets.example.com"} 0
	// myctl_time_to_first_ready_rejected_total{reason="not_witnessed",resource="widgets.example.com"} 0
	// myctl_time_to_first_ready_rejected_total{reason="reversed",resource="widgets.example.com"} 0
	// myctl_time_to_first_ready_rejected_total{reason="too_long",resource="widgets.example.com"} 0
	// myctl_time_to_first_ready_seconds_count{resource="widgets.example.com"} 0
}

// Retire a dynamic watch: stop its stream, then delete its series.
func ExampleWatchMetrics_DeleteResource() {
	wm, err := wgmetrics.NewWatchMetrics(prometheus.NewRegistry(), wgmetrics.WatchOptions{})
	if err != nil {
		panic(err)
	}
	widgets := schema.GroupResource{Group: "example.com", Resource: "widgets"}
	wm.AddResource(schema.GroupResource{Resource: "pods"})
	wm.StateChanged(wgwatch.State{Stream: "widgets", Resource: widgets, Phase: wgwatch.PhaseStreaming})
	fmt.Println("series:", testutil.CollectAndCount(wm))

	wm.StreamStopped("widgets")
	wm.DeleteResource(widgets)
	fmt.Println("series:", testutil.CollectAndCount(wm))
	// Output:
	// series: 32
	// series: 16
}
