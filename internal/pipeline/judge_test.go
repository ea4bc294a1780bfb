package pipeline_test

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/watchgrade/watchgrade/internal/judgekit"
	wgmetrics "github.com/watchgrade/watchgrade/metrics"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	"github.com/watchgrade/watchgrade/readiness/readinesstest"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// The pipeline judge: random histories of a controller's world, played in
// virtual time through the real pipeline, each judged against its ground
// truth. See TestPipeline.

var (
	pipelineHistories = flag.Int("pipeline.histories", 40, "number of histories TestPipeline plays")
	pipelineSeed      = flag.Uint64("pipeline.seed", 1, "seed of TestPipeline's first history")
	pipelineVerbose   = flag.Bool("pipeline.v", false, "print every history TestPipeline plays, and what it saw of a failed one")
)

func TestMain(m *testing.M) {
	// Informers run inside synctest bubbles here.
	watchtest.DisableHandleErrorBackoff()
	// The reflector's warnings say nothing the judge does not check.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	goleak.VerifyTestMain(m)
}

// verdict is what the judge found in one history.
type verdict struct {
	falseWarnings, missedWarnings, readyWhileIncomplete, heldTooLong int
	restartWrites, noopWrites, kstatusDisagree, firstReadyWrong      int
	// firstSyncWrites counts new owners whose first write was made for
	// streams still starting within the start grace.
	firstSyncWrites int
	// errorLines counts the controller's error-level log lines.
	errorLines int
	// firstSyncs counts the new owners' first writes checked.
	firstSyncs int
	// What the history exercised, so that a line of zeros is not empty.
	writes, warnings, firstReady, held, viewGaps int
	// firstOutcomes counts the first outcomes the registries hold,
	// firstStalled those that were Stalled.
	firstOutcomes, firstStalled int
	// quietChecked counts owners checked across a quiet restart, by the
	// state they were in when the controller restarted (ready, stalled,
	// reconciling), then across an apiserver restart.
	quietChecked [4]int
	// resumedChecked counts the owners checked across a quiet controller
	// restart whose process resumed a Stream from a persisted cursor: that
	// stayed valid, that expired meanwhile (an apiserver restart while the
	// controller was down).
	resumedChecked [2]int
	// messagesCompared counts the owners Stalled across a restart over a
	// fault that persisted whose messages were compared.
	messagesCompared int
	// fates counts the owners checked across a controller restart over a
	// fault, by what became of it: persisted, ended, changed.
	fates [3]int
	notes []string
}

func (v *verdict) add(counter *int, format string, args ...any) {
	*counter++
	if len(v.notes) < 12 {
		v.notes = append(v.notes, fmt.Sprintf(format, args...))
	}
}

func (v verdict) failed() bool {
	return v.falseWarnings+v.missedWarnings+v.readyWhileIncomplete+v.heldTooLong+
		v.restartWrites+v.noopWrites+v.kstatusDisagree+v.firstReadyWrong+v.firstSyncWrites+v.errorLines > 0
}

func (v *verdict) sum(o verdict) {
	v.falseWarnings += o.falseWarnings
	v.missedWarnings += o.missedWarnings
	v.readyWhileIncomplete += o.readyWhileIncomplete
	v.heldTooLong += o.heldTooLong
	v.restartWrites += o.restartWrites
	v.noopWrites += o.noopWrites
	v.kstatusDisagree += o.kstatusDisagree
	v.firstReadyWrong += o.firstReadyWrong
	v.firstSyncWrites += o.firstSyncWrites
	v.errorLines += o.errorLines
	v.firstSyncs += o.firstSyncs
	v.writes += o.writes
	v.warnings += o.warnings
	v.resumedChecked[0] += o.resumedChecked[0]
	v.resumedChecked[1] += o.resumedChecked[1]
	v.messagesCompared += o.messagesCompared
	for i := range v.quietChecked {
		v.quietChecked[i] += o.quietChecked[i]
	}
	for i := range v.fates {
		v.fates[i] += o.fates[i]
	}
	v.viewGaps += o.viewGaps
	v.firstReady += o.firstReady
	v.firstOutcomes += o.firstOutcomes
	v.firstStalled += o.firstStalled
	v.held += o.held
}

// play runs h inside a synctest bubble and judges it.
func play(t *testing.T, h history) (v verdict) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, h)
		for _, st := range h.steps {
			time.Sleep(st.at - w.now())
			st.do(w)
			w.ran(st.desc)
			synctest.Wait()
		}
		time.Sleep(h.horizon - w.now())
		// The end: every fault off, the controller up, and a while to
		// settle with writes to every collection.
		for i, s := range w.servers {
			w.mu.Lock()
			open := slices.Sorted(maps.Keys(s.open))
			w.mu.Unlock()
			for _, sl := range open {
				w.faultOff(i, sl)
			}
		}
		w.startController()
		settle := 2*maxBackoff + transientGrace
		time.Sleep(settle / 2)
		for i := range w.servers {
			w.write(i, "late", 1)
		}
		time.Sleep(settle / 2)
		end := w.now()
		w.stopController()
		for _, done := range w.draining {
			<-done
		}
		v = judge(w, end)
		if *pipelineVerbose && v.failed() {
			v.notes = append(v.notes, w.log(end))
		}
	})
	return v
}

// --- reading the ground truth ---------------------------------------------

// lifeWindow is where one owner's life and one process's run overlap.
type lifeWindow struct {
	l        *life
	p        *process
	from, to time.Duration
}

func isTrue(conds []metav1.Condition, typ string) bool {
	return meta.IsStatusConditionTrue(conds, typ)
}

// storedAt returns l's conditions and status.observedGeneration as stored
// at t (after every write made at t), and the process that wrote them (-1
// for none).
func (l *life) storedAt(t time.Duration) ([]metav1.Condition, int64, int) {
	var conds []metav1.Condition
	var observed int64 = -1
	proc := -1
	for _, wr := range l.writes {
		if wr.at > t {
			break
		}
		conds, observed, proc = wr.after, wr.observed, wr.proc
	}
	return conds, observed, proc
}

// genAt returns l's generation mark in force at t.
func (l *life) genAt(t time.Duration) genMark {
	g := l.gens[0]
	for _, m := range l.gens {
		if m.at > t {
			break
		}
		g = m
	}
	return g
}

// unwritableAt reports whether t is in a span in which no status write
// could land (up to RetryMax after the writes are back).
func (l *life) unwritableAt(t time.Duration) bool {
	if l.unwritable == nil {
		return false
	}
	return slices.ContainsFunc(*l.unwritable, func(d downSpan) bool { return t >= d.from && (d.to < 0 || t < d.to) })
}

// findStored returns the first instant in [from, to) at which the stored
// conditions satisfy bad, or -1.
func (l *life) findStored(from, to time.Duration, bad func(conds []metav1.Condition, observed int64) bool) time.Duration {
	return l.findWritten(from, to, func(c []metav1.Condition, o int64, _ int) bool { return bad(c, o) })
}

// findWritten is findStored whose bad also reads which process wrote the
// stored conditions (-1 for none).
func (l *life) findWritten(from, to time.Duration, bad func(conds []metav1.Condition, observed int64, proc int) bool) time.Duration {
	// What is stored while no write could land is not the controller's
	// doing: look from the end of such a span.
	for moved := true; moved && l.unwritable != nil; {
		moved = false
		for _, d := range *l.unwritable {
			if from >= d.from && (d.to < 0 || from < d.to) {
				if d.to < 0 {
					return -1
				}
				from, moved = d.to, true
			}
		}
	}
	if from >= to {
		return -1
	}
	if c, o, p := l.storedAt(from); bad(c, o, p) {
		return from
	}
	for _, wr := range l.writes {
		if wr.at > from && wr.at < to && bad(wr.after, wr.observed, wr.proc) {
			return wr.at
		}
	}
	return -1
}

func readyTrue(c []metav1.Condition, _ int64) bool { return isTrue(c, wgreadiness.ConditionReady) }
func notStalled(c []metav1.Condition, _ int64) bool {
	return !isTrue(c, wgreadiness.ConditionStalled)
}

