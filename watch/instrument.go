package watch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
	"k8s.io/utils/clock"

	"github.com/watchgrade/watchgrade/internal/backoff"
)

// InstrumentOptions configures [Instrument]. Resource is required; the zero
// value of every other field works.
type InstrumentOptions struct {
	// Resource is the watched collection's group and resource. Required.
	Resource schema.GroupResource
	// Name identifies the informer to observers; defaults to Resource.String().
	Name string
	// Observer is told about state changes and session endings, if set.
	Observer Observer
	// Policy holds the grading thresholds. Defaults to Policy's defaults.
	Policy Policy
	// Clock times sessions and escalations; defaults to the real clock.
	Clock clock.Clock
	// Rand, if set, is the source (math/rand/v2) of the random spread of
	// the waits before a call refused a connection is made again; nil is
	// math/rand/v2's global source. The informer draws from it from one
	// goroutine at a time: give each informer a source of its own. A test
	// that replays a history from a seed sets it (client-go's reflectors
	// draw their own jitter from math/rand's global source).
	Rand *rand.Rand
}

// InstrumentedListerWatcher wraps the ListerWatcher an informer is built
// from, so that every List, watch open and session end of that informer
// is graded and reported as a [Stream]'s are (see Informers in the package
// doc). Results, errors and events pass through as they are, and the
// informer keeps its own retries except for a connection refused or reset. The
// reflector's fallback from a watch-list that failed to a LIST in the
// same attempt ends no session (the LIST ends it), nor do events the
// reflector skips. Each open watch is forwarded by one goroutine, through
// a buffer of 64 events. Escalations
// publish nothing once the context of the informer's last call is done.
// Create one with [Instrument]. It is safe for concurrent use.
type InstrumentedListerWatcher struct {
	inner          cache.ListerWatcherWithContext
	watchListUnsup bool
	opts           InstrumentOptions
	clock          clock.Clock
	// pub publishes what the informer's health fold says.
	pub *publisher

	mu sync.Mutex
	// idle is true until the informer's first call, and again after its
	// teardown: the history starts over at its next call.
	idle bool
	// backoff paces the calls retried for a refused connection.
	backoff backoff.Backoff
	rand    func() float64
}

var (
	_ cache.ListerWatcher            = (*InstrumentedListerWatcher)(nil)
	_ cache.ListerWatcherWithContext = (*InstrumentedListerWatcher)(nil)
)

// Instrument wraps lw for an informer: pass the result to
// cache.NewSharedIndexInformer, or return it from controller-runtime's
// cache.Options.NewInformer. The informer's health is measured from its
// first List or Watch call (again after a teardown), not from Instrument.
// It returns an error wrapping ErrNilListerWatcher or ErrNoResource when
// those are missing, and ErrInvalidOptions if [Policy.Validate] fails.
func Instrument(lw cache.ListerWatcher, opts InstrumentOptions) (*InstrumentedListerWatcher, error) {
	if lw == nil {
		return nil, fmt.Errorf("Instrument: %w", ErrNilListerWatcher)
	}
	if opts.Resource.Resource == "" {
		return nil, fmt.Errorf("Instrument: %w", ErrNoResource)
	}
	if err := opts.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("Instrument: %w", err)
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
	draw := rand.Float64
	if opts.Rand != nil {
		draw = opts.Rand.Float64
	}
	i := &InstrumentedListerWatcher{
		inner:          cache.ToListerWatcherWithContext(lw),
		watchListUnsup: watchlist.DoesClientNotSupportWatchListSemantics(lw),
		opts:           opts,
		clock:          opts.Clock,
		idle:           true,
		pub:            newPublisher(opts.Clock, opts.Observer, newHealth(opts.Name, opts.Resource, opts.Policy, true)),
		backoff:        backoff.Backoff{Initial: DefaultInitialBackoff, Max: DefaultMaxBackoff, Rand: draw},
		rand:           draw,
	}
	return i, nil
}

// IsWatchListSemanticsUnSupported passes on the wrapped ListerWatcher's
// answer.
func (i *InstrumentedListerWatcher) IsWatchListSemanticsUnSupported() bool {
	return i.watchListUnsup
}

// State returns the informer's current state.
func (i *InstrumentedListerWatcher) State() State { return i.pub.current() }

