package metrics

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// FirstReadyOptions configures [NewFirstReady]. Its zero value works.
type FirstReadyOptions struct {
	// Namespace prefixes every metric name, usually the controller's name.
	// Defaults to DefaultNamespace ("watchgrade").
	Namespace string
	// Buckets are the classic histogram's upper bounds, in seconds.
	// Defaults to 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600.
	Buckets []float64
	// NativeHistogramBucketFactor, when greater than 1, adds native
	// (sparse) buckets to the classic ones; see
	// [prometheus.HistogramOpts].NativeHistogramBucketFactor. They need a
	// protobuf scrape and add little to a histogram fed once per object.
	// Defaults to 0: classic buckets only.
	NativeHistogramBucketFactor float64
	// NativeHistogramMaxBucketNumber bounds the native buckets. Used only
	// with NativeHistogramBucketFactor. Defaults to 100.
	NativeHistogramMaxBucketNumber uint32
	// NativeHistogramMinResetDuration is the shortest time between resets
	// of a native histogram that reached NativeHistogramMaxBucketNumber.
	// Used only with NativeHistogramBucketFactor. Defaults to 1h.
	NativeHistogramMinResetDuration time.Duration
	// MaxDuration is the longest plausible time to first Ready; longer
	// durations are rejected as too_long. Defaults to 30 days.
	MaxDuration time.Duration
	// ClaimTTL is how long a claim outlives the last sighting of its
	// object, so that an object whose delete was missed is forgotten:
	// claims are dropped between ClaimTTL and twice ClaimTTL after the
	// object was last seen. Keep it above your resync period. Defaults to
	// 24h.
	ClaimTTL time.Duration
	// Clock drives the claim sweep. Defaults to the real clock.
	Clock clock.PassiveClock
	// WitnessedSince is when the tracker began to see creations: an object
	// created at or after it is measured whatever it was first seen with.
	// One created before it and first seen with no Ready condition is
	// measured only if the witness rule of [FirstReady] vouches for it;
	// otherwise its first Ready=True is counted as not_witnessed rather
	// than measured from a creation long past. Set it from a record that
	// outlives the process, such as when the controller was first
	// installed, to measure every object created since. Defaults to when
	// NewFirstReady ran, less a minute for the skew between this clock and
	// the API server's.
	WitnessedSince time.Time
}

// FirstReady option defaults.
const (
	DefaultMaxDuration                     = 30 * 24 * time.Hour
	DefaultClaimTTL                        = 24 * time.Hour
	DefaultNativeHistogramMaxBucketNumber  = 100
	DefaultNativeHistogramMinResetDuration = time.Hour
)

func firstReadyBuckets() []float64 {
	return []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600}
}

// FirstReadyResult is what [FirstReady.Observe] did with one sighting.
type FirstReadyResult string

const (
	// FirstReadyPending: the object has not been Ready yet and was never
	// established; its first Ready=True will be observed.
	FirstReadyPending FirstReadyResult = "Pending"
	// FirstReadyObserved: this sighting is the object's first Ready=True,
	// and its duration was observed.
	FirstReadyObserved FirstReadyResult = "Observed"
	// FirstReadyRejected: this sighting is the object's first Ready=True,
	// but its timestamps were unusable; the rejection counter went up.
	FirstReadyRejected FirstReadyResult = "Rejected"
	// FirstReadyDone: the object was already accounted for, or was already
	// established (Ready True or False) when first seen.
	FirstReadyDone FirstReadyResult = "Done"
	// FirstReadyIgnored: the object is nil (a typed nil too) or has no
	// UID.
	FirstReadyIgnored FirstReadyResult = "Ignored"
)

// witnessSkew is how much earlier than NewFirstReady's own time an object
// may be created and still count as witnessed, by default: room for the
// skew between the API server's clock and this one.
const witnessSkew = time.Minute

// ErrInvalidBuckets is returned by [NewFirstReady] for buckets that are
// not strictly increasing. Match it with errors.Is.
var ErrInvalidBuckets = errors.New("watchgrade/metrics: buckets must be finite and strictly increasing")

