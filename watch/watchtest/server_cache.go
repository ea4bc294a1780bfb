package watchtest

import (
	"cmp"
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// followLocked lets the watch cache take in what etcd has and it has
// not, unless it is stalled or initialising: the open watches get it.
func (s *Server) followLocked(now time.Time) {
	if (s.faults.StallCache && !s.opts.DisableWatchCache) || !s.notReadyUntil.IsZero() {
		return
	}
	for i := s.cacheIndexLocked(); i < len(s.history); i++ {
		c := s.history[i]
		for w := range s.watches {
			w.pushLocked(c.rv, watch.Event{Type: c.typ, Object: c.obj.DeepCopyObject()}, now)
		}
	}
	s.cacheRV = s.rv
	s.evictLocked(now)
}

// cacheIndexLocked is the index in history of the first change the
// watch cache has not seen.
func (s *Server) cacheIndexLocked() int {
	i, _ := slices.BinarySearchFunc(s.history, s.cacheRV+1, func(c change, rv int64) int { return cmp.Compare(c.rv, rv) })
	return i
}

// evictLocked drops from the watch cache what it no longer holds.
func (s *Server) evictLocked(now time.Time) {
	end := s.cacheIndexLocked()
	for end-s.windowStart > s.opts.WatchCacheSize &&
		now.Sub(s.history[s.windowStart].at) > s.opts.WatchCacheWindow {
		s.windowStart++
		s.evicted = true
	}
}

// oldestLocked is the oldest cursor a watch may resume from.
func (s *Server) oldestLocked() int64 {
	if s.opts.DisableWatchCache {
		return s.compacted
	}
	// The cacher's rule (watch_cache_history.go GetIntervalLocked): a
	// cursor older than the oldest event held, less one, is expired; if
	// nothing was evicted since the cache listed, the list's revision.
	if s.evicted && s.windowStart < len(s.history) {
		return s.history[s.windowStart].rv - 1
	}
	return s.listRV
}

// settleLocked ends a restart's not-ready phase once it is over: the new
// watch cache lists at etcd's current revision.
func (s *Server) settleLocked(now time.Time) {
	if s.notReadyUntil.IsZero() || now.Before(s.notReadyUntil) {
		return
	}
	s.notReadyUntil, s.notReadySince = time.Time{}, time.Time{}
	s.relistLocked()
}

// relistLocked starts the watch cache afresh at etcd's current revision.
func (s *Server) relistLocked() {
	s.cacherStart = s.clock.Now()
	s.knownCompacted = 0
	s.cacheRV, s.listRV = s.rv, s.rv
	s.windowStart = len(s.history)
	s.evicted = false
}

// notReadyLocked returns the 429 a request gets while the watch cache
// initialises, or nil.
func (s *Server) notReadyLocked(now time.Time) error {
	s.settleLocked(now)
	if s.notReadyUntil.IsZero() {
		return nil
	}
	return apierrors.NewTooManyRequests("storage is (re)initializing", retryAfterForUnreadyCache(now.Sub(s.notReadySince)))
}

// retryAfterForUnreadyCache is the cacher's Retry-After for a cache that
// has been unready for downtime (util.go): e^(0.06 s⁻¹ × downtime),
// between 1 and 30 seconds.
func retryAfterForUnreadyCache(downtime time.Duration) int {
	return int(math.Min(30, math.Max(1, math.Exp(0.06*downtime.Seconds()))))
}

// ResourceVersion returns the server's current resourceVersion: etcd's
// revision, which a stalled or initialising watch cache may lag.
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
	now := s.clock.Now()
	s.settleLocked(now)
	s.followLocked(now)
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
// what was queued for it and ready to send (initial events the latency
// model has not produced yet are cut): what a client sees when a stream is
// reset mid-way (client-go turns an HTTP/2 INTERNAL_ERROR into a 500
// "unable to decode an event from the watch stream"), or a 410 as an etcd
// compaction sends one to an uncached watch. err must be an API status
// error; anything else is sent as a 500.
func (s *Server) FailWatches(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	status := asStatusError(err)
	now := s.clock.Now()
	for w := range s.watches {
		w.cutUnreadyLocked(now)
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

// Restart is a kube-apiserver restart: every open watch closes; the new
// apiserver's start-up writes (its identity Lease) move etcd's revision
// on; for [ServerOptions.RestartNotReady] its watch cache initialises
// (watches, and LISTs it cannot hand to etcd, get 429 "storage is
// (re)initializing" with a Retry-After); then the cache starts at etcd's
// current revision, so a resume from any cursor taken before the restart
// is expired, caught-up ones and bookmarks too. Writes go on meanwhile.
// With DisableWatchCache a restart expires nothing.
func (s *Server) Restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restartLocked()
}

func (s *Server) restartLocked() {
	s.closeWatchesLocked()
	now := s.clock.Now()
	s.autoCompactLocked(now)
	s.rv++
	s.notReadyUntil, s.notReadySince = time.Time{}, time.Time{}
	if s.opts.RestartNotReady > 0 && !s.opts.DisableWatchCache {
		s.notReadyUntil, s.notReadySince = now.Add(s.opts.RestartNotReady), now
		s.cacheRV = s.rv // nothing to follow until ready; relisted then
		return
	}
	s.relistLocked()
}

// Compact is an etcd compaction at the current resourceVersion: continue
// tokens of older lists expire, and so do exact lists at older
// resourceVersions (once the cacher's compactor, which polls etcd every
// 15 s, has seen the compaction: until then the watch cache's snapshots
// serve those it holds), and, with DisableWatchCache, resumes from older
// cursors. Open watches keep working.
func (s *Server) Compact() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.autoCompactLocked(now)
	s.knownCompactionLocked(now)
	s.compacted, s.compactedAt = s.rv, now
}

// autoCompactLocked plays the apiserver's compactor up to now. It runs
// before every change of the revision, so the revision at each tick not
// yet played is the current one.
func (s *Server) autoCompactLocked(now time.Time) {
	if s.opts.CompactionInterval <= 0 {
		return
	}
	for due := int64(now.Sub(s.start) / s.opts.CompactionInterval); s.ticks < due; {
		s.ticks++
		at := s.start.Add(time.Duration(s.ticks) * s.opts.CompactionInterval)
		if s.ticks > 1 && s.tickRV > s.compacted {
			s.knownCompactionLocked(at)
			s.compacted, s.compactedAt = s.tickRV, at
		}
		s.tickRV = s.rv
	}
}

// compactorPoll is how often the cacher reads etcd's compaction revision.
const compactorPoll = 15 * time.Second

// knownCompactionLocked returns the compaction the cacher's compactor has
// seen by now.
func (s *Server) knownCompactionLocked(now time.Time) int64 {
	if s.compacted > s.knownCompacted && !s.compactedAt.Before(s.cacherStart) {
		// Polls run at cacherStart + k×15s, k ≥ 1.
		polls := now.Sub(s.cacherStart) / compactorPoll
		first := (s.compactedAt.Sub(s.cacherStart) + compactorPoll - 1) / compactorPoll
		if polls >= max(first, 1) {
			s.knownCompacted = s.compacted
		}
	}
	return s.knownCompacted
}

// cacheServesExactLocked reports whether the watch cache has a snapshot
// to serve an exact list or a continue token at rv (ListFromCacheSnapshot,
// on by default in 1.37): one at or below rv, no older than the oldest
// event it holds, its list, or the compaction its compactor has seen.
func (s *Server) cacheServesExactLocked(rv int64, now time.Time) bool {
	if s.opts.DisableWatchCache || !s.notReadyUntil.IsZero() || rv > s.cacheRV {
		return false
	}
	floor := s.listRV
	if s.evicted && s.windowStart < len(s.history) {
		floor = s.history[s.windowStart].rv
	}
	return rv >= max(floor, s.knownCompactionLocked(now))
}

// AdvanceRevision moves the resourceVersion on by n without a change to this
// collection, as writes to other resources move etcd's revision. Bookmarks
// then carry the new resourceVersion.
func (s *Server) AdvanceRevision(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.settleLocked(now)
	s.autoCompactLocked(now)
	s.rv += int64(max(n, 0))
	if !s.faults.StallCache && s.notReadyUntil.IsZero() {
		s.cacheRV = s.rv
	}
}

// EtcdSnapshot is the state of etcd at one revision, taken with
// [Server.Snapshot], for [Server.Restore].
type EtcdSnapshot struct {
	rv      int64
	objects map[objectKey]runtime.Object
	history []change
}

// ResourceVersion returns the revision the snapshot was taken at.
func (e EtcdSnapshot) ResourceVersion() string { return strconv.FormatInt(e.rv, 10) }

// Snapshot takes a snapshot of etcd, as `etcdctl snapshot save` does.
func (s *Server) Snapshot() EtcdSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return EtcdSnapshot{rv: s.rv, objects: maps.Clone(s.objects), history: slices.Clone(s.history)}
}

// Restore restores etcd from snap, as `etcdutl snapshot restore` followed
// by the restart of the apiserver that the procedure requires: the
// collection goes back to what it was at snap's revision, and then
// [Server.Restart] runs. bumpRevision is etcdutl's --bump-revision (with
// --mark-compacted): 0 leaves the revision at snap's, so resourceVersions
// go backwards and every cursor a client took after the snapshot is ahead
// of the server (a plain watch from it is silent until the server passes
// it; a LIST or watch-list from it is "too large"); a positive bump moves
// the revision that far past snap's and compacts there, so every older
// cursor expires.
func (s *Server) Restore(snap EtcdSnapshot, bumpRevision int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.autoCompactLocked(s.clock.Now())
	s.closeWatchesLocked()
	s.objects = maps.Clone(snap.objects)
	s.history = slices.Clone(snap.history)
	s.rv = snap.rv
	s.compacted = min(s.compacted, s.rv)
	s.tickRV = min(s.tickRV, s.rv)
	if bumpRevision > 0 {
		s.rv += bumpRevision
		s.compacted = s.rv
	}
	s.cacheRV = s.rv
	s.relistLocked()
	s.restartLocked()
}