// List calls ListWithContext with a background context.
func (i *InstrumentedListerWatcher) List(options metav1.ListOptions) (runtime.Object, error) {
	return i.ListWithContext(context.Background(), options)
}

// ListWithContext lists through the wrapped ListerWatcher and grades a
// failed List.
func (i *InstrumentedListerWatcher) ListWithContext(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
	i.wake(ctx)
	for {
		if options.Continue == "" {
			i.relist(ctx)
		}
		start := i.clock.Now()
		obj, err := i.inner.ListWithContext(ctx, options)
		if err == nil {
			return obj, nil
		}
		if !i.again(ctx, err, i.end(ctx, result{stage: StageList, cause: CauseError, err: err}, start)) {
			return obj, err
		}
	}
}

// wake starts the history at the informer's first call after idling.
func (i *InstrumentedListerWatcher) wake(ctx context.Context) {
	i.mu.Lock()
	idle := i.idle
	i.idle = false
	i.mu.Unlock()
	if idle {
		i.pub.record(fact{kind: factStart}, ctx.Done())
	}
}

// relist records that the informer started a relist.
func (i *InstrumentedListerWatcher) relist(ctx context.Context) {
	i.pub.record(fact{kind: factReplay, initial: true}, ctx.Done())
}

// Watch calls WatchWithContext with a background context.
func (i *InstrumentedListerWatcher) Watch(options metav1.ListOptions) (apiwatch.Interface, error) {
	return i.WatchWithContext(context.Background(), options)
}

