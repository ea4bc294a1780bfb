package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// Group 4: an apiserver restart under many streams.
//
// Each round starts restartStreams consumers of one namespace holding
// restartObjects ConfigMaps, through one typed clientset (protobuf, its
// default), waits until all
// are Streaming, then restarts the apiserver as a rolling update does: a
// second apiserver on the same etcd (its watch cache starts empty, after
// every cursor), the proxy switched to it with every connection cut, the
// first shut down. It measures, from the cut (the first watch that ends):
//
//   - replayed_s: until every consumer has replayed (the initial-events-end
//     bookmark of its watch-list, or the last page of its LIST).
//   - streaming_s: until every consumer is live again as the watch package
//     defines it: after its replay, its watch delivered an event or a
//     bookmark, or stayed open for ShortSession (1 s). Nothing is written
//     during the restart, so that is the replay plus 1 s.
//   - peak_replays: the most replays in flight at once.
//   - replays, and the session endings by outcome.
//   - published: states the consumers published after the cut. A replay
//     done within ReplayGrace (10 s) publishes nothing: a consumer that
//     never left Streaming does not publish it again.
//
// The kinds: stream, a graded wgwatch.Stream; informer, a
// SharedIndexInformer over wgwatch.Instrument (which changes nothing the
// informer sees; it is how its states are known). Every consumer's watches
// pass through a tracking wrapper that sees what the consumer sees.
const (
	restartStreams = 300
	restartObjects = 100
	restartNS      = "restart"
)

type restartKind struct {
	name  string
	start func(b *testing.B, lw cache.ListerWatcher, i int, obs wgwatch.Observer) (stop func())
}

var restartKinds = []restartKind{
	{"stream", func(b *testing.B, lw cache.ListerWatcher, i int, obs wgwatch.Observer) func() {
		st, err := wgwatch.NewStream(lw, wgwatch.HandlerFuncs{}, wgwatch.StreamOptions{
			Resource: configmaps, Name: "restart-" + strconv.Itoa(i), Observer: obs,
		})
		if err != nil {
			b.Fatalf("NewStream: %v", err)
		}
		return runStream(b, st)
	}},
	{"informer", func(b *testing.B, lw cache.ListerWatcher, i int, obs wgwatch.Observer) func() {
		ilw, err := wgwatch.Instrument(lw, wgwatch.InstrumentOptions{
			Resource: configmaps, Name: "restart-" + strconv.Itoa(i), Observer: obs,
		})
		if err != nil {
			b.Fatalf("Instrument: %v", err)
		}
		return runIdleInformer(b, ilw, nil, false)
	}},
}

func BenchmarkRestart(b *testing.B) {
	defer timeGroup("restart")()
	r, _ := cluster(b, "restart", harness.Options{}, func(r *harness.Remote) struct{} {
		c := newClient(b, r.Config(), contentProtobuf)
		defer c.Close()
		createObjects(b, c, restartNS, restartObjects)
		return struct{}{}
	})
	for round := 1; round <= *benchRounds; round++ {
		for _, k := range rotate(restartKinds, round) {
			b.Run(roundName(k.name, round), func(b *testing.B) { benchRestart(b, r, "restart/"+k.name, k) })
		}
	}
}

// ticker writes a ConfigMap outside the watched namespace ten times a
// second until the returned function is called; writes that fail (the
// apiserver is restarting) are retried at the next tick.
func ticker(b *testing.B, c *client) (stop func()) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cms := c.CoreV1().ConfigMaps("default")
	cm := configMap("default", "restart-tick", 0)
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatalf("ticker: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			_, _ = cms.Update(ctx, configMap("default", "restart-tick", n), metav1.UpdateOptions{})
		}
	}()
	return func() { cancel(); <-done }
}

func benchRestart(b *testing.B, r *harness.Remote, name string, k restartKind) {
	for range b.N {
		b.StopTimer()
		c := newClient(b, r.Config(), contentProtobuf)
		col := newCollector(restartStreams)
		stops := make([]func(), restartStreams)
		for i := range stops {
			lw := &tracker{inner: typedLW(c, restartNS), id: i, col: col}
			stops[i] = k.start(b, lw, i, col.observer(i))
		}
		waitGroup(b, &col.streaming, fmt.Sprintf("%d %ss Streaming", restartStreams, k.name))
		b.StartTimer()

		// A cluster is written to all the time (leases, Events, status):
		// a writer outside the watched namespace, ten writes a second,
		// puts writes between the consumers' last bookmark and the new
		// apiserver's first LIST, whose watch cache then starts after
		// every cursor. (With nothing written in between, a resume from
		// the cursor finds the new cache at the same resourceVersion and
		// goes on without a replay.)
		stopTicks := ticker(b, c)
		col.arm()
		restarted := make(chan error, 1)
		go func() { restarted <- r.RestartAPIServer() }()
		select {
		case <-col.allLive:
		case <-time.After(waitTimeout):
			b.Fatalf("%s: %s", k.name, col.progress())
		}
		b.StopTimer()
		if err := waitFor(b, restarted, "the restart"); err != nil {
			b.Fatalf("restart: %v", err)
		}
		stopTicks()
		res := col.result()
		stopAll(stops)
		c.Close()
		b.ReportMetric(res.streaming.Seconds(), "s-to-streaming")
		b.ReportMetric(float64(res.peak), "peak-replays")
		b.ReportMetric(float64(len(res.published)), "published")
		if len(res.published) > 0 {
			b.Logf("%s published after the cut: %v", k.name, res.published)
		}
		record(name, "replayed_s", res.replayed, "streaming_s", res.streaming, "median_streaming_s", res.medianStreaming,
			"peak_replays", res.peak, "replays", res.replays, "published", len(res.published),
			"expired", res.endings[wgwatch.OutcomeExpired], "closed", res.endings[wgwatch.OutcomeClosed], "error", res.endings[wgwatch.OutcomeError])
		b.StartTimer()
	}
}

// collector gathers what the consumers of one round do around the cut.
type collector struct {
	n         int
	streaming sync.WaitGroup // done at each consumer's first Streaming

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
	endings  map[wgwatch.Outcome]int
	states   []string
}

func newCollector(n int) *collector {
	c := &collector{n: n, wasCut: map[int]bool{}, replayed: map[int]time.Time{}, live: map[int]time.Time{},
		allLive: make(chan struct{}), endings: map[wgwatch.Outcome]int{}}
	c.streaming.Add(n)
	return c
}

// arm starts the measurement: from now on the first watch that ends is the
// cut.
func (c *collector) arm() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed, c.peak, c.replays = true, c.inflight, 0
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

func (c *collector) replayBegin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight++
	c.peak = max(c.peak, c.inflight)
	if c.armed {
		c.replays++
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

func (c *collector) wentLive(id int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.wasCut[id] {
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
	peak, replays                        int
	endings                              map[wgwatch.Outcome]int
	published                            []string
}

func (c *collector) result() restartResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	// What the consumers do from now on (their teardown) is not measured.
	c.armed = false
	res := restartResult{peak: c.peak, replays: c.replays, endings: maps.Clone(c.endings), published: slices.Clone(c.states)}
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
	if o.Continue == "" {
		t.col.replayBegin()
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
		t.col.replayBegin()
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
