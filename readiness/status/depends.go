package status

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/watchgrade/watchgrade/readiness"
	"github.com/watchgrade/watchgrade/watch"
)

// Reasons of the Stalled gates [Writer.Track] sets on an owner for what
// it depends on that nothing watches.
const (
	// ReasonUnknownStream: a stream in [Dependencies.Streams] that no
	// informer of [Options.Streams] is named after (a name that does not
	// follow the kind's stream name, or an informer not made before
	// Track). Without the gate the owner would wait, Reconciling, for a
	// stream that never reports.
	ReasonUnknownStream = "UnknownStream"
	// ReasonNamespaceNotWatched: a namespace the owner depends on a kind
	// in, where the cache, asked for the kind's informers, made none
	// ([Writer.NotWatched]): it watches the kind in other namespaces.
	// Without the gate the owner would wait, Reconciling, on data nobody
	// watches.
	ReasonNamespaceNotWatched = "NamespaceNotWatched"
)

// Dependencies are what one owner depends on, for [Writer.Track].
type Dependencies struct {
	// Kinds are the stream names of the kinds the owner depends on (its
	// controller's watched kinds, "ConfigMap.v1"), followed in Namespaces
	// through [watch.Streams.Dependencies]: the kind's worst state, or
	// each namespace's own where the cache is restricted to namespaces.
	Kinds []string
	// Namespaces are the namespaces the owner depends on the Kinds in;
	// none: every namespace.
	Namespaces []string
	// Streams are further stream names the owner depends on as they are
	// (an informer made per owner, say). With [Options.Streams] set, one
	// that no informer has and that is not one of Kinds is a Stalled gate,
	// [ReasonUnknownStream]: make the informer before Track. A
	// [watch.NamespacedStream] ("shop/Secret.v1") is known where an
	// informer of the kind is restricted to that namespace
	// ([watch.Streams.Has]).
	Streams []string
}

// Track sets what the owner key depends on: the streams its verdict
// follows, and a Stalled gate for each dependency nothing watches
// ([ReasonUnknownStream], [ReasonNamespaceNotWatched]), taken back once
// it is watched or no longer depended on. Call it whenever the owner is
// seen (its informer's add and update, and each Reconcile before the
// status step): it changes nothing when nothing changed. [Writer.Forget]
// forgets it.
func (w *Writer) Track(key types.NamespacedName, d Dependencies) {
	d = d.normalized()
	w.tracking.Lock()
	defer w.tracking.Unlock()
	w.mu.Lock()
	w.deps[key] = d
	w.mu.Unlock()
	w.track(key, d)
}

// TrackStreams sets further streams the owner key depends on, beyond
// those its Dependencies name: an informer your Reconcile makes for this
// owner, say (make it before: with [Options.Streams] set, a name no
// informer has is a Stalled gate, [ReasonUnknownStream]). They are kept
// when the owner is tracked again ([Writer.Track], [Writer.OwnerHandler]
// as its dependencies change) until the next TrackStreams; none clears
// them. [Writer.Forget] forgets them.
func (w *Writer) TrackStreams(key types.NamespacedName, streams ...string) {
	w.tracking.Lock()
	defer w.tracking.Unlock()
	w.mu.Lock()
	if len(streams) == 0 {
		delete(w.extra, key)
	} else {
		w.extra[key] = slices.Clone(streams)
	}
	d := w.deps[key]
	w.mu.Unlock()
	w.track(key, d)
}

// normalized is a copy of d as Track keeps it: its namespaces sorted,
// each once.
func (d Dependencies) normalized() Dependencies {
	nss := slices.Clone(d.Namespaces)
	slices.Sort(nss)
	return Dependencies{Kinds: slices.Clone(d.Kinds), Namespaces: slices.Compact(nss), Streams: slices.Clone(d.Streams)}
}

// track tells the accumulator the streams key depends on, and gates what
// nothing watches. The caller holds w.tracking, so that what the
// accumulator tracks is what w.deps holds.
func (w *Writer) track(key types.NamespacedName, d Dependencies) {
	acc := w.opts.Accumulator
	w.mu.Lock()
	if extra := w.extra[key]; len(extra) > 0 {
		d.Streams = slices.Concat(d.Streams, extra)
		slices.Sort(d.Streams)
		d.Streams = slices.Compact(d.Streams)
	}
	w.mu.Unlock()
	var streams []string
	stalled := map[string]bool{}
	for _, kind := range d.Kinds {
		streams = append(streams, w.streams.Dependencies(kind, nilIfEmpty(d.Namespaces))...)
		for _, ns := range d.Namespaces {
			if !w.isNotWatched(kind, ns) {
				continue
			}
			name := watch.NamespacedStream(ns, kind)
			stalled[name] = true
			acc.SetGate(key, readiness.Stalled(name, ReasonNamespaceNotWatched, fmt.Sprintf(
				"nothing watches %s in namespace %s: the cache watches it in other namespaces only; add %s to the cache's namespaces, or depend on %s in the cache's namespaces only", kind, ns, ns, kind)))
		}
	}
	acc.Track(key, append(streams, d.Streams...)...)
	if w.opts.Streams != nil {
		for _, name := range d.Streams {
			if !w.streams.Has(name) && !slices.Contains(d.Kinds, name) {
				stalled[name] = true
				acc.SetGate(key, readiness.Stalled(name, ReasonUnknownStream, unknownStreamMessage(name)))
			}
		}
	}
	for _, gate := range acc.Gates(key) {
		if !gate.Stream && (gate.Reason == ReasonUnknownStream || gate.Reason == ReasonNamespaceNotWatched) && !stalled[gate.Name] {
			acc.RemoveGate(key, gate.Name)
		}
	}
}

