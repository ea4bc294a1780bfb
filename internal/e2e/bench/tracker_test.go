package bench

// What the consumers of a recovery (the server-* groups) do, seen from
// their side: a tracker wraps each consumer's ListerWatcher and tells a
// collector when a replay starts and ends, when a watch ends and when a
// session goes live.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// collector gathers what the consumers of one round do around the cut.
type collector struct {
	n          int
	mustReplay bool           // see wentLive
	streaming  sync.WaitGroup // done at each consumer's first Streaming

	mu       sync.Mutex
	armed    bool
	cut      time.Time
	wasCut   map[int]bool
	replayed map[int]time.Time
	live     map[int]time.Time
	allLive  chan struct{}
	inflight int
	peak     int
	replays  int
	checks   int
	lists    int
	endings  map[wgwatch.Outcome]int
	states   []string
}

func newCollector(n int, mustReplay bool) *collector {
	c := &collector{n: n, mustReplay: mustReplay, wasCut: map[int]bool{}, replayed: map[int]time.Time{}, live: map[int]time.Time{},
		allLive: make(chan struct{}), endings: map[wgwatch.Outcome]int{}}
	c.streaming.Add(n)
	return c
}

// arm starts the measurement: from now on the first watch that ends is the
// cut.
func (c *collector) arm() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed, c.peak, c.replays, c.checks, c.lists = true, c.inflight, 0, 0, 0
}

// cursorCheck counts a stream's check of its cursor (a LIST of one object
// with a timeoutSeconds): not a replay.
func (c *collector) cursorCheck() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed {
		c.checks++
	}
}

func (c *collector) observer(id int) wgwatch.Observer {
	var once sync.Once
	return observerFuncs{
		state: func(s wgwatch.State) {
			if s.Phase == wgwatch.PhaseStreaming {
				once.Do(c.streaming.Done)
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.armed {
				c.states = append(c.states, fmt.Sprintf("%d:%s/%s", id, s.Phase, s.Reason))
			}
		},
		ended: func(e wgwatch.SessionEnd) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.armed {
				c.endings[e.Verdict.Outcome]++
			}
		},
	}
}

func (c *collector) replayBegin(list bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight++
	c.peak = max(c.peak, c.inflight)
	if c.armed {
		c.replays++
		if list {
			c.lists++
		}
	}
}

func (c *collector) replayEnd(id int, complete bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight--
	if complete && c.wasCut[id] {
		c.replayed[id] = time.Now()
	}
}

func (c *collector) watchEnded(id int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.armed {
		return
	}
	if c.cut.IsZero() {
		c.cut = time.Now()
	}
	c.wasCut[id] = true
}

// wentLive notes a consumer live again, once it was cut. With mustReplay
// only once it has replayed since too: a resume can look live (open for
// ShortSession) before its 410 comes when the server is slow to send it
// (a watch served by etcd, as with the watch cache off, learns of a
// compaction asynchronously). A restart's 410 comes at once, from the
// new watch cache; should a consumer resume there without one (a
// bookmark moved its cursor past the new cache's start), it is live
// without a replay, and replays says so.
func (c *collector) wentLive(id int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.wasCut[id] {
		return
	}
	if _, ok := c.replayed[id]; c.mustReplay && !ok {
		return
	}
	if _, ok := c.live[id]; ok {
		return
	}
	c.live[id] = time.Now()
	if len(c.live) == c.n {
		close(c.allLive)
	}
}

func (c *collector) progress() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("after %v: %d of %d cut, %d replayed, %d live; %d replays in flight; endings %v; states %v",
		waitTimeout, len(c.wasCut), c.n, len(c.replayed), len(c.live), c.inflight, c.endings, c.states)
}

type restartResult struct {
	replayed, streaming, medianStreaming time.Duration
	peak, replays, checks, lists         int
	endings                              map[wgwatch.Outcome]int
	published                            []string
}

