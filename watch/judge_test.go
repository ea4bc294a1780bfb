package watch_test

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// The judge: random fault schedules against a simulated API server, and
// invariants checked against each schedule's ground truth. See TestJudge.

var (
	judgeSchedules = flag.Int("judge.schedules", 200, "number of schedules TestJudge runs")
	judgeSeed      = flag.Uint64("judge.seed", 1, "seed of TestJudge's first schedule")
	judgeVerbose   = flag.Bool("judge.v", false, "print every schedule TestJudge runs, and the states it saw")
)

// Bounds the judge holds a stream to, from the defaults of Policy and
// StreamOptions. Each is stated in the watch package doc.
const (
	shortSession   = wgwatch.DefaultShortSession
	maxBackoff     = wgwatch.DefaultMaxBackoff
	humanGrace     = wgwatch.DefaultHumanGrace
	transientGrace = wgwatch.DefaultTransientGrace
	deadline       = wgwatch.DefaultProgressDeadline
	// slack covers what the simulation itself takes: the server's 3s
	// block on a too large resourceVersion, same-instant ordering.
	slack = 4 * time.Second
	// recallHuman: a cause that needs a human is published within its
	// grace plus one maximum backoff of the first request it failed.
	recallHuman = humanGrace + maxBackoff + slack
	// recallDeadline: no live session for the progress deadline is
	// published within a second of it (it has its own timer).
	recallDeadline = deadline + time.Second
	// clearBound: once the server is healthy again, the stream is
	// Streaming within one maximum backoff (its wait), one more if it must
	// replay and has used its replays (or, for an informer, the
	// reflector's backoff before the watch that gets the 410 and before
	// its relist), and one short session.
	clearBound = 2*maxBackoff + shortSession + slack
	// staleBound: a stream with no live session for the transient grace
	// no longer says it is Streaming.
	staleBound = transientGrace + slack
	// bridge: a healthy gap shorter than this may pass unseen while a
	// stream waits out a backoff, so it does not end the trouble.
	bridge = maxBackoff + shortSession
)

// replayBound is the most full replays a stream makes in any window of
// length d: a burst of 3, then one per MaxBackoff.
func replayBound(d time.Duration) int { return 3 + int(d/maxBackoff) }

// slot is a kind of fault; faults of one slot never overlap.
type slot string

const (
	slotErr       slot = "err"
	slotRefuse    slot = "refuse"
	slotFlap      slot = "flap"
	slotStale     slot = "stale"
	slotWatchList slot = "refuse-watch-list" // not trouble: a server without watch-list
	slotHandler   slot = "handler"
)

// step is one thing a schedule does at a point of virtual time.
type step struct {
	at   time.Duration
	desc string
	do   func(w *world)
}

// schedule is one generated history.
type schedule struct {
	seed     uint64
	horizon  time.Duration
	settle   time.Duration
	server   watchtest.ServerOptions
	stream   wgwatch.StreamOptions
	initial  int
	steps    []step
	informer bool
}

func (sc schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed=%d informer=%v horizon=%v initial=%d server={Expiry:%s DisableWatchCache:%v Bookmarks:%v CacheSize:%d} stream={Cursor:%q DisableWatchList:%v}",
		sc.seed, sc.informer, sc.horizon, sc.initial, sc.server.Expiry, sc.server.DisableWatchCache, sc.server.BookmarkInterval, sc.server.WatchCacheSize, sc.stream.Cursor, sc.stream.DisableWatchList)
	for _, s := range sc.steps {
		fmt.Fprintf(&b, "\n  %12v %s", s.at, s.desc)
	}
	return b.String()
}

// chooser makes the generator's decisions: from a PRNG, or from a fuzz
// input (then a PRNG once the input runs out).
type chooser struct {
	data []byte
	rng  *rand.Rand
}

func (c *chooser) intn(n int) int {
	if n <= 1 {
		return 0
	}
	if len(c.data) >= 2 {
		v := int(c.data[0])<<8 | int(c.data[1])
		c.data = c.data[2:]
		return v % n
	}
	return c.rng.IntN(n)
}

// logDuration picks a duration between lo and hi, uniform in its log.
func (c *chooser) logDuration(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	steps := 1000
	f := float64(c.intn(steps+1)) / float64(steps)
	ratio := float64(hi) / float64(lo)
	return time.Duration(float64(lo) * math.Pow(ratio, f))
}

