package watchtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
)

// ServerOptions configures a [Server]. The zero value serves ConfigMaps with
// the real server's defaults.
type ServerOptions struct {
	// Resource names the collection in the errors the server returns.
	// Defaults to configmaps.
	Resource schema.GroupResource
	// Object is an object of the collection's kind: bookmarks are built
	// from its type and TypeMeta. Defaults to a ConfigMap.
	Object runtime.Object
	// List is an empty list of the collection's kind: LIST responses are
	// built from its type and TypeMeta. Defaults to a ConfigMapList.
	List runtime.Object
	// Clock times watches, bookmarks and the watch cache. Defaults to the
	// real clock, which is virtual inside a testing/synctest bubble.
	Clock clock.Clock
	// Seed seeds the random watch timeouts. Defaults to 0; any value gives
	// the same timeouts every run.
	Seed uint64
	// MinRequestTimeout is the kube-apiserver flag of that name: a watch
	// whose client sends no timeoutSeconds is ended after a random duration
	// in [MinRequestTimeout, 2×MinRequestTimeout). Defaults to 30m.
	MinRequestTimeout time.Duration
	// BookmarkInterval is how often a watch that asked for bookmarks gets
	// one; a watch also gets one 2s before its deadline. A bookmark is
	// sent only when the watch cache's resourceVersion has moved past
	// what the watch last delivered, as the cacher drops the others.
	// Negative sends none but the end of a watch-list's initial events.
	// Defaults to 1m.
	BookmarkInterval time.Duration
	// WatchCacheSize and WatchCacheWindow bound the watch cache: it keeps at
	// least WatchCacheSize events, and every event younger than
	// WatchCacheWindow. A resume from a cursor older than the oldest event
	// kept, less one, is expired (the cacher's threshold: with revision
	// gaps a cursor can expire although no event after it was dropped).
	// Default to 100 events and 75s, as the kube-apiserver.
	WatchCacheSize   int
	WatchCacheWindow time.Duration
	// DisableWatchCache serves watches as --watch-cache=false does: a resume
	// is expired only after a [Server.Compact] past its cursor, and
	// deterministically then; a restart expires nothing.
	DisableWatchCache bool
	// Expiry is the shape of the 410 a resume from an expired cursor gets.
	// Defaults to ExpiryErrorEvent.
	Expiry ExpiryShape
	// RestartNotReady is how long the watch cache initialises after a
	// [Server.Restart]: meanwhile a watch, and a LIST the cacher cannot
	// hand to etcd, get 429 "storage is (re)initializing" with the
	// cacher's Retry-After (1 s, growing to 30 s after about a minute).
	// Defaults to 2s; negative is none.
	RestartNotReady time.Duration
	// Latency is how long requests and initial events take. The zero
	// value is the default model; see [Latency].
	Latency Latency
	// CompactionInterval is the kube-apiserver's --etcd-compaction-interval:
	// every interval its compactor compacts etcd at the revision it saw
	// one interval before (none at the first tick), so exact lists,
	// continue tokens and, with DisableWatchCache, resumes from a cursor
	// more than one to two intervals old expire. Defaults to 5m; negative
	// is none ([Server.Compact] still compacts on demand).
	CompactionInterval time.Duration
	// WatchChannelSize is the size of each of the cacher's two buffers
	// per watch (its input and its result channel): a watch whose
	// consumer leaves more live events than they hold unread is closed
	// (see the package doc). Defaults to the kube-apiserver's size for a
	// watch, decided as it opens: a second of the watch cache's history
	// (the events it holds over 75 s), at least 10 and at most 100, or
	// 1000 with WatchIndexed. 10 while the cache holds under 750 events.
	// On a real connection the socket and HTTP/2 stream buffers (4 MiB
	// with Go's client) hold as many more bytes: a burst of a thousand
	// small objects is not cut off there (the e2e tests TestParity and
	// TestConsumerFarBehindIsNotStreaming), so set it to 1000 to play one.
	WatchChannelSize int
	// WatchIndexed models a resource the cacher has a watch index for
	// (pods, by node): a watch's buffers may grow to 1000 events.
	WatchIndexed bool
}

