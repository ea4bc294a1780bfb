package status_test

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
	"github.com/watchgrade/watchgrade/watch"
)

const kind = "ConfigMap.v1"

// dependsFixture is a writer over a Streams whose informers the test adds.
type dependsFixture struct {
	clock   *clocktesting.FakeClock
	acc     *wgreadiness.Accumulator
	streams *watch.Streams
	w       *wgstatus.Writer
}

func newDependsFixture(t *testing.T, streams *watch.Streams) *dependsFixture {
	t.Helper()
	f := &dependsFixture{clock: clocktesting.NewFakeClock(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)), streams: streams}
	var err error
	if f.acc, err = wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{Clock: f.clock}); err != nil {
		t.Fatal(err)
	}
	if streams != nil {
		streams.InNamespace = f.acc
		streams.Observer = f.acc
	}
	if f.w, err = wgstatus.New(wgstatus.Options{
		Accumulator: f.acc, Update: newServer(1).update, Resource: resource, Clock: f.clock, Streams: streams,
	}); err != nil {
		t.Fatal(err)
	}
	return f
}

// gate returns key's gate named name, if it has one.
func (f *dependsFixture) gate(key types.NamespacedName, name string) (wgreadiness.Gate, bool) {
	i := slices.IndexFunc(f.acc.Gates(key), func(g wgreadiness.Gate) bool { return g.Name == name })
	if i < 0 {
		return wgreadiness.Gate{}, false
	}
	return f.acc.Gates(key)[i], true
}

func TestTrackGatesAStreamNoInformerHas(t *testing.T) {
	f := newDependsFixture(t, &watch.Streams{})
	f.streams.Add(kind, "", nil)
	f.w.Track(key, wgstatus.Dependencies{Kinds: []string{kind}, Streams: []string{"Secret.v1", kind}})
	g, ok := f.gate(key, "Secret.v1")
	if !ok || g.Level != wgreadiness.LevelStalled || g.Reason != wgstatus.ReasonUnknownStream {
		t.Fatalf("gate Secret.v1 = %+v (%v), want Stalled %s", g, ok, wgstatus.ReasonUnknownStream)
	}
	if g, ok := f.gate(key, kind); ok && g.Reason == wgstatus.ReasonUnknownStream {
		t.Errorf("a watched kind tracked as a stream is gated as unknown: %+v", g)
	}
	// The informer made: the gate is taken back at the next Track.
	f.streams.Add("Secret.v1", "", nil)
	f.w.Track(key, wgstatus.Dependencies{Kinds: []string{kind}, Streams: []string{"Secret.v1"}})
	if g, _ := f.gate(key, "Secret.v1"); g.Reason == wgstatus.ReasonUnknownStream {
		t.Errorf("gate Secret.v1 = %+v after its informer was made, want no %s", g, wgstatus.ReasonUnknownStream)
	}
}

// TestTrackKnowsANamespacedStreamOfARestrictedInformer: a stream named
// after a namespace and a kind (watch.NamespacedStream) is known once an
// informer of the kind is restricted to that namespace: the name the
// accumulator hears its states under. Only a namespace no informer of the
// kind serves is unknown.
func TestTrackKnowsANamespacedStreamOfARestrictedInformer(t *testing.T) {
	f := newDependsFixture(t, &watch.Streams{})
	f.streams.Add(kind, "", nil)
	f.streams.Add("Secret.v1", "shop", nil)
	f.w.Track(key, wgstatus.Dependencies{Kinds: []string{kind}})
	f.w.TrackStreams(key, watch.NamespacedStream("shop", "Secret.v1"), watch.NamespacedStream("team-b", "Secret.v1"))
	if g, ok := f.gate(key, "shop/Secret.v1"); !ok || g.Reason == wgstatus.ReasonUnknownStream {
		t.Errorf("gate shop/Secret.v1 = %+v (%v), want it followed, not %s", g, ok, wgstatus.ReasonUnknownStream)
	}
	if g, _ := f.gate(key, "team-b/Secret.v1"); g.Reason != wgstatus.ReasonUnknownStream {
		t.Errorf("gate team-b/Secret.v1 = %+v, want Stalled %s: no informer serves team-b", g, wgstatus.ReasonUnknownStream)
	}
}

