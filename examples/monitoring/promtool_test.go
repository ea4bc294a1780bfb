package monitoring_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/prometheus/model/labels"
	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite the generated files (prometheus/rules_test.yaml and the derived Argo CD fixtures) instead of comparing them")

// The promtool unit tests, prometheus/rules_test.yaml, are generated from
// the scrapes in testdata/e2e, which the examples e2e captured from both
// controllers against a real kube-apiserver (make monitoring-capture).
// Every input series is one the library (or monitoring.ConditionCollector)
// really exposed, with the labels Prometheus 3 stores for it, and starts
// from the value it had. A scenario then either lays real scrapes end to
// end (the e2e story: Ready, routine closes, Stalled, recovered) or, where
// a rule needs an hour of traffic that a two-minute run cannot show,
// grows chosen series by a stated amount per minute, always through the
// same series: a session ending adds to sessions_ended_total and to every
// lifetime bucket at or above its duration, as the library does. The
// expected values are what the prose of each query says, computed from
// those amounts. make monitoring runs promtool on the result.
const rulesTestFile = "prometheus/rules_test.yaml"

// A scenario is one promtool test group.
type scenario struct {
	name string
	// phases are scrapes, each held for a number of minutes, one sample a
	// minute; counters step at a phase boundary.
	phases []phase
	// grow, with a single phase, adds to matching series every minute.
	grow   []growth
	alerts []alertCase
	exprs  []exprCase
	// target, when set, stores every series as a scrape of a Kubernetes
	// target does, and adds its up series.
	target *scrapeTarget
	// prom2 stores le as Prometheus 2 does: as exposed ("1"), not as a
	// float ("1.0").
	prom2 bool
}

// A scrapeTarget is the labels a ServiceMonitor (or a PodMonitor, or a
// kubernetes_sd job) attaches to every series it scrapes, and the
// scrape's honor_labels.
type scrapeTarget struct {
	labels map[string]string
	honor  bool
}

// controllerTarget is the controller's pod as a ServiceMonitor in its
// namespace, watchtarget-system, scrapes it.
func controllerTarget(honor bool) *scrapeTarget {
	return &scrapeTarget{honor: honor, labels: map[string]string{
		"namespace": "watchtarget-system", "service": "watchtarget-controller-metrics",
		"pod": "watchtarget-controller-7d9f8-x2x4q", "container": "controller", "endpoint": "metrics",
		"job": "watchtarget-controller-metrics", "instance": "10.0.3.17:8080",
	}}
}

// relabel returns l as the scrape stores it: each target label is added;
// where the series has a label of that name, honor_labels keeps the
// series' value, and otherwise the series' value moves to exported_<name>
// (Prometheus's scrape loop, mutateSampleLabels).
func (tg *scrapeTarget) relabel(l labels.Labels) labels.Labels {
	if tg == nil {
		return l
	}
	b := labels.NewBuilder(l)
	for k, v := range tg.labels {
		switch {
		case !l.Has(k):
			b.Set(k, v)
		case tg.honor:
		default:
			b.Set("exported_"+k, l.Get(k))
			b.Set(k, v)
		}
	}
	return b.Labels()
}

// up is the target's up series.
func (tg *scrapeTarget) up() labels.Labels {
	m := map[string]string{labels.MetricName: "up"}
	for k, v := range tg.labels {
		m[k] = v
	}
	return labels.FromMap(m)
}

// A phase is a scrape held for a number of minutes, or a stretch the
// target was down (every scrape failed: its series go stale, up is 0) or
// gone (no target at all: up goes stale too).
type phase struct {
	file    string
	minutes int
	down    bool
	gone    bool
	// noObjects leaves out the per-object series (every object deleted).
	noObjects bool
	// also adds the per-object series of this scrape file, as another
	// object in namespace alsoNamespace (an object of the same name).
	also          string
	alsoNamespace string
}

// A growth adds perMinute observations of value to a metric's series
// that carry the labels in match: to a counter itself, to a histogram's
// buckets at or above value, its _count, and value to its _sum.
type growth struct {
	metric    string
	histogram bool
	match     map[string]string
	value     float64
	perMinute float64
}

type alertCase struct {
	at     int // minutes
	name   string
	firing []map[string]string // labels of each firing alert, severity included
}

type exprCase struct {
	at      int
	expr    string
	samples []expSample
	// why is a comment written above the case.
	why string
	// before marks a query as it was before this kit, kept to show what
	// it did; it does not count as testing a doc query.
	before bool
}

type expSample struct {
	labels string
	value  float64
}

