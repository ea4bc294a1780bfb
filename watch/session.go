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
// CauseBadEvent (CauseError for a nil watch or an ERROR event without an
// object). Match them with errors.Is.
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
	// served is true when the session's replay was served.
	served bool
	// refused is true when a watch-list's first event refused it.
	refused bool
}

// Session lifetimes the stream enforces itself, past what it asked the
// server for.
const (
	sessionGrace       = time.Minute
	maxSessionLifetime = 2 * time.Hour
)

// watchOptions returns the options of a watch, with bookmarks and a
// timeout, and how long the stream lets the session live.
func (s *Stream) watchOptions(o metav1.ListOptions) (metav1.ListOptions, time.Duration) {
	o.AllowWatchBookmarks = true
	if w := s.opts.WatchTimeout; w > 0 {
		d := w + time.Duration(s.rand()*float64(w))
		if o.SendInitialEvents != nil {
			// Not cut before the replay could end.
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

// resumeChecked is resume, with the cursor check only if check is set.
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
// watch-list replay, delivered as one snapshot at the initial-events-end
// bookmark. A watch that sctx's deadline ends is a clean close. With
// cursor set, the cursor is checked.
func (s *Stream) consume(ctx, sctx context.Context, w apiwatch.Interface, buf *replayBuffer, cursor string) (r result) {
	r.stage = StageStream
	var deadline <-chan time.Time
	if buf != nil {
		r.stage = StageReplay
		t := s.clock.NewTimer(s.opts.ReplayTimeout)
		defer t.Stop()
		deadline = t.C()
	}
	l := liveness{clock: s.clock, short: s.opts.Policy.ShortSession, idle: s.stall.idle}
	var check <-chan time.Time
	var checkTimer clock.Timer
	defer func() {
		l.stop()
		if checkTimer != nil {
			checkTimer.Stop()
		}
	}()
	if buf == nil {
		l.count()
	}
	// In doubt, a session from a cursor goes live only once the server
	// confirms the cursor (an event, a bookmark or the check); awaiting is
	// true until then, and due once the session would have gone live.
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
		// last confirmed the cursor. In doubt, the check comes at
		// ShortSession/2, and never sooner: a 410 answers first.
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
	// heard records that the server delivered from the cursor.
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
	// delivered is true once the session has had an event or a bookmark.
	first, delivered := true, false
	done, results := ctx.Done(), w.ResultChan()
	// checked receives the answer of a check in flight.
	var checked chan checkResult
	for {
		var ev apiwatch.Event
		var ok, got, live bool
		// now, when set, is when ev was taken.
		var now time.Time
		if l.poll(); l.opened {
			if ev, ok, got, now, live = l.take(results); live {
				goneLive()
			}
		}
		if !got {
			// A ready event without a multi-way select, and whether the
			// consumer has caught up (for the stall watch): nothing
			// waiting says so once the session has delivered something,
			// or has had ShortSession to (a resume's backlog comes a
			// request later).
			select {
			case <-done:
				return ended(CauseClosed, nil)
			default:
			}
			if buf == nil {
				select {
				case ev, ok = <-results:
					got = true
				default:
					if delivered || !l.counting() {
						s.stall.idle()
					}
				}
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
					// The next event goes first, the check a moment later.
					checkTimer = s.clock.NewTimer(settleWait)
					check = checkTimer.C()
					break
				}
				// The check runs beside the session.
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
					// Delivered from the cursor since: reached.
				case err != nil:
					// Behind the cursor: never live; the next ones in doubt.
					r.live, s.doubt = false, true
					return ended(CauseError, err)
				case !told:
					// Ask again a CursorCheck later.
					checkTimer = s.clock.NewTimer(s.opts.CursorCheck)
					check = checkTimer.C()
				default:
					// Confirmed.
					heard()
				}
				continue
			case ev, ok = <-results:
			}
		}
		if !ok {
			return ended(CauseClosed, nil)
		}
		delivered = true
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
			// See liveness.held.
			var began time.Time
			if l.pending() {
				if began = now; began.IsZero() {
					began = s.clock.Now()
				}
			}
			s.stall.enter(s)
			err = s.handler.Event(ctx, ev)
			if s.stall.leave() {
				// A stall was published: the count starts again.
				l.count()
			} else {
				l.held(began)
			}
			if err != nil {
				return ended(CauseHandler, err)
			}
			r.events++
			if rv != "" {
				// Delivered, but no cursor (client-go's fake clientset).
				s.setCursor(rv)
			}
		case apiwatch.Bookmark:
			rv, err := resourceVersionOf(ev.Object)
			if err != nil || rv == "" {
				// A bookmark that says nothing.
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
			// Inside a replay the cursor waits for the end.
		case apiwatch.Error:
			err := apierrorsFromObject(ev.Object)
			r.refused = buf != nil && wasFirst && refusesInStream(err)
			return ended(CauseError, err)
		default:
			// An unknown event type: skipped, as the reflector does.
		}
	}
}

// snapshot delivers snap to the handler, watched for a stall.
func (s *Stream) snapshot(ctx context.Context, snap Snapshot) error {
	s.stall.enter(s)
	err := s.handler.Snapshot(ctx, snap)
	s.stall.leave()
	return err
}
