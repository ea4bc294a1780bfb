package readiness

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/watchgrade/watchgrade/watch"
)

// AccumulatorOptions configures an [Accumulator]. The zero value works.
type AccumulatorOptions struct {
	// Rollup configures the roll-up behind each owner's verdict and
	// [Accumulator.Apply]. Defaults to Options' defaults; options that
	// [Options.Validate] refuses make [NewAccumulator] fail.
	Rollup Options
	// OnChange is called with an owner's key each time its verdict (the
	// conditions Rollup decides from its gates) changes, including when an
	// owner is first tracked, and when the start grace or the not-ready
	// hold of a stream it tracks ends, so the controller can requeue it.
	// Calls come one at a time, from a goroutine of the accumulator's,
	// never from the goroutine that caused the change; an owner whose call
	// is already waiting is not queued twice. Owners affected by one
	// stream's change are queued in namespace and name order. A slow
	// OnChange delays later calls but never the observer or any other
	// method. Handing the key to a workqueue is the intended use. Defaults to none: then the accumulator starts no
	// goroutine and no timer at all, and only Apply and Gates are of use.
	OnChange func(types.NamespacedName)
	// StartGrace is how long a stream may take to be established after the
	// accumulator first hears of it before an owner that is Ready for its
	// generation goes Reconciling: while every gate that is not established
	// is a stream still starting (see [Gate.Starting]), [Accumulator.Apply]
	// leaves such an owner's conditions as they are. A controller restart
	// then writes nothing. Defaults to DefaultStartGrace.
	StartGrace time.Duration
	// NotReadyHold is how long, after the accumulator first hears of a
	// stream, the Stalled or Reconciling conditions an earlier process
	// persisted may stand while that stream has shown neither health nor
	// a stall ([Gate.Unconfirmed]): a controller restart then writes
	// nothing for an owner that was not Ready either, and records no
	// second Warning for a stall already reported (see the package
	// documentation, Restarts). When it ends, the owners are rolled up
	// from their gates as they are. Defaults to Policy's ProgressDeadline
	// (the latest a stream that does not go live publishes a stall) plus
	// DefaultStartGrace, or StartGrace if that is longer:
	// DefaultNotReadyHold with the default Policy. Shorter than StartGrace
	// or than Policy's ProgressDeadline makes [NewAccumulator] fail: a
	// stall that outlives a restart would be dropped before its stream can
	// show it again, then reported a second time.
	NotReadyHold time.Duration
	// Policy is the watch Policy of the streams that report to the
	// accumulator (the one passed to [watch.NewStream] and
	// [watch.Instrument]); only its ProgressDeadline is used, to default
	// and check NotReadyHold. Defaults to the zero Policy: watch's defaults.
	// A Policy that [watch.Policy.Validate] refuses makes NewAccumulator
	// fail.
	Policy watch.Policy
	// Clock times the start grace: both whether a stream is still within
	// it (Apply's now argument plays no part) and the OnChange call when
	// it ends. Defaults to the real clock.
	Clock clock.WithDelayedExecution
}

// DefaultStartGrace is the default of [AccumulatorOptions.StartGrace]: long
// enough for a controller's streams to replay after a restart.
const DefaultStartGrace = 30 * time.Second

// DefaultNotReadyHold is the default of [AccumulatorOptions.NotReadyHold]
// with the default watch Policy: a stream that has not gone live publishes
// a stall at the latest [watch.DefaultProgressDeadline] after it starts, so
// a stall that outlives a restart is seen again within the hold;
// DefaultStartGrace more covers the time the controller takes to start its
// streams and reach the owner. With a longer ProgressDeadline
// ([AccumulatorOptions.Policy]) the default hold is that much longer.
const DefaultNotReadyHold = watch.DefaultProgressDeadline + DefaultStartGrace