// Latency is a [Server]'s model of how long answers take: a LIST answers
// after Request + PerObject × its items; a watch opens after Request, and
// its initial events (a watch-list's, or those of a watch from "" or
// "0") become available at PerObject each, in chunks of at least 10 ms,
// so a long replay can be cut part-way by the watch's deadline or a fault.
// Live events that arrive meanwhile wait behind the initial ones in the
// cacher's input buffer: more than WatchChannelSize of them cut the watch
// off, as on a real server. A LIST is a snapshot of its start; it is
// delivered at its end.
type Latency struct {
	// Request is the fixed cost of each request. Defaults to 1ms.
	Request time.Duration
	// PerObject is the cost of each object listed or replayed. Defaults
	// to 20µs (a 5,000-object list takes about 0.1 s).
	PerObject time.Duration
	// Off turns the model off: everything is answered instantly.
	Off bool
}

// ExpiryShape is how a [Server] answers a watch from an expired cursor.
type ExpiryShape string

const (
	// ExpiryErrorEvent: HTTP 200, then one ERROR event carrying a Status
	// with code 410 and reason Expired, then the watch closes. What the
	// kube-apiserver sends.
	ExpiryErrorEvent ExpiryShape = "ErrorEvent"
	// ExpiryGoneEvent: the same with reason Gone, as servers up to 1.17 did.
	ExpiryGoneEvent ExpiryShape = "GoneEvent"
	// ExpiryOpenError: the Watch call itself fails with a 410, as
	// aggregated API servers and some proxies answer.
	ExpiryOpenError ExpiryShape = "OpenError"
)

// Faults are the failures a [Server] applies while they are set with
// [Server.SetFaults]. The zero value is a healthy server. Watches already
// open are not affected by Refuse, Err or the watch-list refusals: the
// kube-apiserver checks a request once, when it opens.
type Faults struct {
	// Refuse fails every request with a refused connection, as a stopped
	// server does: a [ConnectionRefused] error inside the *url.Error
	// client-go wraps it in, whose URL carries the request's
	// resourceVersion.
	Refuse bool
	// Err, when set, is the error every List and every Watch returns: a
	// 401 or 403 (a RoleBinding removed), a 404 (a CRD not installed), a
	// 429 with Retry-After, a 5xx. Use this package's helpers or
	// k8s.io/apimachinery/pkg/api/errors.
	Err error
	// RefuseWatchList refuses watch-list requests (sendInitialEvents) with
	// the 422 a server with the WatchList feature off gives.
	RefuseWatchList bool
	// WatchListUnsupported answers a watch-list (sendInitialEvents with
	// allowWatchBookmarks) with HTTP 200 and then one ERROR event, a 500
	// "a watch stream was requested by the client but the required
	// storage feature RequestWatchProgress is disabled", as a
	// kube-apiserver on an etcd without watch-progress support does.
	WatchListUnsupported bool
	// WatchLifetime, when positive, ends every watch opened while it is set
	// this long after it opened: a hot flap.
	WatchLifetime time.Duration
	// StaleProxy accepts every watch and closes it at once with no events,
	// as a proxy in front of a stale cache does: the cursor never moves.
	StaleProxy bool
	// StallCache stops the watch cache following etcd, as a cacher whose
	// etcd watch hangs: writes still succeed, but open watches get no
	// event after the stall began and their bookmarks stop (a bookmark
	// that does not advance is dropped), a watch-list or a LIST at a
	// resourceVersion past the cache waits 3 s and is answered "too
	// large resource version", and a consistent LIST (resourceVersion
	// "") waits 3 s and is served from etcd. Clearing it lets the cache
	// catch up: open watches get what they missed, in order.
	StallCache bool
}

// Request records one List or Watch call a [Server] answered.
type Request struct {
	// Kind is CallList or CallWatch.
	Kind CallKind
	// Options are the options the call was made with.
	Options metav1.ListOptions
	// At is when the call was made.
	At time.Time
	// Err is the error the call returned, or the ERROR event a watch sent
	// at once (an expired cursor, a too large resourceVersion).
	Err error
	// InitialEventsEnd is when a watch-list's initial-events-end bookmark
	// was delivered; zero for other watches and until then.
	InitialEventsEnd time.Time
	// FirstEvent is when the watch delivered its first event or bookmark
	// after its initial events (for a watch-list) or at all (for a
	// resume); zero until then.
	FirstEvent time.Time
	// Closed is when the watch ended; zero while it is open.
	Closed time.Time
	// Answered is when a LIST returned, its list or its error (after the
	// [Latency] of the request and of the items listed); zero for
	// watches and until then.
	Answered time.Time
	// Events counts the events and bookmarks the watch delivered.
	Events int
	// ResourceVersion is the resourceVersion of the list a LIST answered
	// with; empty for watches and for a LIST that failed.
	ResourceVersion string
	// CutOff is true when the server closed the watch because its
	// consumer left the cacher's buffers full (see [ServerOptions]
	// WatchChannelSize).
	CutOff bool
}

