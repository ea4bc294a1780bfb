package watch

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
)

// Errors that describe a bad event or response; they end a session with
// CauseBadEvent (or CauseError for a nil watch). Match them with errors.Is.
// An event without a resourceVersion is delivered (client-go's fake
// clientset sends them), and an event of a type this client does not know
// is skipped, as the reflector does.
var (
	// ErrNilObject: an event carried no object.
	ErrNilObject = errors.New("event has no object")
	// ErrNoResourceVersion: a list carried no resourceVersion.
	ErrNoResourceVersion = errors.New("no resourceVersion")
	// ErrNilWatch: the ListerWatcher returned neither a watch nor an error.
	ErrNilWatch = errors.New("watch call returned no watch and no error")
)

// result is how one session ended, before grading.
type result struct {
	stage  Stage
	cause  Cause
	err    error
	events int
	// live is true when the session went live (see Ending.Live).
	live bool
	// served is true when the session's replay was served (a page of the
	// LIST answered, the watch-list opened).
	served bool
	// refused is true when a watch-list's first event was an ERROR that
	// refuses the watch-list (see refusesInStream).
	refused bool
}

// Session lifetimes the stream enforces itself, past what it asked the
// server for, so a connection that died silently cannot hold a session.
const (
	sessionGrace       = time.Minute
	maxSessionLifetime = 2 * time.Hour
)

// watchOptions returns the options of a watch: bookmarks always, and the
// timeout of StreamOptions.WatchTimeout; and how long the stream lets the
// session live.
func (s *Stream) watchOptions(o metav1.ListOptions) (metav1.ListOptions, time.Duration) {
	o.AllowWatchBookmarks = true
	if w := s.opts.WatchTimeout; w > 0 {
		d := w + time.Duration(s.rand()*float64(w))
		if o.SendInitialEvents != nil {
			// A watch-list is not cut before its replay could end: the
			// stream's own ReplayTimeout bounds that.
			d = max(d, s.opts.ReplayTimeout)
		}
		seconds := max(int64((d+time.Second-1)/time.Second), 1)
		o.TimeoutSeconds = &seconds
		return o, time.Duration(seconds)*time.Second + sessionGrace
	}
	return o, maxSessionLifetime
}

// resume opens a watch from the cursor and consumes it.
func (s *Stream) resume(ctx context.Context, cursor string) result {
	return s.resumeChecked(ctx, cursor, s.opts.CursorCheck > 0)
}

// resumeChecked opens a watch from the cursor and consumes it; with check
// set, a session that delivers nothing for CursorCheck has its cursor
// checked against the server's resourceVersion.
func (s *Stream) resumeChecked(ctx context.Context, cursor string, check bool) result {
	opts, lifetime := s.watchOptions(metav1.ListOptions{ResourceVersion: cursor})
	sctx, cancel := context.WithTimeout(ctx, lifetime)
	defer cancel()
	w, err := s.lw.WatchWithContext(sctx, opts)
	if err == nil && w == nil {
		err = ErrNilWatch
	}
	if err != nil {
		return result{stage: StageOpen, cause: CauseError, err: err}
	}
	defer w.Stop()
	if !check {
		cursor = ""
	}
	return s.consume(ctx, sctx, w, nil, cursor)
}

