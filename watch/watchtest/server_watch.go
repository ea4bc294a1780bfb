package watchtest

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// Watch calls WatchWithContext with a background context.
func (s *Server) Watch(options metav1.ListOptions) (watch.Interface, error) {
	return s.WatchWithContext(context.Background(), options)
}

// WatchWithContext opens a watch as the kube-apiserver 1.37 does:
//
//   - with sendInitialEvents=true (resourceVersionMatch must be
//     NotOlderThan): once the watch cache has reached the resourceVersion
//     asked for ("": etcd's current revision; past it after 3 s: HTTP 200
//     and an ERROR event "too large resource version"), an ADDED event
//     for every object in etcd's key order, then, if the watch asked for
//     bookmarks (a watch-list), a bookmark annotated
//     k8s.io/initial-events-end, then live events. Without bookmarks
//     there is no end bookmark: the server accepts such a request as it
//     is;
//   - from resourceVersion "" or "0" with neither sendInitialEvents nor
//     resourceVersionMatch: the same, as the API server defaults such a
//     request to sendInitialEvents=true (so with bookmarks it ends its
//     synthetic ADDED events with the annotated bookmark too), unless
//     the WatchList feature is off ([Faults.RefuseWatchList]): then the
//     ADDED events and no bookmark; with sendInitialEvents=false, live
//     events from now on;
//   - from any other: every change after it, then live events. A cursor
//     older than the watch cache's window is expired (see
//     [ServerOptions.Expiry]); one newer than the watch cache is
//     accepted and answered silently: every event and bookmark at or
//     below it is dropped, as the cacher does.
//
// While a restarted watch cache initialises the call fails with 429. The
// watch ends on the client's timeoutSeconds, or after a random
// [ServerOptions.MinRequestTimeout]…2× of it, or when ctx is done, or when
// stopped, or when its consumer falls behind. With allowWatchBookmarks it
// gets a bookmark every [ServerOptions.BookmarkInterval] and 2s before
// its deadline, if the watch cache has moved past what the watch
// delivered.
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
			s.dropWatch(w)
			return nil, err
		}
	}
	if !s.opts.Latency.Off && !wait && (err == nil || !isConnectionError(err)) {
		if err := s.sleep(ctx, s.opts.Latency.Request); err != nil {
			s.dropWatch(w)
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	go w.run()
	return w, nil
}

// dropWatch forgets a watch whose open was abandoned by its client.
func (s *Server) dropWatch(w *serverWatch) {
	if w == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.watches, w)
	if w.req.Closed.IsZero() {
		w.req.Closed = s.clock.Now()
	}
}

func (s *Server) openLocked(ctx context.Context, options metav1.ListOptions, req *Request) (w *serverWatch, wait bool, err error) {
	now := s.clock.Now()
	s.autoCompactLocked(now)
	if err := s.requestFaultLocked(CallWatch, options); err != nil {
		return nil, false, err
	}
	if !s.faults.RefuseWatchList && options.SendInitialEvents == nil && options.ResourceVersionMatch == "" &&
		(options.ResourceVersion == "" || options.ResourceVersion == "0") {
		// The API server's defaulting (SetListOptionsDefaults, with the
		// WatchList feature on): a legacy watch from "" or "0" is a
		// watch with initial events, at "" a consistent one.
		options.SendInitialEvents = ptr.To(true)
		options.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	}
	if errs := s.validateWatchLocked(options); len(errs) > 0 {
		return nil, false, invalidOptions(errs...)
	}
	var from int64
	if options.ResourceVersion != "" {
		from, err = strconv.ParseInt(options.ResourceVersion, 10, 64)
		if err != nil || from < 0 {
			return nil, false, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version %q", options.ResourceVersion))
		}
	}
	if err := s.notReadyLocked(now); err != nil && !s.opts.DisableWatchCache {
		return nil, false, err
	}
	sendInitial := options.SendInitialEvents != nil && *options.SendInitialEvents
	watchList := sendInitial && options.AllowWatchBookmarks
	w = s.newWatchLocked(ctx, options, req, now)
	if watchList && s.faults.WatchListUnsupported && !s.opts.DisableWatchCache {
		w.failLocked(&apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusInternalServerError, Reason: metav1.StatusReasonInternalError,
			Message: "a watch stream was requested by the client but the required storage feature RequestWatchProgress is disabled",
		}}, req)
		return w, false, nil
	}
	if s.faults.StaleProxy {
		w.endLocked()
		return w, false, nil
	}
	// The resourceVersion the watch cache must reach: for a watch with
	// sendInitialEvents and no resourceVersion, etcd's current revision.
	required := from
	if options.ResourceVersion == "" && options.SendInitialEvents != nil {
		required = s.rv
	}
	cacheRV := s.cacheRV
	if s.opts.DisableWatchCache {
		cacheRV = s.rv
	}
	switch {
	case sendInitial && required > cacheRV:
		w.failLocked(tooLarge(required, cacheRV), req)
		return w, true, nil
	case sendInitial, options.SendInitialEvents == nil && from == 0:
		w.initialLocked(s.stateAtLocked(cacheRV), watchList, cacheRV, now)
		w.sentRV = cacheRV
	case options.SendInitialEvents != nil && from == 0:
		w.sentRV = max(required, cacheRV)
	case from < s.oldestLocked():
		expired := apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, s.oldestLocked()))
		switch s.opts.Expiry {
		case ExpiryOpenError:
			return nil, false, expired
		case ExpiryGoneEvent:
			w.failLocked(apierrors.NewGone(expired.ErrStatus.Message), req)
		default:
			w.failLocked(expired, req)
		}
		return w, false, nil
	default:
		// A cursor ahead of the cache: sentRV drops all up to it.
		w.sentRV = from
		backlog := s.history[s.windowStart:s.cacheIndexLocked()]
		if s.opts.DisableWatchCache {
			// Served from etcd, which keeps every revision since the
			// last compaction.
			backlog = s.history
		}
		for _, c := range backlog {
			if c.rv > w.sentRV {
				w.queue = append(w.queue, queued{ev: watch.Event{Type: c.typ, Object: c.obj.DeepCopyObject()}, backlog: true})
				w.sentRV = c.rv
			}
		}
	}
	s.watches[w] = struct{}{}
	return w, false, nil
}

// validateWatchLocked holds the API server's validation of a watch's
// options.
func (s *Server) validateWatchLocked(options metav1.ListOptions) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("resourceVersionMatch")
	match := options.ResourceVersionMatch
	if options.SendInitialEvents != nil {
		if match != metav1.ResourceVersionMatchNotOlderThan {
			errs = append(errs, field.Forbidden(path, "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"))
		}
		if s.faults.RefuseWatchList {
			errs = append(errs, field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"))
		}
	}
	if match != "" {
		if options.SendInitialEvents == nil {
			errs = append(errs, field.Forbidden(path, "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"))
		}
		if match != metav1.ResourceVersionMatchNotOlderThan {
			errs = append(errs, field.NotSupported(path, match, []string{string(metav1.ResourceVersionMatchNotOlderThan)}))
		}
	}
	return errs
}
