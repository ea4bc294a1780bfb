package readiness

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/watchgrade/watchgrade/watch"
)

// AccumulatorOptions configures an [Accumulator]. The zero value works.
type AccumulatorOptions struct {
	// Rollup configures the roll-up behind each owner's verdict and
	// [Accumulator.Apply]. Defaults to Options' defaults.
	Rollup Options
	// OnChange is called with an owner's key each time its verdict (the
	// conditions Rollup decides from its gates) changes, including when an
	// owner is first tracked, so the controller can requeue it. Calls come
	// one at a time, in the order the changes happened (owners affected by
	// one change in namespace and name order), from a goroutine of the
	// accumulator's, never from the goroutine that caused the change; an
	// owner whose call is already waiting is not queued twice. A slow OnChange delays later calls but never the observer or
	// any other method. Handing the key to a workqueue is the intended use.
	// Defaults to none.
	OnChange func(types.NamespacedName)
}

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
// Owners are keyed by namespace and name; use one accumulator per kind of
// owner. Create one with [NewAccumulator]; all methods are safe for
// concurrent use. The accumulator owns no long-lived goroutine: a delivery
// goroutine runs only while OnChange calls are pending and exits when none
// is, so there is nothing to stop.
type Accumulator struct {
	opts     Options
	onChange func(types.NamespacedName)

	mu       sync.Mutex
	streams  map[string]watch.State
	owners   map[types.NamespacedName]*owner
	byStream map[string]map[types.NamespacedName]struct{}

	// Pending OnChange calls, in order, without duplicates.
	pending    []types.NamespacedName
	queued     map[types.NamespacedName]struct{}
	delivering bool
}

type owner struct {
	streams map[string]struct{}
	gates   map[string]Gate
	verdict []metav1.Condition
}

// NewAccumulator returns an empty accumulator.
func NewAccumulator(opts AccumulatorOptions) *Accumulator {
	return &Accumulator{
		opts:     opts.Rollup,
		onChange: opts.OnChange,
		streams:  make(map[string]watch.State),
		owners:   make(map[types.NamespacedName]*owner),
		byStream: make(map[string]map[types.NamespacedName]struct{}),
		queued:   make(map[types.NamespacedName]struct{}),
	}
}

var _ watch.Observer = (*Accumulator)(nil)

// StateChanged records a stream's state and re-evaluates the owners that
// track it. It never blocks on OnChange.
func (a *Accumulator) StateChanged(s watch.State) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.streams[s.Stream] = s
	for _, key := range sortedKeys(a.byStream[s.Stream]) {
		a.evaluateLocked(key)
	}
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
	}
	a.evaluateLocked(key)
}

// SetGate sets one of owner's own gates (its Stream field is ignored),
// replacing any with the same name, and creates the owner if it is new.
func (a *Accumulator) SetGate(key types.NamespacedName, g Gate) {
	a.mu.Lock()
	defer a.mu.Unlock()
	g.Stream = false
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
// A stream of the same name that reports later is recorded afresh, but
// owners depend on it again only after [Accumulator.Track].
func (a *Accumulator) RemoveStream(stream string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.streams, stream)
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

// Gates returns owner's gates, worst first in the tie order of [Rollup]:
// one per tracked stream and one per gate of its own. An owner that is not
// known has none.
func (a *Accumulator) Gates(key types.NamespacedName) []Gate {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gatesLocked(key)
}

// Apply writes owner's trio onto conditions with the accumulator's
// options: [Apply] of [Accumulator.Gates].
func (a *Accumulator) Apply(key types.NamespacedName, conditions *[]metav1.Condition, generation int64, now time.Time) (changed bool) {
	return Apply(conditions, a.Gates(key), generation, now, a.opts)
}

func (a *Accumulator) ownerLocked(key types.NamespacedName) *owner {
	o, ok := a.owners[key]
	if !ok {
		o = &owner{streams: map[string]struct{}{}, gates: map[string]Gate{}}
		a.owners[key] = o
	}
	return o
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

func (a *Accumulator) gatesLocked(key types.NamespacedName) []Gate {
	o, ok := a.owners[key]
	if !ok {
		return nil
	}
	gates := make([]Gate, 0, len(o.streams)+len(o.gates))
	for name := range o.streams {
		if s, ok := a.streams[name]; ok {
			gates = append(gates, StreamGate(s))
		} else {
			gates = append(gates, pendingStreamGate(name))
		}
	}
	gates = slices.AppendSeq(gates, maps.Values(o.gates))
	return sortGates(gates)
}

// evaluateLocked recomputes owner's verdict and queues OnChange when it
// moved. The verdict is rolled up as for an owner never established, at
// generation zero: what the gates alone decide.
func (a *Accumulator) evaluateLocked(key types.NamespacedName) {
	o := a.owners[key]
	v := Rollup(a.gatesLocked(key), nil, 0, a.opts)
	if o.verdict != nil && slices.Equal(o.verdict, v) {
		return
	}
	o.verdict = v
	if a.onChange == nil {
		return
	}
	if _, ok := a.queued[key]; ok {
		return
	}
	a.queued[key] = struct{}{}
	a.pending = append(a.pending, key)
	if !a.delivering {
		a.delivering = true
		go a.deliver()
	}
}

// deliver calls OnChange for pending owners until none is left.
func (a *Accumulator) deliver() {
	for {
		a.mu.Lock()
		if len(a.pending) == 0 {
			a.delivering = false
			a.mu.Unlock()
			return
		}
		key := a.pending[0]
		a.pending = a.pending[1:]
		delete(a.queued, key)
		a.mu.Unlock()
		a.onChange(key)
	}
}