// stateAt returns the state stream i of p published last at or before t,
// and when; a zero State at p's start when it has published none.
func (p *process) stateAt(i int, t time.Duration) (wgwatch.State, time.Duration) {
	st, at := wgwatch.State{}, p.start
	for _, s := range p.states[i] {
		if s.at > t {
			break
		}
		st, at = s.s, s.at
	}
	return st, at
}

// streamedBefore reports whether stream i of p published Streaming before t.
func (p *process) streamedBefore(i int, t time.Duration) bool {
	for _, s := range p.states[i] {
		if s.at >= t {
			break
		}
		if s.s.Phase == wgwatch.PhaseStreaming {
			return true
		}
	}
	return false
}

// streamedBy returns when stream i of p first published Streaming at or
// after from, or -1.
func (p *process) streamedBy(i int, from time.Duration) time.Duration {
	for _, s := range p.states[i] {
		if s.at >= from && s.s.Phase == wgwatch.PhaseStreaming {
			return s.at
		}
	}
	return -1
}

// stateSegments returns the stretches of p's run over which stream i was
// in one published state; the first, before it published anything, has a
// zero State.
func (p *process) stateSegments(i int, end time.Duration) []struct {
	from, to time.Duration
	s        wgwatch.State
} {
	type seg = struct {
		from, to time.Duration
		s        wgwatch.State
	}
	var out []seg
	from, cur := p.start, wgwatch.State{}
	for _, s := range p.states[i] {
		if s.at > from {
			out = append(out, seg{from, s.at, cur})
		}
		from, cur = max(from, s.at), s.s
	}
	if from < end {
		out = append(out, seg{from, end, cur})
	}
	return out
}

// viewGaps returns the stretches over which the consumer of stream i of p
// did not hold what its server held.
func (p *process) viewGaps(i int, end time.Duration) []span {
	var out []span
	var open time.Duration = -1
	for _, m := range p.views[i] {
		switch {
		case !m.complete && open < 0:
			open = m.at
		case m.complete && open >= 0:
			if m.at > open {
				out = append(out, span{From: open, To: m.at})
			}
			open = -1
		}
	}
	if open >= 0 && open < end {
		out = append(out, span{From: open, To: end})
	}
	return out
}

// gateSegments returns the stretches over which owner o's gate name held
// one mark.
func (w *world) gateSegments(o int, name string, end time.Duration) []struct {
	from, to time.Duration
	m        gateMark
} {
	type seg = struct {
		from, to time.Duration
		m        gateMark
	}
	var out []seg
	marks := w.gates[o][name]
	for k, m := range marks {
		to := end
		if k+1 < len(marks) {
			to = marks[k+1].at
		}
		if m.at < to {
			out = append(out, seg{m.at, to, m})
		}
	}
	return out
}

// --- the judge --------------------------------------------------------------

// streamTruth is what a stream's server went through: when it had a live
// watch, when it was in trouble, when a human had to act.
type streamTruth struct {
	live, trouble, human []span
	// consumer is how long the consumer takes over a snapshot: a stream
	// goes live that much after its server handed the replay over.
	consumer time.Duration
	// deadline is the stream's ProgressDeadline.
	deadline time.Duration
}

func (w *world) truths(end time.Duration) []streamTruth {
	bridge := maxBackoff + shortSession
	var out []streamTruth
	for _, s := range w.servers {
		tr := streamTruth{consumer: s.spec.snapshotDelay, deadline: w.h.deadline()}
		// When the server had a live watch, as the watch judge holds it
		// (judgekit.LiveSpans): every process's watches count. A Stream
		// starts with no cursor, so it is in doubt only after a session
		// of its own that did not go live; an informer never is.
		doubtAt := func(at time.Time) bool {
			t := at.Sub(w.start)
			var p *process // the process whose stream made the request
			for _, q := range w.procs {
				if q.start <= t {
					p = q
				}
			}
			return !s.spec.informer && p != nil && judgekit.Doubt(false, p.ends[s.i], t)
		}
		tr.live = judgekit.LiveSpans(s.srv.Requests(), w.start, end, judgekit.Opened(s.spec.server.Latency), doubtAt)
		for _, iv := range s.intervals {
			to := iv.end
			if to < 0 {
				to = end
			}
			if iv.trouble() {
				tr.trouble = append(tr.trouble, span{From: iv.start, To: to})
			}
			if iv.human {
				tr.human = append(tr.human, span{From: iv.start, To: to})
			}
		}
		// A stream sees the server only when it asks: a healthy gap
		// shorter than one backoff may pass unseen.
		tr.trouble, tr.human = judgekit.Union(tr.trouble, bridge), judgekit.Union(tr.human, bridge)
		// Trouble over, a stream sees so at its next try, up to a backoff
		// later, and goes live once its consumer has taken in the replay
		// that follows: no live session for that long more.
		for k := range tr.trouble {
			tr.trouble[k].To += maxBackoff + tr.consumer
		}
		out = append(out, tr)
	}
	return out
}

// needsHuman reports whether NeedsHuman published at t is justified by
// the ground truth, as the watch package promises it: a cause that needs
// a human for HumanGrace, or no live session for ProgressDeadline (the
// server's gap, and the consumer's time over the snapshot that ended it).
func (tr streamTruth) needsHuman(t time.Duration) bool {
	g := judgekit.GapStart(tr.live, t)
	return judgekit.Covered(tr.human, t-humanGrace, t-eps) ||
		(g >= 0 && t-g >= tr.deadline-eps-tr.consumer) ||
		judgekit.Covered(tr.trouble, t-tr.deadline+eps, t-eps)
}

// unservedReport returns when p's status step reports that the API
// server does not serve stream i's kind (its AwaitInformer, asking from
// p's start, once the human grace has passed, by Writer.NotServed): the
// earliest and the latest it may, and until when the report may stand
// (the first ask after the kind's CRD was installed); ok is false when p
// makes no report, the kind served by its start or installed before the
// grace passed. A clock truncated to the minute (history.lagNow) moves the
// grace by up to a minute either way.
func (w *world) unservedReport(p *process, i int, end time.Duration) (earliest, latest, until time.Duration, ok bool) {
	in := w.servers[i].installed
	if in == 0 || (in > 0 && in <= p.start) {
		return 0, 0, 0, false
	}
	var lag time.Duration
	if w.h.lagNow == 1 {
		lag = time.Minute
	}
	earliest = p.start + humanGrace - lag
	latest = p.start + humanGrace + lag + wgstatus.DefaultServedEvery
	until = end
	if in > 0 {
		if in < earliest {
			return 0, 0, 0, false
		}
		until = in + wgstatus.DefaultServedEvery + eps
	}
	return earliest, latest, until, true
}

// unservedShown reports whether p may show at t that the API server does
// not serve stream i's kind.
func (w *world) unservedShown(p *process, i int, t time.Duration) bool {
	earliest, _, until, ok := w.unservedReport(p, i, t+time.Hour)
	return ok && t >= earliest-eps && t <= until
}

func judge(w *world, end time.Duration) (v verdict) {
	w.mu.Lock()
	defer w.mu.Unlock()
	truths := w.truths(end)
	// Every line the controller logged at error level: the status step
	// says a write failed (none of this world's does: a conflict, a
	// deletion or a stopping controller is routine).
	for _, p := range w.procs {
		for _, line := range p.errorLines {
			v.add(&v.errorLines, "process %d logged an error: %s", p.id, line)
		}
	}
	var windows []lifeWindow
	for _, l := range w.lives {
		lend := end
		if l.deleted >= 0 {
			lend = l.deleted
		}
		for _, p := range w.procs {
			pend := p.end
			if pend < 0 || pend > end {
				pend = end
			}
			if from, to := max(p.start, l.created), min(pend, lend); from < to {
				windows = append(windows, lifeWindow{l, p, from, to})
			}
		}
	}
	for _, lw := range windows {
		judgeGates(&v, w, lw)
		judgeStreams(&v, w, lw)
		judgeHeldStall(&v, w, lw)
	}
	for _, l := range w.lives {
		judgeWrites(&v, w, l, truths)
	}
	judgeQuiet(&v, w, end)
	judgeEpisodes(&v, w, end)
	judgeFirstReady(&v, w)
	judgeFirstOutcomes(&v, w)
	return v
}

