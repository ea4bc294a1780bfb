package pipeline_test

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/watchgrade/watchgrade/internal/judgekit"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// Bounds the judge holds the pipeline to. Each is stated in the docs of
// package watch (the stream's own bounds) or package readiness (the
// restart hold).
const (
	shortSession   = wgwatch.DefaultShortSession
	maxBackoff     = wgwatch.DefaultMaxBackoff
	humanGrace     = wgwatch.DefaultHumanGrace
	transientGrace = wgwatch.DefaultTransientGrace
	replayGrace    = wgwatch.DefaultReplayGrace
	// eps is how long the pipeline may take to reflect a change in the
	// conditions it writes. Everything it does takes no virtual time (a
	// reconcile is a goroutine that runs at once), so this is slack for
	// same-instant ordering only.
	eps = 100 * time.Millisecond
	// slack covers what the simulation itself takes (the server's 3 s
	// block on a too large resourceVersion).
	slack = 4 * time.Second
	// staleBound: a stream that has had no live session for the transient
	// grace is not Streaming any more, so the owner is not Ready: a
	// consumer's view may be behind the server for this long under
	// Ready=True, never longer.
	staleBound = transientGrace + slack
	// quietBefore and quietAfter frame a restart that changes nothing:
	// nothing else happens this long before it, or after the controller
	// is back.
	quietBefore = 6 * time.Minute
	quietAfter  = 2 * time.Minute
)

// The judges' kit (internal/judgekit, shared with the watch judge): the
// slots of faults (of one slot on one server, never two at once), the
// chooser, spans of virtual time.
type (
	slot    = judgekit.Slot
	chooser = judgekit.Chooser
	span    = judgekit.Span
)

const (
	slotErr       = judgekit.SlotErr
	slotRefuse    = judgekit.SlotRefuse
	slotFlap      = judgekit.SlotFlap
	slotStale     = judgekit.SlotStale
	slotWatchList = judgekit.SlotWatchList // not trouble: a server without watch-list
	slotHandler   = judgekit.SlotHandler
)

// step is one thing a history does at a point of virtual time.
type step struct {
	at   time.Duration
	desc string
	do   func(w *world)
	// group ties the steps of one fault or one restart together: a quiet
	// window drops them all or none.
	group int
	// keep marks the steps of a quiet episode itself.
	keep bool
}

// streamSpec is one stream of the controller: its server and how it is
// consumed.
type streamSpec struct {
	informer bool
	// informers is how many informers of the stream run at once (one
	// when 0), merged by watch.Streams as wgctrl merges a cache's.
	informers int
	server    watchtest.ServerOptions
	opts      wgwatch.StreamOptions
	// snapshotDelay is how long the consumer takes over each snapshot (a
	// replay's objects: a large collection, a slow cache fill), 0 for
	// none. A Stream's only.
	snapshotDelay time.Duration
}

