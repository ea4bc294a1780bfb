package main

import (
	"cmp"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchgrade/watchgrade/examples/internal/sandbox"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// record is what a run showed, each thing at its time since the demo
// started: what the summary counts and the timeline draws. A run fills it
// in as it goes (a [recorder]) and completes it at the end of the story.
type record struct {
	// Mode is "embedded" or "kubeconfig".
	Mode string
	// End is when the story ended; nothing later is recorded.
	End time.Duration
	// Scenes are what the story did, in order.
	Scenes []scene
	// States are the streams' state changes and Endings their session
	// endings, in the order the streams reported them.
	States  []stateMark
	Endings []endingMark
	// Target names the WatchTarget; Statuses are its distinct statuses as
	// a watch on it saw them, Writes when each write to it was seen.
	Target   string
	Statuses []statusMark
	Writes   []time.Duration
	// Events are the occurrences of Events about the target, repeats
	// included.
	Events []eventMark
	// Restart is what the controller restart published.
	Restart restartWindow
}

type scene struct {
	At time.Duration
	// Label is a few words for the picture; Detail is the console's line.
	Label, Detail string
}

type stateMark struct {
	At    time.Duration
	State wgwatch.State
}

type endingMark struct {
	At  time.Duration
	End wgwatch.SessionEnd
}

type statusMark struct {
	At     time.Duration
	Target sandbox.Target
}

type eventMark struct {
	At    time.Duration
	Event sandbox.Event
}

// restartWindow is what was published from the moment the controller was
// stopped (From) until the next scene (To): status writes of the target,
// Events about it, and Ready dips (Ready=True followed by a status with
// Ready not True). Zero To means there was no restart.
type restartWindow struct {
	From, To             time.Duration
	Writes, Events, Dips int
}

// streams returns the names of the streams that reported anything, in the
// order they first did.
func (r *record) streams() []string {
	var names []string
	seen := map[string]bool{}
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	// States and endings interleave in time; take both in time order.
	i, j := 0, 0
	for i < len(r.States) || j < len(r.Endings) {
		if j == len(r.Endings) || (i < len(r.States) && r.States[i].At <= r.Endings[j].At) {
			add(r.States[i].State.Stream)
			i++
		} else {
			add(r.Endings[j].End.Stream)
			j++
		}
	}
	return names
}

// sessions counts session endings by stream and outcome.
func (r *record) sessions() map[string]map[wgwatch.Outcome]int {
	out := map[string]map[wgwatch.Outcome]int{}
	for _, e := range r.Endings {
		if out[e.End.Stream] == nil {
			out[e.End.Stream] = map[wgwatch.Outcome]int{}
		}
		out[e.End.Stream][e.End.Verdict.Outcome]++
	}
	return out
}

// published counts, in [from, to), the writes, Events and Ready dips of the
// record's target.
func (r *record) published(from, to time.Duration) restartWindow {
	w := restartWindow{From: from, To: to}
	in := func(at time.Duration) bool { return at >= from && at < to }
	for _, at := range r.Writes {
		if in(at) {
			w.Writes++
		}
	}
	for _, e := range r.Events {
		if in(e.At) {
			w.Events++
		}
	}
	for i := 1; i < len(r.Statuses); i++ {
		if in(r.Statuses[i].At) && isReady(r.Statuses[i-1].Target) && !isReady(r.Statuses[i].Target) {
			w.Dips++
		}
	}
	return w
}

func isReady(t sandbox.Target) bool {
	return t.Status(wgreadiness.ConditionReady) == metav1.ConditionTrue
}

// recorder keeps the part of the record that arrives as it happens: it is
// an Observer of every stream, and the story notes its scenes. It is safe
// for concurrent use.
type recorder struct {
	start time.Time

	mu      sync.Mutex
	scenes  []scene
	states  []stateMark
	endings []endingMark
}

func newRecorder(start time.Time) *recorder { return &recorder{start: start} }

func (r *recorder) since(t time.Time) time.Duration { return t.Sub(r.start) }

// StateChanged records a stream's new state.
func (r *recorder) StateChanged(s wgwatch.State) {
	at := r.since(time.Now())
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, stateMark{At: at, State: s})
}

// SessionEnded records a session ending.
func (r *recorder) SessionEnded(e wgwatch.SessionEnd) {
	at := r.since(time.Now())
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endings = append(r.endings, endingMark{At: at, End: e})
}

// scene records that the story does something now, and returns when.
func (r *recorder) scene(label, detail string) time.Duration {
	at := r.since(time.Now())
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scenes = append(r.scenes, scene{At: at, Label: label, Detail: detail})
	return at
}

// finish returns the record up to end, with the target's statuses, writes
// and Events as the sandbox's watches saw them.
func (r *recorder) finish(mode string, end time.Duration, target string, statuses []sandbox.Target, writes []time.Time, events []sandbox.Event) *record {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := &record{Mode: mode, End: end, Target: target}
	before := func(at time.Duration) bool { return at <= end }
	for _, s := range r.scenes {
		if before(s.At) {
			rec.Scenes = append(rec.Scenes, s)
		}
	}
	for _, s := range r.states {
		if before(s.At) {
			rec.States = append(rec.States, s)
		}
	}
	for _, e := range r.endings {
		if before(e.At) {
			rec.Endings = append(rec.Endings, e)
		}
	}
	for _, s := range statuses {
		if at := r.since(s.Seen); before(at) {
			rec.Statuses = append(rec.Statuses, statusMark{At: at, Target: s})
		}
	}
	for _, w := range writes {
		if at := r.since(w); before(at) {
			rec.Writes = append(rec.Writes, at)
		}
	}
	for _, e := range events {
		if at := r.since(e.Seen); before(at) {
			rec.Events = append(rec.Events, eventMark{At: at, Event: e})
		}
	}
	// Streams and watches report from goroutines of their own: put each
	// list in time order.
	slices.SortStableFunc(rec.States, func(a, b stateMark) int { return cmp.Compare(a.At, b.At) })
	slices.SortStableFunc(rec.Endings, func(a, b endingMark) int { return cmp.Compare(a.At, b.At) })
	slices.SortStableFunc(rec.Statuses, func(a, b statusMark) int { return cmp.Compare(a.At, b.At) })
	slices.SortStableFunc(rec.Events, func(a, b eventMark) int { return cmp.Compare(a.At, b.At) })
	slices.Sort(rec.Writes)
	return rec
}
