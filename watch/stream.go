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

	"math/rand/v2"

	"golang.org/x/time/rate"

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
	// ErrInvalidOptions: options or a Policy whose values cannot all be
	// honoured (see [Policy.Validate] and [NewStream]).
	ErrInvalidOptions = errors.New("watchgrade/watch: invalid options")
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
	// stream starts with a replay. "0" means "any" to the server, as "" does,
	// and replays too.
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
	// with LIST+WATCH for an hour, then tries a watch-list again.
	// Defaults to 2m.
	ReplayTimeout time.Duration
	// WatchTimeout, when positive, makes every watch ask the server to end
	// it after a random duration in [WatchTimeout, 2×WatchTimeout)
	// (timeoutSeconds), as client-go's reflector does with 5 minutes; the
	// stream itself ends a session a minute past it, so a connection that
	// died without a word cannot hold a session open. Short timeouts make
	// routine closes frequent, which is how a demo shows them (a
	// watch-list asks for at least ReplayTimeout, so that its replay is
	// not cut before it can end); [NewStream]
	// refuses one shorter than twice Policy.ShortSession, since sessions
	// that end before they can go live are graded as flapping. Defaults to
	// 0: no timeoutSeconds is sent, the server's own timeout applies (30–60
	// minutes by default), and the stream ends a session that outlives 2
	// hours.
	WatchTimeout time.Duration
	// CursorCheck is how long a session resumed from a cursor may deliver
	// nothing, no event and no bookmark, before the stream asks the server
	// whether it has reached the cursor: one consistent LIST of at most
	// one object, whose resourceVersion (the server's current revision)
	// it compares with the cursor (see "A server behind the cursor" in the
	// package doc for resourceVersions that do not compare). A
	// kube-apiserver answers a watch
	// from a resourceVersion it has not reached with silence, not an
	// error: after an etcd restore without a revision bump, a cluster
	// rebuilt behind the same address, or a Cursor persisted from another
	// cluster, the watch drops every event at or below the cursor. A
	// server behind the cursor makes the stream replay (an ending with
	// [ErrCursorAhead], reason ResourceVersionTooLarge). The silence
	// counts across sessions that end before it is up (an apiserver
	// restarting again and again), from the first session since the
	// server last confirmed the cursor. At most one check per session,
	// never sooner than ShortSession/2 into it (a 410 answers first), none
	// in a session that delivers anything first, none after a watch-list
	// replay, and none after a LIST replay (its cursor is the server's
	// own) unless the stream is in doubt. A negative value turns the
	// check off. Defaults to 10s.
	CursorCheck time.Duration
	// ListPageSize is the page size of a LIST+WATCH replay. Defaults to
	// 500, as client-go's pager. Every page is a round trip, and what a
	// page costs the apiserver grows with the collection: against
	// kube-apiserver 1.37, a LIST+WATCH replay of 100,000 ConfigMaps took
	// about 3 s in pages of 500 and 1 s in pages of 5,000 (the README's
	// Performance section). A watch-list replay, the default, is one
	// request.
	ListPageSize int64
	// DisableWatchList makes every replay a paginated LIST then a WATCH.
	// By default a replay is a watch-list (sendInitialEvents), falling back
	// to LIST+WATCH when the server refuses it or the ListerWatcher reports
	// IsWatchListSemanticsUnSupported.
	DisableWatchList bool
	// ReplaySpread spreads the replays of many streams that expire at
	// once (an apiserver restart expires every cursor): a replay that
	// would start at once starts after a random wait in
	// [ReplaySpread/2, 3·ReplaySpread/2). Defaults to 1s; negative: none.
	// See "What a replay costs the control plane" in the package doc.
	ReplaySpread time.Duration
	// ConsistentReplays makes every replay ask for the latest state
	// (resourceVersion ""), a consistent read that costs etcd a request
	// even when the watch cache serves it. By default the first replay
	// after a 410 asks for a state not older than the expired cursor,
	// which the watch cache serves from memory, as client-go's reflector
	// does.
	ConsistentReplays bool
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
	DefaultCursorCheck    = 10 * time.Second
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
	if o.WatchTimeout < 0 {
		o.WatchTimeout = 0
	}
	if o.CursorCheck == 0 {
		o.CursorCheck = DefaultCursorCheck
	}
	if o.Cursor == "0" {
		o.Cursor = ""
	}
	if o.ReplaySpread == 0 {
		o.ReplaySpread = DefaultReplaySpread
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
// A stream makes at most 3 full replays (LISTs or watch-lists) at once and
// then at most one per MaxBackoff, whatever the server does: with the
// defaults, at most 63 in any hour.
//
// Create one with [NewStream] and call [Stream.Run]; cancel its context to
// stop it. Cursor and State are safe to call from any goroutine.
type Stream struct {
	lw      *cacheRelist // the ListerWatcher, by which replays ask the watch cache
	handler Handler
	opts    StreamOptions
	clock   clock.Clock
	running atomic.Bool
	// pub publishes what the stream's health fold says.
	pub   *publisher
	stall stallWatch

	// Owned by the goroutine in Run.
	backoff backoff.Backoff
	// rand draws the jitter of watch timeouts and backoffs, in [0, 1).
	rand    func() float64
	replays *rate.Limiter
	// initialSync is true until the first replay of a stream that started
	// without a cursor: only that one is published as InitialSync.
	initialSync bool
	// watchListOff is true when every replay is a LIST+WATCH: the options
	// say so, or the source cannot do a watch-list.
	watchListOff bool
	// watchListPaused is when a watch-list may be tried again after one
	// timed out, or two in a row were cut before their end; cutReplays
	// counts those.
	watchListPaused time.Time
	cutReplays      int
	// unconfirmed is when the first session opened since the server last
	// confirmed the cursor (an event or a bookmark delivered, a check);
	// zero while it is confirmed.
	unconfirmed time.Time
	// doubt is true from a session that ended without going live until
	// the server confirms a cursor: sessions from a cursor go live only
	// once confirmed (see consume).
	doubt bool

	mu     sync.Mutex
	cursor string
}

// NewStream returns a stream of the collection that lw lists and watches,
// delivering to h. lw may come from a typed, dynamic or metadata client
// (cache.NewListWatchFromClient, or a cache.ListWatch with your own
// functions); it must not ignore the options it is given. Over client-go's
// fake clientset, wrap your cache.ListWatch with
// cache.ToListWatcherWithWatchListSemantics(lw, client) as informers do,
// so the stream lists rather than ask the fake for a watch-list it
// ignores (it notices the fake's watch either way). It returns an error
// wrapping ErrNilListerWatcher, ErrNilHandler or ErrNoResource when those
// are missing, and ErrInvalidOptions when the Policy is refused by
// [Policy.Validate] or WatchTimeout is shorter than twice the Policy's
// ShortSession.
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
	if err := opts.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("NewStream: %w", err)
	}
	opts = opts.withDefaults()
	if w, short := opts.WatchTimeout, opts.Policy.ShortSession; w > 0 && w < 2*short {
		return nil, fmt.Errorf("NewStream: %w: WatchTimeout %s is shorter than twice ShortSession %s: no session could go live", ErrInvalidOptions, w, short)
	}
	s := &Stream{
		lw:           &cacheRelist{inner: cache.ToListerWatcherWithContext(lw)},
		handler:      h,
		opts:         opts,
		clock:        opts.Clock,
		backoff:      backoff.Backoff{Initial: opts.InitialBackoff, Max: opts.MaxBackoff, Rand: rand.Float64},
		rand:         rand.Float64,
		replays:      rate.NewLimiter(rate.Every(opts.MaxBackoff), replayBurst),
		watchListOff: opts.DisableWatchList || watchlist.DoesClientNotSupportWatchListSemantics(lw),
		cursor:       opts.Cursor,
		initialSync:  opts.Cursor == "",
		// A cursor from elsewhere (persisted, another cluster) is checked
		// before the stream is Streaming on it.
		doubt: opts.Cursor != "" && opts.CursorCheck > 0,
	}
	s.pub = newPublisher(opts.Clock, opts.Observer, newHealth(opts.Name, opts.Resource, opts.Policy, false))
	return s, nil
}

