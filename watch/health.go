package watch

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
)

// health is what a stream, or an instrumented informer, publishes over
// time: a value with a pure step, the package doc's table "What is
// published when". A driver publishes exactly the states step returns;
// due is the next instant a tick can publish something.
type health struct {
	name     string
	resource schema.GroupResource
	policy   Policy
	// informer is true for an instrumented informer.
	informer bool

	hist history
	// cur is the state last published; announced is false until one was.
	cur       State
	announced bool
	steady    steadiness
	// live: a session is live; replayed: a replay began since the last end.
	live, replayed bool
	// stalledAt is when the consumer fell behind, for a stall published
	// since the session went live; zero if none.
	stalledAt time.Time
	// pending are the escalations still to come, each due After base.
	pending []Escalation
	base    time.Time
	// row is the row of the package doc's table "What is published when"
	// that the last step matched ("fact | so far").
	row string
}

// factKind is what a driver observed.
type factKind uint8

const (
	// factStart: a Stream's Run began, or an informer's first call.
	factStart factKind = iota
	// factReplay: a replay began (a LIST, a watch-list).
	factReplay
	// factLive: the session went live.
	factLive
	// factEnd: a session ended.
	factEnd
	// factStuck: the consumer has been behind since fact.since: a
	// handler call in progress (hung), or calls that never found the
	// watch with nothing waiting.
	factStuck
	// factTick: time passed.
	factTick
)

// fact is one observation, stamped by the driver.
type fact struct {
	kind factKind
	at   time.Time
	// resuming (factStart): the stream resumes from a cursor.
	resuming bool
	// initial (factReplay): the first replay of a cursorless start.
	initial bool
	// ending (factEnd): the session's ending; history is filled in here.
	ending Ending
	// since is when the consumer fell behind (factStuck) or the session
	// began.
	since time.Time
	// hung (factStuck): one handler call has been in progress throughout.
	hung bool
}

func newHealth(name string, resource schema.GroupResource, p Policy, informer bool) health {
	h := health{name: name, resource: resource, policy: p, informer: informer}
	h.cur = h.stamp(startingState)
	h.announced = informer
	return h
}

var startingState = State{Phase: PhaseStarting, Reason: ReasonStarting, Message: "the stream has not opened a session yet"}

// step records f and returns the states to publish, and a factEnd's verdict.
func (h *health) step(f fact) (v Verdict, out []State) {
	show := func(st State) {
		st = h.stamp(st)
		if h.announced && h.steady.keep(h.cur, st) {
			return
		}
		h.cur, h.announced = st, true
		out = append(out, st)
	}
	switch f.kind {
	case factStart:
		h.row = "start | replaying"
		if f.resuming {
			h.row = "start | resuming from a cursor"
		}
		h.hist, h.live, h.replayed, h.stalledAt = newHistory(f.at), false, false, time.Time{}
		if !h.informer {
			show(startingState)
		}
		h.arm(startEscalations(h.policy, f.resuming), f.at)
	case factReplay:
		h.replayed = true
		h.row = "replay began | otherwise"
		if f.initial && h.cur.Phase == PhaseStarting {
			h.row = "replay began | Starting, never had a cursor"
			show(State{Phase: PhaseReplaying, Reason: ReasonInitialSync, Message: "the " + h.subject() + " is listing the collection for the first time"})
		}
	case factLive:
		h.live, h.stalledAt = true, time.Time{}
		h.arm(nil, f.at)
		h.row = "live | Streaming"
		if !h.announced || h.cur.Phase != PhaseStreaming {
			h.row = "live | not Streaming"
			show(State{Phase: PhaseStreaming, Reason: ReasonWatching, Message: "the " + h.subject() + " is delivering live events"})
		}
	case factEnd:
		e := f.ending
		h.row = "ended | otherwise"
		if !h.stalledAt.IsZero() {
			h.row = "ended | a stall published since live"
			// Live only until its handler stalled.
			h.hist, e.Live = newHistory(h.stalledAt), false
		}
		h.live, h.stalledAt = false, time.Time{}
		h.hist.fill(&e, f.at, h.replayed)
		h.replayed = false
		v = Grade(e, h.policy)
		h.arm(nil, f.at)
		if v.Next == NextStop {
			h.row = "ended | teardown"
			return v, out
		}
		h.hist.record(e, v, f.at)
		if v.Publish {
			show(v.State)
		}
		h.arm(v.Escalations, f.at)
	case factStuck:
		h.row = "behind | otherwise"
		if !h.live && (h.cur.Phase != PhaseStreaming || !f.since.Before(h.base)) {
			// The escalations cover it: they count from the last ending
			// or start, and the consumer fell behind since. (A live
			// session's ending publishes nothing: a consumer behind
			// from before it is still Streaming, and stalled.)
			break
		}
		// A consumer behind again before its session went live again is
		// in the same stall: it counts from the first.
		since := f.since
		if !h.stalledAt.IsZero() && h.stalledAt.Before(since) {
			since = h.stalledAt
		}
		what := "has not caught up with the events waiting"
		if f.hung && since.Equal(f.since) {
			what = "has not returned"
		}
		p := h.policy
		switch stuck := f.at.Sub(since); {
		case stuck >= p.ProgressDeadline:
			h.row = "behind | live, ProgressDeadline long"
			h.stalledAt = since
			show(State{Phase: PhaseBlocked, Reason: ReasonProgressDeadlineExceeded, NeedsHuman: true,
				Message: fmt.Sprintf("no progress for over %s: the handler %s", p.ProgressDeadline, what)})
		case stuck >= p.TransientGrace:
			h.row = "behind | live, TransientGrace long"
			h.stalledAt = since
			show(State{Phase: PhaseBlocked, Reason: ReasonHandlerStalled,
				Message: fmt.Sprintf("the handler %s for over %s", what, p.TransientGrace)})
		}
	case factTick:
		h.row = "tick | an escalation is due"
		for len(h.pending) > 0 && !f.at.Before(h.base.Add(h.pending[0].After)) {
			show(h.pending[0].State)
			h.pending = h.pending[1:]
		}
	}
	return v, out
}