// history is one generated history.
type history struct {
	seed    uint64
	horizon time.Duration
	streams []streamSpec
	// owners is how many owner names there are; owner i is named "o<i>"
	// in namespace ns-a (even i) or ns-b (odd i).
	owners int
	// rollup are the accumulator's roll-up options.
	rollup wgreadiness.Options
	// startGrace is the accumulator's StartGrace: its default mostly,
	// sometimes shorter or longer than the streams' TransientGrace.
	startGrace time.Duration
	// lagNow has the controller pass Apply a now that lags the
	// accumulator's clock: 1 truncates it to the minute (a coarser
	// clock), 2 sets it a minute behind (another clock).
	lagNow int
	// policy is the streams' watch Policy (both kinds), which the
	// accumulator is given too: the defaults mostly, in a quarter of the
	// histories a ProgressDeadline of 10 minutes.
	policy wgwatch.Policy
	// standby has the controller write as wgctrl's Owner does while its
	// caches sync: until every stream of the process has been Streaming
	// once (or standbyFor has passed), no reconcile runs; a standby writer
	// tracks each owner's streams, rolls it up from them alone (the
	// caller's gates are its reconcile's to set) and writes it only when
	// that verdict is Stalled, or takes a Ready=True away. Then every
	// owner is reconciled.
	standby    bool
	standbyFor time.Duration
	// kinds marks the streams the standby writer knows (bit i: stream i),
	// as an Owner knows the kinds it was declared with: the others are
	// streams its reconcile tracks per owner (Owner.Track).
	kinds int
	// persist has the controller persist each Stream's cursor and its
	// consumer's view when it stops, and resume from them when it starts
	// (StreamOptions.Cursor), as a controller that checkpoints does; a
	// cursor that expired while it was down is replayed.
	persist bool
	// firstStart is when the controller first starts. Owners created
	// before it (with more than a minute to spare) predate the
	// controller: they are never witnessed.
	firstStart time.Duration
	// failing counts the spans in which an owner's Reconcile fails (the
	// steps "reconcile fails" and "reconcile succeeds").
	failing int
	// writesRefused counts the spans in which status writes are answered
	// 503.
	writesRefused int
	// twice has each Reconcile call the status step twice, as a
	// Reconcile that writes its status early and again at its end does.
	twice bool
	// crd is the stream whose kind the API server does not serve when
	// the history begins (its CustomResourceDefinition not installed yet),
	// installed by the step "s<crd> CRD installed" if the history has
	// one; -1 for none. The controller follows it as wgctrl does, through
	// the status step's AwaitInformer.
	crd   int
	steps []step
	// quiet are the windows kept free around quiet restarts.
	quiet []span
	// episodes are the quiet controller restarts over a fault.
	episodes []episode
}

// downRestart is the step of an apiserver restart while the controller is
// down for a quiet restart.
const downRestart = "quiet apiserver restart while the controller is down"

// fate is what becomes of an episode's fault while the controller is down.
type fate string

const (
	fatePersists fate = "persists"
	fateEnds     fate = "ends"
	fateChanges  fate = "changes"
)

// episode is a quiet controller restart over a fault: a fault (of a
// server, or the caller's own gate) that began before the stop, long enough
// for the owners to show it, and that persists, ends or changes while the
// controller is down; nothing else happens in its window (the history's
// episodeWindow: from quietBefore before the stop to quietAfter after the
// start, with the defaults).
type episode struct {
	stop, start, end time.Duration
	// before is how long before stop its window opens.
	before time.Duration
	fate   fate
	desc   string
	// srv and slot are the fault's server and slot; srv is -1 for a
	// caller's gate.
	srv  int
	slot slot
}

func (h history) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed=%d horizon=%v owners=%d first_start=%v streams_condition=%q empty=%q start_grace=%v lag_now=%d persist=%v progress_deadline=%v standby=%v(%v,kinds=%b) step_twice=%v crd=%d streams=[",
		h.seed, h.horizon, h.owners, h.firstStart, h.rollup.StreamsCondition, h.rollup.Empty, h.startGrace, h.lagNow, h.persist, h.deadline(), h.standby, h.standbyFor, h.kinds, h.twice, h.crd)
	for i, s := range h.streams {
		if i > 0 {
			b.WriteString(" ")
		}
		kind := "stream"
		if s.informer {
			kind = fmt.Sprintf("informer(%d)", max(1, s.informers))
		}
		fmt.Fprintf(&b, "%s:{Expiry:%s DisableWatchCache:%v Bookmarks:%v CacheSize:%d DisableWatchList:%v SnapshotDelay:%v}",
			kind, s.server.Expiry, s.server.DisableWatchCache, s.server.BookmarkInterval, s.server.WatchCacheSize, s.opts.DisableWatchList, s.snapshotDelay)
	}
	b.WriteString("]")
	for _, s := range h.steps {
		fmt.Fprintf(&b, "\n  %12v %s", s.at, s.desc)
	}
	return b.String()
}

// deadline is the streams' ProgressDeadline.
func (h history) deadline() time.Duration {
	if h.policy.ProgressDeadline > 0 {
		return h.policy.ProgressDeadline
	}
	return wgwatch.DefaultProgressDeadline
}

// notReadyHold is the accumulator's NotReadyHold, its default for the
// Policy and StartGrace it is given (package readiness).
func (h history) notReadyHold() time.Duration {
	return max(h.deadline()+wgreadiness.DefaultStartGrace, h.startGrace)
}

