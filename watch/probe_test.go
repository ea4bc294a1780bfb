package watch_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"

	wgwatch "github.com/watchgrade/watchgrade/watch"
)

var configmaps = schema.GroupResource{Resource: "configmaps"}

// probe is a Handler and an Observer that keeps, in virtual time, what a
// stream delivered and published, and checks the delivery contract as it
// goes: outside snapshots no revision twice, resourceVersions increasing.
type probe struct {
	mu    sync.Mutex
	start time.Time

	states  []stamped[wgwatch.State]
	endings []stamped[wgwatch.SessionEnd]

	view      map[string]string // name -> resourceVersion
	snapshots int
	events    int
	// last is the resourceVersion of the last snapshot or event applied.
	last int64
	// dup counts events at or below the last applied resourceVersion;
	// regressions counts snapshots older than it.
	dup, regressions int
	// eventsBeforeSnapshot counts events delivered before any snapshot.
	eventsBeforeSnapshot int

	// seen records, in order, every change of the consumer's view: a
	// name's version (see versionOf), or "" when the consumer lost it.
	seen []seenChange

	// fail, if set, decides whether the handler fails a call ("snapshot"
	// or "event") at now, and with what error.
	fail func(now time.Time, call string) error
	// delay, if set, is how long the handler takes over a call at now.
	delay func(now time.Time) time.Duration
	// failures records when the handler failed.
	failures []time.Time
}

// seenChange is one change of a consumer's view of one name.
type seenChange struct {
	at      time.Duration
	name    string
	version string
}

// versionOf names the version of an object: the judge's writes number
// every version in a data key, "seq", unique even across an etcd restore
// that reuses resourceVersions; other objects are known by their
// resourceVersion.
func versionOf(o runtime.Object) string {
	if cm, ok := o.(*corev1.ConfigMap); ok && cm.Data["seq"] != "" {
		return "seq" + cm.Data["seq"]
	}
	m, _ := meta.Accessor(o)
	return m.GetResourceVersion()
}

// observe records that the consumer's view of name is now version ("":
// gone). Called with p.mu held.
func (p *probe) observeLocked(name, version string) {
	p.seen = append(p.seen, seenChange{at: p.now(), name: name, version: version})
}

// Observe records a change of a consumer's view that the probe does not
// handle itself (an informer's store).
func (p *probe) Observe(name, version string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.observeLocked(name, version)
}

type stamped[T any] struct {
	at time.Duration // since the probe started
	v  T
}

func newProbe() *probe {
	return &probe{start: time.Now(), view: map[string]string{}}
}

func (p *probe) now() time.Duration { return time.Since(p.start) }

// wait sleeps as long as p.delay says, if it is set.
func (p *probe) wait() {
	if p.delay != nil {
		if d := p.delay(time.Now()); d > 0 {
			time.Sleep(d)
		}
	}
}

func (p *probe) Snapshot(_ context.Context, snap wgwatch.Snapshot) error {
	p.wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		if err := p.fail(time.Now(), "snapshot"); err != nil {
			p.failures = append(p.failures, time.Now())
			return err
		}
	}
	rv := parseRV(snap.ResourceVersion)
	if rv < p.last {
		p.regressions++
	}
	p.last = rv
	p.snapshots++
	old := p.view
	p.view = map[string]string{}
	for _, o := range snap.Objects {
		m, _ := meta.Accessor(o)
		p.view[m.GetName()] = m.GetResourceVersion()
		p.observeLocked(m.GetName(), versionOf(o))
	}
	for name := range old {
		if _, ok := p.view[name]; !ok {
			p.observeLocked(name, "")
		}
	}
	return nil
}

