// Package watchtest provides two stand-ins for the kube-apiserver, for tests
// of code built on [github.com/watchgrade/watchgrade/watch] and of your own
// controllers: a simulated API server that behaves like the real one over
// hours of virtual time, and a scripted ListerWatcher that plays exactly the
// sessions a test names.
//
// # Which one to use
//
// Use a [Server] to test behaviour over time: run a stream, an
// instrumented informer or a plain client-go informer over it inside a
// testing/synctest bubble, write objects, set [Faults] (a RoleBinding
// removed, a proxy cutting watches, a server refusing connections), expire
// cursors with [Server.Restart], and check what your handler ends up with
// against [Server.Objects]. It keeps state: resourceVersions increase, a
// resume gets what happened since its cursor, a watch cache window expires
// old cursors, lists paginate, watches time out, bookmarks come.
//
// Use a [ListerWatcher] to pin down one exact sequence: this event, then
// this ERROR, then this refused open. It keeps no state and ignores the
// options it is given, so it shows what a stream does with input a real
// server sends rarely, or never.
//
// client-go's fake clientset is neither: it stores objects without
// resourceVersions, never expires a cursor, never times a watch out, and
// sends no bookmarks. Streams and informers work over it (see the watch
// package), but it cannot show how they behave when things go wrong.
//
// # How the simulated server differs from a real one
//
// It copies kube-apiserver 1.37's cacher, watch cache and etcd3 store
// where a difference could hide a client bug: a restart's not-ready phase
// (429 "storage is (re)initializing", Retry-After 1–30 s) after which every
// earlier cursor is expired; the cacher's expiry threshold; bookmarks that
// only come when the cache's revision moved; LIST semantics of limit,
// resourceVersion and resourceVersionMatch; continue tokens and etcd's
// "inconsistent continue" 410; a cursor ahead of the server answered by
// silence; a watch-list at a version the cache lacks refused by an ERROR
// event after 3 s; the slow-consumer cut-off; and requests that take time.
// What remains different:
//
//   - One collection, one resource; no namespaces beyond the objects'
//     own, no selectors (a label or field selector is accepted and
//     ignored), no admission, no RBAC beyond [Faults.Err].
//   - resourceVersions are the collection's own counter plus
//     [Server.AdvanceRevision], not a revision shared with every other
//     resource: a real cluster moves it every few seconds (leases), so
//     bookmarks there advance while this server's stay quiet until told.
//   - The watch cache keeps at least WatchCacheSize events and every
//     event younger than WatchCacheWindow; the real one sizes its buffer
//     between 100 and 102,400 events by the same window, in powers of two.
//   - etcd is compacted every [ServerOptions.CompactionInterval] as the
//     apiservers' compactor does, on ticks counted from the server's
//     creation (a restart does not move them; real apiservers share one
//     schedule through etcd), and on [Server.Compact]; an exact LIST or a
//     continue token is rebuilt from the full history until then. After a
//     compaction the watch cache's snapshots go on
//     serving those it holds until its compactor, polling every 15 s from
//     the cache's start, sees it; a compaction made behind the
//     apiservers' backs (an etcd client's Compact, not recorded under
//     compact_rev_key) is never seen, and the snapshots serve on.
//   - [Server.Restart] is instant for open watches (they close at once,
//     with no error); a real apiserver's graceful shutdown closes them
//     about 2 s in, and a single apiserver then refuses connections until
//     its successor listens: add [Faults.Refuse] for that. The restart
//     moves the revision on by one (what a real cluster writes meanwhile:
//     leases every few seconds), so every cursor expires; on a real
//     server a cursor at etcd's current revision survives a restart if
//     nothing at all was written in between.
//   - A watch gets a bookmark every BookmarkInterval and one 2 s before
//     its deadline, each only if the revision moved. The real cacher
//     schedules them in one-second buckets and may send one more a second
//     later when the revision moved again.
//   - A LIST in flight when [Server.Restart] runs still completes.
//   - The watch cache follows etcd at once; a real one lags it by a few
//     milliseconds, so a LIST or watch from "0" just after a write may
//     not show it yet.
//   - The slow-consumer cut-off is decided at least 1 ms after the write
//     that filled the buffers, never at the same instant, so a consumer
//     that takes no virtual time keeps up with any burst; the real
//     dispatcher also stalls every other watch of the resource while it
//     waits, which this server does not. The cacher's buffers are sized
//     as the cacher sizes them (see [ServerOptions.WatchChannelSize]),
//     from the events held rather than the cache's capacity in powers of
//     two. The server counts events, not bytes: between a real
//     cacher and its client sit the HTTP/2 stream window (4 MiB in Go's
//     transport) and the sockets' buffers, so a real consumer is cut off
//     only once megabytes are unread, a simulated one once the cacher's
//     buffers are.
//   - Latency is a model ([Latency]), not a measurement; a refused
//     connection, and a faulted request, answers at once.
//   - A too-large resourceVersion is decided when the request arrives: a
//     cache that catches up during the 3 s wait still answers "too large".
//   - [Server.Restore] restores and restarts in one step; a real etcd
//     restore needs the apiservers restarted by hand, and until then they
//     serve from a cache that no longer matches etcd.
//   - The typed clientset retries a 429 or 5xx with Retry-After, and a
//     GET whose connection was reset or cut (EOF), up to 10 times (a reset
//     a second apart) before a caller sees it; the server answers each
//     request once.
//   - There is no HTTP/2 connection shared between watches; responses are
//     not compressed (1.37 gzips watch-list responses to clients that
//     accept it).
//   - A watch-list refused for a missing etcd feature
//     ([Faults.WatchListUnsupported]) cannot be produced by the end-to-end
//     harness, whose etcd has the feature; its shape is read from the
//     cacher's source.
//
// The end-to-end tests of this module run the same scenarios against a
// real kube-apiserver: where the two disagree, the simulation is wrong.
// One of them (TestParity) plays 18 fault families (routine timeout,
// starts from "" and "0", resume, watch-lists with and without
// bookmarks, a refused watch-list, bookmarks before the deadline, a cursor
// ahead, too-large versions, expiry after a restart, compaction during a
// paged LIST and the list expiries after it, LIST semantics, a slow
// consumer of large objects and one of a thousand small ones) against
// both and compares what the client sees: status codes,
// event types and order, error shapes, bookmarks and their annotation.
// Every difference it finds must be one listed above.
//
// Inside synctest bubbles, client-go's runtime.HandleError sleeps for
// decades after a reflector's first error; call [DisableHandleErrorBackoff]
// from TestMain.
//
// # How the scripted ListerWatcher differs from a real server
//
//   - It plays scripts; it keeps no state. A Watch does not depend on the
//     resourceVersion it is given, and a List returns what the script says.
//     Assert the options the code under test sent with [ListerWatcher.Calls].
//   - Session scripts are shared by resuming watches and watch-list replays:
//     the next Watch call gets the next script, whatever its options. Only
//     [ListerWatcher.RefuseWatchList] looks at the options.
//   - It never times a session out: a session ends when its script says, and
//     a Watch past the last script stays open, silent, until stopped.
//   - Events are delivered as fast as the consumer reads them; there is no
//     slow-consumer cut-off and no HTTP/2 connection shared between watches.
//   - The typed clientset retries a 429 or 5xx with Retry-After up to 10
//     times before a caller sees it; a script's error is returned at once.
//
// Build scripts from the helpers: [Added], [Bookmark], [InitialEventsEnd],
// [ErrorEvent], [Expired], [Forbidden], [NotFound], [TooManyRequests],
// [ConnectionRefused], [ServiceUnavailable], [TooLargeResourceVersion].
package watchtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// Session scripts one watch session: the Watch call returns OpenErr, or a
// watch that delivers Events in order and then closes (or, with Hang, stays
// open until stopped).
type Session struct {
	// OpenErr, if set, is returned by the Watch call.
	OpenErr error
	// Events are delivered in order.
	Events []watch.Event
	// Hang keeps the session open after its events until the watch is
	// stopped, like a quiet healthy session. Otherwise the result channel
	// closes after the last event, like the server's timeout.
	Hang bool
	// Lasts, when positive and Hang is not set, keeps the session open for
	// that long after it opened before it closes (timed by package time,
	// which is virtual inside a testing/synctest bubble). A session must
	// stay open for Policy.ShortSession to go live: one that closes at once
	// is graded as a short close, whatever it delivered.
	Lasts time.Duration
}

