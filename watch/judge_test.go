// The judge seeds math/rand's global source before each schedule: client-go's
// reflector draws its watch timeouts and its backoff's jitter from it, and
// a seed must replay an informer's history exactly.
//go:debug randseednop=0

package watch_test

import (
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"maps"
	mathrand "math/rand"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/watchgrade/watchgrade/internal/judgekit"
	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// The judge: random fault histories against a simulated API server, and
// every promise of the watch package doc checked against each history's
// ground truth, as the consumer sees it. See TestJudge; the invariants are
// in judge_oracle_test.go.

var (
	judgeSchedules = flag.Int("judge.schedules", 200, "number of schedules TestJudge runs")
	judgeSeed      = flag.Uint64("judge.seed", 1, "seed of TestJudge's first schedule")
	judgeVerbose   = flag.Bool("judge.v", false, "print every schedule TestJudge runs, and the states it saw")
	judgeAt        = flag.Duration("judge.at", -1, "with -judge.v, print the session endings and requests of the 5 minutes before this time of a failed schedule")
	judgeReplays   = flag.Int("judge.replays", 20, "number of seeds TestJudgeReplay plays twice each, from -judge.seed on")
)

// The judges' kit: the slots of faults, the chooser, spans of virtual
// time, and what live means (internal/judgekit, shared with the pipeline
// judge).
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
	slotWatchList = judgekit.SlotWatchList
	slotInStream  = judgekit.SlotInStream
	slotStall     = judgekit.SlotStall
	slotHandler   = judgekit.SlotHandler
	slotSlow      = judgekit.SlotSlow
	slotStuck     = judgekit.SlotStuck
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
	// worlds counts what the schedule draws beyond the faults: handlers
	// slower than keeping up, ones hanging on every call, large watch
	// buffers, large bursts.
	worlds worldCounts
}

// worldCounts counts schedules by what their world holds.
type worldCounts struct{ slowConsumers, hungHandlers, largeBuffers, largeBursts int }

func (a *worldCounts) add(b worldCounts) {
	a.slowConsumers += b.slowConsumers
	a.hungHandlers += b.hungHandlers
	a.largeBuffers += b.largeBuffers
	a.largeBursts += b.largeBursts
}

func (sc schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed=%d informer=%v horizon=%v initial=%d server={Expiry:%s DisableWatchCache:%v Bookmarks:%v CacheSize:%d Latency:%+v NotReady:%v WatchChannel:%d} stream={Cursor:%q DisableWatchList:%v ListPageSize:%d WatchTimeout:%v}",
		sc.seed, sc.informer, sc.horizon, sc.initial, sc.server.Expiry, sc.server.DisableWatchCache, sc.server.BookmarkInterval, sc.server.WatchCacheSize,
		sc.server.Latency, sc.server.RestartNotReady, sc.server.WatchChannelSize,
		sc.stream.Cursor, sc.stream.DisableWatchList, sc.stream.ListPageSize, sc.stream.WatchTimeout)
	for _, s := range sc.steps {
		fmt.Fprintf(&b, "\n  %12v %s", s.at, s.desc)
	}
	return b.String()
}

// aheadCursor is a cursor far ahead of any simulated server: persisted
// from another cluster.
const aheadCursor = "1000000"

