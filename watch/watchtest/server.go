package watchtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
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
	// one; a watch also gets one 2s before its deadline. Negative sends
	// none but the end of a watch-list's initial events. Defaults to 1m.
	BookmarkInterval time.Duration
	// WatchCacheSize and WatchCacheWindow bound the watch cache: it keeps at
	// least WatchCacheSize events, and every event younger than
	// WatchCacheWindow. A resume from a cursor older than the oldest event
	// kept is expired. Default to 100 events and 75s, as the kube-apiserver.
	WatchCacheSize   int
	WatchCacheWindow time.Duration
	// DisableWatchCache serves watches as --watch-cache=false does: a resume
	// is expired only after a [Server.Compact] past its cursor, and
	// deterministically then.
	DisableWatchCache bool
	// Expiry is the shape of the 410 a resume from an expired cursor gets.
	// Defaults to ExpiryErrorEvent.
	Expiry ExpiryShape
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
// open are not affected by Refuse, Err or RefuseWatchList: the
// kube-apiserver checks a request once, when it opens.
type Faults struct {
	// Refuse fails every request with a refused connection, as a stopped
	// server does.
	Refuse bool
	// Err, when set, is the error every List and every Watch returns: a
	// 401 or 403 (a RoleBinding removed), a 404 (a CRD not installed), a
	// 429 with Retry-After, a 5xx. Use this package's helpers or
	// k8s.io/apimachinery/pkg/api/errors.
	Err error
	// RefuseWatchList refuses watch-list requests (sendInitialEvents) with
	// the 422 a server with the WatchList feature off gives.
	RefuseWatchList bool
	// WatchLifetime, when positive, ends every watch opened while it is set
	// this long after it opened: a hot flap.
	WatchLifetime time.Duration
	// StaleProxy accepts every watch and closes it at once with no events,
	// as a proxy in front of a stale cache does: the cursor never moves.
	StaleProxy bool
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
	// Events counts the events and bookmarks the watch delivered.
	Events int
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
// initial-events-end bookmark. [Server.SetFaults] and the instant actions
// [Server.CloseWatches], [Server.Restart], [Server.Compact] and
// [Server.AdvanceRevision] script what goes wrong.
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

	mu          sync.Mutex
	rand        *rand.Rand
	rv          int64
	objects     map[objectKey]runtime.Object
	history     []change
	windowStart int   // index in history of the oldest change the watch cache holds
	resumeFloor int64 // a watch may resume from a cursor >= resumeFloor
	compacted   int64
	faults      Faults
	watches     map[*serverWatch]struct{}
	requests    []*Request
	pages       map[string]*listPage
	nextPage    int
}

type objectKey struct{ namespace, name string }

// change is one write, as the watch cache holds it.
type change struct {
	rv  int64
	typ watch.EventType
	obj runtime.Object // the object as stored; never modified
	at  time.Time
}

// listPage is what remains of a paginated list.
type listPage struct {
	rv    int64
	items []runtime.Object
}

// blockTimeout is how long the kube-apiserver waits for its watch cache to
// reach a resourceVersion newer than it has before it answers "too large
// resource version".
const blockTimeout = 3 * time.Second

// bookmarkBeforeDeadline is how long before a watch's deadline the server
// sends its last bookmark.
const bookmarkBeforeDeadline = 2 * time.Second

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
	return &Server{
		opts:    opts,
		clock:   opts.Clock,
		rand:    rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		rv:      1,
		objects: make(map[objectKey]runtime.Object),
		watches: make(map[*serverWatch]struct{}),
		pages:   make(map[string]*listPage),
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
	s.rv++
	stored := obj.DeepCopyObject()
	m, _ := meta.Accessor(stored)
	m.SetResourceVersion(strconv.FormatInt(s.rv, 10))
	if typ == watch.Deleted {
		delete(s.objects, key)
	} else {
		s.objects[key] = stored
	}
	now := s.clock.Now()
	s.history = append(s.history, change{rv: s.rv, typ: typ, obj: stored, at: now})
	for w := range s.watches {
		w.pushLocked(s.rv, watch.Event{Type: typ, Object: stored.DeepCopyObject()})
	}
	s.evictLocked(now)
	return stored.DeepCopyObject()
}