// Errors returned by [NewAccumulator] and [Options.Validate]. Match them
// with errors.Is.
var (
	// ErrInvalidOptions: an option has a value the roll-up cannot honour.
	ErrInvalidOptions = errors.New("watchgrade/readiness: invalid options")
)

// Accumulator collects stream states and gates per owner object and rolls
// them up into each owner's kstatus trio. It implements [watch.Observer]:
// pass it as the Observer of every stream (with [watch.Observers] to share
// the streams with metrics).
//
// Streams are known by name ([watch.State.Stream]), which must be unique
// among the streams that report to one accumulator. An owner depends on the
// streams named in [Accumulator.Track] and on the gates of its own set with
// [Accumulator.SetGate]; a tracked stream that has not reported yet counts
// as progressing. Nothing is forgotten implicitly: remove what is gone with
// [Accumulator.RemoveStream], [Accumulator.RemoveGate] and
// [Accumulator.RemoveOwner].
//
// A stream's state change costs the same whatever the number of owners
// that track it: the observer only marks the stream, and the accumulator's
// delivery goroutine works out which owners' verdicts changed.
//
// Owners are keyed by namespace and name; use one accumulator per kind of
// owner. Create one with [NewAccumulator]; all methods are safe for
// concurrent use. The accumulator owns no long-lived goroutine: a delivery
// goroutine runs only while there is work for it and exits when there is
// none, and the start grace is a timer; there is nothing to stop.
type Accumulator struct {
	opts     Options
	onChange func(types.NamespacedName)
	grace    time.Duration
	hold     time.Duration
	clock    clock.WithDelayedExecution

	mu      sync.Mutex
	streams map[string]watch.State
	started map[string]time.Time // when each stream was first heard of
	// heardAt holds the streams first heard of at each instant whose hold
	// has not ended: one pair of timers ends their grace and hold.
	heardAt map[time.Time]*[]string
	// established holds the streams that have been established since they
	// were first heard of: they are never held again.
	established map[string]struct{}
	// stalled holds the streams that have been stalled since they were
	// first heard of: they are not unconfirmed any more.
	stalled  map[string]struct{}
	owners   map[types.NamespacedName]*owner
	byStream map[string]map[types.NamespacedName]struct{}

	// Work for the delivery goroutine: streams whose owners must be
	// evaluated again, then OnChange calls, in order, without duplicates.
	dirty      []string
	dirtySet   map[string]struct{}
	pending    []types.NamespacedName
	queued     map[types.NamespacedName]struct{}
	delivering bool
}

type owner struct {
	streams map[string]struct{}
	gates   map[string]Gate
	verdict []metav1.Condition
	// own holds the trio (and StreamsCondition) Apply last changed the
	// owner's conditions to: conditions that read so again are this
	// process's own verdict, written, and never held as an earlier one's.
	// A result that was never written (a writer that writes only some
	// verdicts, a write that failed) leaves the persisted conditions held.
	own []metav1.Condition
}