// List scripts one List call.
type List struct {
	// Err, if set, is returned by the List call.
	Err error
	// Objects are the list's items.
	Objects []runtime.Object
	// ResourceVersion is the list's resourceVersion.
	ResourceVersion string
	// Continue, if set, is the list's continue token.
	Continue string
}

// CallKind says whether a [Call] was a List or a Watch.
type CallKind string

const (
	// CallList is a List call.
	CallList CallKind = "List"
	// CallWatch is a Watch call.
	CallWatch CallKind = "Watch"
)

// Call records one call to a [ListerWatcher].
type Call struct {
	Kind    CallKind
	Options metav1.ListOptions
}

// ListerWatcher is a scripted cache.ListerWatcher (and
// cache.ListerWatcherWithContext). Its zero value has no scripts: every Watch
// stays open, silent, until stopped, and every List returns an empty
// ConfigMapList. It is safe for concurrent use.
type ListerWatcher struct {
	// RefuseWatchList makes every Watch with sendInitialEvents=true fail with
	// a 422 Invalid, as a server with the WatchList feature off does,
	// without consuming a script.
	RefuseWatchList bool

	mu       sync.Mutex
	sessions []Session
	lists    []List
	calls    []Call
	open     []*fakeWatch
}

// New returns a ListerWatcher that plays sessions, one per Watch call.
func New(sessions ...Session) *ListerWatcher {
	return &ListerWatcher{sessions: sessions}
}