// generate builds the schedule of seed, deciding with c.
func generate(seed uint64, c *chooser) schedule {
	sc := schedule{seed: seed, informer: c.Intn(4) == 0}
	sc.horizon = c.LogDuration(time.Minute, 6*time.Hour)
	sc.settle = 2*maxBackoff + transientGrace + stallBound
	sc.initial = []int{0, 1, 3, 5, 12, 30}[c.Intn(6)]
	sc.server.Seed = seed
	sc.server.Expiry = []watchtest.ExpiryShape{watchtest.ExpiryErrorEvent, watchtest.ExpiryGoneEvent, watchtest.ExpiryOpenError}[c.Intn(3)]
	sc.server.DisableWatchCache = c.Intn(5) == 0
	if c.Intn(3) == 0 {
		sc.server.BookmarkInterval = -1
	}
	if c.Intn(2) == 0 {
		sc.server.WatchCacheSize = 1 + c.Intn(10)
		sc.server.WatchCacheWindow = c.LogDuration(time.Second, 2*time.Minute)
	}
	switch c.Intn(4) {
	case 0:
		sc.server.Latency = watchtest.Latency{Off: true}
	case 1:
		// A server under load: every request takes its time, and
		// replays take long enough to be cut part-way.
		sc.server.Latency = watchtest.Latency{Request: c.LogDuration(10*time.Millisecond, 2*time.Second), PerObject: c.LogDuration(time.Millisecond, 500*time.Millisecond)}
	}
	if c.Intn(3) == 0 {
		sc.server.RestartNotReady = c.LogDuration(100*time.Millisecond, 40*time.Second)
	}
	switch c.Intn(8) {
	case 0, 1:
		sc.server.WatchChannelSize = 1 + c.Intn(4)
	case 2, 3:
		// What the cacher gives a busy resource: 100 events without a
		// watch index, 1,000 with one (pods); with small objects the
		// connection's buffers hold as many more. A slow consumer then
		// falls far behind before, or without, being cut off.
		sc.server.WatchChannelSize = []int{100, 1000}[c.Intn(2)]
		sc.worlds.largeBuffers = 1
	}
	sc.stream.DisableWatchList = c.Intn(4) == 0
	sc.stream.Cursor = []string{"", "", "0", "1", aheadCursor}[c.Intn(5)]
	if sc.informer {
		sc.stream.Cursor = ""
	}
	if c.Intn(3) == 0 {
		sc.stream.ListPageSize = int64(1 + c.Intn(4)) // a LIST of many pages
	}
	if c.Intn(4) == 0 {
		sc.stream.WatchTimeout = c.LogDuration(2*shortSession, 10*time.Minute)
	}

	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	busy := map[slot]time.Duration{} // when each slot is free again
	snapshotAt := time.Duration(-1)  // when an etcd snapshot was taken
	at := time.Duration(0)
	for {
		at += c.LogDuration(time.Millisecond, max(sc.horizon/8, time.Second))
		if at >= sc.horizon {
			break
		}
		switch k := c.Intn(22); {
		case k < 8: // writes
			n := 1
			if c.Intn(4) == 0 {
				n = 1 + c.Intn(12) // a burst
				if c.Intn(5) == 0 {
					// A large one: a rollout, a resync of every object.
					n = int(c.LogDuration(12, 1000))
					sc.worlds.largeBursts = 1
				}
			}
			for i := range n {
				name := names[c.Intn(len(names))]
				op := c.Intn(3)
				sc.steps = append(sc.steps, step{at: at + time.Duration(i)*time.Millisecond, desc: fmt.Sprintf("write %s (%d)", name, op), do: func(w *world) { w.write(name, op) }})
			}
		case k < 15: // a fault, for a while
			slots := []slot{slotErr, slotErr, slotRefuse, slotFlap, slotStale, slotWatchList, slotInStream, slotStall, slotHandler, slotSlow, slotStuck}
			s := slots[c.Intn(len(slots))]
			if busy[s] > at || (sc.informer && s.HandlerSlot()) {
				continue
			}
			d := c.LogDuration(time.Millisecond, min(2*time.Hour, sc.horizon))
			end := min(at+d, sc.horizon)
			busy[s] = end + time.Millisecond
			fl := judgekit.DrawFault(c, s)
			if s == slotSlow && fl.Delay > judgekit.MaxSlowCall {
				sc.worlds.slowConsumers = 1
				if fl.Delay >= time.Minute {
					sc.worlds.hungHandlers = 1
				}
			}
			iv := &interval{slot: s, human: fl.Human, err: fl.Err, delay: fl.Delay, start: at, end: end}
			if s == slotStuck {
				iv.until = end
			}
			f, desc := fl.Faults, fl.Desc
			sc.steps = append(sc.steps,
				step{at: at, desc: "on " + desc, do: func(w *world) { w.on(iv, f) }},
				step{at: end, desc: "off " + string(s), do: func(w *world) { w.off(s) }})
		case k < 16 && !sc.informer: // an etcd snapshot now, restored later
			if snapshotAt >= 0 {
				continue
			}
			snapshotAt = at
			restoreAt := at + c.LogDuration(time.Second, 2*time.Hour)
			if restoreAt >= sc.horizon {
				continue
			}
			// etcdutl's --bump-revision must exceed every revision written
			// since the snapshot (the Kubernetes docs suggest a billion).
			bump := int64(0)
			if c.Intn(2) == 0 {
				bump = 1_000_000 + int64(c.Intn(100000))
			}
			sc.steps = append(sc.steps,
				step{at: at, desc: "etcd snapshot", do: func(w *world) { w.etcd = w.srv.Snapshot() }},
				step{at: restoreAt, desc: fmt.Sprintf("etcd restore, bump %d", bump), do: func(w *world) {
					w.restart()
					if bump == 0 && (len(w.open) > 0 || w.stream == nil || parseRV(w.stream.Cursor()) <= parseRV(w.etcd.ResourceVersion())+1) {
						// The stream's cursor would not be ahead of the
						// restored server (its restart writes once), or a
						// fault could keep the stream from the server
						// until writes carry it past the cursor: no
						// client can tell the restore from nothing. Bump.
						bump = 1_000_000
					}
					w.srv.Restore(w.etcd, bump)
					w.restoredBack = w.restoredBack || bump == 0
					w.noteServer()
				}})
		default: // an instant action
			switch c.Intn(7) {
			case 0:
				sc.steps = append(sc.steps, step{at: at, desc: "close watches", do: func(w *world) { w.action(); w.srv.CloseWatches() }})
			case 1:
				sc.steps = append(sc.steps, step{at: at, desc: "restart", do: func(w *world) { w.restart(); w.srv.Restart() }})
			case 2:
				sc.steps = append(sc.steps, step{at: at, desc: "compact", do: func(w *world) { w.action(); w.srv.Compact() }})
			case 3:
				n := 1 + c.Intn(1000)
				sc.steps = append(sc.steps, step{at: at, desc: fmt.Sprintf("advance %d", n), do: func(w *world) { w.srv.AdvanceRevision(n) }})
			case 4:
				sc.steps = append(sc.steps, step{at: at, desc: "fail watches 500", do: func(w *world) {
					w.action()
					w.srv.FailWatches(apierrors.NewInternalError(errors.New("unable to decode an event from the watch stream: stream error: INTERNAL_ERROR")))
				}})
			case 5:
				// A 410 inside a live session: an uncached watch whose
				// revision etcd compacted.
				sc.steps = append(sc.steps, step{at: at, desc: "fail watches 410", do: func(w *world) {
					w.action()
					w.srv.FailWatches(watchtest.Expired())
				}})
			default:
				// A storm: the same instant action again and again.
				n, every := 2+c.Intn(40), c.LogDuration(100*time.Millisecond, 30*time.Second)
				for i := range n {
					sc.steps = append(sc.steps, step{at: at + time.Duration(i)*every, desc: "storm restart", do: func(w *world) { w.restart(); w.srv.Restart() }})
				}
			}
		}
	}
	sc.steps = slices.DeleteFunc(sc.steps, func(s step) bool { return s.at >= sc.horizon && !strings.HasPrefix(s.desc, "off ") })
	slices.SortStableFunc(sc.steps, func(a, b step) int { return int(a.at - b.at) })
	// After an etcd restore without a revision bump the server is behind
	// the stream's cursor, and a stream finds that out only if it stays
	// behind for CursorCheck: writes that carry it past the cursor sooner
	// lose the changes between, for every client (see the watch package
	// doc). The judge holds a stream to the case it can detect: nothing
	// moves the server's revision for a while after such a restore.
	for _, r := range sc.steps {
		if r.desc != "etcd restore, bump 0" {
			continue
		}
		sc.steps = slices.DeleteFunc(sc.steps, func(s step) bool {
			return !strings.HasPrefix(s.desc, "off ") && s.at > r.at && s.at <= r.at+restoreQuiet
		})
	}
	return sc
}

