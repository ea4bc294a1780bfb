package metrics_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	wgmetrics "github.com/watchgrade/watchgrade/metrics"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

var (
	pods        = schema.GroupResource{Resource: "pods"}
	deployments = schema.GroupResource{Group: "apps", Resource: "deployments"}
	t0          = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

// newWatchMetrics returns watch metrics on a fresh registry and a fake
// clock.
func newWatchMetrics(t testing.TB) (*wgmetrics.WatchMetrics, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	m, err := wgmetrics.NewWatchMetrics(prometheus.NewPedanticRegistry(), wgmetrics.WatchOptions{Clock: clk})
	if err != nil {
		t.Fatalf("NewWatchMetrics() error = %v", err)
	}
	return m, clk
}

// step is one thing that happens to the observer.
type step func(m *wgmetrics.WatchMetrics, clk *clocktesting.FakeClock)

func changed(stream string, gr schema.GroupResource, p wgwatch.Phase) step {
	return func(m *wgmetrics.WatchMetrics, _ *clocktesting.FakeClock) {
		m.StateChanged(wgwatch.State{Stream: stream, Resource: gr, Phase: p})
	}
}

func ended(stream string, gr schema.GroupResource, o wgwatch.Outcome, c wgwatch.Class, s wgwatch.Stage, d time.Duration) step {
	return func(m *wgmetrics.WatchMetrics, _ *clocktesting.FakeClock) {
		m.SessionEnded(wgwatch.SessionEnd{
			Stream: stream, Resource: gr, Stage: s, Duration: d,
			Verdict: wgwatch.Verdict{Outcome: o, Class: c},
		})
	}
}

func advance(d time.Duration) step {
	return func(_ *wgmetrics.WatchMetrics, clk *clocktesting.FakeClock) { clk.Step(d) }
}

const (
	endedHeader = `# HELP watchgrade_watch_sessions_ended_total Watch sessions ended, by resource and outcome (closed, expired, error, teardown).
# TYPE watchgrade_watch_sessions_ended_total counter
`
	streamsHeader = `# HELP watchgrade_watch_streams Watch streams and instrumented informers running, by resource and phase (Starting, Replaying, Streaming, Blocked).
# TYPE watchgrade_watch_streams gauge
`
	failuresHeader = `# HELP watchgrade_watch_open_failures_total Watch sessions that failed before delivering live events (List, Watch call or replay), by resource and error class.
# TYPE watchgrade_watch_open_failures_total counter
`
)

func TestWatchMetricsCounters(t *testing.T) {
	tests := []struct {
		name   string
		steps  []step
		metric string
		want   string
	}{{
		name:   "a reported resource starts every outcome at zero",
		steps:  []step{changed("pods", pods, wgwatch.PhaseStarting)},
		metric: "watchgrade_watch_sessions_ended_total",
		want: endedHeader + `watchgrade_watch_sessions_ended_total{outcome="closed",resource="pods"} 0
watchgrade_watch_sessions_ended_total{outcome="error",resource="pods"} 0
watchgrade_watch_sessions_ended_total{outcome="expired",resource="pods"} 0
watchgrade_watch_sessions_ended_total{outcome="teardown",resource="pods"} 0
`,
	}, {
		name: "endings count by resource and outcome",
		steps: []step{
			ended("pods", pods, wgwatch.OutcomeClosed, wgwatch.ClassNone, wgwatch.StageStream, 40*time.Minute),
			ended("pods", pods, wgwatch.OutcomeClosed, wgwatch.ClassNone, wgwatch.StageStream, 35*time.Minute),
			ended("pods", pods, wgwatch.OutcomeExpired, wgwatch.ClassExpired, wgwatch.StageStream, time.Minute),
			ended("deployments.apps", deployments, wgwatch.OutcomeError, wgwatch.ClassTransient, wgwatch.StageStream, time.Second),
			ended("deployments.apps", deployments, wgwatch.OutcomeTeardown, wgwatch.ClassNone, wgwatch.StageStream, time.Second),
		},
		metric: "watchgrade_watch_sessions_ended_total",
		want: endedHeader + `watchgrade_watch_sessions_ended_total{outcome="closed",resource="deployments.apps"} 0
watchgrade_watch_sessions_ended_total{outcome="error",resource="deployments.apps"} 1
watchgrade_watch_sessions_ended_total{outcome="expired",resource="deployments.apps"} 0
watchgrade_watch_sessions_ended_total{outcome="teardown",resource="deployments.apps"} 1
watchgrade_watch_sessions_ended_total{outcome="closed",resource="pods"} 2
watchgrade_watch_sessions_ended_total{outcome="error",resource="pods"} 0
watchgrade_watch_sessions_ended_total{outcome="expired",resource="pods"} 1
watchgrade_watch_sessions_ended_total{outcome="teardown",resource="pods"} 0
`,
	}, {
		name: "failed opens count by class; failures after the open and clean ends do not",
		steps: []step{
			ended("pods", pods, wgwatch.OutcomeError, wgwatch.ClassNeedsHuman, wgwatch.StageOpen, 0),
			ended("pods", pods, wgwatch.OutcomeError, wgwatch.ClassNeedsHuman, wgwatch.StageList, 0),
			ended("pods", pods, wgwatch.OutcomeExpired, wgwatch.ClassExpired, wgwatch.StageList, 0),
			ended("pods", pods, wgwatch.OutcomeError, wgwatch.ClassTransient, wgwatch.StageReplay, time.Minute),
			ended("pods", pods, wgwatch.OutcomeError, wgwatch.ClassTransient, wgwatch.StageStream, time.Minute),
			ended("pods", pods, wgwatch.OutcomeExpired, wgwatch.ClassExpired, wgwatch.StageStream, time.Minute),
			ended("pods", pods, wgwatch.OutcomeClosed, wgwatch.ClassNone, wgwatch.StageReplay, time.Minute),
			ended("pods", pods, wgwatch.OutcomeTeardown, wgwatch.ClassNone, wgwatch.StageOpen, 0),
		},
		metric: "watchgrade_watch_open_failures_total",
		want: failuresHeader + `watchgrade_watch_open_failures_total{class="expired",resource="pods"} 1
watchgrade_watch_open_failures_total{class="needs_human",resource="pods"} 2
watchgrade_watch_open_failures_total{class="transient",resource="pods"} 1
`,
	}, {
		name: "a stream's first state counts it; each change moves it",
		steps: []step{
			changed("a", pods, wgwatch.PhaseStarting),
			changed("b", pods, wgwatch.PhaseStarting),
			changed("c", pods, wgwatch.PhaseReplaying),
			changed("a", pods, wgwatch.PhaseReplaying),
			changed("a", pods, wgwatch.PhaseStreaming),
			changed("b", pods, wgwatch.PhaseBlocked),
		},
		metric: "watchgrade_watch_streams",
		want: streamsHeader + `watchgrade_watch_streams{phase="Blocked",resource="pods"} 1
watchgrade_watch_streams{phase="Replaying",resource="pods"} 1
watchgrade_watch_streams{phase="Starting",resource="pods"} 0
watchgrade_watch_streams{phase="Streaming",resource="pods"} 1
`,
	}, {
		name: "a teardown counts a stream out until it reports again",
		steps: []step{
			changed("a", pods, wgwatch.PhaseStreaming),
			changed("b", pods, wgwatch.PhaseStreaming),
			changed("c", pods, wgwatch.PhaseStreaming),
			ended("a", pods, wgwatch.OutcomeTeardown, wgwatch.ClassNone, wgwatch.StageStream, time.Minute),
			ended("a", pods, wgwatch.OutcomeTeardown, wgwatch.ClassNone, wgwatch.StageStream, time.Minute),
			ended("b", pods, wgwatch.OutcomeTeardown, wgwatch.ClassNone, wgwatch.StageStream, time.Minute),
			// An informer whose watch was stopped goes on in its last phase.
			ended("b", pods, wgwatch.OutcomeClosed, wgwatch.ClassNone, wgwatch.StageStream, time.Minute),
			// A stream that runs again starts over.
			changed("a", pods, wgwatch.PhaseStarting),
		},
		metric: "watchgrade_watch_streams",
		want: streamsHeader + `watchgrade_watch_streams{phase="Blocked",resource="pods"} 0
watchgrade_watch_streams{phase="Replaying",resource="pods"} 0
watchgrade_watch_streams{phase="Starting",resource="pods"} 1
watchgrade_watch_streams{phase="Streaming",resource="pods"} 2
`,
	}, {
		name: "StreamStopped counts a stream out, once",
		steps: []step{
			changed("a", pods, wgwatch.PhaseStreaming),
			changed("b", pods, wgwatch.PhaseStreaming),
			func(m *wgmetrics.WatchMetrics, _ *clocktesting.FakeClock) {
				m.StreamStopped("a")
				m.StreamStopped("a")
				m.StreamStopped("never-seen")
			},
			// A teardown reported after StreamStopped changes nothing.
			ended("a", pods, wgwatch.OutcomeTeardown, wgwatch.ClassNone, wgwatch.StageStream, time.Minute),
		},
		metric: "watchgrade_watch_streams",
		want: streamsHeader + `watchgrade_watch_streams{phase="Blocked",resource="pods"} 0
watchgrade_watch_streams{phase="Replaying",resource="pods"} 0
watchgrade_watch_streams{phase="Starting",resource="pods"} 0
watchgrade_watch_streams{phase="Streaming",resource="pods"} 1
`,
	}, {
		name: "a session ending before the first state does not count the stream",
		steps: []step{
			ended("a", pods, wgwatch.OutcomeError, wgwatch.ClassTransient, wgwatch.StageList, 0),
		},
		metric: "watchgrade_watch_streams",
		want: streamsHeader + `watchgrade_watch_streams{phase="Blocked",resource="pods"} 0
watchgrade_watch_streams{phase="Replaying",resource="pods"} 0
watchgrade_watch_streams{phase="Starting",resource="pods"} 0
watchgrade_watch_streams{phase="Streaming",resource="pods"} 0
`,
	}, {
		name: "values outside the closed sets are ignored",
		steps: []step{
			changed("a", pods, wgwatch.Phase("Exploded")),
			ended("a", pods, wgwatch.Outcome("boom"), wgwatch.ClassNone, wgwatch.StageStream, 0),
		},
		metric: "watchgrade_watch_sessions_ended_total",
		want:   "",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, clk := newWatchMetrics(t)
			for _, s := range tt.steps {
				s(m, clk)
			}
			if err := testutil.CollectAndCompare(m, strings.NewReader(tt.want), tt.metric); err != nil {
				t.Errorf("CollectAndCompare(%s) (-got +want):\n%v", tt.metric, err)
			}
		})
	}
}

