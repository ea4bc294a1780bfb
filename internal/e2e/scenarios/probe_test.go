package scenarios

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// seen is one event a consumer received.
type seen struct {
	Type apiwatch.EventType
	Name string
	RV   string
}

// probe is a stream's handler and observer: the consumer's view of the
// collection, every event in order, every state and every ending.
type probe struct {
	mu        sync.Mutex
	view      map[string]string // name -> resourceVersion
	events    []seen
	snapshots []wgwatch.Snapshot
	// snapshotAt is when each snapshot was delivered (its handler done).
	snapshotAt []time.Time
	states     []wgwatch.State
	endings    []wgwatch.SessionEnd
	// onState, if set, is called (under no lock) on every state change.
	onState func(wgwatch.State)
	// changed is closed and replaced on every update.
	changed chan struct{}
	// hold, if set, makes Snapshot wait until it is closed.
	hold chan struct{}
}

func newProbe() *probe { return &probe{view: map[string]string{}, changed: make(chan struct{})} }

func (p *probe) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// waitFor waits until cond holds, re-checking it on every update the probe
// gets, for at most timeout. Conditions may also read state the probe does
// not see (an informer's store, the API server): those are re-checked every
// 100 ms.
func (p *probe) waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	recheck := time.NewTicker(100 * time.Millisecond)
	defer recheck.Stop()
	for {
		p.mu.Lock()
		ch := p.changed
		p.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-recheck.C:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s; states %v, outcomes %v", timeout, what, p.stateLog(), p.outcomes())
		}
	}
}

func (p *probe) Snapshot(ctx context.Context, snap wgwatch.Snapshot) error {
	if p.hold != nil {
		select {
		case <-p.hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.view = map[string]string{}
	for _, o := range snap.Objects {
		m, _ := meta.Accessor(o)
		p.view[m.GetName()] = m.GetResourceVersion()
	}
	p.snapshots = append(p.snapshots, snap)
	p.snapshotAt = append(p.snapshotAt, time.Now())
	p.notifyLocked()
	return nil
}

func (p *probe) Event(_ context.Context, ev apiwatch.Event) error {
	m, _ := meta.Accessor(ev.Object)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, seen{ev.Type, m.GetName(), m.GetResourceVersion()})
	if ev.Type == apiwatch.Deleted {
		delete(p.view, m.GetName())
	} else {
		p.view[m.GetName()] = m.GetResourceVersion()
	}
	p.notifyLocked()
	return nil
}

func (p *probe) StateChanged(s wgwatch.State) {
	p.mu.Lock()
	p.states = append(p.states, s)
	p.notifyLocked()
	f := p.onState
	p.mu.Unlock()
	if f != nil {
		f(s)
	}
}

func (p *probe) SessionEnded(e wgwatch.SessionEnd) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endings = append(p.endings, e)
	p.notifyLocked()
}

func (p *probe) state() wgwatch.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.states) == 0 {
		return wgwatch.State{}
	}
	return p.states[len(p.states)-1]
}

// outcomes counts endings by outcome.
func (p *probe) outcomes() map[wgwatch.Outcome]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[wgwatch.Outcome]int{}
	for _, e := range p.endings {
		out[e.Verdict.Outcome]++
	}
	return out
}

func (p *probe) viewCopy() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]string, len(p.view))
	for k, v := range p.view {
		out[k] = v
	}
	return out
}

func (p *probe) stateLog() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, s := range p.states {
		out = append(out, fmt.Sprintf("%s/%s", s.Phase, s.Reason))
	}
	return out
}

// blocked reports whether any published state was Blocked, and whether
// any needed a human.
func (p *probe) blocked() (blocked, human bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.states {
		if s.Phase == wgwatch.PhaseBlocked {
			blocked = true
			human = human || s.NeedsHuman
		}
	}
	return blocked, human
}

// write is one change the writer made, with the resourceVersion the server
// returned (empty for deletes: the deletion's resourceVersion is only seen
// in the DELETED event).
type write struct {
	Type apiwatch.EventType
	Name string
	RV   string
}

// checkExactlyOnceInOrder checks a consumer's events against the writer's
// log: every create and update seen exactly once with its resourceVersion,
// every delete seen exactly once after the object's last write, and
// resourceVersions strictly increasing.
func checkExactlyOnceInOrder(t *testing.T, writes []write, events []seen) {
	t.Helper()
	count := map[seen]int{}
	deletes := map[string]int{}
	last := int64(0)
	for i, ev := range events {
		rv, err := strconv.ParseInt(ev.RV, 10, 64)
		if err != nil {
			t.Errorf("event %d %+v: resourceVersion is not a number", i, ev)
			continue
		}
		if rv <= last {
			t.Errorf("event %d %+v: resourceVersion %d not after %d: out of order or delivered twice", i, ev, rv, last)
		}
		last = rv
		if ev.Type == apiwatch.Deleted {
			deletes[ev.Name]++
			continue
		}
		count[ev]++
	}
	for _, w := range writes {
		switch w.Type {
		case apiwatch.Deleted:
			if n := deletes[w.Name]; n != 1 {
				t.Errorf("delete of %s seen %d times, want 1", w.Name, n)
			}
		default:
			if n := count[seen(w)]; n != 1 {
				t.Errorf("%s %s@%s seen %d times, want 1", w.Type, w.Name, w.RV, n)
			}
		}
	}
}

// listWatchFor returns a ListerWatcher of one namespaced resource through
// the dynamic client.
func listWatchFor(client dynamic.Interface, gvr schema.GroupVersionResource, ns string) cache.ListerWatcher {
	r := client.Resource(gvr).Namespace(ns)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return r.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
			return r.Watch(ctx, o)
		},
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
