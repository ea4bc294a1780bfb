package watchtest

import (
	"context"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// serverWatch is one watch a Server serves. Its goroutine (run) delivers
// what is queued, in order, and owns the result channel: it closes it when
// the watch ends, whoever ends it.
type serverWatch struct {
	s        *Server
	ctx      context.Context
	req      *Request
	deadline time.Duration
	// bookmarks is true when the client asked for them.
	bookmarks bool

	result   chan watch.Event
	wake     chan struct{} // something was queued
	stop     chan struct{} // the client stopped the watch
	stopOnce sync.Once
	kill     chan struct{} // the server ended the watch

	// Guarded by s.mu.
	queue []queued
	// after: only changes after this resourceVersion are delivered (a
	// watch from a cursor the server has not reached yet).
	after int64
	// sentRV is the resourceVersion of the last change queued.
	sentRV int64
	ended  bool
}

type queued struct {
	ev watch.Event
	// initial marks the initial events of a watch-list.
	initial bool
	// initialEnd marks the bookmark that ends them.
	initialEnd bool
	// final closes the watch once sent (an ERROR event).
	final bool
}

func (s *Server) newWatchLocked(ctx context.Context, options metav1.ListOptions, req *Request) *serverWatch {
	if ctx == nil {
		ctx = context.Background()
	}
	return &serverWatch{
		s: s, ctx: ctx, req: req,
		deadline:  s.deadlineLocked(options),
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

// pushLocked queues a change.
func (w *serverWatch) pushLocked(rv int64, ev watch.Event) {
	if rv <= w.after {
		return
	}
	w.queue = append(w.queue, queued{ev: ev})
	w.sentRV = rv
	w.signal()
}

// initialLocked queues the current state as ADDED events, and for a
// watch-list the bookmark that ends them.
func (w *serverWatch) initialLocked(objects []watch.Event, watchList bool) {
	for _, ev := range objects {
		w.queue = append(w.queue, queued{ev: ev, initial: watchList})
	}
	if watchList {
		w.queue = append(w.queue, queued{ev: w.s.bookmarkLocked(true), initialEnd: true})
	}
	w.sentRV = w.s.rv
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
	deadline := s.clock.NewTimer(w.deadline)
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
	if w.bookmarks && w.deadline > bookmarkBeforeDeadline {
		t := s.clock.NewTimer(w.deadline - bookmarkBeforeDeadline)
		defer t.Stop()
		last = t.C()
	}
	for {
		s.mu.Lock()
		var next queued
		var out chan<- watch.Event
		if len(w.queue) > 0 {
			next, out = w.queue[0], w.result
		}
		s.mu.Unlock()
		select {
		case out <- next.ev:
			s.mu.Lock()
			w.queue = w.queue[1:]
			w.delivered(next, s.clock.Now())
			s.mu.Unlock()
			if next.final {
				return
			}
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
	}
}

// delivered records that q reached the client at now.
func (w *serverWatch) delivered(q queued, now time.Time) {
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

// bookmarkDueLocked queues a periodic bookmark at the server's current
// resourceVersion, unless the watch waits for a cursor the server has not
// reached.
func (w *serverWatch) bookmarkDueLocked() {
	if w.s.rv <= w.after {
		return
	}
	w.queue = append(w.queue, queued{ev: w.s.bookmarkLocked(false)})
	w.signal()
}

// bookmarkLocked builds a bookmark at the current resourceVersion: an
// object of the collection's kind that carries only its resourceVersion
// (and, to end a watch-list's initial events, the annotation).
func (s *Server) bookmarkLocked(initialEnd bool) watch.Event {
	obj := newOf(s.opts.Object)
	m, _ := meta.Accessor(obj)
	m.SetResourceVersion(strconv.FormatInt(s.rv, 10))
	if initialEnd {
		m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	}
	return watch.Event{Type: watch.Bookmark, Object: obj}
}