// TestTrackStreamsAreKeptWhenTrackedAgain: the streams a Reconcile adds
// for one owner stand when the owner is tracked again (its informer's
// update, a namespace's informer made), until TrackStreams changes them
// or the owner is forgotten.
func TestTrackStreamsAreKeptWhenTrackedAgain(t *testing.T) {
	f := newDependsFixture(t, &watch.Streams{})
	f.streams.Add(kind, "", nil)
	f.streams.Add("Secret.v1", "team-a", nil)
	has := func(name string) bool { _, ok := f.gate(key, name); return ok }
	f.w.Track(key, wgstatus.Dependencies{Kinds: []string{kind}})
	f.w.TrackStreams(key, "team-a/Secret.v1")
	f.w.Track(key, wgstatus.Dependencies{Kinds: []string{kind}, Namespaces: []string{"shop"}})
	f.w.Retrack(kind)
	if !has("team-a/Secret.v1") || !has(kind) {
		t.Fatalf("gates %+v after tracking again, want the kind's and team-a/Secret.v1", f.acc.Gates(key))
	}
	if d, _ := f.w.Tracked(key); len(d.Streams) != 0 {
		t.Errorf("Tracked = %+v, want the Dependencies as given (no streams)", d)
	}
	f.w.TrackStreams(key, "Unknown.v1")
	if has("team-a/Secret.v1") {
		t.Error("team-a/Secret.v1 still followed after TrackStreams replaced it")
	}
	if g, _ := f.gate(key, "Unknown.v1"); g.Reason != wgstatus.ReasonUnknownStream {
		t.Errorf("gate Unknown.v1 = %+v, want Stalled %s", g, wgstatus.ReasonUnknownStream)
	}
	f.w.Forget(key, "")
	f.w.Track(key, wgstatus.Dependencies{Kinds: []string{kind}})
	if has("Unknown.v1") {
		t.Error("a forgotten owner's streams came back when it was tracked again")
	}
}

func TestTrackWithoutStreamsKnowsNoUnknownStream(t *testing.T) {
	f := newDependsFixture(t, nil)
	f.w.Track(key, wgstatus.Dependencies{Kinds: []string{kind}, Streams: []string{"Secret.v1"}})
	for _, g := range f.acc.Gates(key) {
		if g.Reason == wgstatus.ReasonUnknownStream {
			t.Errorf("gate %+v without Options.Streams, want none unknown", g)
		}
	}
	if n := len(f.acc.Gates(key)); n != 2 {
		t.Errorf("gates = %d, want 2 (the kind and the stream)", n)
	}
}

func TestNotWatchedNamespaceIsStalledUntilAnInformerServesIt(t *testing.T) {
	f := newDependsFixture(t, &watch.Streams{})
	f.streams.Add(kind, "team-a", nil)
	other := types.NamespacedName{Namespace: "team-a", Name: "db"}
	f.w.Track(key, wgstatus.Dependencies{Kinds: []string{kind}, Namespaces: []string{"shop"}})
	f.w.Track(other, wgstatus.Dependencies{Kinds: []string{kind}, Namespaces: []string{"team-a"}})
	if got := f.w.TrackedNamespaces(); !slices.Equal(got, []string{"shop", "team-a"}) {
		t.Errorf("TrackedNamespaces = %v, want [shop team-a]", got)
	}
	f.w.NotWatched(kind, "shop")
	name := watch.NamespacedStream("shop", kind)
	if g, ok := f.gate(key, name); !ok || g.Reason != wgstatus.ReasonNamespaceNotWatched || g.Level != wgreadiness.LevelStalled {
		t.Fatalf("gate %s = %+v (%v), want Stalled %s", name, g, ok, wgstatus.ReasonNamespaceNotWatched)
	}
	for _, g := range f.acc.Gates(other) {
		if g.Reason == wgstatus.ReasonNamespaceNotWatched {
			t.Errorf("the owner in a watched namespace has %+v", g)
		}
	}
	// The cache makes the namespace's informer: Retrack takes the gate back.
	f.streams.Add(kind, "shop", nil)
	f.w.Retrack(kind)
	if g, _ := f.gate(key, name); g.Reason == wgstatus.ReasonNamespaceNotWatched {
		t.Errorf("gate %s = %+v once an informer serves the namespace", name, g)
	}
	// Forgotten: no namespace of its own any more.
	f.w.Forget(key, "")
	if got := f.w.TrackedNamespaces(); !slices.Equal(got, []string{"team-a"}) {
		t.Errorf("TrackedNamespaces after Forget = %v, want [team-a]", got)
	}
}