// AddSessions appends session scripts.
func (lw *ListerWatcher) AddSessions(sessions ...Session) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.sessions = append(lw.sessions, sessions...)
}

// AddLists appends List scripts.
func (lw *ListerWatcher) AddLists(lists ...List) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.lists = append(lw.lists, lists...)
}

// Calls returns every call so far, in order.
func (lw *ListerWatcher) Calls() []Call {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return append([]Call(nil), lw.calls...)
}

// Remaining returns the number of session scripts not played yet.
func (lw *ListerWatcher) Remaining() int {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return len(lw.sessions)
}

// Open returns the number of watches returned and not yet stopped.
func (lw *ListerWatcher) Open() int {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	n := 0
	for _, w := range lw.open {
		if !w.isStopped() {
			n++
		}
	}
	return n
}

// List plays the next List script.
func (lw *ListerWatcher) List(options metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), options)
}

// ListWithContext plays the next List script.
func (lw *ListerWatcher) ListWithContext(_ context.Context, options metav1.ListOptions) (runtime.Object, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.calls = append(lw.calls, Call{Kind: CallList, Options: options})
	if len(lw.lists) == 0 {
		return &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
	}
	l := lw.lists[0]
	lw.lists = lw.lists[1:]
	if l.Err != nil {
		return nil, l.Err
	}
	list := &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: l.ResourceVersion, Continue: l.Continue}}
	for _, o := range l.Objects {
		list.Items = append(list.Items, runtime.RawExtension{Object: o})
	}
	return list, nil
}

// Watch plays the next session script.
func (lw *ListerWatcher) Watch(options metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), options)
}

// WatchWithContext plays the next session script.
func (lw *ListerWatcher) WatchWithContext(_ context.Context, options metav1.ListOptions) (watch.Interface, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.calls = append(lw.calls, Call{Kind: CallWatch, Options: options})
	if lw.RefuseWatchList && options.SendInitialEvents != nil && *options.SendInitialEvents {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "ListOptions"}, "",
			nil)
	}
	var s Session
	if len(lw.sessions) == 0 {
		s.Hang = true
	} else {
		s = lw.sessions[0]
		lw.sessions = lw.sessions[1:]
	}
	if s.OpenErr != nil {
		return nil, s.OpenErr
	}
	w := newFakeWatch(s)
	lw.open = append(lw.open, w)
	return w, nil
}

// fakeWatch delivers a script's events, then closes or hangs.
type fakeWatch struct {
	result    chan watch.Event
	stop      chan struct{}
	stopOnce  sync.Once
	closeOnce sync.Once
	timer     *time.Timer
}

func newFakeWatch(s Session) *fakeWatch {
	w := &fakeWatch{result: make(chan watch.Event, len(s.Events)), stop: make(chan struct{})}
	for _, ev := range s.Events {
		w.result <- ev
	}
	switch {
	case s.Hang:
	case s.Lasts > 0:
		w.timer = time.AfterFunc(s.Lasts, w.closeResult)
	default:
		w.closeResult()
	}
	return w
}

func (w *fakeWatch) closeResult() { w.closeOnce.Do(func() { close(w.result) }) }

// Stop ends the watch and closes its result channel, as watch.Interface
// requires; it is safe to call more than once. Events not yet read from a
// script that had not closed are dropped.
func (w *fakeWatch) Stop() {
	w.stopOnce.Do(func() {
		close(w.stop)
		if w.timer != nil {
			w.timer.Stop()
		}
		w.closeResult()
	})
}

