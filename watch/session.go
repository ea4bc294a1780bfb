package watch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/pager"
	"k8s.io/utils/ptr"
)

// Errors that describe a bad event or response; they end a session with
// CauseBadEvent (or CauseError for a nil watch). Match them with errors.Is.
var (
	// ErrNilObject: an event carried no object.
	ErrNilObject = errors.New("event has no object")
	// ErrNoResourceVersion: an event or list carried no resourceVersion.
	ErrNoResourceVersion = errors.New("no resourceVersion")
	// ErrUnknownEventType: an event had a type other than ADDED, MODIFIED,
	// DELETED, BOOKMARK or ERROR.
	ErrUnknownEventType = errors.New("unknown event type")
	// ErrNilWatch: the ListerWatcher returned neither a watch nor an error.
	ErrNilWatch = errors.New("watch call returned no watch and no error")
)

// result is how one session ended, before grading.
type result struct {
	stage  Stage
	cause  Cause
	err    error
	events int
}

// resume opens a watch from the cursor and consumes it.
func (s *Stream) resume(ctx context.Context, cursor string) result {
	w, err := s.lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: cursor, AllowWatchBookmarks: true})
	if err == nil && w == nil {
		err = ErrNilWatch
	}
	if err != nil {
		return result{stage: StageOpen, cause: CauseError, err: err}
	}
	defer w.Stop()
	return s.consume(ctx, w, nil)
}

// replay rebuilds the consumer's view: a watch-list where the server
// supports it, otherwise LIST then WATCH.
func (s *Stream) replay(ctx context.Context) result {
	if s.State().Phase == PhaseStarting && !s.hasDeferred() {
		// Started without a cursor. (One started from a cursor that
		// expired has a deferred Replaying of its own.)
		s.publish(State{Phase: PhaseReplaying, Reason: ReasonInitialSync, Message: "the stream is listing the collection for the first time"})
	}
	s.armDeferred()
	if !s.watchListUnsup {
		w, err := s.lw.WatchWithContext(ctx, metav1.ListOptions{
			SendInitialEvents:    ptr.To(true),
			ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
			AllowWatchBookmarks:  true,
		})
		if err == nil && w == nil {
			err = ErrNilWatch
		}
		if err == nil {
			defer w.Stop()
			r := s.consume(ctx, w, &replayBuffer{})
			if r.cause == CauseReplayDeadline {
				// A server that ignores sendInitialEvents never sends the
				// end bookmark: list from now on.
				s.watchListUnsup = true
			}
			return r
		}
		if !refusesWatchList(err) {
			return result{stage: StageReplay, cause: CauseError, err: err}
		}
		s.watchListUnsup = true
	}
	return s.listThenWatch(ctx)
}

func (s *Stream) hasDeferred() bool {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	return s.deferred != nil
}

// refusesWatchList reports whether err is a server's refusal of the
// watch-list parameters (feature off, an aggregated API that rejects them).
func refusesWatchList(err error) bool {
	class, reason := Classify(err)
	return class == ClassNeedsHuman && reason == ReasonInvalidRequest
}

func (s *Stream) listThenWatch(ctx context.Context) result {
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return s.lw.ListWithContext(ctx, opts)
	})
	p.PageSize = s.opts.ListPageSize
	list, _, err := p.List(ctx, metav1.ListOptions{})
	if err != nil {
		return result{stage: StageList, cause: CauseError, err: err}
	}
	snap, err := snapshotOfList(list)
	if err != nil {
		return result{stage: StageList, cause: CauseBadEvent, err: err}
	}
	if err := s.handler.Snapshot(ctx, snap); err != nil {
		return result{stage: StageList, cause: CauseHandler, err: err, events: len(snap.Objects)}
	}
	s.setCursor(snap.ResourceVersion)
	s.publishStreaming()
	r := s.resume(ctx, snap.ResourceVersion)
	r.events += len(snap.Objects)
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