// FirstReady measures how long objects take from creation to their first
// Ready=True: one observation per object UID, never for a recovery, never
// twice, and not again after a controller restart. Create one with
// [NewFirstReady] and call [FirstReady.Observe] with every sighting of an
// object, [FirstReady.Delete] when it is deleted. It is safe for concurrent
// use and owns no goroutine.
//
// The persisted Ready condition is the witness that survives restarts. The
// readiness roll-up of this module writes Ready=Unknown only while an
// object has never been established, so the first sighting decides:
//
//	first sighting of a UID                       claim         later sightings
//	--------------------------------------------  ------------  -------------------------------------------
//	Ready Unknown                                 pending       first Ready=True: observed (or rejected);
//	                                                              Ready False or Unknown: still pending
//	Ready absent, created at or after             pending       as above
//	  WitnessedSince, or no creationTimestamp                     (no creationTimestamp: rejected,
//	                                                              missing_creation_timestamp)
//	Ready absent, created before WitnessedSince   unwitnessed   first Ready=True: observed if witnessed
//	                                                              (below), else rejected, not_witnessed
//	Ready True or False                           done          never observed
//
// Witnessed: another object of the same resource in the same namespace
// has been first seen, by the time of the first Ready=True, with a Ready
// condition (any status) stamped at or before this object's creation: its
// lastTransitionTime, or its last status write without one. Ready
// conditions are written by the controller, and one there at first sight
// was persisted by an earlier run, so the controller watched that
// namespace then, and an object created since was created while it was
// deployed: one created during an outage or a slow rollout is
// measured from its creation, the outage included, which is what its
// user waited. An object that was there before the controller first ran
// with this library, never seen unready (no Ready at all), is not measured
// from a creation days ago: no Ready in its namespace is older than it,
// so it is counted as not_witnessed, never as too_long.
//
// So an object seen first after a restart already Ready, or stalled
// (Ready=False) before its first Ready, is not observed: the metric
// undercounts rather than counts twice. It also misses an object created
// while the controller was down in a namespace where no object carried a
// Ready before it (the namespace's first object, or one that came into
// the controller's scope with it): that object is counted as
// not_witnessed. Call Observe from the informer's event handlers as well
// as from the reconciler: after a restart the informer's initial list
// then shows the tracker every object's persisted Ready before any
// object's first Ready=True.
//
// Claims live in memory, one small entry per object. Delete releases one;
// an object not seen for [FirstReadyOptions.ClaimTTL] (a missed delete) is
// forgotten by a sweep that the calls themselves drive, so memory is
// bounded by the live objects (and one entry per namespace for the
// witness rule, swept the same way). Forgetting a live object is safe
// under the contract above: its next sighting starts over from its
// persisted Ready.
//
// FirstReady is a [prometheus.Collector] for all of its metrics, which is
// how [NewFirstReady] registers them as one unit.
type FirstReady struct {
	clock          clock.PassiveClock
	maxDuration    time.Duration
	ttl            time.Duration
	witnessedSince time.Time

	durations *prometheus.HistogramVec
	rejected  *prometheus.CounterVec
	outcomes  *prometheus.CounterVec

	mu        sync.Mutex
	claims    claims
	nextSweep time.Time
	known     map[schema.GroupResource]string
	// witnesses holds, per resource and namespace, the earliest time a
	// Ready condition seen on one of its objects was stamped: the
	// controller watched that namespace since then.
	witnesses map[witnessKey]witness
}

// witnessKey is a namespace of one resource.
type witnessKey struct {
	gr        schema.GroupResource
	namespace string
}

// witness is the earliest Ready seen in a namespace, and the sweep
// generation in which one was last seen there.
type witness struct {
	since time.Time
	gen   uint32
}