// Server is a simulated API server for one collection: a stateful,
// deterministic, in-memory stand-in for the kube-apiserver, reachable as a
// cache.ListerWatcher (and cache.ListerWatcherWithContext), so that
// watchgrade's streams, instrumented informers and plain client-go
// informers run over it as they would over a real server.
//
// Writes ([Server.Create], [Server.Update], [Server.Delete]) get increasing
// resourceVersions and reach every open watch as events. Lists paginate
// with continue tokens; watches resume from a cursor inside the watch
// cache's window, expire outside it, send bookmarks when asked, end on the
// server's random 30–60 minute timeout (or the client's timeoutSeconds),
// and serve watch-lists that end their initial events with the
// initial-events-end bookmark. Requests take time ([Latency]); a watch
// whose consumer falls behind is closed. [Server.SetFaults] and the
// actions [Server.CloseWatches], [Server.FailWatches], [Server.Restart],
// [Server.Compact], [Server.AdvanceRevision] and [Server.Restore] script
// what goes wrong.
//
// Time comes from [ServerOptions.Clock]; inside a testing/synctest bubble
// the real clock is virtual, and the server is deterministic as long as
// no two things are scheduled for the same instant. Each open watch runs
// one goroutine, which ends when the watch does.
//
// Create one with [NewServer]; it is safe for concurrent use. See the
// package documentation for where it differs from a real server.
type Server struct {
	opts  ServerOptions
	clock clock.Clock

	mu      sync.Mutex
	rand    *rand.Rand
	rv      int64 // etcd's revision
	objects map[objectKey]runtime.Object
	history []change // every write since the start (or the last restore)

	// The watch cache: it has seen history up to cacheRV (rv, unless
	// stalled), holds history[windowStart:], and last (re)listed at
	// listRV; evicted says whether it dropped an event since.
	cacheRV     int64
	windowStart int
	listRV      int64
	evicted     bool
	// notReadyUntil is when the watch cache restarted by Restart is ready;
	// notReadySince when it went unready. Zero when ready.
	notReadyUntil time.Time
	notReadySince time.Time

	compacted int64
	// The cacher's compactor polls etcd's compaction every 15 s (from
	// cacherStart): until then, the watch cache's snapshots still serve
	// exact lists and continue tokens below the compaction.
	compactedAt    time.Time
	knownCompacted int64
	cacherStart    time.Time
	// The apiserver's own compactor: ticks every CompactionInterval from
	// the start; ticks counts those processed, tickRV is the revision
	// seen at the last one.
	start  time.Time
	ticks  int64
	tickRV int64

	faults   Faults
	watches  map[*serverWatch]struct{}
	requests []*Request
	// The cacher's dispatch budget: how long a write may wait for slow
	// consumers before they are closed.
	budget   time.Duration
	budgetAt time.Time
}

type objectKey struct{ namespace, name string }

// change is one write, as the watch cache holds it.
type change struct {
	rv  int64
	typ watch.EventType
	obj runtime.Object // the object as stored; never modified
	at  time.Time
}

// blockTimeout is how long the kube-apiserver waits for its watch cache to
// reach a resourceVersion newer than it has before it answers "too large
// resource version".
const blockTimeout = 3 * time.Second

// bookmarkBeforeDeadline is how long before a watch's deadline the server
// sends its last bookmark.
const bookmarkBeforeDeadline = 2 * time.Second

// The cacher's dispatch budget (time_budget.go): at most 100 ms, refilled
// at 50 ms a second.
const (
	maxDispatchBudget = 100 * time.Millisecond
	budgetPerSecond   = 50 * time.Millisecond
)

