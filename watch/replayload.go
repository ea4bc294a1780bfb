package watch

import (
	"context"
	"math/rand/v2"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// What a replay costs the control plane, and how a stream keeps it as low
// as an informer's.
//
// Every cursor expires at once when an apiserver restarts (its new watch
// cache starts after them all), or when a compaction passes them and the
// connections are cut. Every stream of every controller then replays at
// the same moment: a burst of full replays against one apiserver. Two
// things make a stream's share of it no larger than an informer's:
//
//   - Spread. A replay that a verdict asks for at once (after an expiry, or
//     a replay cut before it was complete) starts after a random wait in
//     [ReplaySpread/2, 3·ReplaySpread/2): 0.5 to 1.5 s by default. The
//     resumes that every watch cut at once makes first (each answered 410)
//     have half a second to drain, and the replays of many streams, across
//     every process that saw the same event, then arrive spread over a
//     second instead of in one instant. client-go's reflector spreads its
//     relists much the same way, by its backoff: after a 410 it waits 0.8
//     to 1.6 s. So a stream replays no more densely than an informer, and
//     is done sooner. A replay that waits for a backoff or for the replay
//     budget is spread already and waits no longer; the first replay of a
//     stream that starts without a cursor does not wait.
//   - Served from the watch cache. The first replay after a 410 asks for
//     the collection "not older than" the cursor that expired
//     (resourceVersion = the cursor, resourceVersionMatch NotOlderThan),
//     as the reflector does. The watch cache serves that at once, from
//     memory. A replay at resourceVersion "" is a consistent read: even
//     served from the watch cache it costs etcd one request (the current
//     revision), and it waits for the cache to catch up to it. The
//     snapshot is then at the cache's resourceVersion, at or after the
//     cursor, which is all a consumer needs: the watch that follows
//     catches up from there. If that replay fails for a transient reason
//     (a 429, a connection cut), the next one asks the same; if it fails
//     for any other, the next one asks for the latest. After a 504 "too
//     large resource version" (a cursor ahead of the server) or any other
//     cause of a replay, the replay asks for the latest.
//
// Neither changes what a consumer sees: a complete snapshot, then events
// in order. [StreamOptions.ReplaySpread] and
// [StreamOptions.ConsistentReplays] turn them off.

// DefaultReplaySpread is the default of [StreamOptions.ReplaySpread].
const DefaultReplaySpread = time.Second

// replaySpread returns how long to wait before a replay that a verdict
// asked for after d: d, or if d is zero a random wait in
// [ReplaySpread/2, 3·ReplaySpread/2).
func (s *Stream) replaySpread(d time.Duration) time.Duration {
	j := s.opts.ReplaySpread
	if d > 0 || j <= 0 {
		return d
	}
	return j/2 + time.Duration(rand.Int64N(int64(j)))
}

// noteReplayCause is called when a session's ending makes the stream
// replay, before it drops its cursor: after a 410 the next replay asks for
// the collection not older than that cursor. A replay that failed for a
// transient reason (a 429 from an apiserver shedding load, a connection
// cut) or was cut before its end is asked again not older than the same
// cursor: asking for the latest instead would cost etcd a read at the
// moment the control plane is busiest, for no better snapshot. Any other
// failure of that replay (a cursor the server has not reached, a server
// that refuses the request) makes the next one ask for the latest.
func (s *Stream) noteReplayCause(err error) {
	if s.opts.ConsistentReplays {
		return
	}
	class, reason := Classify(err)
	switch {
	case s.Cursor() != "":
		s.relist.from = ""
		if class == ClassExpired && reason == ReasonExpiredResourceVersion {
			s.relist.from = s.Cursor()
		}
	case class != ClassTransient && class != ClassNone:
		// A replay that failed, not for load nor cut.
		s.relist.from = ""
	}
}

// cacheRelist passes a stream's calls through to its ListerWatcher; while
// from is set, the request that starts a replay (a watch-list, or the
// first page of a LIST) asks for the collection not older than from
// instead of the latest. Owned by the goroutine in [Stream.Run], which
// makes every call.
type cacheRelist struct {
	inner cache.ListerWatcherWithContext
	// from is the expired cursor the current replay asks for, "" for the
	// latest. noteReplayCause sets it; a session that ends with a cursor
	// (the replay delivered its snapshot) clears it (replayDone).
	from string
}

func (l *cacheRelist) List(o metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), o)
}

func (l *cacheRelist) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	if l.from != "" && o.Continue == "" && o.ResourceVersion == "" {
		o.ResourceVersion, o.ResourceVersionMatch = l.from, metav1.ResourceVersionMatchNotOlderThan
	}
	return l.inner.ListWithContext(ctx, o)
}

func (l *cacheRelist) Watch(o metav1.ListOptions) (apiwatch.Interface, error) {
	return l.WatchWithContext(context.Background(), o)
}

func (l *cacheRelist) WatchWithContext(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
	if l.from != "" && o.SendInitialEvents != nil && *o.SendInitialEvents && o.ResourceVersion == "" {
		o.ResourceVersion = l.from
	}
	return l.inner.WatchWithContext(ctx, o)
}