// NewFirstReady creates the time-to-first-Ready metrics and registers them
// with reg as one unit. It never panics. Registering a second set under the
// same Namespace with the same registry returns an error wrapping a
// [prometheus.AlreadyRegisteredError] whose ExistingCollector is the first
// *FirstReady: reuse it (its claims are the ones that prevent double
// counting), or choose another Namespace. A nil reg (a nil
// *prometheus.Registry too) returns an error wrapping [ErrNilRegisterer],
// an invalid Namespace one wrapping [ErrInvalidNamespace].
func NewFirstReady(reg prometheus.Registerer, opts FirstReadyOptions) (*FirstReady, error) {
	ns := namespaceOr(opts.Namespace)
	hopts := prometheus.HistogramOpts{
		Namespace: ns, Name: "time_to_first_ready_seconds",
		Help:    "Time from an object's creationTimestamp to its first Ready=True, by resource; one observation per object.",
		Buckets: opts.Buckets,
	}
	if len(hopts.Buckets) == 0 {
		hopts.Buckets = firstReadyBuckets()
	}
	if err := validBuckets(hopts.Buckets); err != nil {
		return nil, fmt.Errorf("NewFirstReady: %w", err)
	}
	if opts.NativeHistogramBucketFactor > 1 {
		hopts.NativeHistogramBucketFactor = opts.NativeHistogramBucketFactor
		hopts.NativeHistogramMaxBucketNumber = opts.NativeHistogramMaxBucketNumber
		if hopts.NativeHistogramMaxBucketNumber == 0 {
			hopts.NativeHistogramMaxBucketNumber = DefaultNativeHistogramMaxBucketNumber
		}
		hopts.NativeHistogramMinResetDuration = opts.NativeHistogramMinResetDuration
		if hopts.NativeHistogramMinResetDuration <= 0 {
			hopts.NativeHistogramMinResetDuration = DefaultNativeHistogramMinResetDuration
		}
	}
	f := &FirstReady{
		clock:       opts.Clock,
		maxDuration: opts.MaxDuration,
		ttl:         opts.ClaimTTL,
		durations:   prometheus.NewHistogramVec(hopts, []string{LabelResource}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "time_to_first_ready_rejected_total",
			Help: "First Ready=True transitions not observed because their timestamps were missing, reversed or implausible, by resource and reason.",
		}, []string{LabelResource, LabelReason}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "first_outcomes_total",
			Help: "Objects by their first outcome since creation, Ready (first Ready=True) or Stalled (Stalled=True before any Ready=True), by resource; one per object.",
		}, []string{LabelResource, LabelOutcome}),
		claims:    newClaims(),
		known:     make(map[schema.GroupResource]string),
		witnesses: make(map[witnessKey]witness),
	}
	if f.clock == nil {
		f.clock = clock.RealClock{}
	}
	if f.maxDuration <= 0 {
		f.maxDuration = DefaultMaxDuration
	}
	if f.ttl <= 0 {
		f.ttl = DefaultClaimTTL
	}
	f.witnessedSince = opts.WitnessedSince
	if f.witnessedSince.IsZero() {
		f.witnessedSince = f.clock.Now().Add(-witnessSkew)
	}
	f.nextSweep = f.clock.Now().Add(f.ttl)
	if err := register(reg, ns, f, "time-to-first-Ready metrics"); err != nil {
		return nil, err
	}
	return f, nil
}

// Describe implements [prometheus.Collector].
func (f *FirstReady) Describe(ch chan<- *prometheus.Desc) {
	f.durations.Describe(ch)
	f.rejected.Describe(ch)
	f.outcomes.Describe(ch)
}

// Collect implements [prometheus.Collector].
func (f *FirstReady) Collect(ch chan<- prometheus.Metric) {
	f.durations.Collect(ch)
	f.rejected.Collect(ch)
	f.outcomes.Collect(ch)
}

// The values of label outcome of first_outcomes_total: an object's first
// outcome since its creation.
const (
	// FirstOutcomeReady: its first Ready=True came before any
	// Stalled=True.
	FirstOutcomeReady = "ready"
	// FirstOutcomeStalled: Stalled=True came before any Ready=True (seen
	// only through [FirstReady.ObserveConditions]).
	FirstOutcomeStalled = "stalled"
)

// The kstatus condition types the first outcome reads.
const (
	conditionReady   = "Ready"
	conditionStalled = "Stalled"
)

// Observe accounts for one sighting of obj, of resource gr, whose Ready
// condition is ready (nil when it has none; meta.FindStatusCondition
// returns it from a condition list). Call it with the object your
// reconciler reads, before it changes anything, and with the object
// returned by the status write that may have set Ready: that response
// carries the API server's time of the write in its managedFields. Calls
// from informer event handlers are welcome too; when several paths race on
// the same first Ready=True, exactly one observes it.
//
// The duration runs from creationTimestamp to the latest managedFields
// time of the status subresource (the API server's clock), falling back to
// ready.LastTransitionTime (the condition writer's clock) when obj has no
// such entry, for example when an informer strips managedFields. Both have
// a resolution of one second. An informer sighting that coalesced the
// Ready write with a later status write carries the later time; the write
// response never does. Missing, reversed or implausible timestamps are not
// observed but counted by [RejectReason].
//
// Call it only where a single replica acts (a reconciler behind leader
// election): each process keeps its own claims.
func (f *FirstReady) Observe(gr schema.GroupResource, obj metav1.Object, ready *metav1.Condition) FirstReadyResult {
	return f.observe(gr, obj, ready, false)
}

// ObserveConditions is [FirstReady.Observe] of obj with its conditions
// (status.conditions, as read or as written), which also counts a first
// outcome of Stalled: an object whose Stalled=True comes before any
// Ready=True has Stalled as its first outcome in first_outcomes_total,
// and its later first Ready=True is timed but is not a first outcome.
func (f *FirstReady) ObserveConditions(gr schema.GroupResource, obj metav1.Object, conds []metav1.Condition) FirstReadyResult {
	stalled := meta.IsStatusConditionTrue(conds, conditionStalled)
	return f.observe(gr, obj, meta.FindStatusCondition(conds, conditionReady), stalled)
}

