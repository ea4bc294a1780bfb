package sandbox

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"

	"github.com/watchgrade/watchgrade/examples/clientgo"
	"github.com/watchgrade/watchgrade/examples/watchtarget"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// Target is one WatchTarget's status as read from the API server.
type Target struct {
	Name               string
	Generation         int64
	ObservedGeneration int64
	// Conditions holds Ready, Reconciling and Stalled as written.
	Conditions []metav1.Condition
	// ResourceVersion is the object's resourceVersion when this status was
	// first seen.
	ResourceVersion string
	// Seen is when this status was first seen.
	Seen time.Time
	// Object is the WatchTarget as the API server sent it.
	Object *unstructured.Unstructured
}

// Status returns the status of condition typ, "" if absent.
func (t Target) Status(typ string) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(t.Conditions, typ); c != nil {
		return c.Status
	}
	return ""
}

// Reason returns the reason of condition typ, "" if absent.
func (t Target) Reason(typ string) string {
	if c := meta.FindStatusCondition(t.Conditions, typ); c != nil {
		return c.Reason
	}
	return ""
}

// Ready reports Ready=True for the current generation: what
// `kubectl wait --for=condition=Ready` waits for.
func (t Target) Ready() bool {
	return t.Status(wgreadiness.ConditionReady) == metav1.ConditionTrue && t.ObservedGeneration == t.Generation
}

// String is one line: name, generation and the trio.
func (t Target) String() string {
	s := fmt.Sprintf("%s gen=%d observed=%d", t.Name, t.Generation, t.ObservedGeneration)
	for _, typ := range []string{wgreadiness.ConditionReady, wgreadiness.ConditionReconciling, wgreadiness.ConditionStalled} {
		if c := meta.FindStatusCondition(t.Conditions, typ); c != nil {
			s += fmt.Sprintf(" %s=%s(%s)", typ, c.Status, c.Reason)
		}
	}
	return s
}

// same reports whether two samples say the same thing (times and
// resourceVersions aside).
func (t Target) same(u Target) bool {
	if t.Generation != u.Generation || t.ObservedGeneration != u.ObservedGeneration || len(t.Conditions) != len(u.Conditions) {
		return false
	}
	for _, c := range t.Conditions {
		d := meta.FindStatusCondition(u.Conditions, c.Type)
		if d == nil || d.Status != c.Status || d.Reason != c.Reason || d.Message != c.Message {
			return false
		}
	}
	return true
}

// changes is a broadcast: every change closes the current channel.
type changes struct {
	mu sync.Mutex
	ch chan struct{}
}

func (c *changes) wait() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

// await waits, for at most timeout, until ok holds; ok is checked again
// after every change.
func (c *changes) await(ctx context.Context, timeout time.Duration, ok func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		changed := c.wait()
		if ok() {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Quiet returns once nothing has changed for d, or ctx has ended: for
// absence measured over a window (a recorder's Events all arrived).
func (c *changes) Quiet(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-c.wait():
			timer.Reset(d)
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (c *changes) notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
}

// Targets follows the WatchTargets of the namespace with a graded stream
// and keeps every distinct status each one showed, in order, and when each
// was written.
type Targets struct {
	changes
	onChange func(Target)

	mu      sync.Mutex
	history map[string][]Target
	// version is the last resourceVersion seen of each target; writes has
	// the times at which a new one was seen, the first excepted.
	version map[string]string
	writes  map[string][]time.Time
}

// WatchTargets starts following the namespace's WatchTargets until ctx
// ends. onChange, if set, is called (from the stream's goroutine) with
// every new distinct status.
func (e *Env) WatchTargets(ctx context.Context, onChange func(Target)) (*Targets, error) {
	t := &Targets{onChange: onChange, history: map[string][]Target{}, version: map[string]string{}, writes: map[string][]time.Time{}}
	err := e.follow(ctx, watchtarget.Resource, "sandbox-watchtargets", wgwatch.HandlerFuncs{
		SnapshotFunc: func(_ context.Context, snap wgwatch.Snapshot) error {
			for _, obj := range snap.Objects {
				t.record(obj)
			}
			return nil
		},
		EventFunc: func(_ context.Context, ev apiwatch.Event) error {
			if ev.Type != apiwatch.Deleted {
				t.record(ev.Object)
			}
			return nil
		},
	})
	return t, err
}

func (t *Targets) record(obj runtime.Object) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	wt, err := watchtarget.FromUnstructured(u)
	if err != nil {
		return
	}
	s := Target{
		Name: wt.Name, Generation: wt.Generation, ObservedGeneration: wt.Status.ObservedGeneration, Conditions: wt.Status.Conditions,
		ResourceVersion: wt.ResourceVersion, Seen: time.Now(), Object: u.DeepCopy(),
	}
	t.mu.Lock()
	if last, ok := t.version[s.Name]; ok && last != s.ResourceVersion {
		t.writes[s.Name] = append(t.writes[s.Name], s.Seen)
	}
	t.version[s.Name] = s.ResourceVersion
	h := t.history[s.Name]
	if n := len(h); n > 0 && h[n-1].same(s) {
		t.mu.Unlock()
		return
	}
	t.history[s.Name] = append(h, s)
	t.mu.Unlock()
	if t.onChange != nil {
		t.onChange(s)
	}
	t.notify()
}

// Latest returns the last status seen for name.
func (t *Targets) Latest(name string) (Target, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.history[name]
	if len(h) == 0 {
		return Target{}, false
	}
	return h[len(h)-1], true
}

// History returns every distinct status seen for name, oldest first.
func (t *Targets) History(name string) []Target {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Target(nil), t.history[name]...)
}