// unknownStreamMessage says what to do about a tracked stream no informer
// has: a kind's name, or a namespace and a kind (watch.NamespacedStream).
func unknownStreamMessage(name string) string {
	if ns, kind, ok := strings.Cut(name, "/"); ok {
		return fmt.Sprintf("no informer of %s is restricted to namespace %s, so nothing is heard under %q: depend on %s (its informers of every namespace), or make an informer of %s in %s before tracking it", kind, ns, name, kind, kind, ns)
	}
	return fmt.Sprintf("no informer is named %q: name a stream after its kind (watch.StreamName: Kind.version.group), and make its informer before tracking it", name)
}

// nilIfEmpty is nss, or nil (every namespace) when it has none.
func nilIfEmpty(nss []string) []string {
	if len(nss) == 0 {
		return nil
	}
	return nss
}

// isNotWatched reports whether the cache, asked for the informers of kind
// in namespace, made none ([Writer.NotWatched]), and still has none there.
func (w *Writer) isNotWatched(kind, namespace string) bool {
	w.mu.Lock()
	asked := w.notWatched[watch.NamespacedStream(namespace, kind)]
	w.mu.Unlock()
	return asked && len(w.streams.Missing(kind, []string{namespace})) > 0
}

// NotWatched records that the cache, asked for the informers of kind in
// namespaces, made none there (a cache restricted to other namespaces),
// and tracks again every owner that depends on kind: those that depend on
// it in one of namespaces get a Stalled gate, [ReasonNamespaceNotWatched],
// for as long as no informer of kind serves the namespace.
func (w *Writer) NotWatched(kind string, namespaces ...string) {
	w.mu.Lock()
	for _, ns := range namespaces {
		w.notWatched[watch.NamespacedStream(ns, kind)] = true
	}
	w.mu.Unlock()
	w.Retrack(kind)
}

// Retrack tracks again every owner that depends on kind, with the
// dependencies its last Track gave: call it when an informer of kind is
// made in a namespace it had none in, so that the owners that depend on
// the kind there follow it from then on.
func (w *Writer) Retrack(kind string) {
	w.retrack(func(d Dependencies) bool { return slices.Contains(d.Kinds, kind) })
}