func (w *fakeWatch) isStopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// ResultChan returns the events.
func (w *fakeWatch) ResultChan() <-chan watch.Event { return w.result }

// ConfigMap returns a ConfigMap in namespace "default" with the given name and
// resourceVersion, a convenient object for scripts.
func ConfigMap(name, resourceVersion string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, ResourceVersion: resourceVersion},
	}
}

// Added returns an ADDED event of obj.
func Added(obj runtime.Object) watch.Event { return watch.Event{Type: watch.Added, Object: obj} }

// Modified returns a MODIFIED event of obj.
func Modified(obj runtime.Object) watch.Event { return watch.Event{Type: watch.Modified, Object: obj} }

// Deleted returns a DELETED event of obj.
func Deleted(obj runtime.Object) watch.Event { return watch.Event{Type: watch.Deleted, Object: obj} }

// Bookmark returns a BOOKMARK event at resourceVersion, as the server sends
// it: an object that carries only its resourceVersion.
func Bookmark(resourceVersion string) watch.Event {
	return watch.Event{Type: watch.Bookmark, Object: &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{ResourceVersion: resourceVersion},
	}}
}

// InitialEventsEnd returns the bookmark that ends a watch-list's initial
// events: annotated k8s.io/initial-events-end: "true".
func InitialEventsEnd(resourceVersion string) watch.Event {
	ev := Bookmark(resourceVersion)
	ev.Object.(*corev1.ConfigMap).Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	return ev
}

// ErrorEvent returns an ERROR event carrying err's Status, as the server
// sends one. err must be an API status error (from this package's helpers
// or k8s.io/apimachinery/pkg/api/errors); anything else becomes a 500.
func ErrorEvent(err error) watch.Event {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		status = apierrors.NewInternalError(err)
	}
	s := status.Status()
	return watch.Event{Type: watch.Error, Object: &s}
}

// Expired returns the error a real server gives for an expired cursor: code
// 410, reason Expired. Use it as an OpenErr, a List's Err, or in an
// [ErrorEvent] (the shape a server usually sends).
func Expired() error {
	return apierrors.NewResourceExpired("too old resource version: 1 (2)")
}

// Gone returns the expiry as older servers sent it: code 410, reason Gone.
func Gone() error {
	return apierrors.NewGone("too old resource version: 1 (2)")
}

// Forbidden returns a 403 for watching configmaps.
func Forbidden() error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "",
		errors.New(`User "system:serviceaccount:default:controller" cannot watch resource "configmaps"`))
}

// ForbiddenFor returns the 403 the API server answers a watch of
// resource in namespace ("" for every namespace) with when RBAC denies it,
// worded as the real server words it ("... cannot watch resource
// \"secrets\" in API group \"\" in the namespace \"team-a\"", or "at the
// cluster scope").
func ForbiddenFor(resource schema.GroupResource, namespace string) error {
	where := "at the cluster scope"
	if namespace != "" {
		where = fmt.Sprintf("in the namespace %q", namespace)
	}
	return apierrors.NewForbidden(resource, "", fmt.Errorf(`User "system:serviceaccount:default:controller" cannot watch resource %q in API group %q %s`, resource.Resource, resource.Group, where))
}

// NotFound returns a 404 for the collection, as a missing CRD gives.
func NotFound() error {
	return apierrors.NewNotFound(schema.GroupResource{Group: "example.com", Resource: "widgets"}, "")
}

// TooManyRequests returns a 429 carrying Retry-After in seconds.
func TooManyRequests(retryAfterSeconds int) error {
	return apierrors.NewTooManyRequests("too many requests", retryAfterSeconds)
}

// ServiceUnavailable returns a 503, as a server being shut down or an
// overloaded aggregated API server gives.
func ServiceUnavailable() error {
	return apierrors.NewServiceUnavailable("the server is currently unable to handle the request")
}

// TooLargeResourceVersion returns the error a server gives for a
// resourceVersion newer than anything it has (after an etcd restore, or a
// rebuilt cluster behind the same address): 504 Timeout with cause
// ResourceVersionTooLarge and a Retry-After of 1 second.
func TooLargeResourceVersion() error {
	return tooLarge(900, 12)
}

// ConnectionRefused returns the error a dial to a stopped server gives.
func ConnectionRefused() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("connect: %w", syscall.ECONNREFUSED)}
}