// evictLocked drops from the watch cache what it no longer holds.
func (s *Server) evictLocked(now time.Time) {
	for len(s.history)-s.windowStart > s.opts.WatchCacheSize &&
		now.Sub(s.history[s.windowStart].at) > s.opts.WatchCacheWindow {
		s.resumeFloor = max(s.resumeFloor, s.history[s.windowStart].rv)
		s.windowStart++
	}
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
	keys := slices.SortedFunc(maps.Keys(objects), func(a, b objectKey) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
	})
	out := make([]runtime.Object, len(keys))
	for i, k := range keys {
		out[i] = objects[k].DeepCopyObject()
	}
	return out
}

// ResourceVersion returns the server's current resourceVersion.
func (s *Server) ResourceVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strconv.FormatInt(s.rv, 10)
}

// SetFaults sets the faults in force from now on, replacing the previous
// ones; SetFaults(Faults{}) heals the server.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// Faults returns the faults in force.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// CloseWatches ends every open watch at once, with no error: the server's
// timeout, a shutdown, a GOAWAY and a connection reset all look like this
// to a client.
func (s *Server) CloseWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeWatchesLocked()
}

func (s *Server) closeWatchesLocked() {
	for w := range s.watches {
		w.endLocked()
	}
}

// FailWatches ends every open watch with an ERROR event carrying err, after
// what was queued for it: what a client sees when a stream is reset mid-way
// (client-go turns an HTTP/2 INTERNAL_ERROR into a 500 "unable to decode an
// event from the watch stream"), or a 410 as an etcd compaction sends one to
// an uncached watch. err must be an API status error; anything else is
// sent as a 500.
func (s *Server) FailWatches(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	status := asStatusError(err)
	for w := range s.watches {
		w.failLocked(status, nil)
		delete(s.watches, w) // no live events after the ERROR
		w.signal()
	}
}

func asStatusError(err error) *apierrors.StatusError {
	var se *apierrors.StatusError
	if errors.As(err, &se) {
		return se
	}
	return apierrors.NewInternalError(err)
}

// Restart is a kube-apiserver restart: every open watch closes, and the new
// watch cache starts at the current resourceVersion, so a resume from any
// older cursor is expired.
func (s *Server) Restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeWatchesLocked()
	s.resumeFloor = s.rv
	s.windowStart = len(s.history)
}

// Compact is an etcd compaction at the current resourceVersion: continue
// tokens of older lists expire, and so do exact lists at older
// resourceVersions and, with DisableWatchCache, resumes from older
// cursors. Open watches keep working.
func (s *Server) Compact() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compacted = s.rv
	for token, p := range s.pages {
		if p.rv < s.compacted {
			delete(s.pages, token)
		}
	}
}