var humanErrs = []func() error{
	watchtest.Forbidden,
	func() error { return apierrors.NewUnauthorized("token expired") },
	watchtest.NotFound,
}

var transientErrs = []func(c *chooser) error{
	func(c *chooser) error { return watchtest.TooManyRequests(1 + c.intn(5)) },
	func(*chooser) error { return watchtest.ServiceUnavailable() },
	func(*chooser) error { return apierrors.NewInternalError(errors.New("etcdserver: request timed out")) },
}

// generate builds the schedule of seed, deciding with c.
func generate(seed uint64, c *chooser) schedule {
	sc := schedule{seed: seed, informer: c.intn(4) == 0}
	sc.horizon = c.logDuration(time.Minute, 6*time.Hour)
	sc.settle = 2*maxBackoff + transientGrace
	sc.initial = c.intn(6)
	sc.server.Seed = seed
	sc.server.Expiry = []watchtest.ExpiryShape{watchtest.ExpiryErrorEvent, watchtest.ExpiryGoneEvent, watchtest.ExpiryOpenError}[c.intn(3)]
	sc.server.DisableWatchCache = c.intn(5) == 0
	if c.intn(3) == 0 {
		sc.server.BookmarkInterval = -1
	}
	if c.intn(2) == 0 {
		sc.server.WatchCacheSize = 1 + c.intn(10)
		sc.server.WatchCacheWindow = c.logDuration(time.Second, 2*time.Minute)
	}
	sc.stream.DisableWatchList = c.intn(4) == 0
	sc.stream.Cursor = []string{"", "", "0", "1"}[c.intn(4)]

	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	busy := map[slot]time.Duration{} // when each slot is free again
	at := time.Duration(0)
	for {
		at += c.logDuration(time.Millisecond, max(sc.horizon/8, time.Second))
		if at >= sc.horizon {
			break
		}
		switch k := c.intn(20); {
		case k < 8: // writes
			n := 1
			if c.intn(4) == 0 {
				n = 1 + c.intn(12) // a burst
			}
			for i := range n {
				name := names[c.intn(len(names))]
				op := c.intn(3)
				sc.steps = append(sc.steps, step{at: at + time.Duration(i)*time.Millisecond, desc: fmt.Sprintf("write %s (%d)", name, op), do: func(w *world) { w.write(name, op) }})
			}
		case k < 14: // a fault, for a while
			s := []slot{slotErr, slotErr, slotRefuse, slotFlap, slotStale, slotWatchList, slotHandler}[c.intn(7)]
			if busy[s] > at {
				continue
			}
			d := c.logDuration(time.Millisecond, min(2*time.Hour, sc.horizon))
			end := min(at+d, sc.horizon)
			busy[s] = end + time.Millisecond
			human := false
			var f watchtest.Faults
			var err error
			desc := string(s)
			switch s {
			case slotErr:
				human = c.intn(2) == 0
				if human {
					err = humanErrs[c.intn(len(humanErrs))]()
				} else {
					err = transientErrs[c.intn(len(transientErrs))](c)
				}
				desc += " " + err.Error()
			case slotRefuse:
				f.Refuse = true
			case slotFlap:
				f.WatchLifetime = c.logDuration(time.Millisecond, 3*time.Second)
				desc += " " + f.WatchLifetime.String()
			case slotStale:
				f.StaleProxy = true
			case slotWatchList:
				f.RefuseWatchList = true
			case slotHandler:
				human = c.intn(3) == 0
				if human {
					err = fmt.Errorf("update status: %w", watchtest.Forbidden())
				} else {
					err = errors.New("database unavailable")
				}
				desc += " " + err.Error()
			}
			if s == slotErr {
				f.Err = err
			}
			sc.steps = append(sc.steps,
				step{at: at, desc: "on " + desc, do: func(w *world) { w.on(s, human, f, err) }},
				step{at: end, desc: "off " + string(s), do: func(w *world) { w.off(s) }})
		default: // an instant action
			switch c.intn(6) {
			case 0:
				sc.steps = append(sc.steps, step{at: at, desc: "close watches", do: func(w *world) { w.action(); w.srv.CloseWatches() }})
			case 1:
				sc.steps = append(sc.steps, step{at: at, desc: "restart", do: func(w *world) { w.action(); w.srv.Restart() }})
			case 2:
				sc.steps = append(sc.steps, step{at: at, desc: "compact", do: func(w *world) { w.action(); w.srv.Compact() }})
			case 3:
				n := 1 + c.intn(1000)
				sc.steps = append(sc.steps, step{at: at, desc: fmt.Sprintf("advance %d", n), do: func(w *world) { w.srv.AdvanceRevision(n) }})
			case 4:
				sc.steps = append(sc.steps, step{at: at, desc: "fail watches 500", do: func(w *world) {
					w.action()
					w.srv.FailWatches(apierrors.NewInternalError(errors.New("unable to decode an event from the watch stream: stream error: INTERNAL_ERROR")))
				}})
			default:
				// A storm: the same instant action again and again.
				n, every := 2+c.intn(40), c.logDuration(100*time.Millisecond, 30*time.Second)
				for i := range n {
					sc.steps = append(sc.steps, step{at: at + time.Duration(i)*every, desc: "storm restart", do: func(w *world) { w.action(); w.srv.Restart() }})
				}
			}
		}
	}
	sc.steps = slices.DeleteFunc(sc.steps, func(s step) bool { return s.at >= sc.horizon && !strings.HasPrefix(s.desc, "off ") })
	slices.SortStableFunc(sc.steps, func(a, b step) int { return int(a.at - b.at) })
	return sc
}