// judgeGates: Ready=True only while every caller's gate is established,
// Stalled=True while one is stalled; never held over either. The gates
// are the reconcile's: before a standby history's workers run, nobody
// knows them.
func judgeGates(v *verdict, w *world, lw lifeWindow) {
	l := lw.l
	known := lw.p.workersAt
	if known < 0 {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(w.gates[l.o])) {
		for _, seg := range w.gateSegments(l.o, name, lw.to) {
			if !seg.m.present || seg.m.level == wgreadiness.LevelEstablished {
				continue
			}
			from, to := max(seg.from, lw.from, known)+eps, min(seg.to, lw.to)
			if at := l.findStored(from, to, readyTrue); at >= 0 {
				v.add(&v.readyWhileIncomplete, "%s %s: Ready=True at %v while gate %s is %s (starting=%v) since %v (process %d)",
					l.key, l.uid, at, name, seg.m.level, seg.m.starting, seg.from, lw.p.id)
			}
			if seg.m.level == wgreadiness.LevelStalled {
				if at := l.findStored(from, to, notStalled); at >= 0 {
					v.add(&v.missedWarnings, "%s %s: not Stalled at %v while gate %s is stalled since %v (process %d)",
						l.key, l.uid, at, name, seg.from, lw.p.id)
				}
			}
		}
	}
}

// judgeStreams: Ready=True only while every stream the owner depends on
// is established and its consumer's view complete, or within the restart
// hold, never longer; Stalled=True while one needs a human; the
// generation observed.
func judgeStreams(v *verdict, w *world, lw lifeWindow) {
	l, p := lw.l, lw.p
	for k, g := range l.gens {
		gto := lw.to
		if k+1 < len(l.gens) {
			gto = min(gto, l.gens[k+1].at)
		}
		gfrom := max(lw.from, g.at)
		if gfrom >= gto {
			continue
		}
		// The generation is observed at once, once the workers run (a
		// standby writer does not reconcile).
		if p.workersAt >= 0 {
			if at := l.findStored(max(gfrom, p.workersAt)+eps, gto, func(c []metav1.Condition, observed int64) bool {
				return isTrue(c, wgreadiness.ConditionReady) && observed != g.gen
			}); at >= 0 {
				_, observed, _ := l.storedAt(at)
				v.add(&v.readyWhileIncomplete, "%s %s: Ready=True at %v with observedGeneration %d, not %d (since %v, process %d)", l.key, l.uid, at, observed, g.gen, g.at, p.id)
			}
		}
		for i := range w.servers {
			if g.streams&(1<<i) == 0 {
				continue
			}
			// A stream the reconcile tracks, not the standby writer, is
			// known once the workers run.
			known := gfrom
			if w.h.standby && w.h.kinds&(1<<i) == 0 {
				if known = max(known, p.workersAt); p.workersAt < 0 {
					continue
				}
			}
			// A kind the API server does not serve is Stalled once the
			// report is due, until its CRD is installed.
			if _, latest, _, ok := w.unservedReport(p, i, lw.to); ok {
				to := gto
				if in := w.servers[i].installed; in >= 0 {
					to = min(to, in)
				}
				if at := l.findStored(max(latest+eps, known), to, notStalled); at >= 0 {
					v.add(&v.missedWarnings, "%s %s: not Stalled at %v while the API server has not served s%d's kind since before process %d started at %v",
						l.key, l.uid, at, i, p.id, p.start)
				}
			}
			for _, seg := range p.stateSegments(i, lw.to) {
				if seg.s.Phase == wgwatch.PhaseStreaming {
					continue
				}
				from, to := max(seg.from, known), min(seg.to, gto)
				if from >= to {
					continue
				}
				// Still starting: not yet established in this process,
				// and Starting or on its first replay, whatever the
				// replay's reason (a cursor persisted by the last process
				// may have expired meanwhile).
				held := !p.streamedBefore(i, seg.from) && (seg.s.Phase == "" || seg.s.Phase == wgwatch.PhaseStarting ||
					seg.s.Phase == wgwatch.PhaseReplaying)
				d := from + eps
				if held {
					d = max(d, p.start+w.h.holdBound())
				}
				if at := l.findStored(d, to, readyTrue); at >= 0 {
					counter, what := &v.readyWhileIncomplete, "ready_while_incomplete"
					if held {
						counter, what = &v.heldTooLong, "held_too_long"
					}
					v.add(counter, "%s: %s %s: Ready=True at %v while s%d is %s/%s since %v (process %d started %v)",
						what, l.key, l.uid, at, i, seg.s.Phase, seg.s.Reason, seg.from, p.id, p.start)
				} else if held && l.findStored(from, min(to, d), readyTrue) >= 0 {
					v.held++
					// Held is a Ready=True persisted by an earlier process:
					// one this process writes over a starting stream (a
					// new generation, say) is no hold.
					if at := l.findWritten(from+eps, min(to, d), func(c []metav1.Condition, _ int64, proc int) bool {
						return proc == p.id && isTrue(c, wgreadiness.ConditionReady)
					}); at >= 0 {
						v.add(&v.readyWhileIncomplete, "%s %s: Ready=True written at %v by process %d itself while s%d is %s/%s since %v: no hold",
							l.key, l.uid, at, p.id, i, seg.s.Phase, seg.s.Reason, seg.from)
					}
				}
				if seg.s.NeedsHuman {
					if at := l.findStored(from+eps, to, notStalled); at >= 0 {
						v.add(&v.missedWarnings, "%s %s: not Stalled at %v while s%d needs a human since %v (%s, process %d)",
							l.key, l.uid, at, i, seg.from, seg.s.Reason, p.id)
					}
				}
			}
			for _, gap := range p.viewGaps(i, lw.to) {
				from, to := max(gap.From, known), min(gap.To, gto)
				if from >= to {
					continue
				}
				v.viewGaps++
				held := !p.streamedBefore(i, gap.From)
				d := max(from, gap.From+staleBound)
				if held {
					d = max(from+eps, p.start+w.h.holdBound())
				}
				if at := l.findStored(d, to, readyTrue); at >= 0 {
					counter, what := &v.readyWhileIncomplete, "ready_while_incomplete"
					if held {
						counter, what = &v.heldTooLong, "held_too_long"
					}
					v.add(counter, "%s: %s %s: Ready=True at %v while the consumer of s%d has been behind its server since %v (process %d started %v)",
						what, l.key, l.uid, at, i, gap.From, p.id, p.start)
				}
			}
		}
	}
}

// judgeFirstSync: a new owner's first write (over a status with none of
// the trio) is not made while every gate that is not established is a
// stream still starting within the start grace: it waits for the streams
// to go live, so that the first sync is one write (Ready=True) and one
// Event, not Reconciling (Starting, InitialSync) then Ready. Such a write
// is one made within the grace of the process's start, before any of its
// streams has been Streaming, whose reason is a stream's starting one.
func judgeFirstSync(v *verdict, w *world, l *life) {
	if len(l.writes) == 0 {
		return
	}
	wr := l.writes[0]
	if wgreadiness.HasTrio(wr.before) {
		return
	}
	v.firstSyncs++
	p := w.procs[wr.proc]
	if wr.at >= p.start+w.h.startGrace-eps {
		return
	}
	for i := range p.states {
		if at := p.streamedBy(i, p.start); at >= 0 && at <= wr.at {
			return
		}
	}
	ready := meta.FindStatusCondition(wr.after, wgreadiness.ConditionReady)
	if ready == nil || !isTrue(wr.after, wgreadiness.ConditionReconciling) {
		return
	}
	if r := wgwatch.Reason(ready.Reason); r == wgwatch.ReasonStarting || r == wgwatch.ReasonInitialSync {
		v.add(&v.firstSyncWrites, "%s %s: its first write at %v is Ready=%s/%s, for streams still starting within the start grace %v of process %d (started %v): the first sync is one write (%q)",
			l.key, l.uid, wr.at, ready.Status, ready.Reason, w.h.startGrace, p.id, p.start, ready.Message)
	}
}