// Writes returns when each write to name was seen: every new
// resourceVersion after the first one seen. With nothing but the
// controller writing to a WatchTarget after its creation, these are its
// status writes. A write the stream did not see (one made while it was
// replaying after an expiry, then overwritten) is not counted.
func (t *Targets) Writes(name string) []time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]time.Time(nil), t.writes[name]...)
}

// Await waits until name's latest status satisfies ok, for at most
// timeout, and returns it.
func (t *Targets) Await(ctx context.Context, name string, timeout time.Duration, what string, ok func(Target) bool) (Target, error) {
	err := t.await(ctx, timeout, func() bool {
		s, found := t.Latest(name)
		return found && ok(s)
	})
	s, _ := t.Latest(name)
	if err != nil {
		return s, fmt.Errorf("WatchTarget %s: %s not seen within %v (last: %v)", name, what, timeout, s)
	}
	return s, nil
}

// Event is one Event about a WatchTarget, as stored by the API server.
type Event struct {
	Name    string // the Event object's name
	Target  string
	Type    string
	Reason  string
	Message string
	// Count is how many times the recorder sent it (at least 1).
	Count int32
	// First is when the Event was first seen by Events.
	First time.Time
	// Seen is when this occurrence was seen (in List, the latest one).
	Seen time.Time
}

// Events follows the namespace's Events about WatchTargets.
type Events struct {
	changes
	onEvent func(Event)

	mu     sync.Mutex
	byName map[string]*Event
	// log has one entry per occurrence, in the order seen: a recorder
	// that repeats an Event bumps its count instead of creating another.
	log []Event
}

// WatchEvents starts following the namespace's Events about WatchTargets
// until ctx ends. onEvent, if set, is called (from the stream's goroutine)
// with each occurrence: a new Event, or a repeat the recorder counted on an
// existing one.
func (e *Env) WatchEvents(ctx context.Context, onEvent func(Event)) (*Events, error) {
	ev := &Events{onEvent: onEvent, byName: map[string]*Event{}}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "events"}
	err := e.follow(ctx, gvr, "sandbox-events", wgwatch.HandlerFuncs{
		SnapshotFunc: func(_ context.Context, snap wgwatch.Snapshot) error {
			for _, obj := range snap.Objects {
				ev.record(obj)
			}
			return nil
		},
		EventFunc: func(_ context.Context, we apiwatch.Event) error {
			if we.Type != apiwatch.Deleted {
				ev.record(we.Object)
			}
			return nil
		},
	})
	return ev, err
}

func (ev *Events) record(obj runtime.Object) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	var e corev1.Event
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &e); err != nil {
		return
	}
	if e.InvolvedObject.Kind != watchtarget.Kind.Kind {
		return
	}
	count := max(e.Count, 1)
	if e.Series != nil {
		count = max(count, e.Series.Count)
	}
	now := time.Now()
	ev.mu.Lock()
	old := ev.byName[e.Name]
	if old == nil {
		old = &Event{Name: e.Name, Target: e.InvolvedObject.Name, Type: e.Type, Reason: e.Reason, Message: e.Message, First: now}
		ev.byName[e.Name] = old
	}
	occurred := count > old.Count
	if occurred {
		old.Seen = now
	}
	for n := old.Count; n < count; n++ {
		ev.log = append(ev.log, *old)
	}
	old.Count = count
	snapshot := *old
	ev.mu.Unlock()
	if occurred && ev.onEvent != nil {
		ev.onEvent(snapshot)
	}
	ev.notify()
}

// List returns the Events seen, in the order first seen.
func (ev *Events) List() []Event {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	out := make([]Event, 0, len(ev.byName))
	for _, e := range ev.byName {
		out = append(out, *e)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].First.Before(out[j].First) })
	return out
}

// Count returns how many Events of this type were sent, repeats included.
func (ev *Events) Count(eventType string) int {
	n := 0
	for _, e := range ev.List() {
		if e.Type == eventType {
			n += int(e.Count)
		}
	}
	return n
}

// Log returns "Type/Reason" for each occurrence of an Event, repeats
// included, in the order seen.
func (ev *Events) Log() []string {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	out := make([]string, 0, len(ev.log))
	for _, e := range ev.log {
		out = append(out, e.Type+"/"+e.Reason)
	}
	return out
}

// Occurrences returns each occurrence of an Event, repeats included, in
// the order seen, with the time it was seen.
func (ev *Events) Occurrences() []Event {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return append([]Event(nil), ev.log...)
}

// Await waits until ok holds for the Events seen, for at most timeout.
func (ev *Events) Await(ctx context.Context, timeout time.Duration, what string, ok func(*Events) bool) error {
	if err := ev.await(ctx, timeout, func() bool { return ok(ev) }); err != nil {
		return fmt.Errorf("events: %s not seen within %v (seen: %v)", what, timeout, ev.Log())
	}
	return nil
}

// follow runs a graded stream of gvr in the namespace, as the admin, until
// ctx ends.
func (e *Env) follow(ctx context.Context, gvr schema.GroupVersionResource, name string, h wgwatch.Handler) error {
	s, err := wgwatch.NewStream(clientgo.ListWatch(e.Dynamic, gvr, e.Namespace), h, wgwatch.StreamOptions{Resource: gvr.GroupResource(), Name: name})
	if err != nil {
		return err
	}
	go func() { _ = s.Run(ctx) }()
	return nil
}