// restoreQuiet is how long nothing happens but faults ending after an
// etcd restore without a revision bump: the restarted apiserver's
// not-ready phase, a backoff, the stream's check of its cursor and the
// server's 3 s answer.
const restoreQuiet = 2 * time.Minute

// interval is one fault, in force from start to end (since the run began).
type interval struct {
	slot       slot
	human      bool
	err        error
	delay      time.Duration // a slow handler's call
	until      time.Duration // when a stuck handler's calls return
	start, end time.Duration
}

// world is the running schedule: the server, and the ground truth as it
// happens.
type world struct {
	srv       *watchtest.Server
	start     time.Time
	faults    map[slot]watchtest.Faults
	open      map[slot]*interval
	intervals []*interval
	actions   []time.Duration
	// loads are the writes made while a slow handler was in force: each
	// may leave it behind, and then caught up again.
	loads []time.Duration
	// notReady holds when a restarted apiserver was not ready, and
	// restartNotReady how long that lasts.
	notReady        []span
	restartNotReady time.Duration
	// server records, at each step that changed it, the server's view:
	// name -> version (see versionOf).
	server  []serverView
	seq     int
	etcd    watchtest.EtcdSnapshot
	cursors []stamped[string]
	stream  *wgwatch.Stream
	// restoredBack is true once etcd was restored without a revision
	// bump: resourceVersions went back.
	restoredBack bool
	// latency is the server's, and pageSize the stream's ListPageSize:
	// what a replay takes the server to serve.
	latency  watchtest.Latency
	pageSize int64

	mu      sync.Mutex
	handler map[slot]*interval // the handler faults in force; guarded by mu
}