// interval is one fault, in force from start to end (since the run began).
type interval struct {
	slot       slot
	human      bool
	err        error
	start, end time.Duration
}

func (iv interval) trouble() bool { return iv.slot != slotWatchList }

// world is the running schedule: the server, and the ground truth as it
// happens.
type world struct {
	srv       *watchtest.Server
	start     time.Time
	faults    map[slot]watchtest.Faults
	open      map[slot]*interval
	intervals []*interval
	actions   []time.Duration
	mu        sync.Mutex
	handler   *interval // the handler fault in force, if any; guarded by mu
	cursors   []string
	stream    *wgwatch.Stream
}

func (w *world) now() time.Duration { return time.Since(w.start) }

func (w *world) write(name string, op int) {
	cm := watchtest.ConfigMap(name, "")
	exists := false
	for _, o := range w.srv.Objects() {
		if m, _ := meta.Accessor(o); m.GetName() == name {
			exists = true
		}
	}
	switch {
	case !exists:
		_, _ = w.srv.Create(cm)
	case op == 0:
		_ = w.srv.Delete(cm.Namespace, name)
	default:
		_, _ = w.srv.Update(cm)
	}
}

func (w *world) on(s slot, human bool, f watchtest.Faults, err error) {
	iv := &interval{slot: s, human: human, err: err, start: w.now(), end: -1}
	w.open[s] = iv
	w.intervals = append(w.intervals, iv)
	if s == slotHandler {
		w.mu.Lock()
		w.handler = iv
		w.mu.Unlock()
		return
	}
	w.faults[s] = f
	w.apply()
}

func (w *world) off(s slot) {
	iv, ok := w.open[s]
	if !ok {
		return
	}
	iv.end = w.now()
	delete(w.open, s)
	if s == slotHandler {
		w.mu.Lock()
		w.handler = nil
		w.mu.Unlock()
		return
	}
	delete(w.faults, s)
	w.apply()
}

func (w *world) apply() {
	var f watchtest.Faults
	for _, g := range w.faults {
		f.Refuse = f.Refuse || g.Refuse
		f.RefuseWatchList = f.RefuseWatchList || g.RefuseWatchList
		f.StaleProxy = f.StaleProxy || g.StaleProxy
		if g.Err != nil {
			f.Err = g.Err
		}
		if g.WatchLifetime > 0 {
			f.WatchLifetime = g.WatchLifetime
		}
	}
	w.srv.SetFaults(f)
}

// handlerErr is the error the handler returns now, if it fails.
func (w *world) handlerErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.handler != nil {
		return w.handler.err
	}
	return nil
}

func (w *world) action() { w.actions = append(w.actions, w.now()) }

// verdict is what the judge found in one schedule.
type verdict struct {
	falseNeedsHuman, missed, lost, ghosts, dup, cursorBack, dishonest int
	replaysPerHour                                                    int
	notes                                                             []string
}

func (v *verdict) add(counter *int, format string, args ...any) {
	*counter++
	if len(v.notes) < 8 {
		v.notes = append(v.notes, fmt.Sprintf(format, args...))
	}
}

func (v verdict) failed() bool {
	return v.falseNeedsHuman+v.missed+v.lost+v.ghosts+v.dup+v.cursorBack+v.dishonest > 0
}