func (p *probe) Event(_ context.Context, ev apiwatch.Event) error {
	p.wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		if err := p.fail(time.Now(), "event"); err != nil {
			p.failures = append(p.failures, time.Now())
			return err
		}
	}
	m, _ := meta.Accessor(ev.Object)
	if p.snapshots == 0 {
		p.eventsBeforeSnapshot++
	}
	if rv := m.GetResourceVersion(); rv != "" {
		if n := parseRV(rv); n <= p.last {
			p.dup++
		} else {
			p.last = n
		}
	}
	p.events++
	if ev.Type == apiwatch.Deleted {
		delete(p.view, m.GetName())
		p.observeLocked(m.GetName(), "")
	} else {
		p.view[m.GetName()] = m.GetResourceVersion()
		p.observeLocked(m.GetName(), versionOf(ev.Object))
	}
	return nil
}

func (p *probe) StateChanged(s wgwatch.State) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.states = append(p.states, stamped[wgwatch.State]{p.now(), s})
}

func (p *probe) SessionEnded(e wgwatch.SessionEnd) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endings = append(p.endings, stamped[wgwatch.SessionEnd]{p.now(), e})
}

// counts is what the probe counted, read under its lock.
type counts struct {
	snapshots, events, dup, regressions, eventsBeforeSnapshot int
	states                                                    []stamped[wgwatch.State]
	endings                                                   []stamped[wgwatch.SessionEnd]
	seen                                                      []seenChange
}

func (p *probe) counts() counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return counts{
		snapshots: p.snapshots, events: p.events, dup: p.dup, regressions: p.regressions,
		eventsBeforeSnapshot: p.eventsBeforeSnapshot,
		states:               slices.Clone(p.states), endings: slices.Clone(p.endings),
		seen: slices.Clone(p.seen),
	}
}

// stateAt returns the state published last at or before d.
func (p *probe) stateAt(d time.Duration) wgwatch.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	var st wgwatch.State
	for _, s := range p.states {
		if s.at > d {
			break
		}
		st = s.v
	}
	return st
}

// firstNeedsHuman returns when NeedsHuman was first published, or -1.
func (p *probe) firstNeedsHuman() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.states {
		if s.v.NeedsHuman {
			return s.at
		}
	}
	return -1
}

func (p *probe) published(phase wgwatch.Phase) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, s := range p.states {
		if s.v.Phase == phase {
			n++
		}
	}
	return n
}

func (p *probe) stateLog() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := ""
	for _, s := range p.states {
		out += fmt.Sprintf("\n  %9v %s/%s human=%v %q", s.at.Round(time.Millisecond), s.v.Phase, s.v.Reason, s.v.NeedsHuman, s.v.Message)
	}
	return out
}

// endingLog returns the last n session endings, one a line.
func (p *probe) endingLog(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return endingLines(p.endings[max(len(p.endings)-n, 0):])
}

// endingsBetween returns the session endings from from to to, one a line.
func (p *probe) endingsBetween(from, to time.Duration) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var in []stamped[wgwatch.SessionEnd]
	for _, e := range p.endings {
		if e.at >= from && e.at <= to {
			in = append(in, e)
		}
	}
	return endingLines(in)
}

func endingLines(endings []stamped[wgwatch.SessionEnd]) string {
	out := ""
	for _, e := range endings {
		v := e.v.Verdict
		out += fmt.Sprintf("\n  %9v %s %s %s after %v events=%d healthy=%v -> %s/%s pub=%v err=%v", e.at.Round(time.Millisecond),
			e.v.Stage, v.Outcome, v.Class, e.v.Duration.Round(time.Millisecond), e.v.Events, v.Healthy, v.Next, v.Wait, v.Publish, e.v.Err)
	}
	return out
}

func (p *probe) viewOf() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.view)
}

// viewOfObjects is the name -> resourceVersion map of objects.
func viewOfObjects(objects []runtime.Object) map[string]string {
	out := map[string]string{}
	for _, o := range objects {
		m, _ := meta.Accessor(o)
		out[m.GetName()] = m.GetResourceVersion()
	}
	return out
}

func parseRV(rv string) int64 {
	n, _ := strconv.ParseInt(rv, 10, 64)
	return n
}

// runStream runs s until the returned stop is called, which waits for Run
// to return.
func runStream(t *testing.T, s *wgwatch.Stream) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil after teardown", err)
		}
	}
}

func sortedNames(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