// NewAccumulator returns an empty accumulator, or an error wrapping
// [ErrInvalidOptions] when opts.Rollup is refused by [Options.Validate],
// opts.Policy by [watch.Policy.Validate], or NotReadyHold is shorter than
// StartGrace or the Policy's ProgressDeadline.
func NewAccumulator(opts AccumulatorOptions) (*Accumulator, error) {
	if err := opts.Rollup.Validate(); err != nil {
		return nil, fmt.Errorf("NewAccumulator: %w", err)
	}
	if err := opts.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("NewAccumulator: %w: Policy: %w", ErrInvalidOptions, err)
	}
	deadline := opts.Policy.ProgressDeadline
	if deadline <= 0 {
		deadline = watch.DefaultProgressDeadline
	}
	if opts.StartGrace <= 0 {
		opts.StartGrace = DefaultStartGrace
	}
	if opts.NotReadyHold <= 0 {
		opts.NotReadyHold = max(deadline+DefaultStartGrace, opts.StartGrace)
	}
	if opts.NotReadyHold < opts.StartGrace {
		return nil, fmt.Errorf("NewAccumulator: %w: NotReadyHold %s is shorter than StartGrace %s", ErrInvalidOptions, opts.NotReadyHold, opts.StartGrace)
	}
	if opts.NotReadyHold < deadline {
		return nil, fmt.Errorf("NewAccumulator: %w: NotReadyHold %s is shorter than the Policy's ProgressDeadline %s: a stall persisted before a restart would be dropped before its stream can show it again",
			ErrInvalidOptions, opts.NotReadyHold, deadline)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Accumulator{
		opts:        opts.Rollup.withDefaults(), // defaulted once: toldAlready reads MessageLimit
		onChange:    opts.OnChange,
		grace:       opts.StartGrace,
		hold:        opts.NotReadyHold,
		clock:       opts.Clock,
		streams:     make(map[string]watch.State),
		started:     make(map[string]time.Time),
		heardAt:     make(map[time.Time]*[]string),
		established: make(map[string]struct{}),
		stalled:     make(map[string]struct{}),
		owners:      make(map[types.NamespacedName]*owner),
		byStream:    make(map[string]map[types.NamespacedName]struct{}),
		dirtySet:    make(map[string]struct{}),
		queued:      make(map[types.NamespacedName]struct{}),
	}, nil
}

var _ watch.Observer = (*Accumulator)(nil)

// StateChanged records a stream's state. Its owners are evaluated again by
// the delivery goroutine: the call costs the same however many owners
// track the stream, and never blocks on OnChange.
func (a *Accumulator) StateChanged(s watch.State) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.streams[s.Stream] = s
	a.heardOfLocked(s.Stream)
	switch StreamLevel(s) {
	case LevelEstablished:
		a.established[s.Stream] = struct{}{}
	case LevelStalled:
		a.stalled[s.Stream] = struct{}{}
	}
	a.markLocked(s.Stream)
}

// SessionEnded does nothing: a session ending alone never changes a gate.
func (a *Accumulator) SessionEnded(watch.SessionEnd) {}

// Track sets the streams that owner depends on, replacing the set given
// before, and creates the owner if it is new. Calling it on every reconcile
// with the same streams is cheap and changes nothing.
func (a *Accumulator) Track(key types.NamespacedName, streams ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	o := a.ownerLocked(key)
	for name := range o.streams {
		a.unindexLocked(name, key)
	}
	o.streams = make(map[string]struct{}, len(streams))
	for _, name := range streams {
		o.streams[name] = struct{}{}
		if a.byStream[name] == nil {
			a.byStream[name] = make(map[types.NamespacedName]struct{})
		}
		a.byStream[name][key] = struct{}{}
		a.heardOfLocked(name)
	}
	a.evaluateLocked(key)
}

// SetGate sets one of owner's own gates, replacing any with the same name,
// and creates the owner if it is new. Its Stream and Starting fields are
// ignored: the restart hold is for streams the accumulator watches start,
// never for a gate of the caller's own.
func (a *Accumulator) SetGate(key types.NamespacedName, g Gate) {
	a.mu.Lock()
	defer a.mu.Unlock()
	g.Stream, g.Starting = false, false
	a.ownerLocked(key).gates[g.Name] = g
	a.evaluateLocked(key)
}

// RemoveGate removes one of owner's own gates by name. Removing a gate that
// is not there does nothing.
func (a *Accumulator) RemoveGate(key types.NamespacedName, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	o, ok := a.owners[key]
	if !ok {
		return
	}
	if _, ok := o.gates[name]; !ok {
		return
	}
	delete(o.gates, name)
	a.evaluateLocked(key)
}