// judgeWrites: every status write changes something and is
// kstatus-conformant; a Warning is recorded exactly once per escalation to
// Stalled, on each recorder, and an escalation is justified.
func judgeWrites(v *verdict, w *world, l *life, truths []streamTruth) {
	judgeFirstSync(v, w, l)
	for _, wr := range l.writes {
		v.writes++
		obs := wr.observed
		if cmp.Equal(wr.before, wr.after) && wr.obsBefore != nil && *wr.obsBefore == wr.observed {
			v.add(&v.noopWrites, "%s %s: a write at %v changed nothing (process %d)", l.key, l.uid, wr.at, wr.proc)
		}
		o := &ownerObj{meta: metav1.ObjectMeta{Name: l.key.Name, Namespace: l.key.Namespace, UID: l.uid, Generation: wr.gen}, conds: wr.after, observed: &obs}
		res, err := status.Compute(ownerObject(o))
		want := status.InProgressStatus
		switch {
		case obs != wr.gen:
			// The standby writer's, for the generation an earlier process
			// observed: kstatus reads the spec change as in progress.
		case isTrue(wr.after, wgreadiness.ConditionStalled):
			want = status.FailedStatus
		case isTrue(wr.after, wgreadiness.ConditionReconciling):
		case isTrue(wr.after, wgreadiness.ConditionReady):
			want = status.CurrentStatus
		}
		if err != nil || res.Status != want {
			v.add(&v.kstatusDisagree, "%s %s: kstatus says %v (%v) after the write at %v, the trio says %s: %v", l.key, l.uid, res, err, wr.at, want, wr.after)
		}
		// The standby writer writes for the generation an earlier process
		// observed (no Reconcile of a spec change ran yet): its trio keeps
		// the rules for that generation.
		if err := readinesstest.Check(readinesstest.Status{Generation: obs, ObservedGeneration: &obs, Conditions: wr.after}); err != nil {
			v.add(&v.kstatusDisagree, "%s %s: the write at %v breaks the trio's rules: %v", l.key, l.uid, wr.at, err)
		}
		if why := transitionTimes(w, wr); why != "" {
			v.add(&v.kstatusDisagree, "%s %s: the write at %v: %s", l.key, l.uid, wr.at, why)
		}

		escalation := !isTrue(wr.before, wgreadiness.ConditionStalled) && isTrue(wr.after, wgreadiness.ConditionStalled)
		for kind, evs := range wr.events {
			n := 0
			for _, e := range evs {
				if e.typ == "Warning" {
					n++
				}
			}
			v.warnings += n
			switch {
			case escalation && n == 0:
				v.add(&v.missedWarnings, "%s %s: no Warning on recorder %d for the escalation to Stalled at %v", l.key, l.uid, kind, wr.at)
			case escalation && n > 1, !escalation && n > 0:
				v.add(&v.falseWarnings, "%s %s: %d Warnings on recorder %d for the write at %v (escalation: %v): %v -> %v",
					l.key, l.uid, n, kind, wr.at, escalation, brief(wr.before), brief(wr.after))
			}
		}
		if escalation {
			if why := justifyStalled(w, l, wr, truths); why != "" {
				v.add(&v.falseWarnings, "%s %s: escalated to Stalled at %v: %s", l.key, l.uid, wr.at, why)
			}
		}
	}
}

// holdBound: a persisted Ready=True stands over streams still starting
// for StartGrace after the accumulator first heard of them (at the
// process's start), never longer (package readiness, Restarts).
func (h history) holdBound() time.Duration { return h.startGrace + eps }

// transitionTimes returns "" when every condition of wr kept its
// lastTransitionTime if its status stayed, and otherwise took the now the
// controller passed to Apply (to the second): meta.SetStatusCondition's
// semantics. (readinesstest.CheckTransition cannot tell a status that
// moved twice within the second of its stamp.)
func transitionTimes(w *world, wr *write) string {
	stampAt := metav1.NewTime(w.h.applyNow(w.start.Add(wr.at))).Rfc3339Copy()
	for _, a := range wr.after {
		b := meta.FindStatusCondition(wr.before, a.Type)
		switch {
		case b != nil && b.Status == a.Status && !a.LastTransitionTime.Equal(&b.LastTransitionTime):
			return fmt.Sprintf("%s kept its status %s, its lastTransitionTime moved from %v to %v", a.Type, a.Status, b.LastTransitionTime, a.LastTransitionTime)
		case (b == nil || b.Status != a.Status) && !a.LastTransitionTime.Equal(&stampAt):
			return fmt.Sprintf("%s is new or moved to %s, its lastTransitionTime is %v, not the write's %v", a.Type, a.Status, a.LastTransitionTime, stampAt)
		}
	}
	return ""
}

// justifyStalled returns "" when an escalation to Stalled at wr is
// justified by the ground truth, and otherwise why not.
func justifyStalled(w *world, l *life, wr *write, truths []streamTruth) string {
	t := wr.at
	for name := range w.gates[l.o] {
		if m := w.gateAt(l.o, name, t); m.present && m.level == wgreadiness.LevelStalled {
			return ""
		}
	}
	p := w.procs[wr.proc]
	g := l.genAt(t)
	why := "no gate stalled and no stream needing a human"
	for i := range w.servers {
		if g.streams&(1<<i) == 0 {
			continue
		}
		if w.unservedShown(p, i, t) {
			return ""
		}
		st, at := p.stateAt(i, t)
		if !st.NeedsHuman {
			continue
		}
		if truths[i].needsHuman(at) {
			return ""
		}
		why = fmt.Sprintf("s%d published NeedsHuman (%s) at %v with no cause that needs a human", i, st.Reason, at)
	}
	return why
}

// judgeQuiet: a controller or apiserver restart that changes nothing
// writes nothing and records nothing, for every owner Ready=True before
// it.
func judgeQuiet(v *verdict, w *world, end time.Duration) {
	for k, st := range w.steps {
		switch st.desc {
		case "quiet controller stop":
			next, expired := k+1, false
			if next < len(w.steps) && w.steps[next].desc == downRestart {
				next, expired = next+1, true
			}
			if next >= len(w.steps) || w.steps[next].desc != "quiet controller start" {
				continue
			}
			r, s := st.at, w.steps[next].at
			var p *process
			for _, q := range w.procs {
				if q.start == s {
					p = q
				}
			}
			if p == nil {
				continue
			}
			for _, l := range w.lives {
				if !settled(w, l, r) {
					continue
				}
				g := l.genAt(r)
				established := true
				for i := range w.servers {
					if g.streams&(1<<i) != 0 {
						if at := p.streamedBy(i, s); at < 0 || at > s+w.h.startGrace-time.Second {
							established = false
						}
					}
				}
				if !established {
					continue // the hold ended: writing is right
				}
				v.quietChecked[classReady]++
				what := fmt.Sprintf("controller restart at %v (back at %v)", r, s)
				if resumed := slices.Contains(p.resumed, true); resumed && expired {
					v.resumedChecked[1]++
					what += ", resumed from persisted cursors that expired while it was down"
				} else if resumed {
					v.resumedChecked[0]++
					what += ", resumed from persisted cursors"
				}
				quietWrites(v, l, s, min(s+quietAfter, end), what)
			}
		case "quiet apiserver restart":
			r := st.at
			var p *process
			for _, q := range w.procs {
				if q.start <= r-quietBefore && (q.end < 0 || q.end >= r+quietAfter) {
					p = q
				}
			}
			if p == nil {
				continue
			}
			for _, l := range w.lives {
				if settled(w, l, r) && !slowConsumer(w, l.genAt(r).streams) && !faultAt(w, l.genAt(r).streams, r) {
					v.quietChecked[3]++
					quietWrites(v, l, r, min(r+quietAfter, end), fmt.Sprintf("apiserver restart at %v", r))
				}
			}
		}
	}
}