// sessions is n session endings a minute of one resource and outcome,
// each lasting seconds.
func sessions(resource, outcome string, seconds, n float64) []growth {
	m := map[string]string{"resource": resource, "outcome": outcome}
	return []growth{
		{metric: "watchgrade_watch_sessions_ended_total", match: m, perMinute: n},
		{metric: "watchgrade_watch_session_duration_seconds", histogram: true, match: m, value: seconds, perMinute: n},
	}
}

// failedOpens is n opens a minute that fail with class after seconds: an
// error ending and an open failure each.
func failedOpens(resource, class string, seconds, n float64) []growth {
	return append(sessions(resource, "error", seconds, n),
		growth{metric: "watchgrade_watch_open_failures_total", match: map[string]string{"resource": resource, "class": class}, perMinute: n})
}

func replays(resource string, seconds, n float64) growth {
	return growth{metric: "watchgrade_watch_replay_duration_seconds", histogram: true, match: map[string]string{"resource": resource}, value: seconds, perMinute: n}
}

func firstReadies(resource string, seconds, n float64) growth {
	return growth{metric: "watchgrade_time_to_first_ready_seconds", histogram: true, match: map[string]string{"resource": resource}, value: seconds, perMinute: n}
}

func firstOutcomes(resource, outcome string, n float64) growth {
	return growth{metric: "watchgrade_first_outcomes_total", match: map[string]string{"resource": resource, "outcome": outcome}, perMinute: n}
}

func rejections(resource, reason string, n float64) growth {
	return growth{metric: "watchgrade_time_to_first_ready_rejected_total", match: map[string]string{"resource": resource, "reason": reason}, perMinute: n}
}

func concat(gs ...[]growth) []growth {
	var out []growth
	for _, g := range gs {
		out = append(out, g...)
	}
	return out
}

const (
	configmaps   = "configmaps"
	secrets      = "secrets"
	watchtargets = "watchtargets.examples.watchgrade.dev"
)

// The queries of the metrics package doc and examples/README.md, word for
// word; TestDocQueriesAreTested holds them to it.
const (
	qEndings    = `sum by (resource, outcome) (rate(watchgrade_watch_sessions_ended_total[10m]))`
	qHotFlap    = "sum by (resource) (rate(watchgrade_watch_session_duration_seconds_bucket{outcome=\"closed\",le=~\"1(\\\\.0)?\"}[15m])) * 3600\n  / clamp_min(sum by (resource) (watchgrade_watch_streams), 1)"
	qShortShare = "sum by (resource) (rate(watchgrade_watch_session_duration_seconds_bucket{outcome=\"closed\",le=~\"1(\\\\.0)?\"}[15m]))\n  / sum by (resource) (rate(watchgrade_watch_session_duration_seconds_count{outcome=\"closed\"}[15m]))"
	// Before: le="1.0", which matches nothing on Prometheus 2.
	qOldHotFlap3 = "sum by (resource) (rate(watchgrade_watch_session_duration_seconds_bucket{outcome=\"closed\",le=\"1.0\"}[15m])) * 3600\n  / clamp_min(sum by (resource) (watchgrade_watch_streams), 1)"
	qReplayTime  = `sum by (resource) (rate(watchgrade_watch_replay_duration_seconds_sum[1h]))`
	qReplays     = `sum by (resource) (increase(watchgrade_watch_replay_duration_seconds_count[1h]))`
	qReplayP90   = `histogram_quantile(0.9, sum by (resource, le) (rate(watchgrade_watch_replay_duration_seconds_bucket[1h])))`
	qNeedsHuman  = `sum by (resource) (rate(watchgrade_watch_open_failures_total{class="needs_human"}[10m])) > 0`
	qFirstReady  = `histogram_quantile(0.9, sum by (resource, le) (rate(watchgrade_time_to_first_ready_seconds_bucket[1h])))`
	qRejected    = `sum by (resource, reason) (increase(watchgrade_time_to_first_ready_rejected_total{reason!="not_witnessed"}[1h])) > 0`
	qStalledObjs = `count(object:watchtarget_status_condition:held{type="Stalled",status="True"} == 1)`
	// Before: rejections by every reason, not_witnessed (routine) included.
	qOldRejected = `sum by (resource, reason) (increase(watchgrade_time_to_first_ready_rejected_total[1h])) > 0`
	// Before this kit: le="1", and a hot flap of closed and error endings.
	qOldShortShare = "sum by (resource) (rate(watchgrade_watch_session_duration_seconds_bucket{outcome=\"closed\",le=\"1\"}[15m]))\n  / sum by (resource) (rate(watchgrade_watch_session_duration_seconds_count{outcome=\"closed\"}[15m]))"
	qOldHotFlap    = "sum by (resource) (rate(watchgrade_watch_sessions_ended_total{outcome=~\"closed|error\"}[15m])) * 3600\n  / clamp_min(sum by (resource) (watchgrade_watch_streams), 1) > 60"
)