// replayBurst is how many replays a stream may make at once.
const replayBurst = 3

// Cursor returns the resourceVersion of the last event or bookmark the
// stream delivered or acknowledged, or "" while it has none (before the first
// replay completes, and after the cursor expired).
func (s *Stream) Cursor() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursor
}

// State returns the stream's current state.
func (s *Stream) State() State { return s.pub.current() }

// Run runs the stream on the calling goroutine until ctx is done, then
// returns nil. Ending the stream is routine: a session open at that moment
// is reported as OutcomeTeardown, nothing is published, and if Run was
// waiting between sessions nothing more is reported (the last ending
// already was). Run starts no goroutine of its own but the callback of an
// escalation's timer (Verdict.Escalations), while it fires; nothing is
// published once Run has returned. The ListerWatcher's watch may start its
// own. It returns
// ErrAlreadyRunning if the stream is already running; once it has returned
// it may be called again, resuming from the cursor.
func (s *Stream) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer s.running.Store(false)
	defer s.pub.stop()
	s.stall.start()
	defer s.stall.stop()

	s.pub.record(fact{kind: factStart, resuming: s.Cursor() != ""}, nil)
	if s.Cursor() == "" && !s.waitReplay(ctx, 0) {
		return nil
	}
	for ctx.Err() == nil {
		startCursor := s.Cursor()
		start := s.clock.Now()
		var r result
		if startCursor == "" {
			r = s.replay(ctx)
		} else {
			r = s.resume(ctx, startCursor)
		}
		s.replayDone(r)
		v := s.pub.record(fact{kind: factEnd, since: start, ending: Ending{
			OwnerDone: ctx.Err() != nil, Stage: r.stage, Cause: r.cause, Err: r.err,
			Events: r.events, Live: r.live,
		}}, nil)
		if v.Next == NextStop {
			return nil
		}
		if v.Healthy {
			s.backoff.Reset()
		} else if s.opts.CursorCheck > 0 {
			s.doubt = true
		}
		if v.Next == NextReplay {
			s.noteReplayCause(r.err)
			s.setCursor("")
		}
		if !s.wait(ctx, v) {
			return nil
		}
	}
	return nil
}