// faultAt reports whether a fault on a stream of streams is on at t: a
// Ready owner over it has not seen it yet (a handler that fails on the
// next event of a stream with none to deliver), and the restart's relist
// is where it shows, which is the fault's news, not the restart's (seed
// 5556).
func faultAt(w *world, streams int, t time.Duration) bool {
	for i, s := range w.servers {
		if streams&(1<<i) == 0 {
			continue
		}
		for _, iv := range s.intervals {
			if iv.trouble() && iv.start <= t && (iv.end < 0 || iv.end > t) {
				return true
			}
		}
	}
	return false
}

// slowConsumer reports whether a stream of streams has a consumer that
// takes half of ReplayGrace or more over a snapshot: the replay after an
// apiserver restart (which takes the server a few seconds of its own) may
// then not be over within ReplayGrace, and is published (package watch),
// which is right.
func slowConsumer(w *world, streams int) bool {
	for i, s := range w.servers {
		if streams&(1<<i) != 0 && s.spec.snapshotDelay >= replayGrace/2 {
			return true
		}
	}
	return false
}

// moved reports whether a fault other than the episode's own, on a
// stream of streams, began or ended from the stop to `to`: what an owner
// shows after the restart is then news of its own, not the restart's.
func (ep episode) moved(w *world, streams int, to time.Duration) bool {
	in := func(t time.Duration) bool { return t >= ep.stop && t < to }
	for i, s := range w.servers {
		if streams&(1<<i) == 0 {
			continue
		}
		for _, iv := range s.intervals {
			if i == ep.srv && iv.slot == ep.slot {
				continue
			}
			if in(iv.start) || in(iv.end) {
				return true
			}
		}
	}
	return false
}

// endedUnseen reports whether the stall stored at the restart names a
// stream whose fault had ended before it, though the process before the
// restart had not seen it end (a handler fault with no event left to
// handle, seed 4572): the restart's clean start is where the end shows,
// so a stall message without that stream is the news, not a rewrite.
func (ep episode) endedUnseen(w *world, before *process, streams int, stored []metav1.Condition) bool {
	stalled := meta.FindStatusCondition(stored, wgreadiness.ConditionStalled)
	if before == nil || stalled == nil {
		return false
	}
	for i, s := range w.servers {
		if streams&(1<<i) == 0 || !strings.Contains(stalled.Message, s.name+":") {
			continue
		}
		faulted := false
		for _, iv := range s.intervals {
			faulted = faulted || (iv.start <= ep.stop && iv.end > ep.stop)
		}
		if st, _ := before.stateAt(i, ep.stop); !faulted && st.Phase != wgwatch.PhaseStreaming {
			return true
		}
	}
	return false
}

// settled reports whether l existed across a quiet window around r and
// was Ready=True for its generation at r, with every gate of its own
// established.
func settled(w *world, l *life, r time.Duration) bool {
	if l.created > r-quietBefore || (l.deleted >= 0 && l.deleted < r+quietAfter) {
		return false
	}
	conds, observed, _ := l.storedAt(r)
	if !isTrue(conds, wgreadiness.ConditionReady) || observed != l.genAt(r).gen {
		return false
	}
	for name := range w.gates[l.o] {
		if m := w.gateAt(l.o, name, r); m.present && m.level != wgreadiness.LevelEstablished {
			return false
		}
	}
	return true
}

func quietWrites(v *verdict, l *life, from, to time.Duration, what string) {
	for _, wr := range l.writes {
		if wr.at < from || wr.at >= to {
			continue
		}
		v.add(&v.restartWrites, "%s %s: a %s wrote at %v: %v -> %v, Events %d+%d",
			what, l.key, l.uid, wr.at, brief(wr.before), brief(wr.after), len(wr.events[0]), len(wr.events[1]))
	}
}

// The states an owner can be in when the controller restarts, as
// quietChecked counts them.
const (
	classReady = iota
	classStalled
	classReconciling
)

// classOf is the state stored conditions show: ready, stalled or
// reconciling, or -1.
func classOf(c []metav1.Condition) int {
	switch {
	case isTrue(c, wgreadiness.ConditionStalled):
		return classStalled
	case isTrue(c, wgreadiness.ConditionReconciling):
		return classReconciling
	case isTrue(c, wgreadiness.ConditionReady):
		return classReady
	}
	return -1
}

// trio is the state a write's conditions show: each condition of the trio
// with its status and reason, messages left out.
func trio(c []metav1.Condition) string {
	var b strings.Builder
	for _, typ := range []string{wgreadiness.ConditionReady, wgreadiness.ConditionReconciling, wgreadiness.ConditionStalled} {
		if x := meta.FindStatusCondition(c, typ); x != nil {
			fmt.Fprintf(&b, "%s=%s/%s ", typ, x.Status, x.Reason)
		}
	}
	return b.String()
}

// judgeEpisodes: a controller restart over a fault that began before it
// (package readiness, Restarts), for every owner that existed across it
// with conditions for its generation. Whatever the fault became, a stall
// already reported is never reported again: no Warning, and Stalled never
// leaves True to come back. When the fault persists, the restart changes
// no condition's status or reason and records no Event, unless the owner
// recovers; when it ends, the owner recovers within the window once its
// gates are established. An owner Ready at the restart whose streams are
// established within the start grace is never written as starting over.
func judgeEpisodes(v *verdict, w *world, end time.Duration) {
	for _, ep := range w.h.episodes {
		var p *process
		for _, q := range w.procs {
			if q.start == ep.start {
				p = q
			}
		}
		if p == nil {
			continue
		}
		// A fault the process before the restart never saw (a handler
		// that fails on the next event of a stream with none to
		// deliver): the restart's replay is where it shows, so what it
		// writes is the fault's, not the restart's.
		unseen := false
		var before *process
		for _, q := range w.procs {
			if q.end == ep.stop {
				before = q
			}
			if q.end == ep.stop && ep.srv >= 0 {
				st, _ := q.stateAt(ep.srv, ep.stop)
				unseen = st.Phase == wgwatch.PhaseStreaming
			}
		}
		// At the horizon every fault ends: the window is over.
		to := min(ep.end, end, w.h.horizon)
		// A fault that persists past the progress deadline within the
		// window stalls by the deadline: that is the fault's news too
		// (seed 5821).
		unseen = unseen || ep.start+w.h.deadline() < to
		what := fmt.Sprintf("controller restart at %v over %s (back at %v)", ep.stop, ep.desc, ep.start)
		for _, l := range w.lives {
			if l.created > ep.stop-ep.before || (l.deleted >= 0 && l.deleted < ep.end) {
				continue
			}
			conds, observed, _ := l.storedAt(ep.stop)
			g := l.genAt(ep.stop)
			class := classOf(conds)
			if observed != g.gen || class < 0 {
				continue
			}
			if class == classReady {
				established := true
				for i := range w.servers {
					if g.streams&(1<<i) != 0 {
						if at := p.streamedBy(i, ep.start); at < 0 || at > ep.start+w.h.startGrace-time.Second {
							established = false
						}
					}
				}
				if !established {
					continue // the hold ended: writing is right
				}
				// The fault may move the owner; the restart alone may not.
				v.quietChecked[classReady]++
				for _, wr := range l.writes {
					if wr.at >= ep.start && wr.at < to && startReason(wr.after) {
						v.add(&v.restartWrites, "%s %s: a %s wrote at %v: %s-> %s, Events %d+%d", l.key, l.uid, what, wr.at,
							trio(wr.before), trio(wr.after), len(wr.events[0]), len(wr.events[1]))
					}
				}
				continue
			}
			v.quietChecked[class]++
			v.fates[slices.Index([]fate{fatePersists, fateEnds, fateChanges}, ep.fate)]++
			if ep.fate == fatePersists && class == classStalled {
				v.messagesCompared++
			}
			wasStalled := class == classStalled
			fromStart := startReason(conds)
			for _, wr := range l.writes {
				if wr.at < ep.start || wr.at >= to {
					continue
				}
				if wasStalled && isTrue(wr.after, wgreadiness.ConditionStalled) && !isTrue(wr.before, wgreadiness.ConditionStalled) {
					v.add(&v.restartWrites, "%s %s: a %s reported the stall again at %v: %s-> %s", l.key, l.uid, what, wr.at, trio(wr.before), trio(wr.after))
				}
				if ep.fate != fatePersists || unseen || ep.moved(w, g.streams, to) || ep.endedUnseen(w, before, g.streams, conds) {
					continue
				}
				if wasStalled && isTrue(wr.before, wgreadiness.ConditionStalled) && isTrue(wr.after, wgreadiness.ConditionStalled) &&
					trio(wr.before) == trio(wr.after) {
					// The same stall, rewritten: its message read
					// differently after the restart (a stage quoted,
					// say), though its cause persisted.
					v.add(&v.restartWrites, "%s %s: a %s rewrote the stall at %v: %q -> %q", l.key, l.uid, what, wr.at,
						meta.FindStatusCondition(wr.before, wgreadiness.ConditionStalled).Message, meta.FindStatusCondition(wr.after, wgreadiness.ConditionStalled).Message)
				}
				// What the restart alone would write: the stall dropped
				// without a recovery, or the owner starting over.
				dropped := isTrue(wr.before, wgreadiness.ConditionStalled) && !isTrue(wr.after, wgreadiness.ConditionStalled) &&
					!isTrue(wr.after, wgreadiness.ConditionReady)
				if dropped || (startReason(wr.after) && !fromStart) {
					v.add(&v.restartWrites, "%s %s: a %s wrote at %v: %s-> %s, Events %d+%d", l.key, l.uid, what, wr.at,
						trio(wr.before), trio(wr.after), len(wr.events[0]), len(wr.events[1]))
				}
			}
			if ep.fate != fateEnds || to < ep.end {
				continue
			}
			// Recovered within the window, once every gate is established.
			// (An owner of no stream and no gate is not Ready: NoGates.)
			healthy, gates := true, g.streams != 0
			for i := range w.servers {
				if g.streams&(1<<i) != 0 {
					if st, _ := p.stateAt(i, to); st.Phase != wgwatch.PhaseStreaming {
						healthy = false
					}
				}
			}
			for name := range w.gates[l.o] {
				if m := w.gateAt(l.o, name, to); m.present {
					gates = true
					healthy = healthy && m.level == wgreadiness.LevelEstablished
				}
			}
			if c, _, _ := l.storedAt(to); healthy && gates && !isTrue(c, wgreadiness.ConditionReady) {
				v.add(&v.heldTooLong, "%s %s: a %s: every gate established at %v, the owner still %s", l.key, l.uid, what, to, trio(c))
			}
		}
	}
}

