package watch

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"
	"k8s.io/utils/ptr"
)

// watchListRetry is how long a stream lists before a watch-list again.
const watchListRetry = time.Hour

// replay rebuilds the consumer's view.
func (s *Stream) replay(ctx context.Context) result {
	// Only a stream started without a cursor has an initial sync.
	s.pub.record(fact{kind: factReplay, initial: s.initialSync}, nil)
	s.initialSync = false
	return s.replayOnce(ctx)
}

func (s *Stream) replayOnce(ctx context.Context) result {
	if s.watchListOff || s.clock.Now().Before(s.watchListPaused) {
		return s.listThenWatch(ctx)
	}
	opts, lifetime := s.watchOptions(metav1.ListOptions{
		SendInitialEvents:    ptr.To(true),
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
	})
	sctx, cancel := context.WithTimeout(ctx, lifetime)
	defer cancel()
	w, err := s.lw.WatchWithContext(sctx, opts)
	if err == nil && w == nil {
		err = ErrNilWatch
	}
	switch {
	case err == nil && isFakeWatch(w):
		// client-go's fake clientset ignores sendInitialEvents.
		w.Stop()
		s.watchListOff = true
		return s.listThenWatch(ctx)
	case err == nil:
		defer w.Stop()
		r := s.consume(ctx, sctx, w, &replayBuffer{}, "")
		if r.refused && ctx.Err() == nil {
			// Refused by its first event: list, as the reflector does.
			w.Stop()
			return s.listThenWatch(ctx)
		}
		r.served = true
		switch {
		case r.cause == CauseReplayDeadline:
			// A server that ignores sendInitialEvents: list for a while.
			s.watchListPaused = s.clock.Now().Add(watchListRetry)
		case r.stage == StageReplay && r.cause == CauseClosed && ctx.Err() == nil:
			// Cut before its end twice in a row: list for a while.
			if s.cutReplays++; s.cutReplays >= 2 {
				s.watchListPaused, s.cutReplays = s.clock.Now().Add(watchListRetry), 0
			}
		case r.stage == StageStream:
			s.cutReplays = 0
		}
		return r
	case refusesWatchList(err):
		// This replay lists; the next one asks again.
		return s.listThenWatch(ctx)
	}
	return result{stage: StageReplay, cause: CauseError, err: err}
}

// isFakeWatch reports whether w comes from client-go's fake clientsets.
func isFakeWatch(w apiwatch.Interface) bool {
	switch w.(type) {
	case *apiwatch.RaceFreeFakeWatcher, *apiwatch.FakeWatcher:
		return true
	}
	return false
}

// refusesWatchList reports whether err refuses a watch-list's parameters.
func refusesWatchList(err error) bool {
	class, reason := Classify(err)
	return class == ClassNeedsHuman && reason == ReasonInvalidRequest
}

// refusesInStream reports whether err, the first thing a watch-list sent,
// refuses the watch-list: anything but a 429 and a 410.
func refusesInStream(err error) bool {
	if class, reason := Classify(err); class == ClassExpired && reason == ReasonExpiredResourceVersion {
		return false
	}
	return !apierrors.IsTooManyRequests(err)
}

func (s *Stream) listThenWatch(ctx context.Context) result {
	// served is set once the server answered a page.
	served := false
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		list, err := s.lw.ListWithContext(ctx, opts)
		if err == nil {
			served = true
		}
		return list, err
	})
	p.PageSize = s.opts.ListPageSize
	// A continue token that expired fails the replay as an expiry, rather
	// than turn into an unpaginated LIST.
	p.FullListIfExpired = false
	list, _, err := p.List(ctx, metav1.ListOptions{})
	if err != nil {
		return result{stage: StageList, cause: CauseError, err: err, served: served}
	}
	snap, err := snapshotOfList(list)
	if err != nil {
		return result{stage: StageList, cause: CauseBadEvent, err: err, served: true}
	}
	// Nothing of the list stays reachable for the watch that follows.
	n, rv := len(snap.Objects), snap.ResourceVersion
	if err := s.snapshot(ctx, snap); err != nil {
		return result{stage: StageList, cause: CauseHandler, err: err, events: n, served: true}
	}
	s.setCursor(rv)
	// The cursor is the server's own: checked only in doubt.
	r := s.resumeChecked(ctx, rv, s.doubt)
	r.events += n
	r.served = true
	return r
}

func snapshotOfList(list runtime.Object) (Snapshot, error) {
	if list == nil {
		return Snapshot{}, fmt.Errorf("list: %w", ErrNilObject)
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return Snapshot{}, fmt.Errorf("list: %w", err)
	}
	rv := lm.GetResourceVersion()
	if rv == "" {
		return Snapshot{}, fmt.Errorf("list: %w", ErrNoResourceVersion)
	}
	var objs []runtime.Object
	err = meta.EachListItem(list, func(o runtime.Object) error {
		objs = append(objs, o)
		return nil
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("list: %w", err)
	}
	sortObjects(objs)
	return Snapshot{Objects: objs, ResourceVersion: rv}, nil
}

// DefaultReplaySpread is the default of [StreamOptions.ReplaySpread].
const DefaultReplaySpread = time.Second

// replaySpread returns how long to wait before a replay that a verdict
// asked for after d: d, or if d is zero a spread drawn from s.rand.
func (s *Stream) replaySpread(d time.Duration) time.Duration {
	j := s.opts.ReplaySpread
	if d > 0 || j <= 0 {
		return d
	}
	return j/2 + time.Duration(s.rand()*float64(j))
}

// noteReplayCause sets what the next replay asks for (see "What a replay
// costs the control plane" in the package doc), before the cursor drops.
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
		// A replay that failed, neither for load nor cut.
		s.lw.from = ""
	}
}

// cacheRelist passes a stream's calls through to its ListerWatcher; while
// from is set, the request that starts a replay asks for the collection
// not older than from. Owned by the goroutine in [Stream.Run].
type cacheRelist struct {
	inner cache.ListerWatcherWithContext
	// from is the expired cursor; "" for the latest.
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
