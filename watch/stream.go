package watch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
	"k8s.io/utils/clock"

	"github.com/watchgrade/watchgrade/internal/backoff"
)

// Errors returned by [NewStream], [Instrument] and [Stream.Run]. Match them
// with errors.Is.
var (
	// ErrNilListerWatcher: the ListerWatcher is nil.
	ErrNilListerWatcher = errors.New("watchgrade/watch: nil ListerWatcher")
	// ErrNilHandler: the Handler is nil.
	ErrNilHandler = errors.New("watchgrade/watch: nil Handler")
	// ErrNoResource: the options name no resource.
	ErrNoResource = errors.New("watchgrade/watch: options name no Resource")
	// ErrAlreadyRunning: Run was called on a stream that is running.
	ErrAlreadyRunning = errors.New("watchgrade/watch: stream is already running")
)

// Handler consumes a stream. A stream calls it from the goroutine that
// called [Stream.Run], one call at a time.
//
// After every replay (at start without a cursor, after the cursor expired)
// the handler gets the whole collection in one Snapshot; then incremental
// events. An object missing from a Snapshot no longer exists, even if its
// deletion was never seen as an event: this is how deletes during an expiry
// reach the consumer. After a routine reconnect nothing is delivered twice.
//
// A handler that returns an error ends the session; after a backoff the same
// event, or the same snapshot, is delivered again (at least once, never
// skipped). A stream never delivers bookmarks or ERROR events to a handler.
type Handler interface {
	// Snapshot replaces everything the consumer knows about the collection.
	Snapshot(ctx context.Context, snap Snapshot) error
	// Event applies one change: an Added, Modified or Deleted event whose
	// object has a resourceVersion.
	Event(ctx context.Context, ev apiwatch.Event) error
}

// Snapshot is the whole collection at one resourceVersion.
type Snapshot struct {
	// Objects holds every object of the collection, sorted by namespace
	// and name.
	Objects []runtime.Object
	// ResourceVersion is the collection's resourceVersion at the snapshot.
	ResourceVersion string
}

// HandlerFuncs adapts functions to a [Handler]. A nil function accepts
// everything.
type HandlerFuncs struct {
	SnapshotFunc func(ctx context.Context, snap Snapshot) error
	EventFunc    func(ctx context.Context, ev apiwatch.Event) error
}

// Snapshot calls SnapshotFunc if it is set.
func (f HandlerFuncs) Snapshot(ctx context.Context, snap Snapshot) error {
	if f.SnapshotFunc == nil {
		return nil
	}
	return f.SnapshotFunc(ctx, snap)
}

// Event calls EventFunc if it is set.
func (f HandlerFuncs) Event(ctx context.Context, ev apiwatch.Event) error {
	if f.EventFunc == nil {
		return nil
	}
	return f.EventFunc(ctx, ev)
}

// StreamOptions configures a [Stream]. Resource is required; the zero value
// of every other field works.
type StreamOptions struct {
	// Resource is the watched collection's group and resource, such as
	// {Resource: "configmaps"}. It labels metrics and states. Required.
	Resource schema.GroupResource
	// Name identifies the stream to observers, unique among the streams
	// that share one. Defaults to Resource.String().
	Name string
	// Cursor is the resourceVersion to resume from. Defaults to "": the
	// stream starts with a replay.
	Cursor string
	// Observer is told about state changes and session endings.
	// Defaults to none.
	Observer Observer
	// Policy holds the grading thresholds. Defaults to Policy's defaults.
	Policy Policy
	// InitialBackoff caps the first backoff wait. Defaults to 1s.
	InitialBackoff time.Duration
	// MaxBackoff caps every backoff wait. Defaults to 60s.
	MaxBackoff time.Duration
	// ReplayTimeout bounds a watch-list replay: the initial-events-end
	// bookmark must arrive within it. After a timeout the stream replays
	// with LIST+WATCH. Defaults to 2m.
	ReplayTimeout time.Duration
	// ListPageSize is the page size of a LIST+WATCH replay. Defaults to 500.
	ListPageSize int64
	// DisableWatchList makes every replay a paginated LIST then a WATCH.
	// By default a replay is a watch-list (sendInitialEvents), falling back
	// to LIST+WATCH when the server refuses it or the ListerWatcher reports
	// IsWatchListSemanticsUnSupported.
	DisableWatchList bool
	// Clock is the clock for backoff, deadlines and durations.
	// Defaults to the real clock.
	Clock clock.Clock
}

// Defaults of StreamOptions.
const (
	DefaultInitialBackoff = time.Second
	DefaultMaxBackoff     = time.Minute
	DefaultReplayTimeout  = 2 * time.Minute
	DefaultListPageSize   = 500
)