// startReason reports whether stored conditions show an owner whose
// streams are starting over: Ready's reason Starting or InitialSync.
func startReason(c []metav1.Condition) bool {
	r := meta.FindStatusCondition(c, wgreadiness.ConditionReady)
	return r != nil && (r.Reason == string(wgwatch.ReasonStarting) || r.Reason == string(wgwatch.ReasonInitialSync))
}

// judgeHeldStall: Stalled=True stands only while a gate is stalled, or,
// when an earlier process wrote it, within the new process's NotReadyHold
// (package readiness, Restarts), never longer.
func judgeHeldStall(v *verdict, w *world, lw lifeWindow) {
	l, p := lw.l, lw.p
	hold := w.h.notReadyHold()
	points := []time.Duration{lw.from, p.start + hold}
	for _, wr := range l.writes {
		points = append(points, wr.at)
	}
	for i := range w.servers {
		for _, s := range p.states[i] {
			points = append(points, s.at)
		}
		if _, _, until, ok := w.unservedReport(p, i, lw.to); ok {
			points = append(points, until)
		}
	}
	for _, marks := range w.gates[l.o] {
		for _, m := range marks {
			points = append(points, m.at)
		}
	}
	slices.Sort(points)
	for _, t := range slices.Compact(points) {
		t += eps // what happens at an instant is written within it
		if t < lw.from || t >= lw.to {
			continue
		}
		conds, _, proc := l.storedAt(t)
		if !isTrue(conds, wgreadiness.ConditionStalled) || stallShown(w, l, p, t) {
			continue
		}
		if proc != p.id && t < p.start+hold+eps {
			continue // held over the restart
		}
		if l.unwritableAt(t) {
			continue // no write could take it back (seed 10694)
		}
		v.add(&v.heldTooLong, "%s %s: Stalled=True at %v with no gate stalled (written by process %d; process %d started %v): %s",
			l.key, l.uid, t, proc, p.id, p.start, stalledMessage(conds))
		return
	}
}

// stalledMessage is the message of stored conditions' Stalled, if any.
func stalledMessage(c []metav1.Condition) string {
	if x := meta.FindStatusCondition(c, wgreadiness.ConditionStalled); x != nil {
		return fmt.Sprintf("%q", x.Message)
	}
	return ""
}

// stallShown reports whether a gate of l is stalled at t in p: a caller's
// gate, or a stream it depends on that p has published as needing a human.
func stallShown(w *world, l *life, p *process, t time.Duration) bool {
	for name := range w.gates[l.o] {
		if m := w.gateAt(l.o, name, t); m.present && m.level == wgreadiness.LevelStalled {
			return true
		}
	}
	g := l.genAt(t)
	for i := range w.servers {
		if g.streams&(1<<i) != 0 {
			if st, _ := p.stateAt(i, t); wgreadiness.StreamLevel(st) == wgreadiness.LevelStalled || w.unservedShown(p, i, t) {
				return true
			}
		}
	}
	return false
}

// judgeFirstReady: one first-Ready observation per object UID, never for
// an object the controller did not witness, with the reason the metrics
// doc promises; and each process's registry holds what it observed.
func judgeFirstReady(v *verdict, w *world) {
	type outcome struct {
		p *process
		s sighting
	}
	outcomes := map[types.UID][]outcome{}
	for _, p := range w.procs {
		for _, s := range p.sightings {
			if s.result == wgmetrics.FirstReadyObserved || s.result == wgmetrics.FirstReadyRejected {
				outcomes[s.uid] = append(outcomes[s.uid], outcome{p, s})
			}
		}
	}
	var firstStart time.Duration = -1
	if len(w.procs) > 0 {
		firstStart = w.procs[0].start
	}
	type tally struct {
		observed, rejected int
		sum                float64
	}
	want := map[*process]*tally{}
	for _, p := range w.procs {
		want[p] = &tally{}
	}
	for _, l := range w.lives {
		got := outcomes[l.uid]
		if len(got) > 1 {
			v.add(&v.firstReadyWrong, "%s %s: %d first-Ready outcomes: %v", l.key, l.uid, len(got), got)
		}
		var first *write
		for _, wr := range l.writes {
			if isTrue(wr.after, wgreadiness.ConditionReady) {
				first = wr
				break
			}
		}
		if first == nil {
			if len(got) > 0 {
				v.add(&v.firstReadyWrong, "%s %s: a first-Ready outcome %s, never Ready", l.key, l.uid, got[0].s.result)
			}
			continue
		}
		p := w.procs[first.proc]
		wantRes, why := expectFirstReady(w, p, l)
		if wantRes == wgmetrics.FirstReadyObserved && l.created < firstStart-time.Minute && why != "seen Ready=Unknown" {
			v.add(&v.firstReadyWrong, "%s %s: expected observed (%s) but created at %v, before the controller first ran at %v", l.key, l.uid, why, l.created, firstStart)
		}
		var gotRes wgmetrics.FirstReadyResult
		if len(got) > 0 {
			gotRes = got[0].s.result
			if got[0].p != p {
				v.add(&v.firstReadyWrong, "%s %s: first Ready written by process %d, outcome from process %d", l.key, l.uid, p.id, got[0].p.id)
			}
		}
		if gotRes != wantRes {
			v.add(&v.firstReadyWrong, "%s %s: first Ready at %v by process %d (started %v), created at %v: outcome %q, want %q (%s)",
				l.key, l.uid, first.at, p.id, p.start, l.created, gotRes, wantRes, why)
		}
		switch wantRes {
		case wgmetrics.FirstReadyObserved:
			v.firstReady++
			at := metav1.NewTime(w.start.Add(first.at)).Rfc3339Copy()
			want[p].observed++
			want[p].sum += at.Sub(l.createdAt).Seconds()
		case wgmetrics.FirstReadyRejected:
			want[p].rejected++
		}
	}
	for _, p := range w.procs {
		count, sum, rejected := gatherFirstReady(p)
		t := want[p]
		if count != t.observed || sum != t.sum || rejected[string(wgmetrics.RejectNotWitnessed)] != float64(t.rejected) {
			v.add(&v.firstReadyWrong, "process %d registry: %d observations summing %vs, rejected %v; want %d summing %vs, %d not_witnessed",
				p.id, count, sum, rejected, t.observed, t.sum, t.rejected)
		}
		for r, n := range rejected {
			if r != string(wgmetrics.RejectNotWitnessed) && n != 0 {
				v.add(&v.firstReadyWrong, "process %d registry: rejected{%s} = %v, want 0", p.id, r, n)
			}
		}
	}
}