func res(r string) string            { return fmt.Sprintf("{resource=%q}", r) }
func resOutcome(r, o string) string  { return fmt.Sprintf("{outcome=%q, resource=%q}", o, r) }
func resReason(r, why string) string { return fmt.Sprintf("{reason=%q, resource=%q}", why, r) }

var appLabels = map[string]string{"namespace": "shop", "name": "app"}

func with(m map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// scenarios are the test groups. Minute numbers are eval_time offsets.
func scenarios(t *testing.T) []scenario {
	var out []scenario
	// The e2e story, scrape by scrape, for each controller: Ready from 0
	// to 20, Stalled (RBAC denies secrets) from 20 to 60, then recovered.
	for _, ctl := range []string{"clientgo", "ctrlruntime"} {
		dir := "testdata/e2e/" + ctl + "/"
		out = append(out, scenario{
			name:   "the e2e story of the " + ctl + " controller: Ready, routine closes, Stalled, recovered",
			phases: []phase{{file: dir + "metrics-ready.txt", minutes: 10}, {file: dir + "metrics-routine.txt", minutes: 10}, {file: dir + "metrics-stalled.txt", minutes: 40}, {file: dir + "metrics-recovered.txt", minutes: 20}},
			alerts: []alertCase{
				{at: 15, name: "WatchTargetStalled"},
				{at: 24, name: "WatchTargetStalled"},
				{at: 25, name: "WatchTargetStalled", firing: []map[string]string{with(appLabels, "severity", "page")}},
				// No bridge: the page resolves with the recovery.
				{at: 59, name: "WatchTargetStalled", firing: []map[string]string{with(appLabels, "severity", "page")}},
				{at: 61, name: "WatchTargetStalled"},
				{at: 15, name: "WatchTargetNotReady"},
				{at: 49, name: "WatchTargetNotReady"},
				{at: 50, name: "WatchTargetNotReady", firing: []map[string]string{with(appLabels, "severity", "ticket")}},
				{at: 61, name: "WatchTargetNotReady"},
				{at: 29, name: "WatchStreamBlocked"},
				{at: 30, name: "WatchStreamBlocked", firing: []map[string]string{{"resource": secrets, "severity": "ticket"}}},
				{at: 61, name: "WatchStreamBlocked"},
			},
			exprs: []exprCase{
				{at: 15, expr: qStalledObjs, why: "no object is Stalled while Ready"},
				{at: 25, expr: qStalledObjs, samples: []expSample{{"{}", 1}}, why: "the one Stalled object"},
			},
		})
	}
	// Hot flap: configmaps' watches close cleanly within a second twice a
	// minute, besides two ordinary 2 s closes; secrets and watchtargets
	// close once a minute after 30 s.
	routine := "testdata/e2e/clientgo/metrics-routine.txt"
	flap := concat(sessions(configmaps, "closed", 0.05, 2), sessions(configmaps, "closed", 2, 2),
		sessions(secrets, "closed", 30, 1), sessions(watchtargets, "closed", 30, 1))
	out = append(out, scenario{
		name:   "hot flap: short clean closes",
		phases: []phase{{file: routine, minutes: 40}},
		grow:   flap,
		alerts: []alertCase{
			{at: 5, name: "WatchHotFlap"},
			{at: 30, name: "WatchHotFlap", firing: []map[string]string{{"resource": configmaps, "severity": "ticket"}}},
		},
		exprs: []exprCase{
			{at: 30, expr: qEndings, why: "endings per second by outcome: 4 a minute for configmaps, 1 for the others", samples: endingRates(t, routine, flap)},
			{at: 30, expr: qHotFlap, why: "short clean closes per stream per hour: 2 a minute is 120", samples: []expSample{{res(configmaps), 120}, {res(secrets), 0}, {res(watchtargets), 0}}},
			{at: 30, expr: qShortShare, why: "half of configmaps' closes came within a second", samples: []expSample{{res(configmaps), 0.5}, {res(secrets), 0}, {res(watchtargets), 0}}},
			{at: 30, expr: qOldShortShare, why: "before: le=\"1\" matches nothing on Prometheus 3, which stores le=\"1.0\"", before: true},
		},
	})
	// Backing off: the secrets stream retries a needs-human error (RBAC)
	// twice a minute (82-149 an hour were measured with the library's
	// backoff); no session opens. The hot flap must stay quiet: the
	// stream is Blocked, and WatchStreamBlocked says so.
	stalled := "testdata/e2e/clientgo/metrics-stalled.txt"
	out = append(out, scenario{
		name:   "backing off from a needs-human error is no hot flap",
		phases: []phase{{file: stalled, minutes: 40}},
		grow:   failedOpens(secrets, "needs_human", 0.005, 2),
		alerts: []alertCase{
			{at: 30, name: "WatchHotFlap"},
			{at: 30, name: "WatchStreamBlocked", firing: []map[string]string{{"resource": secrets, "severity": "ticket"}}},
		},
		exprs: []exprCase{
			{at: 30, expr: qNeedsHuman, why: "opens failing for want of a human", samples: []expSample{{res(secrets), 2.0 / 60}}},
			{at: 30, expr: qHotFlap, why: "no short clean close anywhere", samples: []expSample{{res(configmaps), 0}, {res(secrets), 0}, {res(watchtargets), 0}}},
			{at: 30, expr: qOldHotFlap, why: "before: the hot flap counted failed opens, and fired here", before: true, samples: []expSample{{res(secrets), 120}}},
		},
	})
	// Replay cost and time to first Ready: a replay a minute of 12 s for
	// configmaps (a fifth of the time), 2 s for secrets, 0.07 s for
	// watchtargets; a WatchTarget a minute Ready after 3 s, one rejection
	// (reversed timestamps) a minute, and two routine not_witnessed ones.
	recovered := "testdata/e2e/clientgo/metrics-recovered.txt"
	out = append(out, scenario{
		name:   "replay cost and time to first Ready",
		phases: []phase{{file: recovered, minutes: 70}},
		grow: []growth{replays(configmaps, 12, 1), replays(secrets, 2, 1), replays(watchtargets, 0.07, 1),
			firstReadies(watchtargets, 3, 1), rejections(watchtargets, "reversed", 1), rejections(watchtargets, "not_witnessed", 2)},
		alerts: []alertCase{
			{at: 50, name: "WatchReplayCost"},
			{at: 65, name: "WatchReplayCost", firing: []map[string]string{{"resource": configmaps, "severity": "ticket"}}},
		},
		exprs: []exprCase{
			{at: 65, expr: qReplayTime, why: "seconds replaying per second: 12/60, 2/60, 0.07/60", samples: []expSample{
				{res(configmaps), promRate(t, recovered, replaySum(configmaps), 12, 65, 60)},
				{res(secrets), promRate(t, recovered, replaySum(secrets), 2, 65, 60)},
				{res(watchtargets), promRate(t, recovered, replaySum(watchtargets), 0.07, 65, 60)}}},
			{at: 65, expr: qReplays, why: "replays in the last hour", samples: []expSample{{res(configmaps), 60}, {res(secrets), 60}, {res(watchtargets), 60}}},
			{at: 65, expr: qReplayP90, why: "90th percentile, interpolated in the bucket the replays fell in: (10, 30], (1, 2.5], (0.05, 0.1]",
				samples: []expSample{{res(configmaps), 10 + 0.9*20}, {res(secrets), 1 + 0.9*1.5}, {res(watchtargets), 0.05 + 0.9*0.05}}},
			{at: 65, expr: qFirstReady, why: "90th percentile of time to first Ready, in (2, 5]", samples: []expSample{{res(watchtargets), 2 + 0.9*3}}},
			{at: 65, expr: qRejected, why: "rejections to watch for in the last hour: not_witnessed is routine and left out", samples: []expSample{{resReason(watchtargets, "reversed"), 60}}},
			{at: 65, expr: qOldRejected, why: "before: the routine not_witnessed counted as a rejection to watch for", before: true,
				samples: []expSample{{resReason(watchtargets, "not_witnessed"), 120}, {resReason(watchtargets, "reversed"), 60}}},
		},
	})
	// First outcomes: three WatchTargets a minute Ready first, one Stalled
	// first (a human had to act before it was ever ready).
	out = append(out, scenario{
		name:   "first outcomes: the share provisioned without a human",
		phases: []phase{{file: recovered, minutes: 70}},
		grow:   []growth{firstOutcomes(watchtargets, "ready", 3), firstOutcomes(watchtargets, "stalled", 1)},
		exprs: []exprCase{
			{at: 65, expr: "resource:watchgrade_first_outcomes_ready:ratio1d", why: "three of every four objects were Ready first (195 and 65 in 65 minutes); " +
				"increase extrapolates the ready counter, which starts at 1, 20 s back to its zero (196), and the stalled one, which starts at 0, not at all",
				samples: []expSample{{"resource:watchgrade_first_outcomes_ready:ratio1d" + res(watchtargets), 196.0 / 261}}},
		},
	})
	// The hot flap again, as Prometheus 2 stores it: le="1" as exposed.
	out = append(out, scenario{
		name:   "hot flap, stored by Prometheus 2 (le as exposed)",
		phases: []phase{{file: routine, minutes: 40}},
		grow:   flap,
		prom2:  true,
		alerts: []alertCase{
			{at: 5, name: "WatchHotFlap"},
			{at: 30, name: "WatchHotFlap", firing: []map[string]string{{"resource": configmaps, "severity": "ticket"}}},
		},
		exprs: []exprCase{
			{at: 30, expr: qHotFlap, why: "le=~\"1(\\\\.0)?\" matches Prometheus 2's le=\"1\" too", samples: []expSample{{res(configmaps), 120}, {res(secrets), 0}, {res(watchtargets), 0}}},
			{at: 30, expr: qOldHotFlap3, why: "before: le=\"1.0\" matches nothing on Prometheus 2", before: true},
		},
	})
	// Two objects named app, shop/app Ready and prod/app Stalled, served
	// by a controller in watchtarget-system that a ServiceMonitor
	// scrapes, under both honor_labels settings: the alerts name prod/app.
	ready := "testdata/e2e/clientgo/metrics-ready.txt"
	for _, honor := range []bool{false, true} {
		tg := controllerTarget(honor)
		prod := map[string]string{"namespace": "prod", "name": "app"}
		out = append(out, scenario{
			name:   fmt.Sprintf("two objects named app in shop and prod, scraped with honor_labels: %v", honor),
			phases: []phase{{file: ready, minutes: 40, also: stalled, alsoNamespace: "prod"}},
			target: tg,
			alerts: []alertCase{
				{at: 4, name: "WatchTargetStalled"},
				{at: 6, name: "WatchTargetStalled", firing: []map[string]string{with(prod, "severity", "page")}},
				{at: 29, name: "WatchTargetNotReady"},
				{at: 31, name: "WatchTargetNotReady", firing: []map[string]string{with(prod, "severity", "ticket")}},
				{at: 31, name: "WatchControllerDown"},
				{at: 31, name: "WatchControllerAbsent"},
			},
			exprs: []exprCase{
				{at: 31, expr: qStalledObjs, why: "one Stalled object, in its own namespace", samples: []expSample{{"{}", 1}}},
			},
		})
	}
	// A crash loop: the controller serves 4 minutes and is down 2, for an
	// hour, while shop/app is Stalled. Every gap marks the object series
	// stale; the records hold them, so the object alerts keep firing, and
	// WatchControllerDown pages for the loop itself.
	var loop []phase
	for range 10 {
		loop = append(loop, phase{file: stalled, minutes: 4}, phase{down: true, minutes: 2})
	}
	tg := controllerTarget(false)
	down := with(tg.labels, "severity", "page")
	out = append(out, scenario{
		name:   "a crash loop (up 4 minutes, down 2) with a Stalled object",
		phases: loop,
		target: tg,
		alerts: []alertCase{
			{at: 5, name: "WatchTargetStalled", firing: []map[string]string{with(appLabels, "severity", "page")}},
			{at: 29, name: "WatchTargetStalled", firing: []map[string]string{with(appLabels, "severity", "page")}},
			{at: 59, name: "WatchTargetStalled", firing: []map[string]string{with(appLabels, "severity", "page")}},
			{at: 29, name: "WatchTargetNotReady"},
			{at: 31, name: "WatchTargetNotReady", firing: []map[string]string{with(appLabels, "severity", "ticket")}},
			{at: 59, name: "WatchTargetNotReady", firing: []map[string]string{with(appLabels, "severity", "ticket")}},
			{at: 18, name: "WatchControllerDown"},
			{at: 20, name: "WatchControllerDown", firing: []map[string]string{down}},
			{at: 59, name: "WatchControllerAbsent"},
			// The streams gauge restarts with the process: every gap
			// starts WatchStreamBlocked's for: over.
			{at: 30, name: "WatchStreamBlocked"},
		},
	})
	// An object deleted while Stalled, its controller up: nothing holds
	// it (only a target that is down has its last report held), and the
	// page resolves at once.
	out = append(out, scenario{
		name:   "an object deleted while Stalled, the controller up",
		phases: []phase{{file: stalled, minutes: 10}, {file: stalled, minutes: 20, noObjects: true}},
		target: controllerTarget(false),
		alerts: []alertCase{
			{at: 9, name: "WatchTargetStalled", firing: []map[string]string{with(appLabels, "severity", "page")}},
			{at: 11, name: "WatchTargetStalled"},
			{at: 29, name: "WatchTargetNotReady"},
		},
	})
	// The controller is gone (scaled to zero): nothing serves the
	// watchgrade metrics. Its objects' last reports are held for 10
	// minutes (shop/app was Ready: nothing fires for it).
	out = append(out, scenario{
		name:   "the controller is gone",
		phases: []phase{{file: ready, minutes: 10}, {gone: true, minutes: 30}},
		target: controllerTarget(false),
		alerts: []alertCase{
			{at: 19, name: "WatchControllerAbsent"},
			{at: 21, name: "WatchControllerAbsent", firing: []map[string]string{{"severity": "page"}}},
			{at: 39, name: "WatchControllerDown"},
			{at: 39, name: "WatchTargetNotReady"},
		},
	})
	return out
}

func replaySum(resource string) string {
	return fmt.Sprintf("watchgrade_watch_replay_duration_seconds_sum{resource=%q}", resource)
}

// promRate is rate(series[rangeMin m]) at minute at for a series that
// starts at its value in the scrape file and grows by perMinute a minute:
// perMinute/60, computed the way promtool and Prometheus compute it, so
// that float rounding matches to the last bit (promtool compares that
// closely). A real run's _sum starts at a fraction, and (base + 130) -
// (base + 12) is not exactly 118. promtool expands a+bxN by adding b
// again and again; the samples in the range (at-rangeMin, at] are
// rangeMin, one a minute; Prometheus extrapolates a counter's increase by
// the minute to the range's start (unless the counter would cross zero
// first) and divides by the range.
func promRate(t *testing.T, file, series string, perMinute float64, at, rangeMin int) float64 {
	t.Helper()
	base, found := 0.0, false
	for _, x := range readScrape(t, file).series {
		if notation(x.labels) == series {
			base, found = x.value, true
		}
	}
	if !found {
		t.Fatalf("no series %s in %s", series, file)
	}
	v := make([]float64, at+1)
	k := base
	for i := range v {
		v[i] = k
		k += perMinute
	}
	first, last := v[at-rangeMin+1], v[at]
	increase := last - first
	sampled := float64(rangeMin-1) * 60
	toStart := 60.0
	if increase > 0 && first >= 0 {
		if toZero := sampled * (first / increase); toZero < toStart {
			toStart = toZero
		}
	}
	factor := (sampled + toStart) / sampled
	factor /= float64(rangeMin) * 60
	return increase * factor
}

// endingRates is the expected result of qEndings: every resource and
// outcome of the scrape, at the per-second rate the growth gives it.
func endingRates(t *testing.T, file string, gs []growth) []expSample {
	s := readScrape(t, file)
	var out []expSample
	for _, r := range s.values("watchgrade_watch_sessions_ended_total", "resource") {
		for _, o := range s.values("watchgrade_watch_sessions_ended_total", "outcome") {
			v := 0.0
			for _, g := range gs {
				if g.metric == "watchgrade_watch_sessions_ended_total" && g.match["resource"] == r && g.match["outcome"] == o {
					v += g.perMinute / 60
				}
			}
			out = append(out, expSample{resOutcome(r, o), v})
		}
	}
	return out
}

// The file's shape, as promtool reads it.
type unitTestFile struct {
	RuleFiles          []string    `yaml:"rule_files"`
	EvaluationInterval string      `yaml:"evaluation_interval"`
	FuzzyCompare       bool        `yaml:"fuzzy_compare"`
	Tests              []testGroup `yaml:"tests"`
}

type testGroup struct {
	Name        string        `yaml:"name"`
	Interval    string        `yaml:"interval"`
	InputSeries []inputSeries `yaml:"input_series"`
	Alerts      []alertTest   `yaml:"alert_rule_test,omitempty"`
	Exprs       []promqlTest  `yaml:"promql_expr_test,omitempty"`
}

type inputSeries struct {
	Series string `yaml:"series"`
	Values string `yaml:"values"`
}

type alertTest struct {
	EvalTime  string     `yaml:"eval_time"`
	Alertname string     `yaml:"alertname"`
	ExpAlerts []expAlert `yaml:"exp_alerts"`
}

type expAlert struct {
	ExpLabels      map[string]string `yaml:"exp_labels"`
	ExpAnnotations map[string]string `yaml:"exp_annotations,omitempty"`
}

type promqlTest struct {
	Expr       string     `yaml:"expr"`
	EvalTime   string     `yaml:"eval_time"`
	ExpSamples []expValue `yaml:"exp_samples"`
}

type expValue struct {
	Labels string  `yaml:"labels"`
	Value  float64 `yaml:"value"`
}

// generate builds rules_test.yaml.
func generate(t *testing.T) []byte {
	t.Helper()
	annotations := ruleAnnotations(t)
	file := unitTestFile{RuleFiles: []string{"rules.yaml"}, EvaluationInterval: "1m", FuzzyCompare: true}
	for _, sc := range scenarios(t) {
		g := testGroup{Name: sc.name, Interval: "1m", InputSeries: inputs(t, sc)}
		for _, a := range sc.alerts {
			at := alertTest{EvalTime: fmt.Sprintf("%dm", a.at), Alertname: a.name, ExpAlerts: []expAlert{}}
			for _, l := range a.firing {
				at.ExpAlerts = append(at.ExpAlerts, expAlert{ExpLabels: l, ExpAnnotations: expand(t, annotations[a.name], l)})
			}
			g.Alerts = append(g.Alerts, at)
		}
		for _, e := range sc.exprs {
			pt := promqlTest{Expr: e.expr, EvalTime: fmt.Sprintf("%dm", e.at), ExpSamples: []expValue{}}
			for _, s := range e.samples {
				pt.ExpSamples = append(pt.ExpSamples, expValue{Labels: s.labels, Value: s.value})
			}
			g.Exprs = append(g.Exprs, pt)
		}
		file.Tests = append(file.Tests, g)
	}
	// Each promql_expr_test case gets its why as a comment.
	var doc yaml.Node
	if err := doc.Encode(file); err != nil {
		t.Fatal(err)
	}
	tests := mapValue(mapValue(&doc, "tests"), "")
	for i, sc := range scenarios(t) {
		if exprs := mapValue(tests.Content[i], "promql_expr_test"); exprs != nil {
			for j, e := range sc.exprs {
				exprs.Content[j].HeadComment = e.why
			}
		}
	}
	var buf bytes.Buffer
	buf.WriteString("# Generated by `go test ./monitoring/ -run TestRuleTestsUpToDate -update` from\n" +
		"# testdata/e2e (scrapes of a real run) and the scenarios in promtool_test.go.\n" +
		"# Do not edit. Run with: promtool test rules rules_test.yaml (make monitoring).\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// mapValue returns the value of key in a mapping node, or n itself for
// key "".
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || key == "" {
		return n
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// inputs returns the input series of a scenario: every series of its
// scrapes, in their order.
func inputs(t *testing.T, sc scenario) []inputSeries {
	t.Helper()
	scrapes := make([]scrape, len(sc.phases))
	for i, p := range sc.phases {
		scrapes[i] = sc.stored(t, p)
	}
	if len(sc.grow) > 0 && len(sc.phases) != 1 {
		t.Fatalf("scenario %q: growth needs exactly one phase", sc.name)
	}
	var order []string
	byPhase := make([]map[string]float64, len(scrapes))
	ls := map[string]labels.Labels{}
	for i, s := range scrapes {
		byPhase[i] = map[string]float64{}
		for _, x := range s.series {
			k := notation(x.labels)
			if _, ok := ls[k]; !ok {
				ls[k] = x.labels
				order = append(order, k)
			}
			byPhase[i][k] = x.value
		}
	}
	used := make([]bool, len(sc.grow))
	var out []inputSeries
	for _, k := range order {
		var segs []string
		present := false
		for i, p := range sc.phases {
			v, ok := byPhase[i][k]
			switch {
			case !ok && present:
				// Gone from this scrape (a condition the object no
				// longer has): a staleness marker, as Prometheus writes.
				segs = append(segs, "stale")
				if p.minutes > 1 {
					segs = append(segs, fmt.Sprintf("_x%d", p.minutes-1))
				}
			case !ok:
				segs = append(segs, fmt.Sprintf("_x%d", p.minutes))
			}
			present = ok
			if !ok {
				continue
			}
			if len(sc.grow) == 0 {
				segs = append(segs, fmt.Sprintf("%s+0x%d", number(v), p.minutes-1))
				continue
			}
			inc := 0.0
			for j, g := range sc.grow {
				if d, ok := g.add(ls[k]); ok {
					inc += d
					used[j] = true
				}
			}
			segs = append(segs, fmt.Sprintf("%s+%sx%d", number(v), number(inc), p.minutes))
		}
		out = append(out, inputSeries{Series: k, Values: strings.Join(segs, " ")})
	}
	for j, u := range used {
		if !u {
			t.Fatalf("scenario %q: growth %+v matches no series of %s", sc.name, sc.grow[j], sc.phases[0].file)
		}
	}
	return out
}

// stored returns what Prometheus stores from phase p's scrape: its
// series (and those of p.also, renamed into p.alsoNamespace), le as the
// scenario's Prometheus stores it, the target's labels, and up; nothing
// for a down target but up 0, nothing at all for a gone one.
func (sc scenario) stored(t *testing.T, p phase) scrape {
	t.Helper()
	var s scrape
	if !p.down && !p.gone {
		s = readScrape(t, p.file)
		if p.also != "" {
			for _, x := range readScrape(t, p.also).series {
				if name := x.labels.Get(labels.MetricName); strings.HasPrefix(name, "watchtarget_") {
					x.labels = labels.NewBuilder(x.labels).Set("namespace", p.alsoNamespace).Labels()
					s.series = append(s.series, x)
				}
			}
		}
	}
	out := scrape{file: p.file}
	for _, x := range s.series {
		if p.noObjects && strings.HasPrefix(x.labels.Get(labels.MetricName), "watchtarget_") {
			continue
		}
		if sc.prom2 && x.labels.Has("le") {
			le, err := strconv.ParseFloat(x.labels.Get("le"), 64)
			if err != nil {
				t.Fatalf("%s: le %q: %v", p.file, x.labels.Get("le"), err)
			}
			x.labels = labels.NewBuilder(x.labels).Set("le", strconv.FormatFloat(le, 'g', -1, 64)).Labels()
		}
		x.labels = sc.target.relabel(x.labels)
		out.series = append(out.series, x)
	}
	if sc.target != nil && !p.gone {
		up := 1.0
		if p.down {
			up = 0
		}
		out.series = append(out.series, scraped{labels: sc.target.up(), value: up})
	}
	return out
}

// add returns what g adds per minute to the series l.
func (g growth) add(l labels.Labels) (float64, bool) {
	name := l.Get(labels.MetricName)
	for k, v := range g.match {
		if l.Get(k) != v {
			return 0, false
		}
	}
	if !g.histogram {
		return g.perMinute, name == g.metric
	}
	switch name {
	case g.metric + "_count":
		return g.perMinute, true
	case g.metric + "_sum":
		return g.perMinute * g.value, true
	case g.metric + "_bucket":
		le, err := strconv.ParseFloat(l.Get("le"), 64)
		if err != nil || le < g.value {
			return 0, false
		}
		return g.perMinute, true
	}
	return 0, false
}

// ruleAnnotations reads the annotations of each alert in rules.yaml.
func ruleAnnotations(t *testing.T) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, r := range readRules(t).rules() {
		if r.Alert != "" {
			out[r.Alert] = r.Annotations
		}
	}
	return out
}

var labelRef = regexp.MustCompile(`\{\{ \$labels\.([a-z_]+) \}\}`)

// expand fills in {{ $labels.x }}, the only template the rules use.
func expand(t *testing.T, annotations, l map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range annotations {
		v = labelRef.ReplaceAllStringFunc(v, func(m string) string { return l[labelRef.FindStringSubmatch(m)[1]] })
		if strings.Contains(v, "{{") {
			t.Fatalf("annotation %q uses a template the generator does not expand", v)
		}
		out[k] = v
	}
	return out
}

func TestRuleTestsUpToDate(t *testing.T) {
	got := generate(t)
	if *update {
		if err := os.WriteFile(rulesTestFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s is stale; run go test ./monitoring/ -run TestRuleTestsUpToDate -update (-committed +generated):\n%s", rulesTestFile, diff)
	}
}

// TestEveryAlertIsTestedFiringAndQuiet: each alert of rules.yaml has a
// promtool case where it fires and one where it does not.
func TestEveryAlertIsTestedFiringAndQuiet(t *testing.T) {
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, sc := range scenarios(t) {
		for _, a := range sc.alerts {
			if len(a.firing) > 0 {
				fires[a.name] = true
			} else {
				quiet[a.name] = true
			}
		}
	}
	var names []string
	for _, r := range readRules(t).rules() {
		if r.Alert == "" {
			continue
		}
		names = append(names, r.Alert)
		if !fires[r.Alert] || !quiet[r.Alert] {
			t.Errorf("alert %s: tested firing %v, quiet %v; want both", r.Alert, fires[r.Alert], quiet[r.Alert])
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		t.Fatal("no alerts in rules.yaml")
	}
}