// RemoveStream forgets a stream that has stopped: its state, and the
// dependency of every owner that tracked it; those owners are re-evaluated.
// A stream of the same name that reports later is recorded afresh, with a
// start grace of its own, but owners depend on it again only after
// [Accumulator.Track].
func (a *Accumulator) RemoveStream(stream string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.streams, stream)
	delete(a.started, stream)
	delete(a.established, stream)
	delete(a.stalled, stream)
	keys := a.byStream[stream]
	delete(a.byStream, stream)
	for _, key := range sortedKeys(keys) {
		delete(a.owners[key].streams, stream)
		a.evaluateLocked(key)
	}
}

// RemoveOwner forgets an owner, typically once it is deleted: its tracked
// streams (which stay recorded for other owners), its gates, and any
// OnChange call still pending for it.
func (a *Accumulator) RemoveOwner(key types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	o, ok := a.owners[key]
	if !ok {
		return
	}
	for name := range o.streams {
		a.unindexLocked(name, key)
	}
	delete(a.owners, key)
	if _, ok := a.queued[key]; ok {
		delete(a.queued, key)
		a.pending = slices.DeleteFunc(a.pending, func(k types.NamespacedName) bool { return k == key })
	}
}

// Gates returns owner's gates now, worst first in the tie order of
// [Rollup]: one per tracked stream and one per gate of its own. A stream
// gate is [Gate.Starting] while its stream has not been established since
// the accumulator first heard of it, is Starting or on its first replay
// (or has not reported), and its start grace runs on
// [AccumulatorOptions.Clock]; it is [Gate.Unconfirmed] while its stream
// has been neither established nor stalled since then, within
// [AccumulatorOptions.NotReadyHold], and Apply has not changed the owner's
// conditions. An owner that is not known has none.
func (a *Accumulator) Gates(key types.NamespacedName) []Gate {
	now := a.clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	o, ok := a.owners[key]
	return a.gatesLocked(key, now, ok && o.own != nil)
}

// Apply writes owner's trio onto conditions with the accumulator's
// options: [Apply] of owner's gates ([Accumulator.Gates]), with now as the
// lastTransitionTime of what moves. An owner the accumulator does not know
// (never tracked, or removed) is left alone: Apply reports false and
// changes nothing, so a reconcile that calls it before Track writes no
// "no gates" status.
//
// A new owner (conditions hold none of the trio, and this accumulator has
// not changed them) is left alone the same way while every gate that is
// not established is a stream still starting within StartGrace: its first
// write is its streams' verdict once they are live, Ready=True with one
// Event, not Reconciling (InitialSync) then Ready, two writes and two
// Events a second apart. When the grace ends first, Apply writes what the
// gates say; OnChange is called then. Meanwhile write no
// status.observedGeneration alone either (see [HasTrio]).
//
// After a controller restart an owner keeps the conditions an earlier
// process persisted for generation, unchanged, until its streams show
// evidence against them: a Ready=True while the only gates that are not
// established are streams still starting within
// [AccumulatorOptions.StartGrace], a Stalled=True or Reconciling=True as
// the package documentation's Restarts section says, within
// [AccumulatorOptions.NotReadyHold]. Whether the grace and the hold still
// run is read from [AccumulatorOptions.Clock], the clock that calls
// OnChange when they end, never from now: a now that lags or leads cannot
// keep an owner held after that call, nor end the hold early. Once Apply
// has changed an owner's conditions to a verdict, conditions that read as
// that verdict are this accumulator's own (it was written), and no longer
// held as an earlier process's; a verdict that was not written (a writer
// that writes only some, a write that failed) changes nothing of the hold:
// the hold depends on what is persisted, never on which Apply results the
// caller chose to write.
func (a *Accumulator) Apply(key types.NamespacedName, conditions *[]metav1.Condition, generation int64, now time.Time) (changed bool) {
	at := a.clock.Now()
	a.mu.Lock()
	o, known := a.owners[key]
	if !known {
		a.mu.Unlock()
		return false
	}
	gates := a.gatesLocked(key, at, o.own != nil && a.sameVerdict(*conditions, o.own))
	firstWrite := !HasTrio(*conditions)
	a.mu.Unlock()
	if firstWrite && holdsReady(gates) {
		// A new owner whose streams are still starting: its first write
		// waits for them to go live, or for the grace to end.
		return false
	}
	changed = Apply(conditions, gates, generation, now, a.opts)
	if changed {
		own := a.verdictOf(*conditions)
		a.mu.Lock()
		if o, ok := a.owners[key]; ok {
			o.own = own
		}
		a.mu.Unlock()
	}
	return changed
}