type serverView struct {
	at   time.Duration
	view map[string]string
}

func (w *world) now() time.Duration { return time.Since(w.start) }

// write creates, updates (op 1, 2) or deletes (op 0) name; every version
// is numbered in its data.
func (w *world) write(name string, op int) {
	w.seq++
	cm := watchtest.ConfigMap(name, "")
	cm.Data = map[string]string{"seq": strconv.Itoa(w.seq)}
	if _, slow := w.open[slotSlow]; slow {
		w.loads = append(w.loads, w.now())
	}
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
	w.noteServer()
}

// noteServer records the server's view now.
func (w *world) noteServer() {
	view := map[string]string{}
	for _, o := range w.srv.Objects() {
		m, _ := meta.Accessor(o)
		view[m.GetName()] = versionOf(o)
	}
	w.server = append(w.server, serverView{at: w.now(), view: view})
}

func (w *world) on(iv *interval, f watchtest.Faults) {
	iv.start, iv.end = w.now(), -1
	w.open[iv.slot] = iv
	w.intervals = append(w.intervals, iv)
	if iv.slot.HandlerSlot() {
		w.mu.Lock()
		w.handler[iv.slot] = iv
		w.mu.Unlock()
		return
	}
	w.faults[iv.slot] = f
	w.apply()
}

func (w *world) off(s slot) {
	iv, ok := w.open[s]
	if !ok {
		return
	}
	iv.end = w.now()
	delete(w.open, s)
	if s.HandlerSlot() {
		w.mu.Lock()
		delete(w.handler, s)
		w.mu.Unlock()
		return
	}
	delete(w.faults, s)
	w.apply()
}

func (w *world) apply() { w.srv.SetFaults(judgekit.Combine(w.faults)) }

// handlerErr is the error the handler returns now, if it fails.
func (w *world) handlerErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if iv := w.handler[slotHandler]; iv != nil {
		return iv.err
	}
	return nil
}

// handlerDelay is how long a handler call that starts at now takes: until
// the end of a stuck handler's fault, or a slow handler's delay.
func (w *world) handlerDelay(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if iv := w.handler[slotStuck]; iv != nil {
		return iv.until - now.Sub(w.start)
	}
	if iv := w.handler[slotSlow]; iv != nil {
		return iv.delay
	}
	return 0
}

func (w *world) action() { w.actions = append(w.actions, w.now()) }

// restart records an apiserver restart: an action, and the server not
// ready until its watch cache has initialised.
func (w *world) restart() {
	w.action()
	w.notReady = append(w.notReady, span{From: w.now(), To: w.now() + w.restartNotReady})
}