// episodeWindow is how long before a restart over a fault the window of
// its episode opens, and how long after the controller is back it closes:
// quietBefore and quietAfter, or with a ProgressDeadline longer than the
// default, long enough for a fault to stall a stream by it before the
// stop and for the new process's hold to end after the start.
func (h history) episodeWindow() (before, after time.Duration) {
	if h.deadline() <= wgwatch.DefaultProgressDeadline {
		return quietBefore, quietAfter
	}
	return h.deadline() + time.Minute, h.notReadyHold() + time.Minute
}

// gateLevels are the gate states a history sets: what the caller's own
// dependency check reports, including the Starting flag a caller may set
// by mistake (it must never hold an owner).
var gateLevels = []struct {
	name     string
	level    wgreadiness.Level
	starting bool
}{
	{"established", wgreadiness.LevelEstablished, false},
	{"established", wgreadiness.LevelEstablished, false},
	{"progressing", wgreadiness.LevelProgressing, false},
	{"stalled", wgreadiness.LevelStalled, false},
	{"starting", wgreadiness.LevelProgressing, true},
	{"stalled-starting", wgreadiness.LevelStalled, true},
}

// generate builds the history of seed, deciding with c.
func generate(seed uint64, c *chooser) history {
	h := history{seed: seed}
	h.horizon = c.LogDuration(2*time.Minute, 3*time.Hour)
	h.owners = 1 + c.Intn(4)
	if c.Intn(2) == 0 {
		h.rollup.StreamsCondition = "StreamsRunning"
	}
	if c.Intn(5) == 0 {
		h.rollup.Empty = wgreadiness.EmptyEstablished
	}
	if c.Intn(4) == 0 {
		h.lagNow = 1 + c.Intn(2)
	}
	h.startGrace = wgreadiness.DefaultStartGrace
	if c.Intn(3) == 0 {
		h.startGrace = []time.Duration{5 * time.Second, 10 * time.Second, 90 * time.Second}[c.Intn(3)]
	}
	for i := range 1 + c.Intn(3) {
		var s streamSpec
		s.informer = c.Intn(4) == 0
		s.server.Seed = seed*7 + uint64(i)
		s.server.Expiry = []watchtest.ExpiryShape{watchtest.ExpiryErrorEvent, watchtest.ExpiryGoneEvent, watchtest.ExpiryOpenError}[c.Intn(3)]
		s.server.DisableWatchCache = c.Intn(5) == 0
		if c.Intn(3) == 0 {
			s.server.BookmarkInterval = -1
		}
		if c.Intn(2) == 0 {
			s.server.WatchCacheSize = 1 + c.Intn(10)
			s.server.WatchCacheWindow = c.LogDuration(time.Second, 2*time.Minute)
		}
		s.opts.DisableWatchList = c.Intn(4) == 0
		if s.informer && c.Intn(2) == 0 {
			s.informers = 2
		}
		if !s.informer && c.Intn(3) == 0 {
			// Past ReplayGrace sometimes, so that a replay is published,
			// short of the handler stall's TransientGrace.
			s.snapshotDelay = c.LogDuration(time.Second, 25*time.Second)
		}
		h.streams = append(h.streams, s)
	}
	h.persist = c.Intn(2) == 0
	if c.Intn(4) == 0 {
		h.policy.ProgressDeadline = 10 * time.Minute
	}
	for i := range h.streams {
		h.streams[i].opts.Policy = h.policy
	}
	if c.Intn(3) == 0 {
		h.standby, h.standbyFor = true, c.LogDuration(time.Second, 2*time.Minute)
		h.kinds = c.Intn(1 << len(h.streams))
	}

	group := 0
	nextGroup := func() int { group++; return group }
	add := func(at time.Duration, g int, desc string, do func(w *world)) {
		h.steps = append(h.steps, step{at: at, desc: desc, do: do, group: g})
	}
	owner := func() int { return c.Intn(h.owners) }
	createOwner := func(at time.Duration, o int) {
		streams := c.Intn(1 << len(h.streams))
		if c.Intn(8) == 0 {
			streams = 0
		}
		add(at, 0, fmt.Sprintf("create o%d streams=%b", o, streams), func(w *world) { w.createOwner(o, streams) })
	}

	// Owners that predate the controller, then its first start.
	if c.Intn(3) == 0 {
		for o := range h.owners {
			if c.Intn(2) == 0 {
				createOwner(0, o)
			}
		}
		h.firstStart = c.LogDuration(2*time.Minute, 30*time.Minute)
	}
	h.steps = append(h.steps, step{at: h.firstStart, desc: "controller start", do: func(w *world) { w.startController() }, keep: true})

	busy := map[string]time.Duration{} // "<server>/<slot>" -> when free again
	// fault returns the steps of a fault of slot s on server srv from at
	// for d, or false when the slot is taken then.
	fault := func(srv int, s slot, at, d time.Duration) (on, off step, ok bool) {
		key := fmt.Sprint(srv, "/", s)
		if busy[key] > at {
			return step{}, step{}, false
		}
		end := min(at+d, h.horizon)
		busy[key] = end + time.Millisecond
		fl := judgekit.DrawFault(c, s)
		desc := fmt.Sprintf("s%d %s", srv, fl.Desc)
		on = step{at: at, desc: "on " + desc, do: func(w *world) { w.faultOn(srv, s, fl.Human, fl.Faults, fl.Err) }}
		off = step{at: end, desc: "off " + desc, do: func(w *world) { w.faultOff(srv, s) }}
		return on, off, true
	}
	addFault := func(srv int, s slot, at, d time.Duration) {
		on, off, ok := fault(srv, s, at, d)
		if !ok {
			return
		}
		g := nextGroup()
		on.group, off.group = g, g
		h.steps = append(h.steps, on, off)
	}
	downUntil := time.Duration(0)
	quietUntil := time.Duration(-1) // the end of the last quiet window
	at := h.firstStart
	for {
		at += c.LogDuration(time.Millisecond, max(h.horizon/10, time.Second))
		if at >= h.horizon {
			break
		}
		switch k := c.Intn(24); {
		case k < 6: // writes to the streams' collections
			n := 1
			if c.Intn(4) == 0 {
				n = 1 + c.Intn(12) // a burst
			}
			for i := range n {
				srv, name, op := c.Intn(len(h.streams)), string(rune('a'+c.Intn(6))), c.Intn(3)
				add(at+time.Duration(i)*time.Millisecond, 0, fmt.Sprintf("write s%d/%s (%d)", srv, name, op), func(w *world) { w.write(srv, name, op) })
			}
		case k < 9: // a server fault, for a while
			srv := c.Intn(len(h.streams))
			s := []slot{slotErr, slotErr, slotRefuse, slotFlap, slotStale, slotWatchList, slotHandler}[c.Intn(7)]
			addFault(srv, s, at, c.LogDuration(time.Millisecond, min(90*time.Minute, h.horizon)))
		case k < 11: // an instant action on a server, or on all (an apiserver restart)
			srv := c.Intn(len(h.streams))
			switch c.Intn(6) {
			case 0:
				add(at, 0, fmt.Sprintf("s%d close watches", srv), func(w *world) { w.action(srv, actionClose) })
			case 1:
				add(at, 0, fmt.Sprintf("s%d compact", srv), func(w *world) { w.action(srv, actionCompact) })
			case 2:
				add(at, 0, fmt.Sprintf("s%d fail watches 500", srv), func(w *world) { w.action(srv, actionFail) })
			case 3:
				n := 1 + c.Intn(1000)
				add(at, 0, fmt.Sprintf("s%d advance %d", srv, n), func(w *world) { w.advance(srv, n) })
			default:
				add(at, 0, "apiserver restart", func(w *world) { w.apiserverRestart() })
			}
		case k < 14: // the owners themselves
			o := owner()
			switch c.Intn(5) {
			case 0, 1:
				createOwner(at, o)
			case 2:
				add(at, 0, fmt.Sprintf("delete o%d", o), func(w *world) { w.deleteOwner(o) })
			case 3:
				add(at, 0, fmt.Sprintf("delete o%d", o), func(w *world) { w.deleteOwner(o) })
				createOwner(at+c.LogDuration(time.Millisecond, time.Minute), o)
			default:
				streams := -1 // same streams, a new generation
				if c.Intn(2) == 0 {
					streams = c.Intn(1 << len(h.streams))
				}
				add(at, 0, fmt.Sprintf("bump o%d streams=%b", o, streams), func(w *world) { w.bumpOwner(o, streams) })
			}
		case k < 17: // the caller's own gates
			o, gate := owner(), fmt.Sprint("g", c.Intn(2))
			if c.Intn(5) == 0 {
				add(at, 0, fmt.Sprintf("o%d remove gate %s", o, gate), func(w *world) { w.removeGate(o, gate) })
				continue
			}
			lv := gateLevels[c.Intn(len(gateLevels))]
			add(at, 0, fmt.Sprintf("o%d gate %s %s", o, gate, lv.name), func(w *world) { w.setGate(o, gate, lv.level, lv.starting) })
		case k < 20: // a controller restart: a rollout, or an outage
			if at < downUntil {
				continue
			}
			var down time.Duration
			switch c.Intn(10) {
			case 0, 1, 2, 3, 4:
				down = c.LogDuration(time.Millisecond, 5*time.Second)
			case 5, 6, 7:
				down = c.LogDuration(10*time.Second, 2*time.Minute)
			default:
				down = c.LogDuration(2*time.Minute, 20*time.Minute)
			}
			g := nextGroup()
			add(at, g, "controller stop", func(w *world) { w.stopController() })
			add(at+down, g, "controller start", func(w *world) { w.startController() })
			downUntil = at + down + time.Second
			// Owners created while it is down.
			if down > time.Second && c.Intn(2) == 0 {
				createOwner(at+down/2, owner())
			}
			// A rollout into trouble: a fault that starts as the controller
			// comes back, so that a stream may not establish within the
			// start grace.
			if c.Intn(2) == 0 {
				srv := c.Intn(len(h.streams))
				s := []slot{slotErr, slotRefuse, slotFlap, slotStale, slotHandler}[c.Intn(5)]
				addFault(srv, s, at+down-c.LogDuration(time.Millisecond, time.Second), c.LogDuration(time.Second, 10*time.Minute))
			}
			// A stream run again soon after the start.
			if c.Intn(4) == 0 {
				srv, after := c.Intn(len(h.streams)), c.LogDuration(time.Second, h.startGrace)
				add(at+down+after, g, fmt.Sprintf("s%d run again", srv), func(w *world) { w.rerun(srv) })
			}
		case k < 21: // one stream run again by the controller
			srv := c.Intn(len(h.streams))
			add(at, 0, fmt.Sprintf("s%d run again", srv), func(w *world) { w.rerun(srv) })
		default: // a quiet restart: nothing else around it
			if at < downUntil || at < h.firstStart+quietBefore || at-quietBefore <= quietUntil {
				continue
			}
			g := nextGroup()
			var from, to time.Duration
			switch c.Intn(3) {
			case 0:
				down := c.LogDuration(time.Millisecond, 5*time.Second)
				h.steps = append(h.steps,
					step{at: at, desc: "quiet controller stop", do: func(w *world) { w.stopController() }, group: g, keep: true},
					step{at: at + down, desc: "quiet controller start", do: func(w *world) { w.startController() }, group: g, keep: true})
				if c.Intn(2) == 0 {
					// An apiserver rolled meanwhile: every persisted
					// cursor expired, which changes nothing either.
					h.steps = append(h.steps, step{at: at + down/2, desc: downRestart, do: func(w *world) { w.apiserverRestart() }, group: g, keep: true})
				}
				from, to = at-quietBefore, at+down+quietAfter
				downUntil = at + down + time.Second
			case 1:
				h.steps = append(h.steps, step{at: at, desc: "quiet apiserver restart", do: func(w *world) { w.apiserverRestart() }, group: g, keep: true})
				from, to = at-quietBefore, at+quietAfter
			default:
				ep, steps, ok := restartOverFault(c, &h, at, g, fault, owner)
				if !ok || at < h.firstStart+ep.before || at-ep.before <= quietUntil {
					continue
				}
				h.steps = append(h.steps, steps...)
				h.episodes = append(h.episodes, ep)
				from, to = at-ep.before, ep.end
				downUntil = ep.start + time.Second
			}
			h.quiet = append(h.quiet, span{From: from, To: to})
			quietUntil = to
		}
	}
	// Reconciles that fail (chosen last, so that the histories of a seed
	// are otherwise as they were): an owner's Reconcile returns an error
	// from one step to another, retried, shorter than the status step's
	// progress deadline, or a terminal one, not retried, until the spec
	// or the world is fixed; and, in some histories, a Reconcile that
	// calls the status step twice.
	if c.Intn(3) == 0 {
		for range 1 + c.Intn(2) {
			o, terminal := owner(), c.Intn(4) == 0
			from := c.LogDuration(time.Second, h.horizon)
			long := c.LogDuration(time.Second, wgwatch.DefaultProgressDeadline-time.Minute)
			if terminal {
				long = c.LogDuration(time.Second, time.Hour)
			}
			g := nextGroup()
			kind := "transient"
			if terminal {
				kind = "terminal"
			}
			add(from, g, fmt.Sprintf("o%d reconcile fails (%s)", o, kind), func(w *world) { w.failReconcile(o, terminal) })
			add(from+long, g, fmt.Sprintf("o%d reconcile succeeds", o), func(w *world) { w.reconcileSucceeds(o) })
			h.failing++
		}
	}
	h.twice = c.Intn(6) == 0
	// Status writes the API server does not take for a while (503: etcd
	// slow to write), its watches served: chosen last too.
	if c.Intn(4) == 0 {
		from := c.LogDuration(time.Second, h.horizon)
		long := c.LogDuration(time.Second, 3*time.Minute)
		g := nextGroup()
		add(from, g, "status writes refused", func(w *world) { w.setWritesDown(true) })
		add(from+long, g, "status writes back", func(w *world) { w.setWritesDown(false) })
		h.writesRefused++
	}
	// A kind not served yet, installed later or never: chosen last too.
	h.crd = -1
	if c.Intn(5) == 0 {
		i := c.Intn(len(h.streams))
		h.crd = i
		if at := c.LogDuration(time.Second, 2*h.horizon); at < h.horizon {
			add(at, nextGroup(), fmt.Sprintf("s%d CRD installed", i), func(w *world) { w.installCRD(i) })
		}
	}
	h.dropInQuiet()
	h.steps = slices.DeleteFunc(h.steps, func(s step) bool { return s.at >= h.horizon && !strings.HasPrefix(s.desc, "off ") })
	slices.SortStableFunc(h.steps, func(a, b step) int { return int(a.at - b.at) })
	return h
}

