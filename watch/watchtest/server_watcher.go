package watchtest

import (
	"context"
	"math"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// serverWatch is one watch a Server serves. Its goroutine (run) delivers
// what is queued, in order, and owns the result channel: it closes it when
// the watch ends, whoever ends it.
type serverWatch struct {
	s   *Server
	ctx context.Context
	req *Request
	// size is the cacher's buffers' size for this watch.
	size int
	// deadline is when the server ends the watch: its timeout counts
	// from the request.
	deadline time.Time
	// bookmarks is true when the client asked for them.
	bookmarks bool

	result   chan watch.Event
	wake     chan struct{} // something was queued, or a check is due
	stop     chan struct{} // the client stopped the watch
	stopOnce sync.Once
	kill     chan struct{} // the server ended the watch

	// Guarded by s.mu.
	queue []queued
	// sentRV is the highest resourceVersion queued: the cacher drops
	// every event and bookmark at or below it.
	sentRV int64
	// initialLeft counts initial events still queued; live counts the
	// other queued items, which fill the cacher's buffers.
	initialLeft, live int
	// checkAt, when set, is when the dispatcher gives up on a consumer
	// that leaves its buffers full; budget is what it took for that.
	checkAt time.Time
	budget  time.Duration
	// closing: deliver what is queued, then close (a cut-off).
	closing bool
	ended   bool
}

type queued struct {
	ev watch.Event
	// initial marks the initial events of a watch with sendInitialEvents
	// or from "" or "0"; readyAt is when one may be delivered.
	initial bool
	readyAt time.Time
	// initialEnd marks the bookmark that ends a watch-list's initial
	// events.
	initialEnd bool
	// final closes the watch once sent (an ERROR event).
	final bool
	// backlog marks what the watch cache held past a resume's cursor
	// when the watch opened: the cacher sends it before it takes live
	// events, so it is not held against the consumer's buffers.
	backlog bool
}

// watchChannelSizeLocked is the size of a new watch's buffers: the
// server's WatchChannelSize, or as the cacher sizes them
// (suggestedWatchChannelSize): a second of the watch cache's history,
// what it holds over the 75 s it keeps events for, from 10 to 100, or
// 1000 with a watch index.
func (s *Server) watchChannelSizeLocked() int {
	if n := s.opts.WatchChannelSize; n > 0 {
		return n
	}
	held := max(s.opts.WatchCacheSize, s.cacheIndexLocked()-s.windowStart)
	hi := 100
	if s.opts.WatchIndexed {
		hi = 1000
	}
	return min(max(int(math.Ceil(float64(held)/eventFreshSeconds)), 10), hi)
}

// eventFreshSeconds is how long the cacher's sizing takes its watch cache
// to keep events: a watch's buffer holds a second of that history.
const eventFreshSeconds = 75

func (s *Server) newWatchLocked(ctx context.Context, options metav1.ListOptions, req *Request, now time.Time) *serverWatch {
	if ctx == nil {
		ctx = context.Background()
	}
	return &serverWatch{
		s: s, ctx: ctx, req: req, size: s.watchChannelSizeLocked(),
		deadline:  now.Add(s.deadlineLocked(options)),
		bookmarks: options.AllowWatchBookmarks,
		result:    make(chan watch.Event),
		wake:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		kill:      make(chan struct{}),
	}
}

// Stop ends the watch; its result channel closes. Safe to call more than
// once.
func (w *serverWatch) Stop() { w.stopOnce.Do(func() { close(w.stop) }) }

// ResultChan returns the events.
func (w *serverWatch) ResultChan() <-chan watch.Event { return w.result }

// capacityLocked is how many live items the cacher holds for the watch
// before it blocks: its input buffer, and its result buffer once the
// initial events are through it.
func (w *serverWatch) capacityLocked() int {
	if w.initialLeft > 0 {
		return w.size
	}
	return 2 * w.size
}

// pushLocked queues a change, unless the watch has delivered past it.
func (w *serverWatch) pushLocked(rv int64, ev watch.Event, now time.Time) {
	if rv <= w.sentRV || w.closing || w.ended {
		return
	}
	if w.live >= w.capacityLocked() && w.checkAt.IsZero() {
		// The dispatcher blocks for what is left of its budget, then
		// closes the watch if its consumer has not made room.
		w.budget = w.s.takeBudgetLocked(now)
		w.checkAt = now.Add(max(w.budget, time.Millisecond))
	}
	w.queue = append(w.queue, queued{ev: ev})
	w.live++
	w.sentRV = rv
	w.signal()
}

// initialLocked queues objects as initial ADDED events, paced by the
// latency model, and for a watch-list the bookmark that ends them.
func (w *serverWatch) initialLocked(objects []runtime.Object, watchList bool, rv int64, now time.Time) {
	lat := w.s.opts.Latency
	start := now.Add(lat.Request)
	for i, o := range objects {
		var at time.Time
		if !lat.Off {
			at = start.Add(roundUp(time.Duration(i+1)*lat.PerObject, initialChunk))
		}
		w.queue = append(w.queue, queued{ev: watch.Event{Type: watch.Added, Object: o}, initial: true, readyAt: at})
	}
	w.initialLeft = len(objects)
	if watchList {
		w.queue = append(w.queue, queued{ev: w.s.bookmarkLocked(rv, true), initialEnd: true})
		w.live++
	}
}

// initialChunk is the granularity of the initial events' pacing.
const initialChunk = 10 * time.Millisecond

func roundUp(d, unit time.Duration) time.Duration { return (d + unit - 1) / unit * unit }

// cutUnreadyLocked drops the initial events not produced by now, and
// everything queued behind them.
func (w *serverWatch) cutUnreadyLocked(now time.Time) {
	for i, q := range w.queue {
		if q.readyAt.After(now) {
			w.queue = w.queue[:i]
			return
		}
	}
}

// failLocked queues one ERROR event, after which the watch closes.
func (w *serverWatch) failLocked(err *apierrors.StatusError, req *Request) {
	st := err.Status()
	w.queue = append(w.queue, queued{ev: watch.Event{Type: watch.Error, Object: &st}, final: true})
	if req != nil {
		req.Err = err
	}
}

// endLocked ends the watch from the server's side.
func (w *serverWatch) endLocked() {
	if !w.ended {
		w.ended = true
		close(w.kill)
	}
}

func (w *serverWatch) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// takeBudgetLocked takes what the cacher's dispatch budget holds.
func (s *Server) takeBudgetLocked(now time.Time) time.Duration {
	if elapsed := now.Sub(s.budgetAt); elapsed > 0 {
		s.budget = min(maxDispatchBudget, s.budget+time.Duration(float64(budgetPerSecond)*elapsed.Seconds()))
	}
	s.budgetAt = now
	b := s.budget
	s.budget = 0
	return b
}

// checkLocked runs when the dispatcher's wait for a full watch is over:
// a consumer that made room is fine (the budget goes back); one that did
// not is cut off, keeping what the cacher's result buffer held.
func (w *serverWatch) checkLocked() {
	w.checkAt = time.Time{}
	if w.live <= w.capacityLocked() {
		w.s.budget = min(maxDispatchBudget, w.s.budget+w.budget)
		return
	}
	keep := min(len(w.queue), w.size)
	w.queue = w.queue[:keep]
	w.closing = true
	w.req.CutOff = true
	delete(w.s.watches, w)
}

func (w *serverWatch) run() {
	s := w.s
	defer func() {
		s.mu.Lock()
		delete(s.watches, w)
		if w.req.Closed.IsZero() {
			w.req.Closed = s.clock.Now()
		}
		s.mu.Unlock()
		close(w.result)
	}()
	lifetime := w.deadline.Sub(s.clock.Now())
	deadline := s.clock.NewTimer(lifetime)
	defer deadline.Stop()
	var tick, last <-chan time.Time
	var ticker interface {
		C() <-chan time.Time
		Reset(time.Duration) bool
	}
	if w.bookmarks && s.opts.BookmarkInterval > 0 {
		t := s.clock.NewTimer(s.opts.BookmarkInterval)
		defer t.Stop()
		ticker, tick = t, t.C()
	}
	if w.bookmarks && lifetime > bookmarkBeforeDeadline {
		t := s.clock.NewTimer(lifetime - bookmarkBeforeDeadline)
		defer t.Stop()
		last = t.C()
	}
	// wait is armed when the next event is not ready yet, or when the
	// dispatcher's wait on this watch ends.
	wait := s.clock.NewTimer(time.Hour)
	wait.Stop()
	defer wait.Stop()
	for {
		s.mu.Lock()
		if w.ended {
			// The server ended the watch (a restart, a close), maybe
			// before its goroutine ran: what was queued is not sent.
			s.mu.Unlock()
			return
		}
		now := s.clock.Now()
		if !now.Before(w.deadline) {
			// Past its timeout (which may have passed while the open
			// waited): closed, whatever is queued.
			s.mu.Unlock()
			return
		}
		if !w.checkAt.IsZero() && !now.Before(w.checkAt) {
			w.checkLocked()
		}
		var next queued
		var out chan<- watch.Event
		var until time.Time
		if len(w.queue) > 0 {
			next = w.queue[0]
			if next.readyAt.After(now) {
				until = next.readyAt
			} else {
				out = w.result
			}
		} else if w.closing {
			s.mu.Unlock()
			return
		}
		if !w.checkAt.IsZero() && (until.IsZero() || w.checkAt.Before(until)) {
			until = w.checkAt
		}
		s.mu.Unlock()
		var waitC <-chan time.Time
		if !until.IsZero() {
			wait.Reset(until.Sub(now))
			waitC = wait.C()
		}
		select {
		case out <- next.ev:
			s.mu.Lock()
			w.queue = w.queue[1:]
			w.delivered(next, s.clock.Now())
			s.mu.Unlock()
			if next.final {
				return
			}
		case <-waitC:
		case <-w.wake:
		case <-tick:
			s.mu.Lock()
			w.bookmarkDueLocked()
			s.mu.Unlock()
			ticker.Reset(s.opts.BookmarkInterval)
		case <-last:
			s.mu.Lock()
			w.bookmarkDueLocked()
			s.mu.Unlock()
		case <-deadline.C():
			return
		case <-w.kill:
			return
		case <-w.stop:
			return
		case <-w.ctx.Done():
			return
		}
		if waitC != nil && !wait.Stop() {
			select {
			case <-waitC:
			default:
			}
		}
	}
}

// delivered records that q reached the client at now.
func (w *serverWatch) delivered(q queued, now time.Time) {
	switch {
	case q.initial:
		w.initialLeft--
	case !q.final && !q.backlog:
		w.live--
	}
	if q.final {
		return
	}
	w.req.Events++
	switch {
	case q.initialEnd:
		w.req.InitialEventsEnd = now
	case !q.initial && w.req.FirstEvent.IsZero():
		w.req.FirstEvent = now
	}
}

// bookmarkDueLocked queues a periodic bookmark at the watch cache's
// resourceVersion, unless the watch has delivered that far already (the
// cacher drops a bookmark at or below a watcher's resourceVersion) or its
// buffers are full (a bookmark is never waited for).
func (w *serverWatch) bookmarkDueLocked() {
	rv := w.s.cacheRV
	if w.s.opts.DisableWatchCache {
		rv = w.s.rv
	}
	if rv <= w.sentRV || w.closing || w.live >= w.capacityLocked() {
		return
	}
	w.queue = append(w.queue, queued{ev: w.s.bookmarkLocked(rv, false)})
	w.live++
	w.sentRV = rv
	w.signal()
}

// bookmarkLocked builds a bookmark at rv: an object of the collection's
// kind that carries only its resourceVersion (and, to end a watch-list's
// initial events, the annotation).
func (s *Server) bookmarkLocked(rv int64, initialEnd bool) watch.Event {
	obj := newOf(s.opts.Object)
	m, _ := meta.Accessor(obj)
	m.SetResourceVersion(strconv.FormatInt(rv, 10))
	if initialEnd {
		m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	}
	return watch.Event{Type: watch.Bookmark, Object: obj}
}
