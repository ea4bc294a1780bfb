package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"

	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// WatchOptions configures [NewWatchMetrics]. Its zero value works.
type WatchOptions struct {
	// Namespace prefixes every metric name, usually the controller's name.
	// Defaults to DefaultNamespace ("watchgrade").
	Namespace string
	// Clock times replays. Defaults to the real clock.
	Clock clock.PassiveClock
}

// Bucket upper bounds, in seconds. A session that closes at once lands in
// the first three (a hot flap, client-go's VeryShortWatch), the reflector's
// own 5–10 min timeouts in (300, 600], and the apiserver's 30–60 min
// timeouts in (1800, 3600].
func sessionBuckets() []float64 {
	return []float64{0.1, 0.5, 1, 5, 30, 60, 300, 600, 1800, 3600, 7200, 14400}
}

func replayBuckets() []float64 {
	return []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
}

// WatchMetrics publishes what watch streams and instrumented informers
// report: session endings by outcome, session lifetimes, streams by phase,
// replay durations and failed opens. It is a [wgwatch.Observer]: pass it as
// StreamOptions.Observer or InstrumentOptions.Observer, alone or through
// [wgwatch.Observers]. Create one with [NewWatchMetrics]; it is safe for
// concurrent use and owns no goroutine.
//
// A resource's series are created at zero when the resource is first
// reported, or earlier with [WatchMetrics.AddResource], and removed with
// [WatchMetrics.DeleteResource].
//
// The stream gauge follows each stream by its name (StreamOptions.Name or
// InstrumentOptions.Name): a stream's first StateChanged counts it in its
// phase, each StateChanged moves it, and a teardown ending counts it out
// until it reports again; [WatchMetrics.StreamStopped] counts it out and
// forgets it. Keep stream names stable: the observer remembers one small
// entry per name until StreamStopped or [WatchMetrics.DeleteResource].
//
// WatchMetrics is a [prometheus.Collector] for all of its metrics, which is
// how [NewWatchMetrics] registers them as one unit.
type WatchMetrics struct {
	clock clock.PassiveClock

	ended       *prometheus.CounterVec
	lifetime    *prometheus.HistogramVec
	streams     *prometheus.GaugeVec
	replay      *prometheus.HistogramVec
	openFailure *prometheus.CounterVec

	mu      sync.Mutex
	known   map[schema.GroupResource]string
	tracked map[string]*streamEntry
}

// streamEntry is what the observer remembers about one stream.
type streamEntry struct {
	resource string
	phase    wgwatch.Phase
	// counted is true while the stream counts in the gauge.
	counted bool
	// replaying is true from PhaseReplaying to the next PhaseStreaming.
	replaying bool
	// replayStart is when the stream last entered PhaseReplaying; zero
	// when it is not replaying or is Blocked inside a replay.
	replayStart time.Time
	// replayed is the time the current replay spent in PhaseReplaying
	// before replayStart: time Blocked is not replay cost.
	replayed time.Duration
}

// resetReplay abandons the replay in progress, unobserved.
func (e *streamEntry) resetReplay() {
	e.replaying, e.replayStart, e.replayed = false, time.Time{}, 0
}

var _ wgwatch.Observer = (*WatchMetrics)(nil)