// restartOverFault builds an episode: a controller restart at `at`, over a
// fault that began from 40 s to nearly its window's start earlier (long enough
// for a stream to be blocked, or stalled by a cause that needs a human or
// by the progress deadline) and that persists, ends or changes while the
// controller is down. Its steps are kept in the quiet window, in group g.
func restartOverFault(c *chooser, h *history, at time.Duration, g int,
	fault func(srv int, s slot, at, d time.Duration) (on, off step, ok bool), owner func() int) (episode, []step, bool) {
	before, after := h.episodeWindow()
	begun := c.LogDuration(40*time.Second, before-10*time.Second)
	if before > quietBefore && c.Intn(2) == 0 {
		// Past the progress deadline: the stream is stalled by it.
		begun = h.deadline() + c.LogDuration(10*time.Second, 50*time.Second)
	}
	down := c.LogDuration(time.Millisecond, 5*time.Second)
	ep := episode{stop: at, start: at + down, end: at + down + after, before: before, fate: []fate{fatePersists, fateEnds, fateChanges}[c.Intn(3)], srv: -1}
	during := at + down/2 // what becomes of the fault, while the controller is down
	var steps []step
	keep := func(st step) {
		st.group, st.keep = g, true
		steps = append(steps, st)
	}
	if c.Intn(4) == 0 {
		// The caller's own gate.
		o, name := owner(), fmt.Sprint("g", c.Intn(2))
		levels := []wgreadiness.Level{wgreadiness.LevelStalled, wgreadiness.LevelProgressing}
		k := c.Intn(2)
		set := func(at time.Duration, lv wgreadiness.Level) {
			keep(step{at: at, desc: fmt.Sprintf("o%d gate %s %s", o, name, lv), do: func(w *world) { w.setGate(o, name, lv, false) }})
		}
		set(at-begun, levels[k])
		switch ep.fate {
		case fateEnds:
			set(during, wgreadiness.LevelEstablished)
		case fateChanges:
			set(during, levels[1-k])
		}
		ep.desc = fmt.Sprintf("o%d gate %s %s, %s", o, name, levels[k], ep.fate)
	} else {
		srv := c.Intn(len(h.streams))
		if c.Intn(4) != 0 {
			// As the window starts, every caller's gate is established and
			// an owner follows the stream: the fault is what the owners
			// show.
			o := owner()
			keep(step{at: at - before, desc: fmt.Sprintf("o%d follows s%d", o, srv), do: func(w *world) { w.follow(o, srv) }})
			for o := range h.owners {
				for _, name := range []string{"g0", "g1"} {
					keep(step{at: at - before - time.Millisecond, desc: fmt.Sprintf("o%d gate %s established", o, name), do: func(w *world) {
						w.setGate(o, name, wgreadiness.LevelEstablished, false)
					}})
				}
			}
		}
		sl := []slot{slotErr, slotErr, slotRefuse, slotFlap, slotHandler}[c.Intn(5)]
		end := ep.end + c.LogDuration(time.Second, 10*time.Minute)
		if ep.fate != fatePersists {
			end = during
		}
		on, off, ok := fault(srv, sl, at-begun, end-(at-begun))
		if !ok {
			return episode{}, nil, false
		}
		ep.srv, ep.slot = srv, sl
		keep(on)
		keep(off)
		// The server closes its watches as the fault begins, so that the
		// stream meets it now rather than when its session would end.
		keep(step{at: on.at + time.Millisecond, desc: fmt.Sprintf("s%d close watches", srv), do: func(w *world) { w.action(srv, actionClose) }})
		ep.desc = strings.TrimPrefix(on.desc, "on ") + ", " + string(ep.fate)
		if ep.fate == fateChanges {
			if on2, off2, ok := fault(srv, sl, during+time.Millisecond, ep.end+c.LogDuration(time.Second, 10*time.Minute)-during); ok {
				keep(on2)
				keep(off2)
				ep.desc += " to " + strings.TrimPrefix(on2.desc, "on ")
			}
		}
	}
	keep(step{at: at, desc: "quiet controller stop over " + ep.desc, do: func(w *world) { w.stopController() }})
	keep(step{at: ep.start, desc: "quiet controller start over " + ep.desc, do: func(w *world) { w.startController() }})
	return ep, steps, true
}

// dropInQuiet removes every step inside a quiet window but the quiet
// episode's own, with the other steps of its group (a fault that starts
// or ends there, a restart that stops or starts there).
func (h *history) dropInQuiet() {
	if len(h.quiet) == 0 {
		return
	}
	inQuiet := func(s step) bool {
		for _, q := range h.quiet {
			if q.From <= s.at && s.at <= q.To {
				return true
			}
		}
		return false
	}
	// A fault that spans a window has both ends outside it.
	spans := map[int]span{}
	for _, s := range h.steps {
		if s.group == 0 || s.keep {
			continue
		}
		sp, ok := spans[s.group]
		if !ok {
			sp = span{From: s.at, To: s.at}
		}
		sp.From, sp.To = min(sp.From, s.at), max(sp.To, s.at)
		spans[s.group] = sp
	}
	drop := map[int]bool{}
	for g, sp := range spans {
		for _, q := range h.quiet {
			if sp.From <= q.To && q.From <= sp.To {
				drop[g] = true
			}
		}
	}
	h.steps = slices.DeleteFunc(h.steps, func(s step) bool {
		if s.keep {
			return false
		}
		return drop[s.group] || inQuiet(s)
	})
}