func (f *FirstReady) observe(gr schema.GroupResource, obj metav1.Object, ready *metav1.Condition, stalled bool) FirstReadyResult {
	if isNil(obj) || obj.GetUID() == "" {
		return FirstReadyIgnored
	}
	status := metav1.ConditionUnknown
	if ready != nil && ready.Status != "" {
		status = ready.Status
	}
	created := obj.GetCreationTimestamp().Time
	// An object without a creationTimestamp is not left to the witness
	// rule: its first Ready is rejected as missing_creation_timestamp.
	witnessed := ready != nil || created.IsZero() || !created.Before(f.witnessedSince)
	res := f.add(gr)
	outcome, first := f.claim(obj.GetUID(), status, stalled, witnessed, sighting{
		where: witnessKey{gr, obj.GetNamespace()}, created: created, readyAt: readyStamped(obj, ready),
	})
	if first != "" {
		f.outcomes.WithLabelValues(res, first).Inc()
	}
	switch outcome {
	case claimObserve:
		d, reason := readyDuration(obj, ready, f.maxDuration)
		if reason != "" {
			f.rejected.WithLabelValues(res, string(reason)).Inc()
			return FirstReadyRejected
		}
		f.durations.WithLabelValues(res).Observe(d.Seconds())
		return FirstReadyObserved
	case claimNotWitnessed:
		f.rejected.WithLabelValues(res, string(RejectNotWitnessed)).Inc()
		return FirstReadyRejected
	case claimStillPending:
		return FirstReadyPending
	}
	return FirstReadyDone
}

// claimOutcome is what one sighting does to a claim.
type claimOutcome uint8

const (
	claimNothing claimOutcome = iota
	claimStillPending
	claimObserve
	claimNotWitnessed
)

// sighting is what the witness rule reads from one sighting.
type sighting struct {
	where   witnessKey
	created time.Time
	// readyAt is when the sighted Ready condition was stamped; zero when
	// there is none.
	readyAt time.Time
}

// readyStamped returns when ready was stamped: its lastTransitionTime, or
// without one the latest managedFields time of obj's status subresource;
// zero when ready is nil.
func readyStamped(obj metav1.Object, ready *metav1.Condition) time.Time {
	if ready == nil {
		return time.Time{}
	}
	if !ready.LastTransitionTime.IsZero() {
		return ready.LastTransitionTime.Time
	}
	var at time.Time
	for _, m := range obj.GetManagedFields() {
		if m.Subresource == "status" && m.Time != nil && m.Time.After(at) {
			at = m.Time.Time
		}
	}
	return at
}

// claim updates uid's claim for a sighting with Ready status (and
// Stalled=True when stalled), and says what to do, and which first
// outcome the sighting is, if any; the metrics are touched after the lock
// is released.
func (f *FirstReady) claim(uid types.UID, status metav1.ConditionStatus, stalled, witnessed bool, s sighting) (claimOutcome, string) {
	now := f.clock.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sweepLocked(now)
	c, seen := f.claims.get(uid)
	f.witnessLocked(s, !seen)
	state, stalledFirst := c.state&^claimStalled, c.state&claimStalled != 0
	switch {
	case !seen && (status == metav1.ConditionTrue || status == metav1.ConditionFalse):
		f.claims.put(uid, claimDone)
		return claimNothing, ""
	case !seen && !witnessed:
		f.claims.put(uid, claimUnwitnessed)
		return claimStillPending, ""
	case !seen:
		f.claims.put(uid, claimPending)
		return claimStillPending, ""
	case state == claimDone:
		f.claims.put(uid, claimDone)
		return claimNothing, ""
	case status != metav1.ConditionTrue:
		if !stalled || stalledFirst {
			f.claims.put(uid, c.state) // seen again: still pending
			return claimStillPending, ""
		}
		// Stalled before any Ready=True: the first outcome.
		f.claims.put(uid, state|claimStalled)
		if state == claimUnwitnessed && !f.witnessedLocked(s) {
			return claimStillPending, ""
		}
		return claimStillPending, FirstOutcomeStalled
	}
	// Pending (or unwitnessed) and now Ready=True: this call wins.
	f.claims.put(uid, claimDone)
	if state == claimUnwitnessed && !f.witnessedLocked(s) {
		return claimNotWitnessed, ""
	}
	if stalledFirst {
		return claimObserve, ""
	}
	return claimObserve, FirstOutcomeReady
}