func TestWatchMetricsReplayDuration(t *testing.T) {
	m, clk := newWatchMetrics(t)
	steps := []step{
		// A first replay of 3 s.
		changed("a", pods, wgwatch.PhaseStarting),
		advance(time.Second),
		changed("a", pods, wgwatch.PhaseReplaying),
		advance(3 * time.Second),
		changed("a", pods, wgwatch.PhaseStreaming),
		// A routine hour of streaming is no replay.
		advance(time.Hour),
		// An expiry: a replay that fails, is Blocked for a minute, and
		// then streams is one replay of the 30 s it spent Replaying.
		changed("a", pods, wgwatch.PhaseReplaying),
		advance(30 * time.Second),
		changed("a", pods, wgwatch.PhaseBlocked),
		advance(60 * time.Second),
		changed("a", pods, wgwatch.PhaseStreaming),
		// Blocked from Streaming and back is no replay either.
		changed("a", pods, wgwatch.PhaseBlocked),
		advance(time.Minute),
		changed("a", pods, wgwatch.PhaseStreaming),
		// A replay abandoned by a teardown is not observed.
		changed("a", pods, wgwatch.PhaseReplaying),
		ended("a", pods, wgwatch.OutcomeTeardown, wgwatch.ClassNone, wgwatch.StageReplay, time.Second),
		advance(time.Minute),
		changed("a", pods, wgwatch.PhaseStreaming),
	}
	for _, s := range steps {
		s(m, clk)
	}
	want := `# HELP watchgrade_watch_replay_duration_seconds Time streams spent replaying, from entering Replaying to the next Streaming less any time Blocked in between, by resource.
# TYPE watchgrade_watch_replay_duration_seconds histogram
watchgrade_watch_replay_duration_seconds_bucket{resource="pods",le="0.05"} 0
watchgrade_watch_replay_duration_seconds_bucket{resource="pods",le="0.1"} 0
watchgrade_watch_replay_duration_seconds_bucket{resource="pods",le="0.25"} 0
watchgrade_watch_replay_duration_seconds_bucket{resource="pods",le="0.5"} 0
watchgrade_watch_replay_duration_seconds_bucket{resource="pods",le="1"} 0
watchgrade_watch_replay_duration_seconds_bucket{resource="pods",le="2.5"} 0
watchgrade_watch_replay_duration_seconds_bucket{resource="pods",le="5"} 1
watchgrade_watch_replay_duration_seconds_bucket{resource="pods",le="10"} 1
watchgrade_watch_replay_duration_seconds_bucket{resource="pods",le="30"} 2
watchgrade_watch_replay_duration_seconds_bucket{resource="pods",le="60"} 2
watchgrade_watch_replay_duration_seconds_bucket{resource="pods",le="120"} 2
watchgrade_watch_replay_duration_seconds_bucket{resource="pods",le="300"} 2
watchgrade_watch_replay_duration_seconds_bucket{resource="pods",le="600"} 2
watchgrade_watch_replay_duration_seconds_bucket{resource="pods",le="+Inf"} 2
watchgrade_watch_replay_duration_seconds_sum{resource="pods"} 33
watchgrade_watch_replay_duration_seconds_count{resource="pods"} 2
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "watchgrade_watch_replay_duration_seconds"); err != nil {
		t.Errorf("CollectAndCompare (-got +want):\n%v", err)
	}
}

// TestReplayDurationLeavesOutBlockedTime: an initial sync that RBAC
// refuses for two hours, repaired, is one replay of the time the stream
// spent Replaying, not of the two hours it was Blocked (which made
// WatchReplayCost fire on a healthy cluster after the repair). Each
// Replaying stretch counts, however often the replay is Blocked.
func TestReplayDurationLeavesOutBlockedTime(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
		sum   float64
	}{
		{"initial sync refused for two hours, then repaired", []step{
			changed("a", pods, wgwatch.PhaseStarting),
			changed("a", pods, wgwatch.PhaseReplaying),
			advance(30 * time.Second), // the human grace: 403s, not yet Blocked
			changed("a", pods, wgwatch.PhaseBlocked),
			advance(2 * time.Hour),
			changed("a", pods, wgwatch.PhaseStreaming),
		}, 30},
		{"Blocked twice an hour apart inside one replay", []step{
			changed("a", pods, wgwatch.PhaseReplaying),
			advance(2 * time.Second),
			changed("a", pods, wgwatch.PhaseBlocked),
			advance(time.Hour),
			changed("a", pods, wgwatch.PhaseReplaying),
			advance(3 * time.Second),
			changed("a", pods, wgwatch.PhaseBlocked),
			advance(time.Hour),
			changed("a", pods, wgwatch.PhaseReplaying),
			advance(4 * time.Second),
			changed("a", pods, wgwatch.PhaseStreaming),
		}, 9},
		{"Blocked before the replay does not count", []step{
			changed("a", pods, wgwatch.PhaseBlocked),
			advance(time.Hour),
			changed("a", pods, wgwatch.PhaseReplaying),
			advance(5 * time.Second),
			changed("a", pods, wgwatch.PhaseStreaming),
		}, 5},
		{"a restart in the middle starts the replay over", []step{
			changed("a", pods, wgwatch.PhaseReplaying),
			advance(time.Minute),
			changed("a", pods, wgwatch.PhaseBlocked),
			ended("a", pods, wgwatch.OutcomeTeardown, wgwatch.ClassNone, wgwatch.StageReplay, time.Second),
			advance(time.Hour),
			changed("a", pods, wgwatch.PhaseStarting),
			changed("a", pods, wgwatch.PhaseReplaying),
			advance(6 * time.Second),
			changed("a", pods, wgwatch.PhaseStreaming),
		}, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, clk := newWatchMetrics(t)
			for _, s := range tt.steps {
				s(m, clk)
			}
			count, sum := replayCountSum(t, m)
			if count != 1 || sum != tt.sum {
				t.Errorf("replay_duration_seconds{resource=\"pods\"}: count %d, sum %v; want count 1, sum %v", count, sum, tt.sum)
			}
		})
	}
}

// replayCountSum returns the count and sum of pods' replay histogram.
func replayCountSum(t *testing.T, m *wgmetrics.WatchMetrics) (uint64, float64) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "watchgrade_watch_replay_duration_seconds" {
			continue
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "resource" && l.GetValue() == "pods" {
					return mt.GetHistogram().GetSampleCount(), mt.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	t.Fatal("no replay_duration_seconds series for pods")
	return 0, 0
}

func TestWatchMetricsSessionDuration(t *testing.T) {
	m, clk := newWatchMetrics(t)
	for _, s := range []step{
		// A hot flap: three closes within a second.
		ended("a", pods, wgwatch.OutcomeClosed, wgwatch.ClassNone, wgwatch.StageStream, 50*time.Millisecond),
		ended("a", pods, wgwatch.OutcomeClosed, wgwatch.ClassNone, wgwatch.StageStream, 200*time.Millisecond),
		ended("a", pods, wgwatch.OutcomeClosed, wgwatch.ClassNone, wgwatch.StageStream, 900*time.Millisecond),
		// An informer's own timeout and the apiserver's.
		ended("a", pods, wgwatch.OutcomeClosed, wgwatch.ClassNone, wgwatch.StageStream, 7*time.Minute),
		ended("a", pods, wgwatch.OutcomeClosed, wgwatch.ClassNone, wgwatch.StageStream, 45*time.Minute),
		// A session that outlived every bucket.
		ended("a", pods, wgwatch.OutcomeTeardown, wgwatch.ClassNone, wgwatch.StageStream, 5*time.Hour),
	} {
		s(m, clk)
	}
	want := `# HELP watchgrade_watch_session_duration_seconds How long watch sessions lasted, from the List or Watch call to their end, by resource and outcome.
# TYPE watchgrade_watch_session_duration_seconds histogram
` + histogram("watchgrade_watch_session_duration_seconds", `outcome="closed",resource="pods"`,
		[]string{"0.1", "0.5", "1", "5", "30", "60", "300", "600", "1800", "3600", "7200", "14400"},
		[]int{1, 2, 3, 3, 3, 3, 3, 4, 4, 5, 5, 5}, 5, "3121.15") +
		histogram("watchgrade_watch_session_duration_seconds", `outcome="error",resource="pods"`,
			[]string{"0.1", "0.5", "1", "5", "30", "60", "300", "600", "1800", "3600", "7200", "14400"},
			make([]int, 12), 0, "0") +
		histogram("watchgrade_watch_session_duration_seconds", `outcome="expired",resource="pods"`,
			[]string{"0.1", "0.5", "1", "5", "30", "60", "300", "600", "1800", "3600", "7200", "14400"},
			make([]int, 12), 0, "0") +
		histogram("watchgrade_watch_session_duration_seconds", `outcome="teardown",resource="pods"`,
			[]string{"0.1", "0.5", "1", "5", "30", "60", "300", "600", "1800", "3600", "7200", "14400"},
			make([]int, 12), 1, "18000")
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "watchgrade_watch_session_duration_seconds"); err != nil {
		t.Errorf("CollectAndCompare (-got +want):\n%v", err)
	}
}

// histogram writes one histogram series in the text format: its buckets
// with their cumulative counts as given, +Inf, sum and count.
func histogram(name, labels string, les []string, cumulative []int, count int, sum string) string {
	var b strings.Builder
	for i, le := range les {
		fmt.Fprintf(&b, "%s_bucket{%s,le=%q} %d\n", name, labels, le, cumulative[i])
	}
	fmt.Fprintf(&b, "%s_bucket{%s,le=\"+Inf\"} %d\n", name, labels, count)
	fmt.Fprintf(&b, "%s_sum{%s} %s\n", name, labels, sum)
	fmt.Fprintf(&b, "%s_count{%s} %d\n", name, labels, count)
	return b.String()
}

func TestWatchMetricsResources(t *testing.T) {
	tests := []struct {
		name string
		do   func(m *wgmetrics.WatchMetrics)
		want int
	}{{
		name: "nothing reported, no series",
		do:   func(*wgmetrics.WatchMetrics) {},
		want: 0,
	}, {
		// 4 outcomes × 2 + 4 phases + 1 replay + 3 classes.
		name: "AddResource creates every series of one resource",
		do:   func(m *wgmetrics.WatchMetrics) { m.AddResource(pods); m.AddResource(pods) },
		want: 16,
	}, {
		name: "DeleteResource removes one resource and leaves the others",
		do: func(m *wgmetrics.WatchMetrics) {
			m.AddResource(pods)
			m.StateChanged(wgwatch.State{Stream: "d", Resource: deployments, Phase: wgwatch.PhaseStreaming})
			m.DeleteResource(deployments)
		},
		want: 16,
	}, {
		name: "a report after DeleteResource creates the series again",
		do: func(m *wgmetrics.WatchMetrics) {
			m.AddResource(deployments)
			m.DeleteResource(deployments)
			m.SessionEnded(wgwatch.SessionEnd{Stream: "d", Resource: deployments, Verdict: wgwatch.Verdict{Outcome: wgwatch.OutcomeClosed}})
		},
		want: 16,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := newWatchMetrics(t)
			tt.do(m)
			if got := testutil.CollectAndCount(m); got != tt.want {
				t.Errorf("CollectAndCount() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestWatchMetricsDeleteResourceForgetsStreams(t *testing.T) {
	m, _ := newWatchMetrics(t)
	m.StateChanged(wgwatch.State{Stream: "d", Resource: deployments, Phase: wgwatch.PhaseStreaming})
	m.DeleteResource(deployments)
	// The stream is forgotten: its next state counts it from nothing,
	// rather than moving a count that no longer exists.
	m.StateChanged(wgwatch.State{Stream: "d", Resource: deployments, Phase: wgwatch.PhaseBlocked})
	want := streamsHeader + `watchgrade_watch_streams{phase="Blocked",resource="deployments.apps"} 1
watchgrade_watch_streams{phase="Replaying",resource="deployments.apps"} 0
watchgrade_watch_streams{phase="Starting",resource="deployments.apps"} 0
watchgrade_watch_streams{phase="Streaming",resource="deployments.apps"} 0
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "watchgrade_watch_streams"); err != nil {
		t.Errorf("CollectAndCompare (-got +want):\n%v", err)
	}
}