// play runs sc inside a synctest bubble and judges it.
func play(t *testing.T, sc schedule) (v verdict) {
	synctest.Test(t, func(t *testing.T) {
		srv := watchtest.NewServer(sc.server)
		for i := range sc.initial {
			_, _ = srv.Create(watchtest.ConfigMap(fmt.Sprint("init", i), ""))
		}
		p := newProbe()
		w := &world{srv: srv, start: p.start, faults: map[slot]watchtest.Faults{}, open: map[slot]*interval{}}
		p.fail = func(time.Time, string) error { return w.handlerErr() }
		var stop func()
		var store cache.Store
		if sc.informer {
			stop, store = runInformer(t, srv, p)
		} else {
			opts := sc.stream
			opts.Resource, opts.Observer = configmaps, p
			s, err := wgwatch.NewStream(srv, p, opts)
			if err != nil {
				t.Fatal(err)
			}
			w.stream = s
			stop = runStream(t, s)
		}
		for _, st := range sc.steps {
			time.Sleep(st.at - w.now())
			st.do(w)
			if w.stream != nil {
				w.cursors = append(w.cursors, w.stream.Cursor())
			}
		}
		time.Sleep(sc.horizon - w.now())
		for s := range w.open {
			w.off(s)
		}
		quiet := w.now()
		time.Sleep(sc.settle / 2)
		_, _ = srv.Update(watchtest.ConfigMap("init0", ""))
		_, _ = srv.Create(watchtest.ConfigMap("late", ""))
		time.Sleep(sc.settle / 2)
		end := w.now()

		// No loss, no ghosts.
		want := viewOfObjects(srv.Objects())
		got := p.viewOf()
		if store != nil {
			got = map[string]string{}
			for _, o := range store.List() {
				m, _ := meta.Accessor(o)
				got[m.GetName()] = m.GetResourceVersion()
			}
		}
		for name, rv := range want {
			if got[name] != rv {
				v.add(&v.lost, "lost: %s@%s, the consumer has %q", name, rv, got[name])
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok {
				v.add(&v.ghosts, "ghost: %s is gone from the server, the consumer still has it", name)
			}
		}
		stop()
		if store == nil {
			// Exactly once, in order.
			if c := p.counts(); c.dup > 0 || c.regressions > 0 {
				v.add(&v.dup, "%d events at or below the last resourceVersion, %d snapshots older than it", c.dup, c.regressions)
			}
			last := int64(0)
			for _, c := range w.cursors {
				if c == "" {
					continue
				}
				if n := parseRV(c); n < last {
					v.add(&v.cursorBack, "cursor went back from %d to %d", last, n)
				} else {
					last = n
				}
			}
			v.replaysPerHour = maxInWindow(replayTimes(srv.Requests(), w.start), time.Hour)
			if b := replayBound(min(time.Hour, end)); v.replaysPerHour > b {
				v.add(&v.dishonest, "%d replays in one hour, over the bound %d", v.replaysPerHour, b)
			}
		}
		judge(&v, p, w, srv.Requests(), quiet, end)
		if *judgeVerbose && v.failed() {
			v.notes = append(v.notes, "states:"+p.stateLog(), "endings:"+p.endingLog(40), "requests:"+requestLog(srv.Requests(), w.start, 12))
		}
	})
	return v
}

func requestLog(reqs []watchtest.Request, start time.Time, n int) string {
	out := ""
	for _, r := range reqs[max(len(reqs)-n, 0):] {
		closed := time.Duration(-1)
		if !r.Closed.IsZero() {
			closed = r.Closed.Sub(start)
		}
		out += fmt.Sprintf("\n  %9v %s rv=%q sie=%v limit=%d cont=%q err=%v events=%d closed=%v", r.At.Sub(start).Round(time.Millisecond), r.Kind,
			r.Options.ResourceVersion, r.Options.SendInitialEvents != nil, r.Options.Limit, r.Options.Continue, r.Err, r.Events, closed)
	}
	return out
}

// replayTimes returns when each full replay was served: a LIST's first
// page or a watch-list the server did not refuse.
func replayTimes(reqs []watchtest.Request, start time.Time) []time.Duration {
	var out []time.Duration
	for _, r := range reqs {
		// A LIST of one object is a stream's check of its cursor.
		list := r.Kind == watchtest.CallList && r.Options.Continue == "" && r.Options.Limit != 1
		watchList := r.Kind == watchtest.CallWatch && r.Options.SendInitialEvents != nil
		if (list || watchList) && r.Err == nil {
			out = append(out, r.At.Sub(start))
		}
	}
	return out
}

func maxInWindow(times []time.Duration, window time.Duration) int {
	best, j := 0, 0
	for i := range times {
		for times[i]-times[j] >= window {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// span is a stretch of virtual time.
type span struct{ from, to time.Duration }

// liveSpans returns when the server had a live watch of the client's: open,
// past its replay, and having delivered an event or a bookmark or stayed
// open for ShortSession.
func liveSpans(reqs []watchtest.Request, start time.Time, end time.Duration) []span {
	var out []span
	for _, r := range reqs {
		if r.Kind != watchtest.CallWatch || r.Err != nil {
			continue
		}
		replayEnd := r.At
		if r.Options.SendInitialEvents != nil {
			if r.InitialEventsEnd.IsZero() {
				continue
			}
			replayEnd = r.InitialEventsEnd
		}
		live := replayEnd.Add(shortSession)
		if !r.FirstEvent.IsZero() && r.FirstEvent.Before(live) {
			live = r.FirstEvent
		}
		closed := end
		if !r.Closed.IsZero() {
			closed = r.Closed.Sub(start)
		}
		if l := live.Sub(start); l < closed {
			out = append(out, span{l, closed})
		}
	}
	return union(out, 0)
}

// union merges spans, bridging gaps shorter than gap.
func union(spans []span, gap time.Duration) []span {
	slices.SortFunc(spans, func(a, b span) int { return int(a.from - b.from) })
	var out []span
	for _, s := range spans {
		if n := len(out); n > 0 && s.from <= out[n-1].to+gap {
			out[n-1].to = max(out[n-1].to, s.to)
			continue
		}
		out = append(out, s)
	}
	return out
}

// gapStart returns when the no-live stretch holding t began, or -1 if t is
// inside a live span.
func gapStart(live []span, t time.Duration) time.Duration {
	from := time.Duration(0)
	for _, s := range live {
		if s.from > t {
			break
		}
		if t < s.to {
			return -1
		}
		from = s.to
	}
	return from
}

func covered(spans []span, from, to time.Duration) bool {
	for _, s := range spans {
		if s.from <= from && to <= s.to {
			return true
		}
	}
	return false
}

func judge(v *verdict, p *probe, w *world, reqs []watchtest.Request, quiet, end time.Duration) {
	live := liveSpans(reqs, w.start, end)
	var trouble, human []span
	for _, iv := range w.intervals {
		to := iv.end
		if to < 0 {
			to = end
		}
		if iv.trouble() {
			trouble = append(trouble, span{iv.start, to})
		}
		if iv.human {
			human = append(human, span{iv.start, to})
		}
	}
	// A stream sees the server only when it asks: a healthy gap shorter
	// than one backoff may pass unseen, and does not end the trouble.
	trouble = union(trouble, bridge)
	human = union(human, bridge)
	const eps = 10 * time.Millisecond

	states := p.counts().states
	stateAt := func(t time.Duration) wgwatch.State { return p.stateAt(t) }

	// Precision: NeedsHuman only for a cause a human must fix that has
	// lasted HumanGrace, or no live progress for ProgressDeadline.
	for _, s := range states {
		if !s.v.NeedsHuman {
			continue
		}
		t := s.at
		g := gapStart(live, t)
		justified := covered(human, t-humanGrace, t-eps) ||
			(g >= 0 && t-g >= deadline-eps) ||
			covered(trouble, t-deadline+eps, t-eps)
		if !justified {
			v.add(&v.falseNeedsHuman, "false NeedsHuman at %v: %s/%s %q", t, s.v.Phase, s.v.Reason, s.v.Message)
		}
	}

	// Recall, human causes: from the first request a human cause failed,
	// while every request fails with it, published within recallHuman.
	for _, iv := range w.intervals {
		if !iv.human || iv.slot != slotErr {
			continue
		}
		to := iv.end
		if to < 0 {
			to = end
		}
		first := time.Duration(-1)
		clean := true
		for _, r := range reqs {
			at := r.At.Sub(w.start)
			if at < iv.start || at >= to {
				continue
			}
			if first < 0 {
				if r.Err != nil && r.Err.Error() == iv.err.Error() {
					first = at
				}
				continue
			}
			if at <= first+recallHuman && (r.Err == nil || r.Err.Error() != iv.err.Error()) {
				clean = false
			}
		}
		if first < 0 || !clean || to <= first+recallHuman {
			continue
		}
		if st := stateAt(first + recallHuman); !st.NeedsHuman {
			v.add(&v.missed, "missed: %v from %v not NeedsHuman at %v (state %s/%s)", iv.err, first, first+recallHuman, st.Phase, st.Reason)
		}
	}

	// Recall, the deadline: no live watch for ProgressDeadline is
	// NeedsHuman within a second of it.
	from := time.Duration(0)
	for _, s := range append(live, span{end, end}) {
		if t := from + recallDeadline; t < s.from && t < end {
			if st := stateAt(t); !st.NeedsHuman {
				v.add(&v.missed, "missed: no live watch from %v, not NeedsHuman at %v (state %s/%s)", from, t, st.Phase, st.Reason)
			}
		}
		// Honest Streaming: not Streaming once no watch has been live for
		// the transient grace.
		if t := from + staleBound; t < s.from && t < end {
			if st := stateAt(t); st.Phase == wgwatch.PhaseStreaming {
				v.add(&v.dishonest, "dishonest: no live watch from %v, still Streaming at %v", from, t)
			}
		}
		from = s.to
	}

	// Honest Streaming: published only while a watch is live.
	for _, s := range states {
		if s.v.Phase == wgwatch.PhaseStreaming && gapStart(live, s.at) >= 0 {
			v.add(&v.dishonest, "dishonest: Streaming published at %v with no live watch", s.at)
		}
	}

	// Clearing: healthy for clearBound (no fault, no instant action) means
	// Streaming.
	var busy []span
	for _, iv := range w.intervals {
		if iv.trouble() {
			to := iv.end
			if to < 0 {
				to = end
			}
			busy = append(busy, span{iv.start, to})
		}
	}
	for _, a := range w.actions {
		busy = append(busy, span{a, a})
	}
	busy = union(busy, 0)
	from = 0
	for _, s := range append(busy, span{end, end}) {
		if t := from + clearBound; t < s.from {
			if st := stateAt(t); st.Phase != wgwatch.PhaseStreaming {
				v.add(&v.missed, "not cleared: healthy from %v, state %s/%s at %v", from, st.Phase, st.Reason, t)
			}
		}
		from = max(from, s.to)
	}
	_ = quiet
}

// TestJudge runs -judge.schedules random schedules (writes of every kind,
// every fault the simulated server has, durations from milliseconds to
// hours) against a Stream, and one in four against a client-go informer
// over Instrument, and checks every invariant of the watch package doc on
// each. It prints one summary line.
func TestJudge(t *testing.T) {
	before := runtime.NumGoroutine()
	var total verdict
	failed := 0
	for i := range *judgeSchedules {
		seed := *judgeSeed + uint64(i)
		sc := generate(seed, &chooser{rng: rand.New(rand.NewPCG(seed, 0))})
		var v verdict
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			v = play(t, sc)
			if *judgeVerbose || v.failed() {
				t.Logf("%v", sc)
			}
			if v.failed() {
				t.Errorf("schedule %d broke the invariants:\n  %s", seed, strings.Join(v.notes, "\n  "))
			}
		})
		if v.failed() {
			failed++
		}
		total.falseNeedsHuman += v.falseNeedsHuman
		total.missed += v.missed
		total.lost += v.lost
		total.ghosts += v.ghosts
		total.dup += v.dup + v.cursorBack
		total.dishonest += v.dishonest
		total.replaysPerHour = max(total.replaysPerHour, v.replaysPerHour)
	}
	runtime.GC()
	leaks := max(runtime.NumGoroutine()-before, 0)
	fmt.Printf("judge: schedules=%d failed=%d false_needs_human=%d missed=%d lost=%d ghosts=%d dup=%d dishonest=%d leaks=%d max_replays_per_hour=%d bound=%d\n",
		*judgeSchedules, failed, total.falseNeedsHuman, total.missed, total.lost, total.ghosts, total.dup, total.dishonest, leaks, total.replaysPerHour, replayBound(time.Hour))
	if leaks > 0 {
		t.Errorf("%d goroutines more than before the schedules", leaks)
	}
}

// FuzzJudge drives the schedule generator from the fuzz input.
func FuzzJudge(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3})
	f.Add([]byte("a replay loop behind a proxy"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc := generate(0, &chooser{data: data, rng: rand.New(rand.NewPCG(uint64(len(data)), 1))})
		if v := play(t, sc); v.failed() {
			t.Errorf("schedule broke the invariants:\n  %s\n%v", strings.Join(v.notes, "\n  "), sc)
		}
	})
}