func TestNotServedIsReportedAfterTheGraceAndTakenBack(t *testing.T) {
	streams := &watch.Streams{Configured: func(string) []string { return []string{"shop"} }}
	f := newDependsFixture(t, streams)
	gr := schema.GroupResource{Group: "example.dev", Resource: "Widget"}
	const widget = "Widget.v1.example.dev"
	f.w.Track(key, wgstatus.Dependencies{Kinds: []string{widget}, Namespaces: []string{"shop"}})
	stalled := func() bool {
		g, ok := f.gate(key, watch.NamespacedStream("shop", widget))
		return ok && g.Level == wgreadiness.LevelStalled && g.Reason == string(watch.ReasonResourceNotFound)
	}
	f.w.NotServed(widget, gr)
	f.clock.Step(watch.DefaultHumanGrace - time.Second)
	f.w.NotServed(widget, gr)
	if stalled() {
		t.Fatal("stalled within the human grace")
	}
	f.clock.Step(time.Second)
	f.w.NotServed(widget, gr)
	if !stalled() {
		t.Fatalf("gates %+v after the grace, want the namespace's stream (a restricted cache's) Blocked, %s", f.acc.Gates(key), watch.ReasonResourceNotFound)
	}
	f.w.Served(widget, gr)
	if stalled() {
		t.Error("still stalled once served")
	}
	// Removed again an hour later: the grace runs again.
	f.clock.Step(time.Hour)
	f.w.NotServed(widget, gr)
	if stalled() {
		t.Error("stalled at once when the kind went unserved again, want after the grace")
	}
}

func TestOwnerHandlerFollowsTheLifecycle(t *testing.T) {
	f := newDependsFixture(t, nil)
	var changed, deleted []types.NamespacedName
	follow := map[string][]string{"db": {"shop"}}
	h := f.w.OwnerHandler(wgstatus.OwnerEvents{
		Dependencies: func(o metav1.Object) wgstatus.Dependencies {
			return wgstatus.Dependencies{Kinds: []string{kind}, Namespaces: follow[o.GetName()]}
		},
		Changed: func(k types.NamespacedName) { changed = append(changed, k) },
		Deleted: func(k types.NamespacedName) { deleted = append(deleted, k) },
	})
	owner := func(generation int64) *unstructured.Unstructured {
		u := newServer(generation).read()
		u.SetUID("uid-1")
		return u
	}
	h.OnAdd(owner(1), true)
	if d, ok := f.w.Tracked(key); !ok || !slices.Equal(d.Namespaces, []string{"shop"}) || !slices.Equal(d.Kinds, []string{kind}) {
		t.Fatalf("Tracked after add = %+v, %v", d, ok)
	}
	h.OnUpdate(owner(1), owner(1)) // a resync: nothing moved
	if len(changed) != 1 {
		t.Errorf("changed %v after an add and a resync, want the add only", changed)
	}
	h.OnUpdate(owner(1), owner(2))
	if len(changed) != 2 {
		t.Errorf("changed %v after a new generation, want it queued", changed)
	}
	follow["db"] = []string{"team-a", "shop"}
	h.OnUpdate(owner(2), owner(2))
	if d, _ := f.w.Tracked(key); !slices.Equal(d.Namespaces, []string{"shop", "team-a"}) || len(changed) != 3 {
		t.Errorf("after its namespaces changed: Tracked = %+v, changed %v; want both namespaces, queued", d, changed)
	}
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: key.String(), Obj: owner(2)})
	if _, ok := f.w.Tracked(key); ok || !slices.Equal(deleted, []types.NamespacedName{key}) {
		t.Errorf("after a delete (a tombstone): still tracked %v, deleted %v", ok, deleted)
	}
	if g := f.acc.Gates(key); len(g) != 0 {
		t.Errorf("gates after a delete = %+v, want none (forgotten)", g)
	}
	h.OnAdd("not an object", false) // left alone, no panic
}
