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
	// ErrInvalidOptions: see [Policy.Validate] and [NewStream].
	ErrInvalidOptions = errors.New("watchgrade/watch: invalid options")
)

// Handler consumes a stream. A stream calls it from the goroutine that
// called [Stream.Run], one call at a time.
//
// After every replay the handler gets the whole collection in one
// Snapshot, then incremental events; an object missing from a Snapshot
// was deleted, even if no Deleted event was seen. A handler that returns
// an error ends the session, and after a backoff the same event or
// snapshot is delivered again (at least once, never skipped). Bookmarks
// and ERROR events are never delivered.
type Handler interface {
	// Snapshot replaces everything the consumer knows about the collection.
	Snapshot(ctx context.Context, snap Snapshot) error
	// Event applies one change: an Added, Modified or Deleted event.
	Event(ctx context.Context, ev apiwatch.Event) error
}

// Snapshot is the whole collection at one resourceVersion.
type Snapshot struct {
	// Objects holds every object, sorted by namespace and name.
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
	// stream starts with a replay, as it does from "0".
	Cursor string
	// Observer is told about state changes and session endings, if set.
	Observer Observer
	// Policy holds the grading thresholds. Defaults to Policy's defaults.
	Policy Policy
	// InitialBackoff caps the first backoff wait. Defaults to 1s.
	InitialBackoff time.Duration
	// MaxBackoff caps every backoff wait. Defaults to 60s.
	MaxBackoff time.Duration
	// ReplayTimeout bounds a watch-list replay until its initial-events-end
	// bookmark; after a timeout the stream replays with LIST+WATCH for an
	// hour. Defaults to 2m.
	ReplayTimeout time.Duration
	// WatchTimeout, when positive, makes every watch ask the server to end
	// it after a random duration in [WatchTimeout, 2×WatchTimeout), at least
	// ReplayTimeout for a watch-list; the stream itself ends a session a
	// minute past that. [NewStream] refuses one shorter than twice
	// Policy.ShortSession. Defaults to 0: the server's own timeout applies,
	// and the stream ends a session that outlives 2 hours.
	WatchTimeout time.Duration
	// CursorCheck is how long sessions resumed from a cursor may deliver
	// nothing before the stream checks that the server has reached the
	// cursor (see "A server behind the cursor" in the package doc); none
	// follows a watch-list replay, nor a LIST replay unless the stream is
	// in doubt. A negative value turns the check off. Defaults to 10s.
	CursorCheck time.Duration
	// ListPageSize is the page size of a LIST+WATCH replay; every page is
	// a round trip. Defaults to 500, as client-go's pager.
	ListPageSize int64
	// DisableWatchList makes every replay a paginated LIST then a WATCH. By
	// default a replay is a watch-list (sendInitialEvents) unless the server
	// refuses it or the ListerWatcher reports IsWatchListSemanticsUnSupported.
	DisableWatchList bool
	// ReplaySpread delays a replay that would start at once by a random
	// wait in [ReplaySpread/2, 3·ReplaySpread/2). Defaults to 1s; negative:
	// none.
	ReplaySpread time.Duration
	// ConsistentReplays makes every replay ask for the latest state, not for
	// one not older than an expired cursor (see "What a replay costs the
	// control plane" in the package doc).
	ConsistentReplays bool
	// Clock times backoffs, deadlines and sessions; defaults to the real clock.
	Clock clock.Clock
	// Rand, if set, is the source (math/rand/v2) of the random spread of
	// the stream's waits (backoff jitter, the spread of a replay); nil is
	// math/rand/v2's global source. The stream draws from it from one
	// goroutine at a time: give each stream a source of its own. A test
	// that replays a history from a seed sets it
	// (rand.New(rand.NewPCG(seed, n))).
	Rand *rand.Rand
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
// replay, back off, publish a State. It makes at most 3 full replays at
// once, then at most one per MaxBackoff.
//
// Create one with [NewStream] and call [Stream.Run]; cancel its context to
// stop it. Cursor and State are safe to call from any goroutine.
type Stream struct {
	lw      *cacheRelist
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
	// initialSync is true until the first replay of a cursorless start.
	initialSync bool
	// watchListOff is true when every replay is a LIST+WATCH.
	watchListOff bool
	// watchListPaused is when a watch-list may be tried again; cutReplays
	// counts the watch-lists in a row cut before their end.
	watchListPaused time.Time
	cutReplays      int
	// unconfirmed is when the first session opened since the server last
	// confirmed the cursor; zero while it is confirmed.
	unconfirmed time.Time
	// doubt is true from a session that ended without going live until
	// the server confirms a cursor.
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
// so the stream lists; objects the fake stores without a resourceVersion
// are delivered and move no cursor. It returns an error wrapping
// ErrNilListerWatcher, ErrNilHandler or ErrNoResource when those are
// missing, and ErrInvalidOptions when the options are refused (see
// [StreamOptions.WatchTimeout] and [Policy.Validate]).
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
	draw := rand.Float64
	if opts.Rand != nil {
		draw = opts.Rand.Float64
	}
	s := &Stream{
		lw:           &cacheRelist{inner: cache.ToListerWatcherWithContext(lw)},
		handler:      h,
		opts:         opts,
		clock:        opts.Clock,
		backoff:      backoff.Backoff{Initial: opts.InitialBackoff, Max: opts.MaxBackoff, Rand: draw},
		rand:         draw,
		replays:      rate.NewLimiter(rate.Every(opts.MaxBackoff), replayBurst),
		watchListOff: opts.DisableWatchList || watchlist.DoesClientNotSupportWatchListSemantics(lw),
		cursor:       opts.Cursor,
		initialSync:  opts.Cursor == "",
		// A cursor from elsewhere is checked before it is trusted.
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
// waiting between sessions nothing more is reported. Run starts no
// goroutine but timer callbacks (escalations, the stall watch) and a
// cursor check in flight; nothing is published once it has returned. It
// returns ErrAlreadyRunning if the stream is already running; once it has
// returned it may be called again, resuming from the cursor.
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

// wait sleeps as the verdict and the replay limit say, and reports
// whether ctx is still live. The lead before an escalation covers a resume
// answered 410: a replay's spread, the replay, ShortSession.
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

// replayDone charges the limit with a replay the server served (a LIST
// page answered, a watch-list accepted); a refused one is no load.
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

func (s *Stream) goneLive() { s.pub.record(fact{kind: factLive}, nil) }