// retrack tracks again, in key order, every owner tracked whose
// dependencies match: a test that replays a history wants one order of
// the verdicts that move.
func (w *Writer) retrack(match func(Dependencies) bool) {
	w.mu.Lock()
	var keys []types.NamespacedName
	for k, d := range w.deps {
		if match(d) {
			keys = append(keys, k)
		}
	}
	w.mu.Unlock()
	slices.SortFunc(keys, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	w.tracking.Lock()
	defer w.tracking.Unlock()
	for _, k := range keys {
		w.mu.Lock()
		d, ok := w.deps[k]
		w.mu.Unlock()
		if ok {
			w.track(k, d)
		}
	}
}

// TrackedNamespaces returns the namespaces the owners tracked depend on
// kinds in, sorted: those to make the kinds' informers in, in a cache
// restricted to namespaces. An owner that depends on every namespace adds
// none.
func (w *Writer) TrackedNamespaces() []string {
	w.mu.Lock()
	var nss []string
	for _, d := range w.deps {
		nss = append(nss, d.Namespaces...)
	}
	w.mu.Unlock()
	slices.Sort(nss)
	return slices.Compact(nss)
}

// NotServed tells the writer that the API server does not serve kind (a
// stream name; its CustomResourceDefinition is not installed), whose
// resource is resource: there is no stream to grade, and its informers
// wait. Call it each time the kind is found not served. Once it has not
// been served for [Options.HumanGrace], the kind's stream, under every
// name an owner may follow it by ([watch.Streams.Aliases]), is Blocked,
// reason [watch.ReasonResourceNotFound], needing a human: every owner that
// depends on it is Stalled, as its informers would have it if they could
// run. [Writer.Served] takes it back. The probe of [Options.Streams]
// (its Synced) does not wait for the kind: no informer of it can sync.
// [Writer.AwaitInformer] calls it as it should be called.
func (w *Writer) NotServed(kind string, resource schema.GroupResource) {
	w.forgetSynced(kind) // no informer: the probe does not wait for one
	now := w.opts.Clock.Now()
	w.mu.Lock()
	since, seen := w.notServed[kind]
	if !seen {
		w.notServed[kind] = now
		since = now
	}
	report := !since.IsZero() && now.Sub(since) >= w.opts.HumanGrace
	if report {
		w.notServed[kind] = time.Time{} // reported
	}
	w.mu.Unlock()
	if !report {
		return
	}
	for _, name := range w.streams.Aliases(kind) {
		w.opts.Accumulator.StateChanged(watch.State{
			Stream:     name,
			Resource:   resource,
			Phase:      watch.PhaseBlocked,
			Reason:     watch.ReasonResourceNotFound,
			Message:    fmt.Sprintf("the API server does not serve %s: install its CustomResourceDefinition", resource),
			NeedsHuman: true,
		})
	}
}

// Served tells the writer that the API server serves kind (again): a
// report of [Writer.NotServed] is taken back, the kind's stream Starting
// under every name, unless its informers have published a state of
// their own, which stands.
func (w *Writer) Served(kind string, resource schema.GroupResource) {
	w.mu.Lock()
	since, seen := w.notServed[kind]
	delete(w.notServed, kind)
	w.mu.Unlock()
	if !seen || !since.IsZero() {
		return // never reported
	}
	for _, name := range w.streams.Aliases(kind) {
		w.opts.Accumulator.StateChanged(watch.State{
			Stream:   name,
			Resource: resource,
			Phase:    watch.PhaseStarting,
			Reason:   watch.ReasonStarting,
			Message:  "the API server serves the kind now; its informer is starting",
		})
		if s, ok := w.streams.Shown(name); ok {
			w.opts.Accumulator.StateChanged(s)
		}
	}
}

// OwnerEvents configures [Writer.OwnerHandler].
type OwnerEvents struct {
	// Dependencies returns what owner depends on, for [Writer.Track].
	// Nil: nothing (the owner is Reconciling, NoGates, but for gates of
	// your own).
	Dependencies func(owner metav1.Object) Dependencies
	// Changed is told each owner to reconcile: one added, one whose
	// dependencies changed, one with a new generation. It must not block
	// (queue the key). Optional.
	Changed func(key types.NamespacedName)
	// Deleted is told each owner deleted, once the writer has forgotten
	// it ([Writer.Forget]): forget what you keep of it. Optional.
	Deleted func(key types.NamespacedName)
}

// OwnerHandler returns the handler of the owner kind's informer: the
// owner's lifecycle as the status step follows it. Each owner added or
// updated is sighted for time-to-first-Ready and its first outcome
// ([Writer.Sight]: one that became Ready while no Reconcile ran is still
// seen once) and tracked ([Writer.Track]) when what it depends on
// changed; each one deleted is forgotten everywhere ([Writer.Forget]),
// its time-to-first-Ready claim included. An object the handler cannot
// read metadata of is left alone.
func (w *Writer) OwnerHandler(e OwnerEvents) toolscache.ResourceEventHandler {
	if e.Dependencies == nil {
		e.Dependencies = func(metav1.Object) Dependencies { return Dependencies{} }
	}
	changed := func(key types.NamespacedName) {
		if e.Changed != nil {
			e.Changed(key)
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(x any) {
			m, ok := w.seen(x)
			if !ok {
				return
			}
			key := types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}
			w.mu.Lock()
			delete(w.gone, key) // made again under the name, if it was deleted
			w.mu.Unlock()
			w.Track(key, e.Dependencies(m))
			changed(key)
		},
		UpdateFunc: func(before, after any) {
			m, ok := w.seen(after)
			if !ok {
				return
			}
			key := types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}
			d := e.Dependencies(m)
			w.mu.Lock()
			prev, tracked := w.deps[key]
			w.mu.Unlock()
			moved := !tracked || !prev.same(d.normalized())
			if moved {
				w.Track(key, d)
			}
			if b, err := meta.Accessor(before); moved || (err == nil && b.GetGeneration() != m.GetGeneration()) {
				changed(key)
			}
		},
		DeleteFunc: func(x any) {
			if d, ok := x.(toolscache.DeletedFinalStateUnknown); ok {
				x = d.Obj
			}
			m, err := meta.Accessor(x)
			if err != nil {
				return
			}
			key := types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}
			w.forget(key, m.GetUID(), true)
			if e.Deleted != nil {
				e.Deleted(key)
			}
		},
	}
}

// seen sights x, an owner of the informer, and returns its metadata.
func (w *Writer) seen(x any) (metav1.Object, bool) {
	m, err := meta.Accessor(x)
	if err != nil {
		return nil, false
	}
	if ro, ok := x.(runtime.Object); ok {
		w.Sight(ro)
	}
	return m, true
}

// same reports whether d and e say the same, both normalized.
func (d Dependencies) same(e Dependencies) bool {
	return slices.Equal(d.Kinds, e.Kinds) && slices.Equal(d.Namespaces, e.Namespaces) && slices.Equal(d.Streams, e.Streams)
}

// Tracked returns what key depends on as its last [Writer.Track] said,
// if it is tracked and not forgotten.
func (w *Writer) Tracked(key types.NamespacedName) (Dependencies, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d, ok := w.deps[key]
	if !ok {
		return Dependencies{}, false
	}
	return d.normalized(), true
}