// judgeFirstOutcomes: each process's first_outcomes_total counts, per
// object it first saw undecided (Ready absent or Unknown), one outcome:
// Stalled when it saw Stalled=True before any Ready=True, else Ready at
// its first Ready=True; nothing for an object first seen decided. An
// object first seen with no Ready, created before the process could see
// creations, counts only if the witness rule vouches for it: the judge
// allows it either way.
func judgeFirstOutcomes(v *verdict, w *world) {
	for _, p := range w.procs {
		witnessedSince := w.start.Add(p.start - time.Minute)
		type state struct{ decided, uncertain bool }
		seen := map[types.UID]*state{}
		var ready, stalled, uncertain int
		for _, s := range p.sightings {
			st, ok := seen[s.uid]
			if !ok {
				st = &state{}
				seen[s.uid] = st
				if s.ready != nil && (s.ready.Status == metav1.ConditionTrue || s.ready.Status == metav1.ConditionFalse) {
					st.decided = true
					continue
				}
				// Near the boundary, creationTimestamp's second and the
				// process's start may fall either way.
				st.uncertain = s.ready == nil && s.created.Before(witnessedSince.Add(2*time.Second))
				if st.uncertain {
					uncertain++
				}
			}
			if st.decided {
				continue
			}
			switch {
			case s.stalled && (s.ready == nil || s.ready.Status != metav1.ConditionTrue):
				st.decided = true
				if !st.uncertain {
					stalled++
				}
			case s.ready != nil && s.ready.Status == metav1.ConditionTrue:
				st.decided = true
				if !st.uncertain {
					ready++
				}
			}
		}
		gotReady, gotStalled := gatherFirstOutcomes(p)
		if gotReady < ready || gotStalled < stalled || gotReady+gotStalled > ready+stalled+uncertain {
			v.add(&v.firstReadyWrong, "process %d registry: first outcomes ready=%d stalled=%d; want ready=%d stalled=%d (and up to %d more, not witnessed)",
				p.id, gotReady, gotStalled, ready, stalled, uncertain)
		}
		v.firstOutcomes += gotReady + gotStalled
		v.firstStalled += gotStalled
	}
}

// gatherFirstOutcomes reads p's first_outcomes_total of the owners.
func gatherFirstOutcomes(p *process) (ready, stalled int) {
	ownerSamples(p, func(family string, m *dto.Metric, labels map[string]string) {
		if family != "watchgrade_first_outcomes_total" {
			return
		}
		switch labels[wgmetrics.LabelOutcome] {
		case wgmetrics.FirstOutcomeReady:
			ready = int(m.GetCounter().GetValue())
		case wgmetrics.FirstOutcomeStalled:
			stalled = int(m.GetCounter().GetValue())
		}
	})
	return ready, stalled
}

// ownerSamples calls each with every sample of p's registry labelled with
// the owners' resource, its family's name and its labels.
func ownerSamples(p *process, each func(family string, m *dto.Metric, labels map[string]string)) {
	families, err := p.reg.Gather()
	if err != nil {
		p.w.t.Fatal(err)
	}
	for _, fam := range families {
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels[wgmetrics.LabelResource] == owners.String() {
				each(fam.GetName(), m, labels)
			}
		}
	}
}

// expectFirstReady is what the metrics doc promises for l's first Ready,
// written by p: read from p's first sighting of l, the witness rule, and
// FirstReady's default WitnessedSince.
func expectFirstReady(w *world, p *process, l *life) (wgmetrics.FirstReadyResult, string) {
	first, readyAt := -1, -1
	for k, s := range p.sightings {
		if s.uid != l.uid {
			continue
		}
		if first < 0 {
			first = k
		}
		if s.ready != nil && s.ready.Status == metav1.ConditionTrue {
			readyAt = k
			break
		}
	}
	if first < 0 || readyAt < 0 {
		return "", "never sighted Ready by the process that wrote it"
	}
	r0 := p.sightings[first].ready
	switch {
	case r0 != nil && (r0.Status == metav1.ConditionTrue || r0.Status == metav1.ConditionFalse):
		return "", "first seen established"
	case r0 != nil:
		return wgmetrics.FirstReadyObserved, "seen Ready=Unknown"
	}
	witnessedSince := w.start.Add(p.start).Add(-time.Minute)
	if !l.createdAt.Before(witnessedSince) {
		return wgmetrics.FirstReadyObserved, "created while the process ran"
	}
	// Witnessed: another object of its namespace first seen by p with a
	// Ready stamped at or before its creation.
	seen := map[types.UID]bool{}
	for _, s := range p.sightings[:readyAt] {
		first := !seen[s.uid]
		seen[s.uid] = true
		if first && s.uid != l.uid && s.ns == l.key.Namespace && s.ready != nil && !s.stamped.IsZero() && !l.createdAt.Before(s.stamped) {
			return wgmetrics.FirstReadyObserved, fmt.Sprintf("witnessed by %s's Ready stamped %v", s.uid, s.stamped.Sub(w.start))
		}
	}
	return wgmetrics.FirstReadyRejected, "not witnessed"
}