// AdvanceRevision moves the resourceVersion on by n without a change to this
// collection, as writes to other resources move etcd's revision. Bookmarks
// then carry the new resourceVersion.
func (s *Server) AdvanceRevision(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv += int64(max(n, 0))
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

// List calls ListWithContext with a background context.
func (s *Server) List(options metav1.ListOptions) (runtime.Object, error) {
	return s.ListWithContext(context.Background(), options)
}

// ListWithContext lists the collection as the kube-apiserver does:
//
//   - resourceVersion "" is a consistent read of the current state, paginated
//     by Limit with continue tokens;
//   - "0" is served from the watch cache: the current state, all of it;
//   - any other with resourceVersionMatch NotOlderThan (or none) is the
//     current state, unless the server has not reached it: then it answers
//     "too large resource version" (504 with cause ResourceVersionTooLarge)
//     after 3 seconds;
//   - with resourceVersionMatch Exact, the state at that resourceVersion,
//     expired (410) if compacted.
//
// A continue token of a list older than the last compaction is expired
// (410), as the real server says: "the provided continue parameter is too
// old".
func (s *Server) ListWithContext(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
	s.mu.Lock()
	req := s.recordLocked(CallList, options)
	obj, wait, err := s.listLocked(options)
	if err != nil {
		req.Err = err
	}
	s.mu.Unlock()
	if wait {
		if err := s.sleep(ctx, blockTimeout); err != nil {
			return nil, err
		}
	}
	return obj, err
}

func (s *Server) listLocked(options metav1.ListOptions) (list runtime.Object, wait bool, err error) {
	if err := s.requestFaultLocked(); err != nil {
		return nil, false, err
	}
	if options.SendInitialEvents != nil {
		return nil, false, invalidOptions(field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for list"))
	}
	if options.Continue != "" {
		p, ok := s.pages[options.Continue]
		switch {
		case ok:
			delete(s.pages, options.Continue)
			return s.pageLocked(p.rv, p.items, options.Limit), false, nil
		case s.isCompactedToken(options.Continue):
			return nil, false, apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
		default:
			return nil, false, apierrors.NewBadRequest("invalid continue token")
		}
	}
	switch options.ResourceVersion {
	case "":
		return s.pageLocked(s.rv, s.sortedLocked(), options.Limit), false, nil
	case "0":
		return s.pageLocked(s.rv, s.sortedLocked(), 0), false, nil
	}
	r, err := strconv.ParseInt(options.ResourceVersion, 10, 64)
	if err != nil || r < 0 {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version %q", options.ResourceVersion))
	}
	if r > s.rv {
		return nil, true, tooLarge(r, s.rv)
	}
	if options.ResourceVersionMatch == metav1.ResourceVersionMatchExact {
		if r < s.compacted {
			return nil, false, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", r, s.compacted))
		}
		return s.pageLocked(r, s.stateAtLocked(r), options.Limit), false, nil
	}
	return s.pageLocked(s.rv, s.sortedLocked(), options.Limit), false, nil
}

// isCompactedToken reports whether token names a list whose
// resourceVersion has been compacted away since.
func (s *Server) isCompactedToken(token string) bool {
	rv, _, ok := parseToken(token)
	return ok && rv < s.compacted
}

func parseToken(token string) (rv int64, id int, ok bool) {
	var err error
	if _, err = fmt.Sscanf(token, "%d/%d", &rv, &id); err != nil {
		return 0, 0, false
	}
	return rv, id, true
}

// pageLocked builds a list of items at rv, at most limit long (0: all),
// with a continue token for the rest.
func (s *Server) pageLocked(rv int64, items []runtime.Object, limit int64) runtime.Object {
	list := newOf(s.opts.List)
	var rest []runtime.Object
	if limit > 0 && int64(len(items)) > limit {
		items, rest = items[:limit], items[limit:]
	}
	_ = meta.SetList(list, items)
	lm, _ := meta.ListAccessor(list)
	lm.SetResourceVersion(strconv.FormatInt(rv, 10))
	if len(rest) > 0 {
		s.nextPage++
		token := fmt.Sprintf("%d/%d", rv, s.nextPage)
		s.pages[token] = &listPage{rv: rv, items: rest}
		lm.SetContinue(token)
	}
	return list
}

// stateAtLocked rebuilds the collection as it was at rv.
func (s *Server) stateAtLocked(rv int64) []runtime.Object {
	state := map[objectKey]runtime.Object{}
	for _, c := range s.history {
		if c.rv > rv {
			break
		}
		key, _ := keyOf(c.obj)
		if c.typ == watch.Deleted {
			delete(state, key)
		} else {
			state[key] = c.obj
		}
	}
	return sortedCopies(state)
}

// Watch calls WatchWithContext with a background context.
func (s *Server) Watch(options metav1.ListOptions) (watch.Interface, error) {
	return s.WatchWithContext(context.Background(), options)
}

// WatchWithContext opens a watch as the kube-apiserver does:
//
//   - with sendInitialEvents=true (a watch-list; resourceVersionMatch must be
//     NotOlderThan): an ADDED event for every object, in namespace and name
//     order, then a bookmark annotated k8s.io/initial-events-end, then live
//     events;
//   - from resourceVersion "" or "0": a synthetic ADDED event for every
//     object (no end bookmark), then live events;
//   - from any other: every change after it, then live events. A cursor
//     older than the watch cache's window is expired (see
//     [ServerOptions.Expiry]); one newer than the server waits, silently,
//     for the server to pass it.
//
// The watch ends on the client's timeoutSeconds, or after a random
// [ServerOptions.MinRequestTimeout]…2× of it, or when ctx is done, or when
// stopped. With allowWatchBookmarks it gets a bookmark every
// [ServerOptions.BookmarkInterval] and 2s before its deadline.
func (s *Server) WatchWithContext(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	req := s.recordLocked(CallWatch, options)
	w, wait, err := s.openLocked(ctx, options, req)
	if err != nil {
		req.Err = err
		req.Closed = req.At
	}
	s.mu.Unlock()
	if wait {
		// The watch cache waits for a resourceVersion it has not reached.
		if err := s.sleep(ctx, blockTimeout); err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	go w.run()
	return w, nil
}

func (s *Server) openLocked(ctx context.Context, options metav1.ListOptions, req *Request) (w *serverWatch, wait bool, err error) {
	if err := s.requestFaultLocked(); err != nil {
		return nil, false, err
	}
	watchList := options.SendInitialEvents != nil && *options.SendInitialEvents
	if watchList {
		var errs field.ErrorList
		if options.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan {
			errs = append(errs, field.Forbidden(field.NewPath("resourceVersionMatch"), "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"))
		}
		if s.faults.RefuseWatchList {
			errs = append(errs, field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"))
		}
		if len(errs) > 0 {
			return nil, false, invalidOptions(errs...)
		}
	} else if options.ResourceVersionMatch != "" {
		return nil, false, invalidOptions(field.Forbidden(field.NewPath("resourceVersionMatch"), "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"))
	}
	var from int64
	if options.ResourceVersion != "" {
		from, err = strconv.ParseInt(options.ResourceVersion, 10, 64)
		if err != nil || from < 0 {
			return nil, false, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version %q", options.ResourceVersion))
		}
	}
	w = s.newWatchLocked(ctx, options, req)
	switch {
	case s.faults.StaleProxy:
		w.endLocked()
		return w, false, nil
	case watchList && from > s.rv:
		w.failLocked(tooLarge(from, s.rv), req)
		return w, true, nil
	case watchList:
		w.initialLocked(added(s.sortedLocked()), true)
	case from == 0:
		w.initialLocked(added(s.sortedLocked()), false)
	case s.expiredLocked(from):
		expired := apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, s.oldestLocked()))
		switch s.opts.Expiry {
		case ExpiryOpenError:
			w.endLocked()
			return nil, false, expired
		case ExpiryGoneEvent:
			w.failLocked(apierrors.NewGone(expired.ErrStatus.Message), req)
		default:
			w.failLocked(expired, req)
		}
		return w, false, nil
	case from > s.rv:
		w.after = from
	default:
		backlog := s.history[s.windowStart:]
		if s.opts.DisableWatchCache {
			// Served from etcd, which keeps every revision since the last
			// compaction.
			backlog = s.history
		}
		for _, c := range backlog {
			if c.rv > from {
				w.pushLocked(c.rv, watch.Event{Type: c.typ, Object: c.obj.DeepCopyObject()})
			}
		}
		w.sentRV = from
	}
	s.watches[w] = struct{}{}
	return w, false, nil
}

// expiredLocked reports whether a resume from rv can no longer be served.
func (s *Server) expiredLocked(rv int64) bool {
	if s.opts.DisableWatchCache {
		return rv < s.compacted
	}
	return rv < s.resumeFloor
}

func (s *Server) oldestLocked() int64 {
	if s.opts.DisableWatchCache {
		return s.compacted
	}
	return s.resumeFloor
}

// requestFaultLocked returns the error the faults in force give a new
// request.
func (s *Server) requestFaultLocked() error {
	switch {
	case s.faults.Refuse:
		return ConnectionRefused()
	case s.faults.Err != nil:
		return s.faults.Err
	}
	return nil
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