// consume reads events from w until the session ends. With buf set it is a
// watch-list replay: objects are buffered until the initial-events-end
// bookmark and then delivered as one snapshot. sctx is the session's own
// context, whose deadline the stream set: a watch it ends is a clean close.
// With cursor set, a session that has delivered nothing after CursorCheck
// has that cursor checked (see [StreamOptions.CursorCheck]).
func (s *Stream) consume(ctx, sctx context.Context, w apiwatch.Interface, buf *replayBuffer, cursor string) (r result) {
	r.stage = StageStream
	var deadline <-chan time.Time
	if buf != nil {
		r.stage = StageReplay
		t := s.clock.NewTimer(s.opts.ReplayTimeout)
		defer t.Stop()
		deadline = t.C()
	}
	// When the session goes live: see liveness. What it delivers before
	// then does not make it live: behind a proxy that cuts every watch at
	// once, an event slipping through a cut session is not health.
	l := liveness{clock: s.clock, short: s.opts.Policy.ShortSession}
	var check <-chan time.Time
	var checkTimer clock.Timer
	defer func() {
		l.stop()
		if checkTimer != nil {
			checkTimer.Stop()
		}
	}()
	// In doubt (the stream has not been live since its last session
	// ended in trouble), a session from a cursor goes live only once the
	// server confirms it serves the cursor: an event or a bookmark, or the
	// check, which then comes at once. The server that answers after
	// trouble may be one whose storage was restored behind the cursor, or
	// whose watch cache stopped following etcd: a session from a cursor
	// it has not reached looks live and is silent. After a routine close
	// a session needs no confirmation, and costs no request.
	if buf == nil {
		l.count()
	}
	// awaiting is true while the session waits for the server to confirm
	// its cursor; due when it has meanwhile stayed open for ShortSession.
	awaiting, due := s.doubt && cursor != "", false
	goneLive := func() {
		if awaiting {
			due = true
			return
		}
		r.live = true
		s.goneLive()
	}
	if cursor != "" {
		// The silence counts from the first session since the server
		// last confirmed the cursor: a storm of short sessions (an
		// apiserver restarting again and again) does not put the check
		// off.
		// In doubt, the check comes ShortSession/2 after the session
		// opened, and never sooner in any session: the session cannot go
		// live before ShortSession anyway, and a server that has let the
		// cursor expire says so with the watch's first event, a moment
		// after the open. Checking at the open instead costs a LIST for
		// every resume that a 410 answers: after an apiserver restart,
		// one for nearly every stream in doubt or silent for CursorCheck.
		now := s.clock.Now()
		if s.unconfirmed.IsZero() {
			s.unconfirmed = now
		}
		wait := max(s.opts.CursorCheck-now.Sub(s.unconfirmed), 0)
		if s.doubt {
			wait = 0
		}
		wait = max(wait, s.opts.Policy.ShortSession/2)
		checkTimer = s.clock.NewTimer(wait)
		check = checkTimer.C()
	} else {
		s.unconfirmed = time.Time{}
	}
	// heard stops the cursor check: the server confirmed the cursor by
	// delivering something.
	// heardAny is true once the session delivered an event or a bookmark:
	// an answer to a check asked before then is out of date.
	heardAny := false
	heard := func() {
		heardAny = true
		if check != nil {
			checkTimer.Stop()
			check = nil
		}
		s.confirmed()
		if awaiting {
			awaiting = false
			if due {
				goneLive()
			}
		}
	}
	ended := func(cause Cause, err error) result {
		if sctx.Err() != nil && ctx.Err() == nil {
			// The stream cut the session at its own deadline.
			cause, err = CauseClosed, nil
		}
		r.cause, r.err = cause, err
		return r
	}
	first := true
	done, results := ctx.Done(), w.ResultChan()
	// checked, while a check of the cursor is in flight, receives its
	// answer.
	var checked chan checkResult
	for {
		var ev apiwatch.Event
		var ok, got, live bool
		// now, when set, is when the event in ev was taken.
		var now time.Time
		if l.poll(); l.opened {
			if ev, ok, got, now, live = l.take(results); live {
				goneLive()
			}
		}
		if !got && deadline == nil && check == nil && checked == nil {
			// Steady state, and the first ShortSession of a session from
			// a confirmed cursor (the count was polled above):
			// take a ready event without the cost of a multi-way select,
			// after a cheap check that the owner is not done.
			select {
			case <-done:
				return ended(CauseClosed, nil)
			default:
			}
			select {
			case ev, ok = <-results:
				got = true
			default:
			}
		}
		if !got {
			select {
			case <-done:
				return ended(CauseClosed, nil)
			case <-deadline:
				return ended(CauseReplayDeadline, nil)
			case <-l.ran():
				continue
			case <-check:
				if ev, ok, got, _ = settled(results); got {
					// The session's next event came with the check's
					// time: it goes first (an event or a bookmark makes
					// the check needless, a close ends the session), the
					// check a moment later.
					checkTimer = s.clock.NewTimer(settleWait)
					check = checkTimer.C()
					break
				}
				// The check runs beside the session, which the stream
				// keeps watching: a close meanwhile ends it as usual.
				check, checked = nil, make(chan checkResult, 1)
				go func(c chan<- checkResult) {
					err, told := s.cursorAhead(sctx, cursor)
					c <- checkResult{err, told}
				}(checked)
				continue
			case res := <-checked:
				checked = nil
				switch err, told := res.ahead, res.told; {
				case heardAny:
					// The server delivered from the cursor since: it has
					// reached it (a watch cache that caught up).
				case err != nil:
					// The server never had the cursor: the session was
					// never live, whatever it looked like, and the next
					// ones are in doubt.
					r.live, s.doubt = false, true
					return ended(CauseError, err)
				case !told:
					// Ask again a CursorCheck later.
					checkTimer = s.clock.NewTimer(s.opts.CursorCheck)
					check = checkTimer.C()
				default:
					// Confirmed for this session; the next one checks
					// again.
					heard()
				}
				continue
			case ev, ok = <-results:
			}
		}
		if !ok {
			return ended(CauseClosed, nil)
		}
		wasFirst := first
		first = false
		switch ev.Type {
		case apiwatch.Added, apiwatch.Modified, apiwatch.Deleted:
			rv, err := resourceVersionOf(ev.Object)
			if err != nil {
				return ended(CauseBadEvent, fmt.Errorf("%s event: %w", ev.Type, err))
			}
			if buf != nil {
				buf.apply(ev)
				r.events++
				continue
			}
			heard()
			// Before the session is live, a handler call that takes
			// ShortSession or more starts its count again.
			var began time.Time
			if l.pending() {
				if began = now; began.IsZero() {
					began = s.clock.Now()
				}
			}
			s.stall.enter(s)
			err = s.handler.Event(ctx, ev)
			if s.stall.leave() {
				// Live only until the call began; live again once the
				// session, if the server did not close it meanwhile,
				// stays open for ShortSession.
				l.count()
			} else {
				l.held(began)
			}
			if err != nil {
				return ended(CauseHandler, err)
			}
			r.events++
			if rv != "" {
				// An object without a resourceVersion (client-go's fake
				// clientset stores them so) is delivered; it moves nothing.
				s.setCursor(rv)
			}
		case apiwatch.Bookmark:
			rv, err := resourceVersionOf(ev.Object)
			if err != nil || rv == "" {
				// A bookmark that says nothing; real servers send none.
				continue
			}
			switch {
			case buf == nil:
				heard()
				s.setCursor(rv)
			case isInitialEventsEnd(ev.Object):
				snap := buf.snapshot(rv)
				buf = nil
				if err := s.snapshot(ctx, snap); err != nil {
					return ended(CauseHandler, err)
				}
				s.setCursor(rv)
				s.confirmed()
				deadline, r.stage = nil, StageStream
				l.count()
			}
			// Any other bookmark inside a replay says nothing about the
			// snapshot; the cursor waits for the end.
		case apiwatch.Error:
			err := apierrorsFromObject(ev.Object)
			r.refused = buf != nil && wasFirst && refusesInStream(err)
			return ended(CauseError, err)
		default:
			// An event type this client does not know: skipped, as the
			// reflector does.
		}
	}
}

// snapshot delivers snap to the handler, watched for a stall (only
// published in a live session: a replay's is covered by escalations).
func (s *Stream) snapshot(ctx context.Context, snap Snapshot) error {
	s.stall.enter(s)
	err := s.handler.Snapshot(ctx, snap)
	s.stall.leave()
	return err
}