// NewWatchMetrics creates the watch metrics and registers them with reg as
// one unit. It never panics. Registering a second set under the same
// Namespace with the same registry returns an error wrapping a
// [prometheus.AlreadyRegisteredError] whose ExistingCollector is the first
// *WatchMetrics: reuse it, or choose another Namespace. A nil reg returns an
// error wrapping [ErrNilRegisterer], an invalid Namespace one wrapping
// [ErrInvalidNamespace].
func NewWatchMetrics(reg prometheus.Registerer, opts WatchOptions) (*WatchMetrics, error) {
	ns := namespaceOr(opts.Namespace)
	m := &WatchMetrics{
		clock: opts.Clock,
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: "watch", Name: "sessions_ended_total",
			Help: "Watch sessions ended, by resource and outcome (closed, expired, error, teardown).",
		}, []string{LabelResource, LabelOutcome}),
		lifetime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: "watch", Name: "session_duration_seconds",
			Help:    "How long watch sessions lasted, from the List or Watch call to their end, by resource and outcome.",
			Buckets: sessionBuckets(),
		}, []string{LabelResource, LabelOutcome}),
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "watch", Name: "streams",
			Help: "Watch streams and instrumented informers running, by resource and phase (Starting, Replaying, Streaming, Blocked).",
		}, []string{LabelResource, LabelPhase}),
		replay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: "watch", Name: "replay_duration_seconds",
			Help:    "Time streams spent replaying, from entering Replaying to the next Streaming less any time Blocked in between, by resource.",
			Buckets: replayBuckets(),
		}, []string{LabelResource}),
		openFailure: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: "watch", Name: "open_failures_total",
			Help: "Watch sessions that failed before delivering live events (List, Watch call or replay), by resource and error class.",
		}, []string{LabelResource, LabelClass}),
		known:   make(map[schema.GroupResource]string),
		tracked: make(map[string]*streamEntry),
	}
	if m.clock == nil {
		m.clock = clock.RealClock{}
	}
	if err := register(reg, ns, m, "watch metrics"); err != nil {
		return nil, err
	}
	return m, nil
}

// Describe implements [prometheus.Collector].
func (m *WatchMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.ended.Describe(ch)
	m.lifetime.Describe(ch)
	m.streams.Describe(ch)
	m.replay.Describe(ch)
	m.openFailure.Describe(ch)
}

// Collect implements [prometheus.Collector].
func (m *WatchMetrics) Collect(ch chan<- prometheus.Metric) {
	m.ended.Collect(ch)
	m.lifetime.Collect(ch)
	m.streams.Collect(ch)
	m.replay.Collect(ch)
	m.openFailure.Collect(ch)
}

// AddResource creates every series of gr at zero, so that a resource whose
// streams have not reported yet already shows in queries and alerts.
// Calling it again is harmless.
func (m *WatchMetrics) AddResource(gr schema.GroupResource) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.addLocked(gr)
}

// DeleteResource removes every series of gr and forgets its streams: call
// it when a dynamic watch is retired, after its stream has stopped (a
// report that arrives later creates the series again).
func (m *WatchMetrics) DeleteResource(gr schema.GroupResource) {
	res := resourceLabel(gr)
	m.mu.Lock()
	defer m.mu.Unlock()
	match := prometheus.Labels{LabelResource: res}
	m.ended.DeletePartialMatch(match)
	m.lifetime.DeletePartialMatch(match)
	m.streams.DeletePartialMatch(match)
	m.replay.DeletePartialMatch(match)
	m.openFailure.DeletePartialMatch(match)
	for name, e := range m.tracked {
		if e.resource == res {
			delete(m.tracked, name)
		}
	}
	delete(m.known, gr)
}

// openFailureClasses are the classes a failed open can have: ClassNone
// never goes with an error or expired outcome.
func openFailureClasses() []wgwatch.Class {
	var out []wgwatch.Class
	for _, c := range wgwatch.Classes() {
		if c != wgwatch.ClassNone {
			out = append(out, c)
		}
	}
	return out
}

// addLocked creates the series of gr if they do not exist yet, and
// returns gr's label value without allocating once gr is known.
func (m *WatchMetrics) addLocked(gr schema.GroupResource) string {
	if res, ok := m.known[gr]; ok {
		return res
	}
	res := resourceLabel(gr)
	m.known[gr] = res
	for _, o := range wgwatch.Outcomes() {
		m.ended.WithLabelValues(res, string(o))
		m.lifetime.WithLabelValues(res, string(o))
	}
	for _, p := range wgwatch.Phases() {
		m.streams.WithLabelValues(res, string(p))
	}
	m.replay.WithLabelValues(res)
	for _, c := range openFailureClasses() {
		m.openFailure.WithLabelValues(res, string(c))
	}
	return res
}