// gatherFirstReady reads p's time-to-first-Ready series for the owners.
func gatherFirstReady(p *process) (count int, sum float64, rejected map[string]float64) {
	rejected = map[string]float64{}
	ownerSamples(p, func(family string, m *dto.Metric, labels map[string]string) {
		switch family {
		case "watchgrade_time_to_first_ready_seconds":
			count, sum = int(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum()
		case "watchgrade_time_to_first_ready_rejected_total":
			rejected[labels[wgmetrics.LabelReason]] = m.GetCounter().GetValue()
		}
	})
	return count, sum, rejected
}

// brief shows conditions as Type=Status/Reason.
func brief(conds []metav1.Condition) string {
	var parts []string
	for _, c := range conds {
		parts = append(parts, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// log describes what the world saw, for a failed history.
func (w *world) log(end time.Duration) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, p := range w.procs {
		fmt.Fprintf(&b, "\nprocess %d: %v..%v", p.id, p.start, p.end)
		for i := range w.servers {
			fmt.Fprintf(&b, "\n  s%d states:", i)
			for _, s := range p.states[i] {
				fmt.Fprintf(&b, " %v:%s/%s%s", s.at.Round(time.Millisecond), s.s.Phase, s.s.Reason, map[bool]string{true: "!", false: ""}[s.s.NeedsHuman])
			}
			fmt.Fprintf(&b, "\n  s%d view gaps: %v", i, p.viewGaps(i, end))
		}
	}
	for _, l := range w.lives {
		fmt.Fprintf(&b, "\n%s %s created %v deleted %v gens %v", l.key, l.uid, l.created, l.deleted, l.gens)
		for _, wr := range l.writes {
			fmt.Fprintf(&b, "\n  %v p%d gen %d %s events %d+%d", wr.at.Round(time.Millisecond), wr.proc, wr.gen, brief(wr.after), len(wr.events[0]), len(wr.events[1]))
		}
	}
	return b.String()
}

// TestPipeline plays -pipeline.histories random histories through the
// real pipeline (streams over the simulated API server and informers over
// Instrument, with the watch judge's faults; the caller's own gates;
// StreamsCondition on and off; generation bumps; controller restarts and
// outages, a new process each time reading the persisted status, and in
// half the histories resuming each Stream from the cursor and consumer's
// view the last process persisted; consumers slow over snapshots;
// apiserver restarts, some while the controller is down; owners created,
// deleted and recreated, some while the controller is down; streams with
// a ProgressDeadline of 10 minutes, the accumulator given their Policy;
// controllers with a standby writer, as wgctrl's Owner, writing only what
// ApplyStandby returns until their caches sync, knowing some of the
// streams an owner depends on; Reconciles that fail for a while, retried
// every reconcileRetry, or with a terminal error; Reconciles that call
// the status step twice) and checks on each, against its ground truth:
//
//   - a Warning is recorded exactly once per escalation to Stalled, on each
//     recorder kind, and never otherwise; Stalled=True only when a human
//     must act (a caller's stalled gate, or a stream's NeedsHuman that a
//     cause needing a human for HumanGrace, or the progress deadline,
//     justifies), and within eps of when one must;
//   - Ready=True only while every gate is established, every stream the
//     owner depends on is Streaming and its consumer's view complete (a
//     view may lag for the watch package's TransientGrace bound), and the
//     generation observed; or within the restart hold, never longer than
//     StartGrace, and never over a stalled or caller's gate;
//   - a controller or apiserver restart that changes nothing writes nothing
//     and records nothing, resumed from persisted cursors that expired
//     meanwhile too (an apiserver restart while the controller was down);
//   - a controller restart over a fault that began before it (of a
//     stream's server, or a caller's gate), for owners Ready, Stalled or
//     Reconciling when it stopped, whether the fault persists, ends or
//     changes while it is down: a stall already reported is never reported
//     again (no second Warning, Stalled never leaves True to come back);
//     while the fault persists, no condition of the trio changes its status
//     or reason (nor a stall its message) and no Event is recorded unless
//     the owner recovers, and the
//     owner is never written as starting over; once it ends, the owner is
//     Ready within quietAfter of the restart when its gates are;
//   - Stalled=True only while a gate is stalled, or, persisted by an
//     earlier process, within the new one's NotReadyHold;
//   - a kind the API server does not serve (its CRD installed later, or
//     never), followed by the status step's AwaitInformer as wgctrl
//     follows each watched kind: every owner that depends on it is
//     Stalled once the human grace has passed, never before, and no longer
//     than the next ask after its CRD is installed;
//   - every status write changes something; after it, kstatus's Compute
//     agrees with the trio, and readinesstest finds no rule broken;
//   - one first-Ready outcome per object UID, as the metrics doc promises
//     it, and each process's registry holds exactly those;
//   - a Reconcile that fails is a gate of its own (the status step's
//     GateReconcile: progressing while retried, stalled when terminal),
//     so Ready=True is never written nor left standing for a generation
//     whose last Reconcile failed, and a terminal failure is one Warning;
//   - the controller logs nothing at error level (error_lines): in these
//     worlds every outcome of the status step is routine;
//   - a new owner's first sync is one write: no first write over a status
//     with none of the trio is made for streams still starting within the
//     start grace (Reconciling, Starting or InitialSync, then Ready).
//
// It prints one summary line, and one counting the worlds beyond faults
// ("pipeline: worlds standby_writers=... progress_deadline_10m=...").
func TestPipeline(t *testing.T) {
	start := time.Now()
	before := runtime.NumGoroutine()
	var total verdict
	failed, standby, longDeadline, failing, twice, writesRefused := 0, 0, 0, 0, 0, 0
	informerStreams, twoInformers, crdMissing, crdInstalled := 0, 0, 0, 0
	for i := range *pipelineHistories {
		seed := *pipelineSeed + uint64(i)
		h := generate(seed, &chooser{Rng: rand.New(rand.NewPCG(seed, 19))})
		if h.standby {
			standby++
		}
		if h.deadline() > wgwatch.DefaultProgressDeadline {
			longDeadline++
		}
		if h.failing > 0 {
			failing++
		}
		if h.twice {
			twice++
		}
		if h.writesRefused > 0 {
			writesRefused++
		}
		if slices.ContainsFunc(h.streams, func(s streamSpec) bool { return s.informer }) {
			informerStreams++
		}
		if slices.ContainsFunc(h.streams, func(s streamSpec) bool { return s.informers > 1 }) {
			twoInformers++
		}
		if h.crd >= 0 {
			crdMissing++
			if slices.ContainsFunc(h.steps, func(s step) bool { return strings.HasSuffix(s.desc, " CRD installed") }) {
				crdInstalled++
			}
		}
		var v verdict
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			v = play(t, h)
			if *pipelineVerbose || v.failed() {
				t.Logf("%v", h)
			}
			if v.failed() {
				t.Errorf("history %d broke the invariants:\n  %s", seed, strings.Join(v.notes, "\n  "))
			}
		})
		if v.failed() {
			failed++
		}
		total.sum(v)
	}
	runtime.GC()
	leaks := max(runtime.NumGoroutine()-before, 0)
	fmt.Printf("pipeline: histories=%d failed=%d false_warnings=%d missed_warnings=%d ready_while_incomplete=%d held_too_long=%d restart_writes=%d noop_writes=%d kstatus_disagree=%d first_ready_wrong=%d first_sync_writes=%d error_lines=%d leaks=%d (writes=%d first_syncs=%d warnings=%d holds=%d view_gaps=%d quiet_restarts_checked=ready:%d,stalled:%d,reconciling:%d,apiserver:%d persisted_starts=valid:%d,expired:%d stall_messages_compared=%d fault_fates=persisted:%d,ended:%d,changed:%d first_ready=%d first_outcomes=%d(stalled:%d), %v)\n",
		*pipelineHistories, failed, total.falseWarnings, total.missedWarnings, total.readyWhileIncomplete, total.heldTooLong,
		total.restartWrites, total.noopWrites, total.kstatusDisagree, total.firstReadyWrong, total.firstSyncWrites, total.errorLines, leaks,
		total.writes, total.firstSyncs, total.warnings, total.held, total.viewGaps, total.quietChecked[0], total.quietChecked[1], total.quietChecked[2], total.quietChecked[3],
		total.resumedChecked[0], total.resumedChecked[1], total.messagesCompared, total.fates[0], total.fates[1], total.fates[2], total.firstReady, total.firstOutcomes, total.firstStalled, time.Since(start).Round(time.Second))
	// The worlds beyond faults: controllers with a standby writer (as
	// wgctrl's Owner), streams with a ProgressDeadline of 10 minutes,
	// Reconciles that fail, a status step called twice per Reconcile,
	// informers merged by watch.Streams (two of one kind at once).
	fmt.Printf("pipeline: worlds standby_writers=%d progress_deadline_10m=%d failing_reconciles=%d step_twice=%d status_writes_refused=%d informer_streams=%d two_informers=%d kinds_not_served=%d crds_installed_later=%d\n",
		standby, longDeadline, failing, twice, writesRefused, informerStreams, twoInformers, crdMissing, crdInstalled)
	if leaks > 0 {
		t.Errorf("%d goroutines more than before the histories", leaks)
	}
}

// FuzzPipeline drives the history generator from the fuzz input.
func FuzzPipeline(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3})
	f.Add([]byte("a rollout of the controller while a stream is forbidden"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h := generate(0, &chooser{Data: data, Rng: rand.New(rand.NewPCG(uint64(len(data)), 19))})
		if v := play(t, h); v.failed() {
			t.Errorf("history broke the invariants:\n  %s\n%v", strings.Join(v.notes, "\n  "), h)
		}
	})
}