// witnessLocked records the Ready condition of an object's first sighting,
// if it has one, as a witness that the controller watched its namespace
// since it was stamped: that Ready was persisted before this tracker saw
// the object. A Ready first seen later was written since, and says
// nothing about the past; its sightings only keep the namespace's witness
// from being swept.
func (f *FirstReady) witnessLocked(s sighting, first bool) {
	if s.readyAt.IsZero() {
		return
	}
	w, ok := f.witnesses[s.where]
	if ok && (!first || !s.readyAt.Before(w.since)) && w.gen == f.claims.gen {
		return // the steady state: one lookup
	}
	switch {
	case first && (!ok || s.readyAt.Before(w.since)):
		w.since = s.readyAt
	case !ok:
		return
	}
	w.gen = f.claims.gen
	f.witnesses[s.where] = w
}

// witnessedLocked reports whether an object first seen with no Ready,
// created before WitnessedSince, was created while the controller watched
// its namespace: another object of its resource there was first seen with
// a Ready condition stamped at or before its creation.
func (f *FirstReady) witnessedLocked(s sighting) bool {
	w, ok := f.witnesses[s.where]
	return ok && !s.created.Before(w.since)
}

// isNil reports whether obj is nil or a typed nil, as a dynamic client
// returns beside an error.
func isNil(obj metav1.Object) bool {
	if obj == nil {
		return true
	}
	v := reflect.ValueOf(obj)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// validBuckets reports buckets that are not finite and strictly
// increasing (a last +Inf is allowed): prometheus would panic on them at
// the first observation.
func validBuckets(buckets []float64) error {
	for i, b := range buckets {
		if math.IsNaN(b) || (math.IsInf(b, 0) && !(math.IsInf(b, 1) && i == len(buckets)-1)) {
			return fmt.Errorf("%w: bucket %d is %v", ErrInvalidBuckets, i, b)
		}
		if i > 0 && b <= buckets[i-1] {
			return fmt.Errorf("%w: bucket %d (%v) is not above bucket %d (%v)", ErrInvalidBuckets, i, b, i-1, buckets[i-1])
		}
	}
	return nil
}

// Delete releases the claim of the object with uid: call it from the
// informer's delete handler (tombstones included). A UID is never reused,
// so a recreated object starts a claim of its own.
func (f *FirstReady) Delete(uid types.UID) {
	now := f.clock.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claims.delete(uid)
	f.sweepLocked(now)
}

// Claims returns the number of objects currently held in memory.
func (f *FirstReady) Claims() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.claims.len()
}

// AddResource creates the series of gr at zero, so that the histogram and
// every rejection reason show before the first object is observed. Calling
// it again is harmless.
func (f *FirstReady) AddResource(gr schema.GroupResource) {
	f.add(gr)
}

// DeleteResource removes every series of gr. The claims of its objects are
// left to the sweep.
func (f *FirstReady) DeleteResource(gr schema.GroupResource) {
	res := resourceLabel(gr)
	f.mu.Lock()
	delete(f.known, gr)
	for k := range f.witnesses {
		if k.gr == gr {
			delete(f.witnesses, k)
		}
	}
	f.mu.Unlock()
	match := prometheus.Labels{LabelResource: res}
	f.durations.DeletePartialMatch(match)
	f.rejected.DeletePartialMatch(match)
	f.outcomes.DeletePartialMatch(match)
}

// add creates the series of gr if they do not exist yet, and returns gr's
// label value without allocating once gr is known. The series are created
// outside the lock.
func (f *FirstReady) add(gr schema.GroupResource) string {
	f.mu.Lock()
	res, ok := f.known[gr]
	if !ok {
		res = resourceLabel(gr)
		f.known[gr] = res
	}
	f.mu.Unlock()
	if !ok {
		f.durations.WithLabelValues(res)
		for _, r := range RejectReasons() {
			f.rejected.WithLabelValues(res, string(r))
		}
		f.outcomes.WithLabelValues(res, FirstOutcomeReady)
		f.outcomes.WithLabelValues(res, FirstOutcomeStalled)
	}
	return res
}

// sweepLocked drops the claims of objects not seen for a while, once per
// ClaimTTL.
func (f *FirstReady) sweepLocked(now time.Time) {
	if now.Before(f.nextSweep) {
		return
	}
	f.claims.sweep()
	for k, w := range f.witnesses {
		if f.claims.gen-w.gen > 1 {
			delete(f.witnesses, k)
		}
	}
	f.nextSweep = now.Add(f.ttl)
}