// WatchWithContext opens a watch through the wrapped ListerWatcher, grades
// a failed open, and returns a watch that grades its own ending.
func (i *InstrumentedListerWatcher) WatchWithContext(ctx context.Context, options metav1.ListOptions) (apiwatch.Interface, error) {
	i.wake(ctx)
	replay := options.SendInitialEvents != nil && *options.SendInitialEvents
	stage := StageOpen
	if replay {
		stage = StageReplay
	}
	var start time.Time
	var w apiwatch.Interface
	for {
		if replay {
			i.relist(ctx)
		}
		start = i.clock.Now()
		var err error
		w, err = i.inner.WatchWithContext(ctx, options)
		if err == nil && w == nil {
			err = ErrNilWatch
		}
		if err == nil {
			break
		}
		if replay && reflectorListsAfter(err) {
			// The reflector lists instead, in the same attempt: no
			// session; the LIST ends it (and a refused watch-list is
			// routine). Only what it retries as a watch-list ends one.
			return nil, err
		}
		if !i.again(ctx, err, i.end(ctx, result{stage: stage, cause: CauseError, err: err}, start)) {
			return nil, err
		}
	}
	g := &gradedWatch{
		parent: i, inner: w, ctx: ctx, start: start, replay: replay,
		result: make(chan apiwatch.Event, forwardBuffer), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go g.forward()
	return g, nil
}

// again reports whether a call that failed with err, graded v, is made
// again here after a Stream's wait rather than handed to the reflector
// (see Informers in the package doc).
func (i *InstrumentedListerWatcher) again(ctx context.Context, err error, v Verdict) bool {
	refused := utilnet.IsConnectionRefused(err)
	if v.Next == NextStop || v.Publish || !(refused || utilnet.IsConnectionReset(err)) {
		return false
	}
	i.mu.Lock()
	d := backoffWait(v, &i.backoff, 3*i.opts.Policy.ShortSession, i.rand)
	i.mu.Unlock()
	if refused {
		d = min(d, refusedRetryCap)
	}
	return sleep(ctx, i.clock, d)
}

// refusedRetryCap is the longest Instrument waits before it makes a call
// refused a connection again itself (see Informers in the package doc): an
// informer catches up within it of the apiserver accepting connections
// again. A refused connection costs the server nothing.
const refusedRetryCap = 2 * time.Second

// end grades one session ending and reports it.
func (i *InstrumentedListerWatcher) end(ctx context.Context, r result, start time.Time) Verdict {
	v := i.pub.record(fact{kind: factEnd, since: start, ending: Ending{
		OwnerDone: ctx.Err() != nil, Stage: r.stage, Cause: r.cause, Err: r.err,
		Events: r.events, Live: r.live,
	}}, ctx.Done())
	i.mu.Lock()
	defer i.mu.Unlock()
	if v.Healthy {
		i.backoff.Reset()
	}
	if v.Next == NextStop {
		i.idle = true
	}
	return v
}

// gradedWatch forwards an informer's watch and grades how it ends.
type gradedWatch struct {
	parent *InstrumentedListerWatcher
	inner  apiwatch.Interface
	ctx    context.Context
	start  time.Time
	replay bool

	result   chan apiwatch.Event
	stop     chan struct{}
	stopOnce sync.Once
	// done is closed once the forwarding goroutine has reported the
	// watch's ending.
	done chan struct{}
}

// Stop stops the wrapped watch and returns once the forwarding goroutine
// has reported its ending and closed the result channel, so that an
// informer's teardown is reported before its Run returns. Safe to call
// more than once.
func (g *gradedWatch) Stop() {
	g.stopOnce.Do(func() {
		close(g.stop)
		g.inner.Stop()
	})
	<-g.done
}

// ResultChan returns the forwarded events.
func (g *gradedWatch) ResultChan() <-chan apiwatch.Event { return g.result }

func (g *gradedWatch) forward() {
	defer close(g.done)
	defer close(g.result)
	defer g.inner.Stop()
	r, graded := g.pump()
	if graded {
		return // when the ERROR event arrived
	}
	ctx := g.ctx
	if r.cause == "" {
		// Stopped by the informer: it is shutting down.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(g.ctx)
		cancel()
		r.cause = CauseClosed
	}
	g.parent.end(ctx, r, g.start)
}

// pump forwards events until the watch closes or the consumer stops it. It
// returns the ending (cause empty when the consumer stopped the watch), and
// whether it was already graded: an ERROR event is graded as it arrives,
// before the informer can open its next watch.
func (g *gradedWatch) pump() (r result, graded bool) {
	r.stage = StageStream
	if g.replay {
		r.stage = StageReplay
	}
	l := liveness{clock: g.parent.clock, short: g.parent.opts.Policy.ShortSession}
	defer l.stop()
	if !g.replay {
		l.count()
	}
	in := g.inner.ResultChan()
	for {
		var ev apiwatch.Event
		var open, got, live bool
		if l.poll(); l.opened {
			if ev, open, got, _, live = l.take(in); live {
				r.live = true
				g.parent.pub.record(fact{kind: factLive}, g.ctx.Done())
			}
		}
		if !got {
			// A ready event without a multi-way select.
			select {
			case <-g.stop:
				r.cause = ""
				return r, graded
			default:
			}
			select {
			case ev, open = <-in:
				got = true
			default:
			}
		}
		if !got {
			select {
			case <-g.stop:
				r.cause = ""
				return r, graded
			case <-l.ran():
				continue
			case ev, open = <-in:
			}
		}
		if !open {
			r.cause = CauseClosed
			return r, graded
		}
		if !graded {
			switch ev.Type {
			case apiwatch.Added, apiwatch.Modified, apiwatch.Deleted:
				r.events++
			case apiwatch.Bookmark:
				if r.stage == StageReplay && isInitialEventsEnd(ev.Object) {
					r.stage = StageStream
					l.count()
				}
			case apiwatch.Error:
				graded = true
				err := apierrorsFromObject(ev.Object)
				if r.stage == StageReplay && reflectorListsAfter(err) {
					// The reflector lists instead: no session.
					break
				}
				r.cause, r.err = CauseError, err
				g.parent.end(g.ctx, r, g.start)
			}
		}
		select {
		case g.result <- ev:
			continue
		default:
		}
		// The informer holds the event (see liveness.held).
		var began time.Time
		if l.pending() {
			began = g.parent.clock.Now()
		}
		select {
		case g.result <- ev:
		case <-g.stop:
			r.cause = ""
			return r, graded
		}
		l.held(began)
	}
}

// reflectorListsAfter reports whether client-go's reflector answers err,
// a watch-list's failed open or an ERROR event inside one, by listing
// instead: anything but a 429, a refused connection and an expiry or a
// too large resourceVersion, which it retries as a watch-list.
func reflectorListsAfter(err error) bool {
	if apierrors.IsTooManyRequests(err) || utilnet.IsConnectionRefused(err) {
		return false
	}
	class, _ := Classify(err)
	return class != ClassExpired
}

// forwardBuffer is the capacity of an instrumented watch's result channel,
// so the reflector takes events without a goroutine hand-off each.
const forwardBuffer = 64