// Observes reports whether conditions hold the trio for generation: a
// Ready condition whose observedGeneration is generation. A writer that
// records status.observedGeneration beside the trio writes it only over
// conditions that observe it: after a change of generation, an owner whose
// persisted stall on streams stands over a restart until they show
// evidence keeps its conditions for the generation they observed, and
// status.observedGeneration written alone would have kstatus read the
// stall as the new generation's (Failed, not in progress). Skip the write
// when Apply changed nothing and status.observedGeneration is generation
// or the conditions do not observe it:
//
//	if !changed && (observed == generation || !readiness.Observes(after, generation)) {
//		return nil // nothing to write
//	}
func Observes(conditions []metav1.Condition, generation int64) bool {
	r := meta.FindStatusCondition(conditions, ConditionReady)
	return r != nil && r.ObservedGeneration == generation
}

// HasTrio reports whether conditions hold Ready, Reconciling or Stalled.
// A writer that records status.observedGeneration beside the trio writes
// it only over conditions that have one: kstatus reads a status whose
// observedGeneration is current and that has no conditions as Current,
// which an owner whose first write [Accumulator.Apply] holds is not.
func HasTrio(conditions []metav1.Condition) bool {
	return slices.ContainsFunc(conditions, func(c metav1.Condition) bool {
		return c.Type == ConditionReady || c.Type == ConditionReconciling || c.Type == ConditionStalled
	})
}

// ApplyStandby is [Accumulator.Apply] for a writer that runs while the
// controller's reconcile does not (a standby writer while the controller's
// caches sync, say), and so knows the owner's streams but none of the
// gates the reconcile sets: it changes conditions, and reports true, only
// when what the streams show must not wait for the reconcile: a verdict
// that is Stalled=True (a human must act) but for a Stalled=True already
// persisted for generation whose message names every gate stalled now
// (the human has been told; it would only reword the message, dropping
// the reconcile's gates it names), or a Ready=True taken away by a
// stream that is not established and not still starting (data is being
// lost). Any other verdict is left to the reconcile, which knows the
// gates, and conditions are left as they are. What the standby writer
// left unwritten holds nothing back: the restart hold follows the
// persisted conditions (see Apply).
func (a *Accumulator) ApplyStandby(key types.NamespacedName, conditions *[]metav1.Condition, generation int64, now time.Time) bool {
	after := slices.Clone(*conditions)
	if !a.Apply(key, &after, generation, now) {
		return false
	}
	stalled := meta.IsStatusConditionTrue(after, ConditionStalled)
	if stalled && a.toldAlready(key, *conditions, generation) {
		// The human has been told of this stall: the standby writer, which
		// knows none of the reconcile's gates, would only reword it (drop
		// the gates of the caller's own that the message names).
		return false
	}
	readyLost := meta.IsStatusConditionTrue(*conditions, ConditionReady) && !meta.IsStatusConditionTrue(after, ConditionReady) &&
		slices.ContainsFunc(a.Gates(key), func(g Gate) bool { return g.Stream && g.Level != LevelEstablished && !g.Starting })
	if !stalled && !readyLost {
		return false
	}
	*conditions = after
	return true
}