// consume reads events from w until the session ends. With buf set it is a
// watch-list replay: objects are buffered until the initial-events-end
// bookmark and then delivered as one snapshot.
func (s *Stream) consume(ctx context.Context, w apiwatch.Interface, buf *replayBuffer) result {
	stage := StageStream
	var deadline <-chan time.Time
	if buf != nil {
		stage = StageReplay
		t := s.clock.NewTimer(s.opts.ReplayTimeout)
		defer t.Stop()
		deadline = t.C()
	}
	// A stream that is not Streaming (Starting, or Blocked) goes back to
	// Streaming on the first sign of health: an event, a bookmark, or a
	// session that stays open for ShortSession.
	var healthy <-chan time.Time
	if buf == nil && s.State().Phase != PhaseStreaming {
		t := s.clock.NewTimer(s.opts.Policy.ShortSession)
		defer t.Stop()
		healthy = t.C()
	}

	events := 0
	// Once this session has published Streaming the phase stays Streaming
	// until it returns: other states come only from Run's goroutine, and
	// publishing Streaming cancels a deferred Replaying (see armDeferred).
	streaming := false
	done, results := ctx.Done(), w.ResultChan()
	for {
		var ev apiwatch.Event
		var ok, got bool
		if deadline == nil && healthy == nil {
			// Steady state: take a ready event without the cost of a
			// multi-way select, after a cheap check that the owner is
			// not done.
			select {
			case <-done:
				return result{stage: stage, cause: CauseClosed, events: events}
			default:
			}
			select {
			case ev, ok = <-results:
				got = true
			default:
			}
		}
		if !got {
			select {
			case <-done:
				return result{stage: stage, cause: CauseClosed, events: events}
			case <-deadline:
				return result{stage: stage, cause: CauseReplayDeadline, events: events}
			case <-healthy:
				healthy = nil
				s.publishStreaming()
				streaming = true
				continue
			case ev, ok = <-results:
			}
		}
		if !ok {
			return result{stage: stage, cause: CauseClosed, events: events}
		}
		switch ev.Type {
		case apiwatch.Added, apiwatch.Modified, apiwatch.Deleted:
			rv, err := resourceVersionOf(ev.Object)
			if err != nil {
				return result{stage: stage, cause: CauseBadEvent, err: fmt.Errorf("%s event: %w", ev.Type, err), events: events}
			}
			if buf != nil {
				buf.apply(ev)
				events++
				continue
			}
			if err := s.handler.Event(ctx, ev); err != nil {
				return result{stage: stage, cause: CauseHandler, err: err, events: events}
			}
			events++
			s.setCursor(rv)
		case apiwatch.Bookmark:
			rv, err := resourceVersionOf(ev.Object)
			if err != nil {
				return result{stage: stage, cause: CauseBadEvent, err: fmt.Errorf("BOOKMARK event: %w", err), events: events}
			}
			if buf == nil {
				s.setCursor(rv)
			} else if isInitialEventsEnd(ev.Object) {
				if err := s.handler.Snapshot(ctx, buf.snapshot(rv)); err != nil {
					return result{stage: stage, cause: CauseHandler, err: err, events: events}
				}
				s.setCursor(rv)
				buf, deadline, stage = nil, nil, StageStream
			} else {
				// A bookmark inside a replay says nothing about the
				// snapshot; the cursor waits for the end.
				continue
			}
		case apiwatch.Error:
			return result{stage: stage, cause: CauseError, err: apierrorsFromObject(ev.Object), events: events}
		default:
			return result{stage: stage, cause: CauseBadEvent, err: fmt.Errorf("%w %q", ErrUnknownEventType, ev.Type), events: events}
		}
		healthy = nil
		if !streaming {
			s.publishStreaming()
			streaming = true
		}
	}
}

// apierrorsFromObject turns an ERROR event's object into an error; a Status
// becomes a *StatusError, anything else an error that says what it was.
func apierrorsFromObject(obj runtime.Object) error {
	if obj == nil {
		return fmt.Errorf("ERROR event: %w", ErrNilObject)
	}
	return apierrors.FromObject(obj)
}

func resourceVersionOf(obj runtime.Object) (string, error) {
	if obj == nil {
		return "", ErrNilObject
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", err
	}
	rv := m.GetResourceVersion()
	if rv == "" {
		return "", ErrNoResourceVersion
	}
	return rv, nil
}

func isInitialEventsEnd(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	return err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
}

// replayBuffer collects a watch-list's initial events by namespace and name.
type replayBuffer struct {
	objects map[objectKey]runtime.Object
}

type objectKey struct{ namespace, name string }

func keyOf(obj runtime.Object) objectKey {
	m, err := meta.Accessor(obj)
	if err != nil {
		return objectKey{}
	}
	return objectKey{m.GetNamespace(), m.GetName()}
}

func (b *replayBuffer) apply(ev apiwatch.Event) {
	if b.objects == nil {
		b.objects = make(map[objectKey]runtime.Object)
	}
	if ev.Type == apiwatch.Deleted {
		delete(b.objects, keyOf(ev.Object))
		return
	}
	b.objects[keyOf(ev.Object)] = ev.Object
}

func (b *replayBuffer) snapshot(rv string) Snapshot {
	objs := make([]runtime.Object, 0, len(b.objects))
	for _, o := range b.objects {
		objs = append(objs, o)
	}
	sortObjects(objs)
	return Snapshot{Objects: objs, ResourceVersion: rv}
}

func sortObjects(objs []runtime.Object) {
	slices.SortStableFunc(objs, func(a, b runtime.Object) int {
		ka, kb := keyOf(a), keyOf(b)
		return cmp.Or(cmp.Compare(ka.namespace, kb.namespace), cmp.Compare(ka.name, kb.name))
	})
}
