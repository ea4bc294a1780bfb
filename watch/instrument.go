package watch

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
	"k8s.io/utils/clock"
)

// InstrumentOptions configures [Instrument]. Resource is required; the zero
// value of every other field works.
type InstrumentOptions struct {
	// Resource is the watched collection's group and resource. Required.
	Resource schema.GroupResource
	// Name identifies the informer to observers. Defaults to
	// Resource.String().
	Name string
	// Observer is told about state changes and session endings.
	// Defaults to none.
	Observer Observer
	// Policy holds the grading thresholds. Defaults to Policy's defaults.
	Policy Policy
	// Clock measures sessions and trouble. Defaults to the real clock.
	Clock clock.PassiveClock
}

// InstrumentedListerWatcher wraps the ListerWatcher an informer is built
// from, so that every List, every watch open and every session end of that
// informer is graded by [Grade] and reported to an [Observer]. It changes
// nothing the informer sees: calls, results, errors and events pass through
// as they are, and the informer keeps its own retries and relists.
//
// The informer's watches are forwarded through one goroutine per open watch,
// which ends when the watch ends or is stopped. Create one with [Instrument].
// It is safe for concurrent use.
type InstrumentedListerWatcher struct {
	inner          cache.ListerWatcherWithContext
	watchListUnsup bool
	opts           InstrumentOptions
	clock          clock.PassiveClock

	mu    sync.Mutex
	hist  history
	state State
	// listedSinceShort records a List during a run of short closes: the
	// informer's own answer to a stale cursor.
	listedSinceShort bool
}

var (
	_ cache.ListerWatcher            = (*InstrumentedListerWatcher)(nil)
	_ cache.ListerWatcherWithContext = (*InstrumentedListerWatcher)(nil)
)

// Instrument wraps lw for an informer: pass the result to
// cache.NewSharedIndexInformer, or return it from controller-runtime's
// cache.Options.NewInformer. It returns an error wrapping ErrNilListerWatcher
// or ErrNoResource when those are missing.
func Instrument(lw cache.ListerWatcher, opts InstrumentOptions) (*InstrumentedListerWatcher, error) {
	if lw == nil {
		return nil, fmt.Errorf("Instrument: %w", ErrNilListerWatcher)
	}
	if opts.Resource.Resource == "" {
		return nil, fmt.Errorf("Instrument: %w", ErrNoResource)
	}
	if opts.Name == "" {
		opts.Name = opts.Resource.String()
	}
	if opts.Observer == nil {
		opts.Observer = Observers()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	opts.Policy = opts.Policy.withDefaults()
	return &InstrumentedListerWatcher{
		inner:          cache.ToListerWatcherWithContext(lw),
		watchListUnsup: watchlist.DoesClientNotSupportWatchListSemantics(lw),
		opts:           opts,
		clock:          opts.Clock,
		state:          State{Stream: opts.Name, Resource: opts.Resource, Phase: PhaseStarting, Reason: ReasonStarting},
	}, nil
}

// IsWatchListSemanticsUnSupported passes on the wrapped ListerWatcher's
// answer, so the informer's reflector makes the same watch-list choice
// it would make without the wrapper.
func (i *InstrumentedListerWatcher) IsWatchListSemanticsUnSupported() bool {
	return i.watchListUnsup
}

// State returns the informer's current state.
func (i *InstrumentedListerWatcher) State() State {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.state
}

// List calls ListWithContext with a background context.
func (i *InstrumentedListerWatcher) List(options metav1.ListOptions) (runtime.Object, error) {
	return i.ListWithContext(context.Background(), options)
}

// ListWithContext lists through the wrapped ListerWatcher and grades a
// failed List.
func (i *InstrumentedListerWatcher) ListWithContext(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
	if options.Continue == "" {
		i.mu.Lock()
		i.listedSinceShort = true
		if i.state.Phase == PhaseStarting {
			i.publishLocked(State{Phase: PhaseReplaying, Reason: ReasonInitialSync, Message: "the informer is listing the collection for the first time"})
		}
		i.mu.Unlock()
	}
	start := i.clock.Now()
	obj, err := i.inner.ListWithContext(ctx, options)
	if err != nil {
		i.end(ctx, result{stage: StageList, cause: CauseError, err: err}, start, false)
	}
	return obj, err
}

// Watch calls WatchWithContext with a background context.
func (i *InstrumentedListerWatcher) Watch(options metav1.ListOptions) (apiwatch.Interface, error) {
	return i.WatchWithContext(context.Background(), options)
}

// WatchWithContext opens a watch through the wrapped ListerWatcher, grades
// a failed open, and returns a watch that grades its own ending.
func (i *InstrumentedListerWatcher) WatchWithContext(ctx context.Context, options metav1.ListOptions) (apiwatch.Interface, error) {
	replay := options.SendInitialEvents != nil && *options.SendInitialEvents
	stage := StageOpen
	if replay {
		stage = StageReplay
	}
	if replay {
		i.mu.Lock()
		if i.state.Phase == PhaseStarting {
			i.publishLocked(State{Phase: PhaseReplaying, Reason: ReasonInitialSync, Message: "the informer is listing the collection for the first time"})
		}
		i.mu.Unlock()
	}
	start := i.clock.Now()
	w, err := i.inner.WatchWithContext(ctx, options)
	if err == nil && w == nil {
		err = ErrNilWatch
	}
	if err != nil {
		i.end(ctx, result{stage: stage, cause: CauseError, err: err}, start, false)
		return nil, err
	}
	if !replay {
		i.mu.Lock()
		if i.state.Phase != PhaseStreaming && i.state.Reason != ReasonFlapping {
			i.publishLocked(streamingState)
		}
		i.mu.Unlock()
	}
	g := &gradedWatch{
		parent: i, inner: w, ctx: ctx, start: start, replay: replay,
		result: make(chan apiwatch.Event), stop: make(chan struct{}),
		cursor: options.ResourceVersion,
	}
	go g.forward()
	return g, nil
}

var streamingState = State{Phase: PhaseStreaming, Reason: ReasonWatching, Message: "the informer is delivering live events"}

// end grades one session ending and reports it.
func (i *InstrumentedListerWatcher) end(ctx context.Context, r result, start time.Time, cursorMoved bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	now := i.clock.Now()
	e := Ending{
		OwnerDone: ctx.Err() != nil, Stage: r.stage, Cause: r.cause, Err: r.err,
		Duration: now.Sub(start), Events: r.events, CursorMoved: cursorMoved,
	}
	i.hist.fill(&e, now)
	// The informer relists by itself after a short watch: that List is the
	// replay the grading table asks for.
	e.FlapReplayed = e.FlapReplayed || (e.ShortCloses > 0 && i.listedSinceShort)
	v := Grade(e, i.opts.Policy)
	i.opts.Observer.SessionEnded(SessionEnd{
		Stream: i.opts.Name, Resource: i.opts.Resource, Verdict: v,
		Stage: e.Stage, Duration: e.Duration, Events: e.Events, Err: e.Err,
	})
	if v.Next == NextStop {
		return
	}
	i.hist.record(v, now)
	if v.ShortClose && e.ShortCloses == 0 {
		i.listedSinceShort = false
	}
	if v.Publish {
		i.publishLocked(v.State)
	}
}

// healthy publishes Streaming when a session shows health.
func (i *InstrumentedListerWatcher) healthy() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.state.Phase != PhaseStreaming {
		i.publishLocked(streamingState)
	}
}