// StateChanged implements [wgwatch.Observer]: it moves the stream in the
// streams gauge and times replays. A phase outside [wgwatch.Phases] is
// ignored, which keeps the label set closed.
func (m *WatchMetrics) StateChanged(s wgwatch.State) {
	if !knownPhase(s.Phase) {
		return
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	res := m.addLocked(s.Resource)
	e := m.tracked[s.Stream]
	if e == nil {
		e = &streamEntry{}
		m.tracked[s.Stream] = e
	}
	if e.counted {
		m.streams.WithLabelValues(e.resource, string(e.phase)).Dec()
	}
	if e.resource != res {
		e.resetReplay()
	}
	e.resource, e.phase, e.counted = res, s.Phase, true
	m.streams.WithLabelValues(res, string(s.Phase)).Inc()

	switch s.Phase {
	case wgwatch.PhaseStarting:
		e.resetReplay()
	case wgwatch.PhaseReplaying:
		// A replay that goes through Blocked (a replay that timed out, a
		// failing LIST) is still the same replay: the consumer's view stays
		// incomplete until the stream streams.
		e.replaying = true
		if e.replayStart.IsZero() {
			e.replayStart = now
		}
	case wgwatch.PhaseBlocked:
		// But the time it spends Blocked is not replay cost: a stream whose
		// initial sync RBAC refused for two hours did not replay for two
		// hours (WatchStreamBlocked reports that time).
		if !e.replayStart.IsZero() {
			e.replayed += now.Sub(e.replayStart)
			e.replayStart = time.Time{}
		}
	case wgwatch.PhaseStreaming:
		if e.replaying {
			if !e.replayStart.IsZero() {
				e.replayed += now.Sub(e.replayStart)
			}
			m.replay.WithLabelValues(res).Observe(max(e.replayed, 0).Seconds())
		}
		e.resetReplay()
	}
}

// SessionEnded implements [wgwatch.Observer]: it counts the ending, observes
// its lifetime, counts a failed open, and counts a torn-down stream out of
// the streams gauge. An outcome outside [wgwatch.Outcomes] is ignored.
func (m *WatchMetrics) SessionEnded(end wgwatch.SessionEnd) {
	outcome := end.Verdict.Outcome
	if !knownOutcome(outcome) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	res := m.addLocked(end.Resource)
	m.ended.WithLabelValues(res, string(outcome)).Inc()
	m.lifetime.WithLabelValues(res, string(outcome)).Observe(max(end.Duration, 0).Seconds())
	if failedOpen(end) {
		m.openFailure.WithLabelValues(res, string(end.Verdict.Class)).Inc()
	}

	e := m.tracked[end.Stream]
	if e == nil {
		return // not counted until its first StateChanged
	}
	switch {
	case outcome == wgwatch.OutcomeTeardown && e.counted:
		m.streams.WithLabelValues(e.resource, string(e.phase)).Dec()
		e.counted = false
		e.resetReplay()
	case outcome != wgwatch.OutcomeTeardown && !e.counted && e.resource == res:
		// An informer whose watch was stopped goes on: count it again in
		// the phase it last reported.
		m.streams.WithLabelValues(e.resource, string(e.phase)).Inc()
		e.counted = true
	}
}

// StreamStopped counts the stream with this name out of the streams gauge
// and forgets it, abandoning a replay in progress. Call it after
// Stream.Run returns or an informer stops: a stream whose context ends
// while it waits between sessions reports no teardown. Calling it for an
// unknown or already stopped stream does nothing.
func (m *WatchMetrics) StreamStopped(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.tracked[name]
	if e == nil {
		return
	}
	if e.counted {
		m.streams.WithLabelValues(e.resource, string(e.phase)).Dec()
	}
	delete(m.tracked, name)
}

// failedOpen reports whether end is a session that failed before it
// delivered live events.
func failedOpen(end wgwatch.SessionEnd) bool {
	switch end.Verdict.Outcome {
	case wgwatch.OutcomeError, wgwatch.OutcomeExpired:
	default:
		return false
	}
	switch end.Stage {
	case wgwatch.StageOpen, wgwatch.StageList, wgwatch.StageReplay:
	default:
		return false
	}
	for _, c := range openFailureClasses() {
		if end.Verdict.Class == c {
			return true
		}
	}
	return false
}

func knownPhase(p wgwatch.Phase) bool {
	for _, q := range wgwatch.Phases() {
		if p == q {
			return true
		}
	}
	return false
}

func knownOutcome(o wgwatch.Outcome) bool {
	for _, q := range wgwatch.Outcomes() {
		if o == q {
			return true
		}
	}
	return false
}