// play runs sc inside a synctest bubble and judges it.
func play(t *testing.T, sc schedule) (v verdict) {
	synctest.Test(t, func(t *testing.T) {
		srv := watchtest.NewServer(sc.server)
		p := newProbe()
		w := &world{srv: srv, start: p.start, faults: map[slot]watchtest.Faults{}, open: map[slot]*interval{}, handler: map[slot]*interval{},
			latency: sc.server.Latency, pageSize: sc.stream.ListPageSize}
		switch nr := sc.server.RestartNotReady; {
		case nr == 0:
			w.restartNotReady = 2 * time.Second // the server's default
		case nr > 0 && !sc.server.DisableWatchCache:
			w.restartNotReady = nr
		}
		for i := range sc.initial {
			w.seq++
			cm := watchtest.ConfigMap(fmt.Sprint("init", i), "")
			cm.Data = map[string]string{"seq": strconv.Itoa(w.seq)}
			_, _ = srv.Create(cm)
		}
		w.noteServer()
		p.fail = func(time.Time, string) error { return w.handlerErr() }
		p.delay = w.handlerDelay
		if sc.seed%5 == 0 {
			// The option set wrong, as a caller does: refused with the
			// error the docs name, before any request.
			refusesWrongOptions(&v, srv, p, sc)
		}
		// The fold's rows, for the trace.
		var rowsMu sync.Mutex
		var rows []stamped[string]
		onRow := func(at time.Time, row string) {
			rowsMu.Lock()
			defer rowsMu.Unlock()
			rows = append(rows, stamped[string]{at.Sub(w.start), row})
		}
		var stop func()
		var store cache.Store
		var stateOf func() wgwatch.State
		// client-go's reflector draws from math/rand's global source.
		mathrand.Seed(int64(sc.seed))
		// A readiness probe fed as a controller feeds it, and the
		// informer's reflector logging through the graded handler.
		ready := &wgwatch.SyncCheck{}
		var errorLogs atomic.Int64
		if sc.informer {
			stop, store, stateOf = runSeededInformer(t, srv, p, rand.New(rand.NewPCG(sc.seed, 3)).Float64,
				wgwatch.Observers(p, ready), wgwatch.WatchErrorLogger(logr.New(errorSink{&errorLogs}), wgwatch.LogOptions{}), onRow)
		} else {
			opts := sc.stream
			// Through Observers, as a controller wires its metrics and
			// its accumulator beside each other.
			// A third of them through ObserverFuncs.
			var obs wgwatch.Observer = p
			if sc.seed%3 == 0 {
				obs = wgwatch.ObserverFuncs{StateChangedFunc: p.StateChanged, SessionEndedFunc: p.SessionEnded}
			}
			opts.Resource, opts.Observer = configmaps, wgwatch.Observers(nil, obs, ready)
			// Some handlers through HandlerFuncs, as a caller with two
			// closures writes them.
			var h wgwatch.Handler = p
			if sc.seed%2 == 0 {
				h = wgwatch.HandlerFuncs{SnapshotFunc: p.Snapshot, EventFunc: p.Event}
			}
			s, err := wgwatch.NewStream(srv, h, opts)
			if err != nil {
				t.Fatal(err)
			}
			// The stream's jitter from the schedule's seed: a failed
			// schedule replays exactly.
			wgwatch.SetStreamRand(s, rand.New(rand.NewPCG(sc.seed, 2)).Float64)
			wgwatch.SetFoldTrace(s, onRow)
			w.stream = s
			stateOf = s.State
			stop = runStream(t, s)
		}
		// Each step runs once everything else due at its instant has run
		// and blocked, and the next waits for what it set off: the
		// order of what happens at one instant is the schedule's, not the
		// goroutine scheduler's, and a seed replays exactly.
		for _, st := range sc.steps {
			time.Sleep(st.at - w.now())
			synctest.Wait()
			st.do(w)
			synctest.Wait()
			if w.stream != nil {
				w.cursors = append(w.cursors, stamped[string]{w.now(), w.stream.Cursor()})
			}
		}
		time.Sleep(sc.horizon - w.now())
		synctest.Wait()
		for _, s := range slices.Sorted(maps.Keys(w.open)) {
			w.off(s)
		}
		synctest.Wait()
		quiet := w.now()
		time.Sleep(sc.settle / 2)
		synctest.Wait()
		w.write("init0", 1)
		synctest.Wait()
		w.write("late", 1)
		synctest.Wait()
		time.Sleep(sc.settle / 2)
		synctest.Wait()
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
		for _, name := range sortedNames(want) {
			if rv := want[name]; got[name] != rv {
				v.add(&v.lost, "lost: %s@%s, the consumer has %q", name, rv, got[name])
			}
		}
		for _, name := range sortedNames(got) {
			if _, ok := want[name]; !ok {
				v.add(&v.ghosts, "ghost: %s is gone from the server, the consumer still has it", name)
			}
		}
		{
			// What the stream says it is, asked, is what it last said.
			p.mu.Lock()
			var last wgwatch.State
			if n := len(p.states); n > 0 {
				last = p.states[n-1].v
			}
			p.mu.Unlock()
			if got := stateOf(); got != last {
				v.add(&v.dishonest, "dishonest: State() = %s/%s, last published %s/%s", got.Phase, got.Reason, last.Phase, last.Reason)
			}
		}
		{
			// Every value published is one the package lists: a
			// dashboard initialises one series per listed value.
			c := p.counts()
			for _, st := range c.states {
				if !slices.Contains(wgwatch.Phases(), st.v.Phase) {
					v.add(&v.dishonest, "phase %q at %v is not among Phases()", st.v.Phase, st.at)
				}
			}
			for _, e := range c.endings {
				if !slices.Contains(wgwatch.Outcomes(), e.v.Verdict.Outcome) || !slices.Contains(wgwatch.Classes(), e.v.Verdict.Class) {
					v.add(&v.dishonest, "session end at %v: outcome %q, class %q, not among Outcomes() and Classes()", e.at, e.v.Verdict.Outcome, e.v.Verdict.Class)
				}
			}
		}
		{
			// The probe is ready once the consumer has streamed; an
			// error is logged only for a cause that needs a human.
			c := p.counts()
			streamed := slices.ContainsFunc(c.states, func(st stamped[wgwatch.State]) bool { return st.v.Phase == wgwatch.PhaseStreaming })
			if got, want := ready.Check(nil) == nil, streamed || len(c.states) == 0; got != want {
				v.add(&v.dishonest, "readiness probe ready=%v, the consumer streamed=%v", got, streamed)
			}
			human := slices.ContainsFunc(c.endings, func(e stamped[wgwatch.SessionEnd]) bool { return e.v.Verdict.Class == wgwatch.ClassNeedsHuman })
			if n := errorLogs.Load(); n > 0 && !human {
				v.add(&v.dishonest, "%d error log lines, and no session ending needed a human", n)
			}
		}
		stop()
		// Stopped, the consumer holds no watch open on the server.
		synctest.Wait()
		rowsMu.Lock()
		v.trace = traceOf(p, srv.Requests(), w.start, rows)
		rowsMu.Unlock()
		if n := srv.OpenWatches(); n > 0 {
			v.add(&v.openWatches, "%d watches still open on the server after the consumer stopped", n)
		}
		if store == nil {
			// Exactly once, in order: but after an etcd restore without
			// a revision bump, resourceVersions go back by design.
			restoredBack := w.restoredBack
			if c := p.counts(); (c.dup > 0 || c.regressions > 0) && !restoredBack {
				v.add(&v.dup, "%d events at or below the last resourceVersion, %d snapshots older than it", c.dup, c.regressions)
			}
			last := int64(0)
			for _, c := range w.cursors {
				if c.v == "" || c.v == aheadCursor || restoredBack {
					continue
				}
				if n := parseRV(c.v); n < last {
					v.add(&v.cursorBack, "cursor went back from %d to %d at %v", last, n, c.at)
				} else {
					last = n
				}
			}
			v.replaysPerHour = maxInWindow(replayTimes(srv.Requests(), w.start), time.Hour)
			if b := replayBound(min(time.Hour, end)); v.replaysPerHour > b {
				v.add(&v.replays, "%d replays in one hour, over the bound %d", v.replaysPerHour, b)
			}
		}
		judge(&v, p, w, srv.Requests(), sc, quiet, end)
		if *judgeVerbose && v.failed() {
			v.notes = append(v.notes, "states:"+p.stateLog(), "endings:"+p.endingLog(40), "requests:"+requestLog(srv.Requests(), w.start, 16))
			if at := *judgeAt; at >= 0 {
				var reqs []watchtest.Request
				for _, r := range srv.Requests() {
					if d := r.At.Sub(w.start); d >= at-5*time.Minute && d <= at {
						reqs = append(reqs, r)
					}
				}
				v.notes = append(v.notes, fmt.Sprintf("endings before %v:", at)+p.endingsBetween(at-5*time.Minute, at), "requests:"+requestLog(reqs, w.start, len(reqs)))
			}
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
		timeout := int64(-1)
		if r.Options.TimeoutSeconds != nil {
			timeout = *r.Options.TimeoutSeconds
		}
		out += fmt.Sprintf("\n  %9v %s rv=%q sie=%v limit=%d timeout=%d cont=%q err=%v events=%d closed=%v", r.At.Sub(start).Round(time.Millisecond), r.Kind,
			r.Options.ResourceVersion, r.Options.SendInitialEvents != nil, r.Options.Limit, timeout, r.Options.Continue, r.Err, r.Events, closed)
	}
	return out
}

// refusesWrongOptions builds the schedule's consumer with one option set
// wrong (chosen by its seed) and checks that the constructor refuses it
// with the error its doc names, without a request to the server.
func refusesWrongOptions(v *verdict, srv *watchtest.Server, p *probe, sc schedule) {
	type wrong struct {
		desc string
		err  error
		lw   cache.ListerWatcher
		h    wgwatch.Handler
		mod  func(*wgwatch.Policy, *schema.GroupResource, *time.Duration)
	}
	policy := func(f func(*wgwatch.Policy)) func(*wgwatch.Policy, *schema.GroupResource, *time.Duration) {
		return func(pol *wgwatch.Policy, _ *schema.GroupResource, _ *time.Duration) { f(pol) }
	}
	cases := []wrong{
		{"ProgressDeadline shorter than TransientGrace", wgwatch.ErrInvalidOptions, srv, p,
			policy(func(pol *wgwatch.Policy) { pol.TransientGrace, pol.ProgressDeadline = time.Minute, 30*time.Second })},
		{"ShortSession as long as TransientGrace", wgwatch.ErrInvalidOptions, srv, p,
			policy(func(pol *wgwatch.Policy) { pol.ShortSession, pol.TransientGrace = 20*time.Second, 20*time.Second })},
		{"no resource", wgwatch.ErrNoResource, srv, p,
			func(_ *wgwatch.Policy, r *schema.GroupResource, _ *time.Duration) { *r = schema.GroupResource{} }},
		{"no ListerWatcher", wgwatch.ErrNilListerWatcher, nil, p, func(*wgwatch.Policy, *schema.GroupResource, *time.Duration) {}},
	}
	if !sc.informer {
		cases = append(cases,
			wrong{"WatchTimeout shorter than twice ShortSession", wgwatch.ErrInvalidOptions, srv, p,
				func(_ *wgwatch.Policy, _ *schema.GroupResource, wt *time.Duration) { *wt = shortSession }},
			wrong{"no handler", wgwatch.ErrNilHandler, srv, nil, func(*wgwatch.Policy, *schema.GroupResource, *time.Duration) {}})
	}
	c := cases[int(sc.seed/5)%len(cases)]
	before := len(srv.Requests())
	var err error
	if sc.informer {
		opts := wgwatch.InstrumentOptions{Resource: configmaps, Observer: p}
		c.mod(&opts.Policy, &opts.Resource, new(time.Duration))
		_, err = wgwatch.Instrument(c.lw, opts)
	} else {
		opts := sc.stream
		opts.Resource, opts.Observer = configmaps, p
		c.mod(&opts.Policy, &opts.Resource, &opts.WatchTimeout)
		_, err = wgwatch.NewStream(c.lw, c.h, opts)
	}
	if !errors.Is(err, c.err) {
		v.add(&v.badOptions, "options with %s: error %v, want %v", c.desc, err, c.err)
	}
	if n := len(srv.Requests()) - before; n > 0 {
		v.add(&v.badOptions, "options with %s: %d requests to the server", c.desc, n)
	}
}

// isCursorCheck reports whether r is a stream's check of its cursor (see
// judgekit.IsCursorCheck).
func isCursorCheck(r watchtest.Request) bool { return judgekit.IsCursorCheck(r) }

// replayTimes returns when each full replay was served: a LIST's first
// page or a watch-list the server did not refuse.
func replayTimes(reqs []watchtest.Request, start time.Time) []time.Duration {
	var out []time.Duration
	for _, r := range reqs {
		list := r.Kind == watchtest.CallList && r.Options.Continue == "" && !isCursorCheck(r)
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

// TestJudge runs -judge.schedules random schedules (writes of every kind,
// bursts of up to 1,000, every fault the simulated server has, watch
// buffers from 1 event to the 1,000 of a busy resource, handlers slow by
// a distribution from a millisecond to minutes a call, some hanging on
// every call, and stuck ones, etcd
// snapshots restored with and without a revision bump, durations from
// milliseconds to hours) against a Stream, and one in four against a
// client-go informer over Instrument, and checks every invariant of the
// watch package doc on each, from the consumer's view. It prints one
// summary line.
func TestJudge(t *testing.T) {
	before := runtime.NumGoroutine()
	var total verdict
	var worlds worldCounts
	failed := 0
	traces := fnv.New64a() // of every schedule's trace hash, in order
	for i := range *judgeSchedules {
		seed := *judgeSeed + uint64(i)
		sc := generate(seed, &chooser{Rng: rand.New(rand.NewPCG(seed, 0))})
		var v verdict
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			v = play(t, sc)
			h := traceHash(v.trace)
			if *judgeVerbose || v.failed() {
				t.Logf("%v", sc)
			}
			if v.failed() {
				t.Errorf("schedule %d broke the invariants (trace %016x):\n  %s\n  trace:\n    %s", seed, h, strings.Join(v.notes, "\n  "), strings.Join(v.trace, "\n    "))
			} else {
				t.Logf("trace %016x, %d facts", h, len(v.trace))
			}
			fmt.Fprintf(traces, "%016x\n", h)
		})
		if v.failed() {
			failed++
		}
		total.sum(v)
		worlds.add(sc.worlds)
	}
	runtime.GC()
	leaks := max(runtime.NumGoroutine()-before, 0)
	fmt.Printf("judge: schedules=%d failed=%d false_needs_human=%d missed=%d lost=%d ghosts=%d dup=%d dishonest=%d flapping=%d leaks=%d open_watches=%d wrong_options_taken=%d max_replays_per_hour=%d bound=%d max_publications_per_stretch=%d bound=%d\n",
		*judgeSchedules, failed, total.falseNeedsHuman, total.missed, total.lost, total.ghosts, total.dup+total.cursorBack, total.dishonest, total.flapping, leaks, total.openWatches, total.badOptions,
		total.replaysPerHour, replayBound(time.Hour), total.publications, maxPublications)
	fmt.Printf("judge: worlds slow_consumers=%d hung_handlers=%d large_buffers=%d large_bursts=%d\n",
		worlds.slowConsumers, worlds.hungHandlers, worlds.largeBuffers, worlds.largeBursts)
	fmt.Printf("judge: trace seeds=%d..%d hash=%016x\n", *judgeSeed, *judgeSeed+uint64(max(*judgeSchedules, 1))-1, traces.Sum64())
	if leaks > 0 {
		t.Errorf("%d goroutines more than before the schedules", leaks)
	}
}

// FuzzJudge drives the schedule generator from the fuzz input.
func FuzzJudge(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3})
	f.Add([]byte("a replay loop behind a proxy"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc := generate(0, &chooser{Data: data, Rng: rand.New(rand.NewPCG(uint64(len(data)), 1))})
		if v := play(t, sc); v.failed() {
			t.Errorf("schedule broke the invariants (trace %016x):\n  %s\n%v\n  trace:\n    %s", traceHash(v.trace), strings.Join(v.notes, "\n  "), sc, strings.Join(v.trace, "\n    "))
		}
	})
}

// errorSink counts a logger's error lines.
type errorSink struct{ n *atomic.Int64 }

func (errorSink) Init(logr.RuntimeInfo)            {}
func (errorSink) Enabled(int) bool                 { return true }
func (errorSink) Info(int, string, ...any)         {}
func (e errorSink) Error(error, string, ...any)    { e.n.Add(1) }
func (e errorSink) WithValues(...any) logr.LogSink { return e }
func (e errorSink) WithName(string) logr.LogSink   { return e }
