package watch

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// DefaultReplaySpread is the default of [StreamOptions.ReplaySpread].
const DefaultReplaySpread = time.Second

// replaySpread returns how long to wait before a replay that a verdict
// asked for after d: d, or if d is zero a random wait in
// [ReplaySpread/2, 3·ReplaySpread/2), drawn from the stream's source of
// jitter like every other random wait, so that a seeded stream replays its
// history exactly.
func (s *Stream) replaySpread(d time.Duration) time.Duration {
	j := s.opts.ReplaySpread
	if d > 0 || j <= 0 {
		return d
	}
	return j/2 + time.Duration(s.rand()*float64(j))
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
		s.lw.from = ""
		if class == ClassExpired && reason == ReasonExpiredResourceVersion {
			s.lw.from = s.Cursor()
		}
	case class != ClassTransient && class != ClassNone:
		// A replay that failed, not for load nor cut.
		s.lw.from = ""
	}
}

// cacheRelist (see "What a replay costs the control plane" in the package
// doc) passes a stream's calls through to its ListerWatcher; while
// from is set, the request that starts a replay (a watch-list, or the
// first page of a LIST) asks for the collection not older than from
// instead of the latest. Owned by the goroutine in [Stream.Run], which
// makes every call.
type cacheRelist struct {
	inner cache.ListerWatcherWithContext
	// from is the expired cursor the next replay asks for, "" for the
	// latest; noteReplayCause sets it before each replay. Only a request
	// that starts a replay (no resourceVersion) reads it: while the
	// stream has a cursor it is unused.
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