// toldAlready reports whether before is a Stalled=True for generation
// whose message names every gate of key's that is stalled now: a stall
// the human has been told of.
func (a *Accumulator) toldAlready(key types.NamespacedName, before []metav1.Condition, generation int64) bool {
	stalled := meta.FindStatusCondition(before, ConditionStalled)
	if stalled == nil || stalled.Status != metav1.ConditionTrue || stalled.ObservedGeneration != generation {
		return false
	}
	told := false
	for _, g := range a.Gates(key) {
		if g.Level.normal() != LevelStalled {
			continue
		}
		if !namedIn(stalled.Message, g.Name, a.opts.MessageLimit) {
			return false // a new cause
		}
		told = true
	}
	return told
}

// verdictTypes are the condition types Apply writes.
func (a *Accumulator) verdictTypes() []string {
	types := []string{ConditionReady, ConditionReconciling, ConditionStalled}
	if a.opts.StreamsCondition != "" {
		types = append(types, a.opts.StreamsCondition)
	}
	return types
}

// verdictOf returns the conditions of conditions that Apply writes, with
// no lastTransitionTime (the API server keeps it to the second).
func (a *Accumulator) verdictOf(conditions []metav1.Condition) []metav1.Condition {
	var out []metav1.Condition
	for _, typ := range a.verdictTypes() {
		if c := meta.FindStatusCondition(conditions, typ); c != nil {
			v := *c
			v.LastTransitionTime = metav1.Time{}
			out = append(out, v)
		}
	}
	return out
}

// sameVerdict reports whether conditions read as verdict, as verdictOf
// returned it.
func (a *Accumulator) sameVerdict(conditions, verdict []metav1.Condition) bool {
	return slices.Equal(a.verdictOf(conditions), verdict)
}

func (a *Accumulator) ownerLocked(key types.NamespacedName) *owner {
	o, ok := a.owners[key]
	if !ok {
		o = &owner{streams: map[string]struct{}{}, gates: map[string]Gate{}}
		a.owners[key] = o
	}
	return o
}

// heardOfLocked starts a stream's grace and hold the first time the
// accumulator hears of it, and arms the timers that tell its owners when
// they end: one pair for every stream heard of at one instant, which tells
// their owners in order, streams by name (two timers ending at one
// instant would tell them in the order the scheduler runs them).
func (a *Accumulator) heardOfLocked(stream string) {
	if _, ok := a.started[stream]; ok {
		return
	}
	at := a.clock.Now()
	a.started[stream] = at
	if a.onChange == nil {
		return // nobody to tell
	}
	if heard, ok := a.heardAt[at]; ok {
		*heard = append(*heard, stream)
		return
	}
	heard := &[]string{stream}
	a.heardAt[at] = heard
	end := func(hold bool) func() {
		return func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			if hold {
				delete(a.heardAt, at)
			}
			for _, stream := range slices.Sorted(slices.Values(*heard)) {
				if t, ok := a.started[stream]; !ok || !t.Equal(at) {
					continue // removed since
				}
				if _, ok := a.established[stream]; ok {
					continue // established in time: it held nothing at the end
				}
				if _, ok := a.stalled[stream]; ok && hold {
					continue // stalled in time: it holds nothing either
				}
				for _, key := range sortedKeys(a.byStream[stream]) {
					a.queueLocked(key)
				}
			}
		}
	}
	a.clock.AfterFunc(a.grace, end(false))
	a.clock.AfterFunc(a.hold, end(true))
}