// due returns when a tick next publishes something, zero if none will.
func (h *health) due() time.Time {
	if len(h.pending) == 0 {
		return time.Time{}
	}
	return h.base.Add(h.pending[0].After)
}

// arm replaces what is pending with escalations, due from base.
func (h *health) arm(escalations []Escalation, base time.Time) {
	h.pending, h.base = escalations, base
}

func (h *health) stamp(st State) State {
	st.Stream, st.Resource = h.name, h.resource
	return st
}

func (h *health) subject() string {
	if h.informer {
		return "informer"
	}
	return "stream"
}

// steadiness keeps a stream's published state steady under a fault that
// does not change (the package doc's table "the state a row gives").
type steadiness struct {
	// pending is the Blocked reason asked for seen times in a row.
	pending Reason
	seen    int
}

// switchAfter is how many times in a row a blocked stream must be asked
// to publish another reason.
const switchAfter = 3

// keep reports whether a stream in state cur keeps it rather than publish
// next (the rows of "the state a row gives").
func (k *steadiness) keep(cur, next State) bool {
	if next.Phase != PhaseBlocked || cur.Phase != PhaseBlocked || next.NeedsHuman || cur.NeedsHuman {
		k.pending, k.seen = "", 0
	}
	switch {
	case cur.Phase == next.Phase && cur.Reason == next.Reason && cur.NeedsHuman == next.NeedsHuman:
		return true
	case next.Phase == PhaseReplaying && cur.Phase == PhaseBlocked:
		return true
	case next.Reason == ReasonProgressDeadlineExceeded && cur.NeedsHuman:
		return true
	case next.Phase == PhaseBlocked && !next.NeedsHuman && cur.NeedsHuman:
		// A transient failure says nothing of whether the human's cause
		// was fixed: only a live session or another cause that needs a
		// human does.
		return true
	case next.Phase == PhaseBlocked && cur.Phase == PhaseBlocked && !next.NeedsHuman && !cur.NeedsHuman:
		if k.pending != next.Reason {
			k.pending, k.seen = next.Reason, 0
		}
		k.seen++
		if k.seen < switchAfter {
			return true
		}
		k.pending, k.seen = "", 0
	}
	return false
}

// publisher drives a health fold: it stamps each fact with the time,
// steps the fold under one lock, tells the observer what the step says
// (the package's only path to an Observer), and keeps one timer at the
// fold's due time. The lock serialises steps and observer calls, so an
// escalation never lands after the Streaming that cancelled it.
type publisher struct {
	clock    clock.Clock
	observer Observer

	mu sync.Mutex
	h  health
	// done, when closed, stops what the timer would publish.
	done    <-chan struct{}
	stopped bool
	timer   stopper
	gen     uint64

	// onRow, if set, is told each step's row of the doc's table (a
	// test's trace; see export_test.go).
	onRow func(at time.Time, row string)

	// stateMu guards state, which an observer may ask for while told.
	stateMu sync.Mutex
	state   State
}

func newPublisher(c clock.Clock, o Observer, h health) *publisher {
	return &publisher{clock: c, observer: o, h: h, state: h.cur}
}

// record steps the fold with f and returns a factEnd's verdict; done
// replaces the channel that stops the timer (nil: never). Only a start
// undoes a stop.
func (p *publisher) record(f fact, done <-chan struct{}) Verdict {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = done
	if f.kind == factStart {
		p.stopped = false
	}
	return p.stepLocked(f)
}

// stuck records that the consumer has been behind since since (hung: in
// one handler call), and reports whether the session is in a stall.
func (p *publisher) stuck(since time.Time, hung bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return false
	}
	p.stepLocked(fact{kind: factStuck, since: since, hung: hung})
	return !p.h.stalledAt.IsZero()
}

// stop cancels the timer: nothing is published after it returns.
func (p *publisher) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	p.cancelLocked()
}

func (p *publisher) current() State {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	return p.state
}

// stepLocked steps the fold with f, at f.at if set, else now.
func (p *publisher) stepLocked(f fact) Verdict {
	if f.at.IsZero() {
		f.at = p.clock.Now()
	}
	if f.kind == factEnd {
		f.ending.Duration = f.at.Sub(f.since)
	}
	v, out := p.h.step(f)
	if p.onRow != nil {
		p.onRow(f.at, p.h.row)
	}
	if f.kind == factEnd {
		e := f.ending
		p.observer.SessionEnded(SessionEnd{Stream: p.h.name, Resource: p.h.resource, Verdict: v,
			Stage: e.Stage, Duration: e.Duration, Events: e.Events, Err: e.Err})
	}
	for _, st := range out {
		p.stateMu.Lock()
		p.state = st
		p.stateMu.Unlock()
		p.observer.StateChanged(st)
	}
	p.cancelLocked()
	if due := p.h.due(); !due.IsZero() && !p.stopped {
		gen := p.gen
		p.timer = afterFunc(p.clock, due.Sub(f.at), func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.gen == gen && !p.stopped && !isDone(p.done) {
				p.stepLocked(fact{kind: factTick, at: due})
			}
		})
	}
	return v
}

func (p *publisher) cancelLocked() {
	p.gen++
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
}

func isDone(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}