func (c *collector) result() restartResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	// What the consumers do from now on (their teardown) is not measured.
	c.armed = false
	res := restartResult{peak: c.peak, replays: c.replays, checks: c.checks, lists: c.lists, endings: maps.Clone(c.endings), published: slices.Clone(c.states)}
	var lives []time.Duration
	for _, t := range c.live {
		lives = append(lives, t.Sub(c.cut))
	}
	slices.Sort(lives)
	res.streaming, res.medianStreaming = lives[len(lives)-1], lives[len(lives)/2]
	for _, t := range c.replayed {
		res.replayed = max(res.replayed, t.Sub(c.cut))
	}
	return res
}

// tracker passes a consumer's calls through and tells the collector when
// a replay starts and ends, when a watch ends, and when a session goes
// live: after its replay (or from its open, for a watch that follows a
// LIST or resumes), its first event or bookmark, or ShortSession open.
type tracker struct {
	inner cache.ListerWatcherWithContext
	id    int
	col   *collector
}

func (t *tracker) List(o metav1.ListOptions) (kruntime.Object, error) {
	return t.ListWithContext(context.Background(), o)
}

func (t *tracker) ListWithContext(ctx context.Context, o metav1.ListOptions) (kruntime.Object, error) {
	if o.Limit == 1 && o.TimeoutSeconds != nil {
		t.col.cursorCheck()
		return t.inner.ListWithContext(ctx, o)
	}
	if o.Continue == "" {
		t.col.replayBegin(true)
	}
	list, err := t.inner.ListWithContext(ctx, o)
	if err != nil {
		t.col.replayEnd(t.id, false)
		return list, err
	}
	if lm, merr := meta.ListAccessor(list); merr == nil && lm.GetContinue() == "" {
		t.col.replayEnd(t.id, true)
	}
	return list, err
}

func (t *tracker) Watch(o metav1.ListOptions) (apiwatch.Interface, error) {
	return t.WatchWithContext(context.Background(), o)
}

func (t *tracker) WatchWithContext(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
	replay := o.SendInitialEvents != nil && *o.SendInitialEvents
	if replay {
		t.col.replayBegin(false)
	}
	w, err := t.inner.WatchWithContext(ctx, o)
	if err != nil {
		if replay {
			t.col.replayEnd(t.id, false)
		}
		return nil, err
	}
	tw := &trackedWatch{t: t, inner: w, result: make(chan apiwatch.Event), stop: make(chan struct{})}
	go tw.run(replay)
	return tw, nil
}

type trackedWatch struct {
	t        *tracker
	inner    apiwatch.Interface
	result   chan apiwatch.Event
	stop     chan struct{}
	stopOnce sync.Once
}

func (w *trackedWatch) ResultChan() <-chan apiwatch.Event { return w.result }

func (w *trackedWatch) Stop() {
	w.stopOnce.Do(func() {
		close(w.stop)
		w.inner.Stop()
	})
}

func (w *trackedWatch) run(replaying bool) {
	defer close(w.result)
	var short <-chan time.Time
	var timer *time.Timer
	arm := func() {
		timer = time.NewTimer(wgwatch.DefaultShortSession)
		short = timer.C
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if replaying {
			w.t.col.replayEnd(w.t.id, false)
		}
		w.t.col.watchEnded(w.t.id)
	}()
	if !replaying {
		arm()
	}
	live, failed := false, false
	goLive := func() {
		if !live && !failed {
			live, short = true, nil
			w.t.col.wentLive(w.t.id)
		}
	}
	in := w.inner.ResultChan()
	for {
		var ev apiwatch.Event
		var ok bool
		select {
		case <-w.stop:
			return
		case <-short:
			goLive()
			continue
		case ev, ok = <-in:
		}
		if !ok {
			return
		}
		switch ev.Type {
		case apiwatch.Bookmark:
			switch {
			case !replaying:
				goLive()
			case isInitialEventsEnd(ev.Object):
				replaying = false
				w.t.col.replayEnd(w.t.id, true)
				arm()
			}
		case apiwatch.Added, apiwatch.Modified, apiwatch.Deleted:
			if !replaying {
				goLive()
			}
		case apiwatch.Error:
			failed, short = true, nil
		}
		select {
		case w.result <- ev:
		case <-w.stop:
			return
		}
	}
}

func isInitialEventsEnd(obj kruntime.Object) bool {
	m, err := meta.Accessor(obj)
	return err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
}