// sortedKeys orders owners by namespace and name, so that OnChange calls
// for one change come in a stable order.
func sortedKeys(set map[types.NamespacedName]struct{}) []types.NamespacedName {
	return slices.SortedFunc(maps.Keys(set), func(a, b types.NamespacedName) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}

func (a *Accumulator) unindexLocked(stream string, key types.NamespacedName) {
	delete(a.byStream[stream], key)
	if len(a.byStream[stream]) == 0 {
		delete(a.byStream, stream)
	}
}

// gatesLocked returns key's gates at now; own is whether the conditions
// they are for are the accumulator's own verdict (none is held then).
func (a *Accumulator) gatesLocked(key types.NamespacedName, now time.Time, own bool) []Gate {
	o, ok := a.owners[key]
	if !ok {
		return nil
	}
	gates := make([]Gate, 0, len(o.streams)+len(o.gates))
	for name := range o.streams {
		g := pendingStreamGate(name)
		s, reported := a.streams[name]
		if reported {
			g = StreamGate(s)
		}
		started, ok := a.started[name]
		_, established := a.established[name]
		_, stalled := a.stalled[name]
		g.Starting = ok && !established && now.Sub(started) < a.grace && (!reported || startingState(s))
		g.Unconfirmed = ok && !established && !stalled && !own && now.Sub(started) < a.hold
		gates = append(gates, g)
	}
	gates = slices.AppendSeq(gates, maps.Values(o.gates))
	return sortGates(gates)
}

// startingState reports whether s, the state of a stream not established
// since the accumulator heard of it, is that of a stream still starting:
// Starting, or on its first replay whatever the replay's reason (a stream
// resumed from a persisted cursor that expired while the controller was
// down replays with ExpiredResourceVersion, not InitialSync).
func startingState(s watch.State) bool {
	return s.Phase == watch.PhaseStarting || s.Phase == watch.PhaseReplaying
}

// markLocked has the delivery goroutine evaluate stream's owners again.
func (a *Accumulator) markLocked(stream string) {
	if a.onChange == nil {
		return // verdicts are kept only to call OnChange
	}
	if _, ok := a.dirtySet[stream]; ok || len(a.byStream[stream]) == 0 {
		return
	}
	a.dirtySet[stream] = struct{}{}
	a.dirty = append(a.dirty, stream)
	a.startDeliveryLocked()
}

// evaluateLocked recomputes owner's verdict and queues OnChange when it
// moved. The verdict is rolled up as for an owner never established, at
// generation zero, with no grace: what the gates alone decide.
func (a *Accumulator) evaluateLocked(key types.NamespacedName) {
	o, ok := a.owners[key]
	if !ok || a.onChange == nil {
		return
	}
	gates := a.gatesLocked(key, time.Time{}, o.own != nil)
	v := Rollup(gates, nil, 0, a.opts)
	if o.verdict != nil && slices.Equal(o.verdict, v) {
		return
	}
	o.verdict = v
	a.queueLocked(key)
}

func (a *Accumulator) queueLocked(key types.NamespacedName) {
	if a.onChange == nil {
		return
	}
	if _, ok := a.queued[key]; ok {
		return
	}
	a.queued[key] = struct{}{}
	a.pending = append(a.pending, key)
	a.startDeliveryLocked()
}

func (a *Accumulator) startDeliveryLocked() {
	if !a.delivering {
		a.delivering = true
		go a.deliver()
	}
}

// evaluateBatch is how many owners the delivery goroutine evaluates under
// one hold of the lock, so that the observer and Apply never wait long.
const evaluateBatch = 64

// deliver evaluates the owners of dirty streams and calls OnChange for
// pending owners until there is nothing left to do.
func (a *Accumulator) deliver() {
	var keys []types.NamespacedName
	for {
		a.mu.Lock()
		if len(keys) == 0 && len(a.dirty) > 0 {
			stream := a.dirty[0]
			a.dirty = a.dirty[1:]
			delete(a.dirtySet, stream)
			keys = sortedKeys(a.byStream[stream])
		}
		n := min(len(keys), evaluateBatch)
		for _, key := range keys[:n] {
			a.evaluateLocked(key)
		}
		keys = keys[n:]
		if len(a.pending) == 0 {
			if len(keys) == 0 && len(a.dirty) == 0 {
				a.delivering = false
				a.mu.Unlock()
				return
			}
			a.mu.Unlock()
			continue
		}
		// One call between batches: calls are not held back by a long
		// evaluation, nor evaluations by slow calls.
		key := a.pending[0]
		a.pending = a.pending[1:]
		delete(a.queued, key)
		a.mu.Unlock()
		a.onChange(key)
	}
}