// NewServer returns a server with an empty collection at resourceVersion 1.
func NewServer(opts ServerOptions) *Server {
	if opts.Resource.Resource == "" {
		opts.Resource = schema.GroupResource{Resource: "configmaps"}
	}
	if opts.Object == nil {
		opts.Object = &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}}
	}
	if opts.List == nil {
		opts.List = &corev1.ConfigMapList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"}}
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.MinRequestTimeout <= 0 {
		opts.MinRequestTimeout = 30 * time.Minute
	}
	if opts.BookmarkInterval == 0 {
		opts.BookmarkInterval = time.Minute
	}
	if opts.WatchCacheSize <= 0 {
		opts.WatchCacheSize = 100
	}
	if opts.WatchCacheWindow <= 0 {
		opts.WatchCacheWindow = 75 * time.Second
	}
	if opts.Expiry == "" {
		opts.Expiry = ExpiryErrorEvent
	}
	if opts.RestartNotReady == 0 {
		opts.RestartNotReady = 2 * time.Second
	}
	if opts.Latency.Off {
		opts.Latency = Latency{Off: true}
	} else {
		if opts.Latency.Request <= 0 {
			opts.Latency.Request = time.Millisecond
		}
		if opts.Latency.PerObject <= 0 {
			opts.Latency.PerObject = 20 * time.Microsecond
		}
	}
	if opts.CompactionInterval == 0 {
		opts.CompactionInterval = 5 * time.Minute
	}
	return &Server{
		opts:     opts,
		clock:    opts.Clock,
		rand:     rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		rv:       1,
		cacheRV:  1,
		listRV:   1,
		objects:  make(map[objectKey]runtime.Object),
		watches:  make(map[*serverWatch]struct{}),
		budget:   maxDispatchBudget,
		budgetAt: opts.Clock.Now(),

		cacherStart: opts.Clock.Now(),
		start:       opts.Clock.Now(),
	}
}

var _ interface {
	List(metav1.ListOptions) (runtime.Object, error)
	Watch(metav1.ListOptions) (watch.Interface, error)
	ListWithContext(context.Context, metav1.ListOptions) (runtime.Object, error)
	WatchWithContext(context.Context, metav1.ListOptions) (watch.Interface, error)
} = (*Server)(nil)

// Create stores a copy of obj with the next resourceVersion and sends an
// ADDED event; it returns the stored copy, or an AlreadyExists error.
func (s *Server) Create(obj runtime.Object) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key, err := keyOf(obj)
	if err != nil {
		return nil, err
	}
	if _, ok := s.objects[key]; ok {
		return nil, apierrors.NewAlreadyExists(s.opts.Resource, key.name)
	}
	return s.writeLocked(watch.Added, key, obj), nil
}

// Update replaces the stored object of obj's namespace and name with a copy
// of obj at the next resourceVersion, whatever resourceVersion obj carries,
// and sends a MODIFIED event; it returns the stored copy, or a NotFound
// error.
func (s *Server) Update(obj runtime.Object) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key, err := keyOf(obj)
	if err != nil {
		return nil, err
	}
	if _, ok := s.objects[key]; !ok {
		return nil, apierrors.NewNotFound(s.opts.Resource, key.name)
	}
	return s.writeLocked(watch.Modified, key, obj), nil
}

// Delete removes an object and sends a DELETED event carrying its last
// state at the deletion's resourceVersion, or returns a NotFound error.
func (s *Server) Delete(namespace, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := objectKey{namespace, name}
	obj, ok := s.objects[key]
	if !ok {
		return apierrors.NewNotFound(s.opts.Resource, name)
	}
	s.writeLocked(watch.Deleted, key, obj)
	return nil
}

func (s *Server) writeLocked(typ watch.EventType, key objectKey, obj runtime.Object) runtime.Object {
	now := s.clock.Now()
	s.settleLocked(now)
	s.autoCompactLocked(now)
	s.rv++
	stored := obj.DeepCopyObject()
	m, _ := meta.Accessor(stored)
	m.SetResourceVersion(strconv.FormatInt(s.rv, 10))
	if typ == watch.Deleted {
		delete(s.objects, key)
	} else {
		s.objects[key] = stored
	}
	s.history = append(s.history, change{rv: s.rv, typ: typ, obj: stored, at: now})
	s.followLocked(now)
	return stored.DeepCopyObject()
}

// Objects returns copies of every object, sorted by namespace and name.
func (s *Server) Objects() []runtime.Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sortedLocked()
}

func (s *Server) sortedLocked() []runtime.Object { return sortedCopies(s.objects) }

// sortedCopies returns copies of objects, in namespace and name order.
func sortedCopies(objects map[objectKey]runtime.Object) []runtime.Object {
	keys := slices.SortedFunc(maps.Keys(objects), compareKeys)
	out := make([]runtime.Object, len(keys))
	for i, k := range keys {
		out[i] = objects[k].DeepCopyObject()
	}
	return out
}

// compareKeys orders keys as etcd orders them.
func compareKeys(a, b objectKey) int { return cmp.Compare(a.String(), b.String()) }

// isConnectionError reports whether err is a failure to connect, which
// answers at once.
func isConnectionError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