// wait sleeps as the verdict says ([backoffWait]), and before a replay as
// long as the replay limit says, and reports whether ctx is still live.
// The look before an escalation leaves time for what a resume answered 410
// takes at most: a replay's spread, the replay, ShortSession.
func (s *Stream) wait(ctx context.Context, v Verdict) bool {
	lead := 3*s.opts.Policy.ShortSession + 2*max(s.opts.ReplaySpread, 0)
	d := backoffWait(v, &s.backoff, lead, s.rand)
	if v.Next == NextReplay {
		return s.waitReplay(ctx, s.replaySpread(d))
	}
	return sleep(ctx, s.clock, d)
}

// waitReplay sleeps at least d before a replay, longer if the replay limit
// has no replay to spare yet.
func (s *Stream) waitReplay(ctx context.Context, d time.Duration) bool {
	now := s.clock.Now()
	if tokens := s.replays.TokensAt(now); tokens < 1 {
		d = max(d, time.Duration((1-tokens)/float64(s.replays.Limit())*float64(time.Second)))
	}
	return sleep(ctx, s.clock, d)
}

// replayDone takes from the limit a replay the server served (a LIST that
// answered, a watch-list it accepted): the limit is on the load of full
// replays, and a refused request is no load.
func (s *Stream) replayDone(r result) {
	if r.served {
		s.replays.ReserveN(s.clock.Now(), 1)
	}
}

// sleep waits d on c, and reports whether ctx is still live.
func sleep(ctx context.Context, c clock.Clock, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

func (s *Stream) setCursor(rv string) {
	s.mu.Lock()
	s.cursor = rv
	s.mu.Unlock()
}

// goneLive is called when the session goes live.
func (s *Stream) goneLive() { s.pub.record(fact{kind: factLive}, nil) }
