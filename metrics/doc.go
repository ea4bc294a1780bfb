// Package metrics publishes Prometheus metrics that separate a routine watch
// reconnect from real trouble, and the time objects take to become Ready
// for the first time. Nothing is registered globally: every constructor
// takes a [prometheus.Registerer].
//
// Import it as wgmetrics: its name collides with controller-runtime's
// pkg/metrics and client-go's tools/metrics.
//
//	import wgmetrics "github.com/watchgrade/watchgrade/metrics"
//
// # Registration
//
// [NewWatchMetrics] and [NewFirstReady] create their metrics and register
// them as one collector with the registerer you pass: all of them or none.
// They never panic and register nothing else (no Go or process
// collectors). Registering the same set twice (same Namespace, same
// registry) returns an error that wraps the registry's
// [prometheus.AlreadyRegisteredError]; its ExistingCollector is the first
// set, which a caller that restarts its manager can take and reuse:
//
//	wm, err := wgmetrics.NewWatchMetrics(reg, wgmetrics.WatchOptions{Namespace: "myctl"})
//	var are prometheus.AlreadyRegisteredError
//	if errors.As(err, &are) {
//		wm, err = are.ExistingCollector.(*wgmetrics.WatchMetrics), nil
//	}
//
// With controller-runtime, pass its registry, which is a
// prometheus.Registerer; the metrics are then served on the manager's
// /metrics endpoint next to controller-runtime's own:
//
//	import ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
//
//	wm, err := wgmetrics.NewWatchMetrics(ctrlmetrics.Registry, wgmetrics.WatchOptions{Namespace: "myctl"})
//
// To add constant labels (several controllers in one process, say), wrap
// the registerer with [prometheus.WrapRegistererWith].
//
// # Watch metrics
//
// A [WatchMetrics] is a watch.Observer: give it to every stream
// (StreamOptions.Observer) and instrumented informer
// (InstrumentOptions.Observer). Names below use the default Namespace,
// "watchgrade"; the Namespace option replaces that prefix.
//
//	metric                                        type       labels
//	--------------------------------------------  ---------  ----------------
//	watchgrade_watch_sessions_ended_total         counter    resource, outcome
//	watchgrade_watch_session_duration_seconds     histogram  resource, outcome
//	watchgrade_watch_streams                      gauge      resource, phase
//	watchgrade_watch_replay_duration_seconds      histogram  resource
//	watchgrade_watch_open_failures_total          counter    resource, class
//
// Labels and their values:
//
//   - resource: the watched collection as schema.GroupResource prints it,
//     "deployments.apps", or "pods" for the core group.
//   - outcome: closed (the server ended the session; routine, about once
//     per 30–60 minutes per stream, every 5–10 minutes for an informer's
//     own timeouts), expired (the cursor expired and the stream replays;
//     routine), error (the session failed), teardown (the owner stopped
//     the stream).
//   - phase: Starting, Replaying, Streaming, Blocked (see watch.Phase).
//   - class: expired, transient, needs_human (see watch.Class; a failed
//     open never has class none, so that series does not exist).
//
// sessions_ended_total counts every session ending. session_duration_seconds
// observes its lifetime, from the List or Watch call to its end, with
// bucket bounds 0.1, 0.5, 1, 5, 30, 60, 300, 600, 1800, 3600, 7200 and
// 14400 s: a hot flap piles up in the buckets up to 1 s, an informer's own
// timeouts land in (300, 600], the apiserver's in (1800, 3600].
//
// streams counts each stream (by its name) in the phase it last reported.
// A stream is counted from its first state change; a teardown counts it
// out until it reports again. A stream whose context ends while it waits
// between sessions reports nothing more, so call
// [WatchMetrics.StreamStopped] with its name once Stream.Run has returned.
//
// replay_duration_seconds observes, per replay, the time the stream spent
// in Replaying from entering it to the next Streaming, on the injected
// clock, with bounds 0.05 to 600 s. A replay that passes through Blocked
// is one replay, but its time Blocked is left out: that is no replay
// cost (the streams gauge shows it), and counting it made an initial sync
// that RBAC refused for two hours, then repaired, one replay of 7,200 s,
// so the replay-cost alert fired on a healthy cluster after the fix. (The
// attempt that ends a Blocked stretch runs while the stream still reports
// Blocked, so it is left out too.) A teardown abandons a replay
// unobserved. Only replays the stream publishes are timed: the
// initial sync, and a replay after an expired cursor that outlasts
// watch.Policy.ReplayGrace (10 s; a quicker one publishes nothing and shows
// only as an "expired" session ending), so this histogram shows the slow
// replays. The one replay a stream tries quietly against a suspected stale
// cursor keeps it in Streaming and shows only as a short closed session.
//
// open_failures_total counts the sessions that ended with outcome error or
// expired before they delivered live events: in the LIST, the Watch call
// that resumes from a cursor, or a watch-list replay.
//
// Every series of a resource exists at zero from the moment the resource
// is first reported, or from [WatchMetrics.AddResource];
// [WatchMetrics.DeleteResource] removes them when a dynamic watch is
// retired. No label holds a stream name, an object, a UID or error text,
// so the number of series is fixed per resource.
//
// # Time to first Ready
//
// A [FirstReady] publishes:
//
//	metric                                          type       labels
//	----------------------------------------------  ---------  ----------------
//	watchgrade_time_to_first_ready_seconds          histogram  resource
//	watchgrade_time_to_first_ready_rejected_total   counter    resource, reason
//	watchgrade_first_outcomes_total                 counter    resource, outcome
//
// first_outcomes_total counts each object once, by its first outcome
// since creation: outcome="ready" at its first Ready=True, or
// outcome="stalled" when Stalled=True came first (a human had to act
// before it was ever ready). The two exclude each other through the claim
// that times the first Ready, so an object is never counted twice, nor
// after a restart that finds it decided. Only [FirstReady.ObserveConditions]
// sees Stalled; [FirstReady.Observe], given Ready alone, counts the
// ready outcomes. The share of objects provisioned without a human, over
// a day:
//
//	sum by (resource) (increase(watchgrade_first_outcomes_total{outcome="ready"}[1d])) / sum by (resource) (increase(watchgrade_first_outcomes_total[1d]))
//
// The monitoring kit (examples/monitoring) records it as
// resource:watchgrade_first_outcomes_ready:ratio1d and its dashboard
// shows it.
//
// Call [FirstReady.Observe] from the reconciler with the object it reads
// and with the object its status write returns, passing the Ready
// condition (meta.FindStatusCondition(conditions, "Ready")), and
// [FirstReady.Delete] from the informer's delete handler:
//
//	fr.Observe(widgetsGR, widget, meta.FindStatusCondition(widget.Status.Conditions, "Ready"))
//	// ... roll up conditions, then:
//	if err := c.Status().Update(ctx, widget); err == nil {
//		fr.Observe(widgetsGR, widget, meta.FindStatusCondition(widget.Status.Conditions, "Ready"))
//	}
//
// (controller-runtime's Update fills widget with the server's response.)
//
// The histogram has one observation per object UID: the time from its
// creationTimestamp to its first Ready=True, with bucket bounds 1, 2, 5,
// 10, 15, 30, 60, 120, 300, 600, 900, 1800 and 3600 s
// ([FirstReadyOptions.Buckets]); native buckets only when
// [FirstReadyOptions.NativeHistogramBucketFactor] asks for them. A recovery
// (Ready True, then not, then True again) is never observed, nor is an
// object first seen after a controller restart already established. See
// [FirstReady] for the contract and [FirstReady.Observe] for the clocks.
//
// reason is one of missing_creation_timestamp, missing_ready_time,
// reversed, too_long, not_witnessed ([RejectReason]): a first Ready whose
// timestamps could not give a plausible duration (negative, or longer than
// [FirstReadyOptions.MaxDuration], 30 days by default) is counted there
// instead of poisoning the histogram's sum. not_witnessed is routine: an
// object that was there before the controller first ran with the library
// ([FirstReadyOptions.WitnessedSince]) and was never seen unready, so its
// creation is no start to measure from; do not alert on it. An object
// created while the controller was down is measured from its creation,
// the outage included, when another object of its namespace carried a
// Ready older than it (see [FirstReady]); the first object of a namespace
// created during an outage is counted as not_witnessed instead. The
// others mean broken timestamps.
//
// The end time is the latest managedFields time of the status
// subresource: stamped by the API server, like creationTimestamp, so the
// controller's clock never enters. On the response of the write that set
// Ready it is that write's time. Without such an entry (no status
// subresource, or managedFields stripped by an informer transform) the
// Ready condition's lastTransitionTime is used instead: it is stamped by
// whoever wrote the condition, on that process's clock, so clock skew
// shifts the duration, and a writer that stamps the time it computed the
// condition rather than the time it wrote it reads shorter. All these
// times have one-second resolution: durations are whole seconds, which
// is why the buckets start at 1 s.
//
// # Queries
//
// Session endings by outcome, per resource:
//
//	sum by (resource, outcome) (rate(watchgrade_watch_sessions_ended_total[10m]))
//
// Hot flap: clean closes that came within a second, per stream per hour.
// A healthy stream's server closes it about once per 30–60 minutes (an
// informer, whose reflector times out its own watches, every 5–10), after
// a long session; a flapping one closes within a second, many times a
// minute. Failed opens are not counted: a stream that keeps retrying an
// error (every 30–60 s for one that needs a human) never opened a session,
// is Blocked rather than flapping, and shows in the streams gauge and in
// open_failures_total below.
//
//	sum by (resource) (rate(watchgrade_watch_session_duration_seconds_bucket{outcome="closed",le=~"1(\\.0)?"}[15m])) * 3600
//	  / clamp_min(sum by (resource) (watchgrade_watch_streams), 1)
//
// and the share of clean closes that came within a second:
//
//	sum by (resource) (rate(watchgrade_watch_session_duration_seconds_bucket{outcome="closed",le=~"1(\\.0)?"}[15m]))
//	  / sum by (resource) (rate(watchgrade_watch_session_duration_seconds_count{outcome="closed"}[15m]))
//
// The bucket is exposed as le="1". Prometheus 3 stores le values as
// floats ("1.0"), Prometheus 2 as exposed ("1"): le="1" matches nothing
// on Prometheus 3, le="1.0" nothing on Prometheus 2, and le=~"1(\\.0)?"
// matches on both.
//
// Replay cost: the share of time spent replaying, how often, and how long
// a replay takes:
//
//	sum by (resource) (rate(watchgrade_watch_replay_duration_seconds_sum[1h]))
//	sum by (resource) (increase(watchgrade_watch_replay_duration_seconds_count[1h]))
//	histogram_quantile(0.9, sum by (resource, le) (rate(watchgrade_watch_replay_duration_seconds_bucket[1h])))
//
// Opens failing for want of a human (RBAC, a missing CRD):
//
//	sum by (resource) (rate(watchgrade_watch_open_failures_total{class="needs_human"}[10m])) > 0
//
// Time to first Ready, 90th percentile, and the rejections to watch for
// (not_witnessed is routine, see above):
//
//	histogram_quantile(0.9, sum by (resource, le) (rate(watchgrade_time_to_first_ready_seconds_bucket[1h])))
//	sum by (resource, reason) (increase(watchgrade_time_to_first_ready_rejected_total{reason!="not_witnessed"}[1h])) > 0
//
// Counters and histograms restart from zero with the process; always read
// them through rate or increase, never as raw cumulative values.
//
// # Alert rules
//
// Alerts on objects need a per-object condition series, which this package
// does not publish (per-object labels are unbounded). The examples module
// ships one, monitoring.ConditionCollector, which reads the informer cache
// at scrape time and is shaped like kube-state-metrics' condition metrics:
// one series per object and condition, labels type and status, value 1
// for the status the condition has, and an info series per object.
// examples/monitoring has the rules as a rule file and a PrometheusRule,
// with a ServiceMonitor, a PodMonitor and a scrape config to go with them,
// and tests them on a day of operations scraped and evaluated by
// Prometheus's own code. Two things about a real scrape shape them. A
// Kubernetes scrape attaches the controller's namespace to every series,
// and with honor_labels false (the default) the object's own namespace
// becomes exported_namespace; and while the controller is down (a crash
// loop) its series go stale, which would start every for: clock over. So
// the object alerts read two records of that file, which take the
// object's namespace from exported_namespace where it is set and hold an
// object's last report for 10 minutes while its target is down:
//
//	groups:
//	- name: watchgrade
//	  rules:
//	  - alert: WatchTargetStalled         # pages: a human must act
//	    expr: max by (namespace, name) (object:watchtarget_status_condition:held{type="Stalled",status="True"}) == 1
//	    for: 5m
//	    labels: {severity: page}
//	  - alert: WatchTargetNotReady        # opens a ticket
//	    expr: |
//	      object:watchtarget_info:held
//	        unless on (namespace, name) object:watchtarget_status_condition:held{type="Ready",status="True"} == 1
//	    for: 30m
//	    labels: {severity: ticket}
//	  - alert: WatchStreamBlocked         # the controller cannot see its inputs
//	    expr: sum by (resource) (watchgrade_watch_streams{phase="Blocked"}) > 0
//	    for: 10m
//	    labels: {severity: ticket}
//	  - alert: WatchControllerAbsent      # nothing serves these metrics
//	    expr: absent(watchgrade_watch_streams)
//	    for: 10m
//	    labels: {severity: page}
//
// The not-Ready rule reads "Ready is not True", not "Ready is False": an
// object that has never been established reports Ready=Unknown, and must
// not slip through. Stalled, not Ready, is what pages: Ready is False or
// Unknown through every routine replay and dependency wait.
package metrics