// Many streams and sessions of one resource leave the number of series
// where one stream leaves it.
func TestWatchMetricsSeriesDoNotGrowWithStreams(t *testing.T) {
	count := func(streams int) int {
		m, _ := newWatchMetrics(t)
		for i := range streams {
			name := fmt.Sprintf("stream-%d", i)
			m.StateChanged(wgwatch.State{Stream: name, Resource: pods, Phase: wgwatch.PhaseReplaying})
			m.StateChanged(wgwatch.State{Stream: name, Resource: pods, Phase: wgwatch.PhaseStreaming})
			for _, o := range wgwatch.Outcomes() {
				m.SessionEnded(wgwatch.SessionEnd{Stream: name, Resource: pods, Stage: wgwatch.StageOpen,
					Verdict: wgwatch.Verdict{Outcome: o, Class: wgwatch.ClassTransient}, Duration: time.Duration(i) * time.Second,
					Err: fmt.Errorf("error %d", i)})
			}
		}
		return testutil.CollectAndCount(m)
	}
	one, many := count(1), count(1000)
	if one != 16 || many != one {
		t.Errorf("series for 1 stream = %d, for 1000 streams = %d, want 16 for both", one, many)
	}
}

func TestWatchMetricsConcurrentUse(t *testing.T) {
	m, _ := newWatchMetrics(t)
	done := make(chan struct{})
	const streams = 50
	for i := range streams {
		go func() {
			defer func() { done <- struct{}{} }()
			name := fmt.Sprintf("s%d", i)
			for range 20 {
				m.StateChanged(wgwatch.State{Stream: name, Resource: pods, Phase: wgwatch.PhaseReplaying})
				m.StateChanged(wgwatch.State{Stream: name, Resource: pods, Phase: wgwatch.PhaseStreaming})
				m.SessionEnded(wgwatch.SessionEnd{Stream: name, Resource: pods, Verdict: wgwatch.Verdict{Outcome: wgwatch.OutcomeClosed}})
			}
		}()
	}
	for range streams {
		<-done
	}
	want := streamsHeader + `watchgrade_watch_streams{phase="Blocked",resource="pods"} 0
watchgrade_watch_streams{phase="Replaying",resource="pods"} 0
watchgrade_watch_streams{phase="Starting",resource="pods"} 0
watchgrade_watch_streams{phase="Streaming",resource="pods"} 50
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "watchgrade_watch_streams"); err != nil {
		t.Errorf("CollectAndCompare (-got +want):\n%v", err)
	}
}

// errorsAsAlreadyRegistered is errors.As for the registry's error type.
func errorsAsAlreadyRegistered(err error) (prometheus.AlreadyRegisteredError, bool) {
	var are prometheus.AlreadyRegisteredError
	ok := errors.As(err, &are)
	return are, ok
}