// OpenWatches returns the number of watches open now.
func (s *Server) OpenWatches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watches)
}

// Requests returns a copy of the record of every List and Watch call, in
// the order they were made.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	for i, r := range s.requests {
		out[i] = *r
	}
	return out
}

// requestFaultLocked returns the error the faults in force give a new
// request.
func (s *Server) requestFaultLocked(kind CallKind, options metav1.ListOptions) error {
	switch {
	case s.faults.Refuse:
		// As client-go returns it: the dial error inside a *url.Error
		// naming the request, whose query (the resourceVersion) differs
		// from one request to the next.
		return &url.Error{Op: "Get", URL: s.requestURL(kind, options), Err: ConnectionRefused()}
	case s.faults.Err != nil:
		return s.faults.Err
	}
	return nil
}

// requestURL is the URL client-go would request for a call of kind with
// options, against an apiserver at 127.0.0.1:6443.
func (s *Server) requestURL(kind CallKind, options metav1.ListOptions) string {
	path := "/api/v1/" + s.opts.Resource.Resource
	if g := s.opts.Resource.Group; g != "" {
		path = "/apis/" + g + "/v1/" + s.opts.Resource.Resource
	}
	q := url.Values{}
	if options.ResourceVersion != "" {
		q.Set("resourceVersion", options.ResourceVersion)
	}
	if options.Limit > 0 {
		q.Set("limit", strconv.FormatInt(options.Limit, 10))
	}
	if kind == CallWatch {
		q.Set("watch", "true")
	}
	return (&url.URL{Scheme: "https", Host: "127.0.0.1:6443", Path: path, RawQuery: q.Encode()}).String()
}

func (s *Server) recordLocked(kind CallKind, options metav1.ListOptions) *Request {
	r := &Request{Kind: kind, Options: options, At: s.clock.Now()}
	s.requests = append(s.requests, r)
	return r
}

// sleep waits d on the server's clock, or until ctx is done.
func (s *Server) sleep(ctx context.Context, d time.Duration) error {
	t := s.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// deadlineLocked picks when a new watch ends.
func (s *Server) deadlineLocked(options metav1.ListOptions) time.Duration {
	d := s.opts.MinRequestTimeout + time.Duration(s.rand.Int64N(int64(s.opts.MinRequestTimeout)))
	if options.TimeoutSeconds != nil && *options.TimeoutSeconds > 0 {
		d = time.Duration(*options.TimeoutSeconds) * time.Second
	}
	if s.faults.WatchLifetime > 0 {
		d = min(d, s.faults.WatchLifetime)
	}
	return d
}

func tooLarge(requested, current int64) *apierrors.StatusError {
	err := apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", requested, current), 1)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
	return err
}

func invalidOptions(errs ...*field.Error) error {
	return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "ListOptions"}, "", errs)
}

func keyOf(obj runtime.Object) (objectKey, error) {
	if obj == nil {
		return objectKey{}, fmt.Errorf("watchtest: nil object")
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return objectKey{}, fmt.Errorf("watchtest: %w", err)
	}
	if m.GetName() == "" {
		return objectKey{}, fmt.Errorf("watchtest: object has no name")
	}
	return objectKey{m.GetNamespace(), m.GetName()}, nil
}

func added(objects []runtime.Object) []watch.Event {
	events := make([]watch.Event, len(objects))
	for i, o := range objects {
		events[i] = watch.Event{Type: watch.Added, Object: o}
	}
	return events
}

// newOf returns a new, empty object of template's type with its TypeMeta.
func newOf(template runtime.Object) runtime.Object {
	obj := reflect.New(reflect.TypeOf(template).Elem()).Interface().(runtime.Object)
	obj.GetObjectKind().SetGroupVersionKind(template.GetObjectKind().GroupVersionKind())
	return obj
}

// DisableHandleErrorBackoff removes, process-wide, the rate limit that
// k8s.io/apimachinery's runtime.HandleError puts on errors (it sleeps so
// that errors come at most one a millisecond). That limit measures from the
// last error's time, which the real clock set at start-up; inside a
// testing/synctest bubble, whose clock starts in the year 2000, its first
// sleep lasts decades, and a client-go reflector that reports an error
// (a failed List, say) never runs again. Call it from TestMain of tests that
// run informers inside bubbles. Errors are still logged.
func DisableHandleErrorBackoff() {
	if len(utilruntime.ErrorHandlers) > 1 {
		utilruntime.ErrorHandlers = utilruntime.ErrorHandlers[:1]
	}
}