func (o StreamOptions) withDefaults() StreamOptions {
	if o.Name == "" {
		o.Name = o.Resource.String()
	}
	if o.Observer == nil {
		o.Observer = Observers()
	}
	o.Policy = o.Policy.withDefaults()
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = DefaultInitialBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.MaxBackoff < o.InitialBackoff {
		o.MaxBackoff = o.InitialBackoff
	}
	if o.ReplayTimeout <= 0 {
		o.ReplayTimeout = DefaultReplayTimeout
	}
	if o.ListPageSize <= 0 {
		o.ListPageSize = DefaultListPageSize
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// Stream is one long-lived, graded watch of one collection. It runs as a
// series of sessions, each one open watch; [Grade] decides what every
// session ending means, and the stream acts on it: resume from its cursor,
// replay, back off, publish a State.
//
// Create one with [NewStream] and call [Stream.Run]; cancel its context to
// stop it. Cursor and State are safe to call from any goroutine.
type Stream struct {
	lw      cache.ListerWatcherWithContext
	handler Handler
	opts    StreamOptions
	clock   clock.Clock
	running atomic.Bool

	// Owned by the goroutine in Run.
	backoff        backoff.Backoff
	watchListUnsup bool
	// stopDeferred is closed when Run returns, ending a deferred timer.
	stopDeferred chan struct{}
	timers       sync.WaitGroup

	// pubMu serialises publications: a deferred state fires from a timer
	// goroutine, and must never land after the Streaming that cancels it.
	pubMu sync.Mutex
	// deferred is a state to publish if the next replay has not delivered
	// its snapshot deferAfter after it started (see Verdict.PublishAfter).
	// armed is set when that replay starts its timer; deferGen cancels a
	// timer that has been overtaken.
	deferred   *State
	deferAfter time.Duration
	armed      bool
	deferGen   uint64

	mu     sync.Mutex
	cursor string
	state  State
	// announced is false until observers have heard of the stream.
	announced bool
}

// NewStream returns a stream of the collection that lw lists and watches,
// delivering to h. lw may come from a typed, dynamic or metadata client
// (cache.NewListWatchFromClient, or a cache.ListWatch with your own
// functions); it must not ignore the options it is given. It returns an
// error wrapping ErrNilListerWatcher, ErrNilHandler or ErrNoResource when
// those are missing.
func NewStream(lw cache.ListerWatcher, h Handler, opts StreamOptions) (*Stream, error) {
	if lw == nil {
		return nil, fmt.Errorf("NewStream: %w", ErrNilListerWatcher)
	}
	if h == nil {
		return nil, fmt.Errorf("NewStream: %w", ErrNilHandler)
	}
	if opts.Resource.Resource == "" {
		return nil, fmt.Errorf("NewStream: %w", ErrNoResource)
	}
	opts = opts.withDefaults()
	s := &Stream{
		lw:             cache.ToListerWatcherWithContext(lw),
		handler:        h,
		opts:           opts,
		clock:          opts.Clock,
		backoff:        backoff.Backoff{Initial: opts.InitialBackoff, Max: opts.MaxBackoff},
		watchListUnsup: opts.DisableWatchList || watchlist.DoesClientNotSupportWatchListSemantics(lw),
		cursor:         opts.Cursor,
	}
	s.state = s.stamp(State{Phase: PhaseStarting, Reason: ReasonStarting, Message: "the stream has not opened a session yet"})
	return s, nil
}

// Cursor returns the resourceVersion of the last event or bookmark the
// stream delivered or acknowledged, or "" while it has none (before the first
// replay completes, and after the cursor expired).
func (s *Stream) Cursor() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursor
}

// State returns the stream's current state.
func (s *Stream) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// Run runs the stream on the calling goroutine until ctx is done, then
// returns nil. Ending the stream is routine: it reports the last session as
// OutcomeTeardown and publishes nothing. Run starts one goroutine of its own
// only while the replay after an expiry is under way (the timer of
// Policy.ReplayGrace); it has ended when Run returns. The ListerWatcher's
// watch may start its own. It returns ErrAlreadyRunning if the
// stream is already running; once it has returned it may be called again,
// resuming from the cursor.
func (s *Stream) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer s.running.Store(false)
	s.stopDeferred = make(chan struct{})
	defer func() {
		s.cancelDeferred()
		close(s.stopDeferred)
		s.timers.Wait()
	}()

	s.publish(State{Phase: PhaseStarting, Reason: ReasonStarting, Message: "the stream has not opened a session yet"})
	var hist history
	for ctx.Err() == nil {
		startCursor := s.Cursor()
		start := s.clock.Now()
		var r result
		if startCursor == "" {
			r = s.replay(ctx)
		} else {
			r = s.resume(ctx, startCursor)
		}
		now := s.clock.Now()
		e := Ending{
			OwnerDone:   ctx.Err() != nil,
			Stage:       r.stage,
			Cause:       r.cause,
			Err:         r.err,
			Duration:    now.Sub(start),
			Events:      r.events,
			CursorMoved: s.Cursor() != startCursor,
		}
		hist.fill(&e, now)
		v := Grade(e, s.opts.Policy)
		s.opts.Observer.SessionEnded(SessionEnd{
			Stream: s.opts.Name, Resource: s.opts.Resource, Verdict: v,
			Stage: e.Stage, Duration: e.Duration, Events: e.Events, Err: e.Err,
		})
		if v.Next == NextStop {
			return nil
		}
		hist.record(v, now)
		if v.Healthy {
			s.backoff.Reset()
		}
		switch {
		case v.Publish && v.PublishAfter > 0:
			s.deferPublish(v.State, v.PublishAfter)
		case v.Publish:
			s.publish(v.State)
		}
		if v.Next == NextReplay {
			s.setCursor("")
		}
		if !s.wait(ctx, v) {
			return nil
		}
	}
	return nil
}