func (i *InstrumentedListerWatcher) publishLocked(st State) {
	st.Stream, st.Resource = i.opts.Name, i.opts.Resource
	if sameState(i.state, st) {
		return
	}
	i.state = st
	i.opts.Observer.StateChanged(st)
}

// gradedWatch forwards an informer's watch and grades how it ends.
type gradedWatch struct {
	parent *InstrumentedListerWatcher
	inner  apiwatch.Interface
	ctx    context.Context
	start  time.Time
	replay bool
	cursor string

	result   chan apiwatch.Event
	stop     chan struct{}
	stopOnce sync.Once
}

// Stop stops the wrapped watch; the forwarding goroutine then closes the
// result channel. Safe to call more than once.
func (g *gradedWatch) Stop() {
	g.stopOnce.Do(func() {
		close(g.stop)
		g.inner.Stop()
	})
}

// ResultChan returns the forwarded events.
func (g *gradedWatch) ResultChan() <-chan apiwatch.Event { return g.result }

func (g *gradedWatch) forward() {
	defer close(g.result)
	defer g.inner.Stop()
	r, moved, ok := g.pump()
	if !ok {
		return // graded when the ERROR or bad event arrived
	}
	ctx := g.ctx
	if r.cause == "" {
		// Stopped by the informer with nothing wrong: the informer is
		// shutting down.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(g.ctx)
		cancel()
		r.cause = CauseClosed
	}
	g.parent.end(ctx, r, g.start, moved)
}

// pump forwards events until the watch closes or the consumer stops it. It
// returns the ending (cause empty when the consumer stopped the watch), whether
// the cursor moved, and false if the ending was already graded: an ERROR or
// unusable event is graded as soon as it arrives, before the informer sees it
// and opens its next watch, and forwarded like any other, since the informer
// decides what to do with it.
func (g *gradedWatch) pump() (r result, moved bool, ok bool) {
	stage := StageStream
	if g.replay {
		stage = StageReplay
	}
	events, graded := 0, false
	in := g.inner.ResultChan()
	for {
		var ev apiwatch.Event
		var open bool
		select {
		case <-g.stop:
			return result{stage: stage, events: events}, moved, !graded
		case ev, open = <-in:
		}
		if !open {
			return result{stage: stage, cause: CauseClosed, events: events}, moved, !graded
		}
		if !graded {
			if failed := g.inspect(ev, &stage, &events, &moved); failed != nil {
				graded = true
				g.parent.end(g.ctx, *failed, g.start, moved)
			} else if stage == StageStream {
				g.parent.healthy()
			}
		}
		select {
		case g.result <- ev:
		case <-g.stop:
			return result{stage: stage, events: events}, moved, !graded
		}
	}
}

// inspect accounts for one event and returns the ending it makes, if any.
func (g *gradedWatch) inspect(ev apiwatch.Event, stage *Stage, events *int, moved *bool) *result {
	switch ev.Type {
	case apiwatch.Added, apiwatch.Modified, apiwatch.Deleted, apiwatch.Bookmark:
		rv, err := resourceVersionOf(ev.Object)
		if err != nil {
			return &result{stage: *stage, cause: CauseBadEvent, err: fmt.Errorf("%s event: %w", ev.Type, err), events: *events}
		}
		*moved = *moved || rv != g.cursor
		if ev.Type != apiwatch.Bookmark {
			*events++
		} else if *stage == StageReplay && isInitialEventsEnd(ev.Object) {
			*stage = StageStream
		}
		return nil
	case apiwatch.Error:
		return &result{stage: *stage, cause: CauseError, err: apierrorsFromObject(ev.Object), events: *events}
	default:
		return &result{stage: *stage, cause: CauseBadEvent, err: fmt.Errorf("%w %q", ErrUnknownEventType, ev.Type), events: *events}
	}
}