// wait sleeps as the verdict says and reports whether ctx is still live.
func (s *Stream) wait(ctx context.Context, v Verdict) bool {
	var d time.Duration
	switch v.Wait {
	case WaitBackoff:
		d = s.backoff.Next(v.RetryAfter, false)
	case WaitSlow:
		d = s.backoff.Next(v.RetryAfter, true)
	default:
		d = min(v.RetryAfter, backoff.MaxRetryAfter)
	}
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := s.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// history is what Grade needs to know about the sessions before this one.
type history struct {
	failures     int
	troubleStart time.Time
	shortCloses  int
	flapReplayed bool
}

func (h *history) fill(e *Ending, now time.Time) {
	e.Failures = h.failures
	e.ShortCloses = h.shortCloses
	e.FlapReplayed = h.flapReplayed
	if h.failures > 0 {
		e.Trouble = now.Sub(h.troubleStart)
	}
}

func (h *history) record(v Verdict, now time.Time) {
	if v.Healthy {
		*h = history{}
		return
	}
	if h.failures == 0 {
		h.troubleStart = now
	}
	h.failures++
	if !v.ShortClose {
		h.shortCloses, h.flapReplayed = 0, false
		return
	}
	h.shortCloses++
	if v.Next == NextReplay {
		h.flapReplayed = true
	}
}

func (s *Stream) setCursor(rv string) {
	s.mu.Lock()
	s.cursor = rv
	s.mu.Unlock()
}

// stamp fills in the stream's identity.
func (s *Stream) stamp(st State) State {
	st.Stream, st.Resource = s.opts.Name, s.opts.Resource
	return st
}

// publish makes st the current state and tells the observer, unless it
// differs from what observers last heard only in its message (then nothing
// changes, so State and observers agree). It cancels a deferred state.
func (s *Stream) publish(st State) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	s.deferred, s.armed = nil, false
	s.deferGen++
	s.publishLocked(st)
}

func (s *Stream) publishLocked(st State) {
	st = s.stamp(st)
	s.mu.Lock()
	if s.announced && sameState(s.state, st) {
		s.mu.Unlock()
		return
	}
	s.state, s.announced = st, true
	s.mu.Unlock()
	s.opts.Observer.StateChanged(st)
}

// deferPublish keeps st to publish if the next replay outlasts after,
// unless a state is already deferred (the first one's grace counts).
func (s *Stream) deferPublish(st State, after time.Duration) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if s.deferred == nil {
		s.deferred, s.deferAfter, s.armed = &st, after, false
	}
}

// armDeferred starts the grace of a deferred state when the replay it
// waits for starts: a backoff before that replay is no part of it. The
// timer fires even while a List, an open or the handler blocks.
func (s *Stream) armDeferred() {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if s.deferred == nil || s.armed {
		return
	}
	s.armed = true
	gen := s.deferGen
	t := s.clock.NewTimer(s.deferAfter)
	s.timers.Add(1)
	go func() {
		defer s.timers.Done()
		defer t.Stop()
		select {
		case <-t.C():
			s.pubMu.Lock()
			defer s.pubMu.Unlock()
			if s.deferGen == gen && s.deferred != nil {
				st := *s.deferred
				s.deferred, s.armed = nil, false
				s.publishLocked(st)
			}
		case <-s.stopDeferred:
		}
	}()
}

// cancelDeferred drops a deferred state and its timer.
func (s *Stream) cancelDeferred() {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	s.deferred, s.armed = nil, false
	s.deferGen++
}

// sameState reports whether a and b agree in everything but the message.
func sameState(a, b State) bool {
	return a.Phase == b.Phase && a.Reason == b.Reason && a.NeedsHuman == b.NeedsHuman
}

func (s *Stream) publishStreaming() {
	if s.State().Phase == PhaseStreaming {
		s.cancelDeferred()
		return
	}
	s.publish(State{Phase: PhaseStreaming, Reason: ReasonWatching, Message: "the stream is delivering live events"})
}
