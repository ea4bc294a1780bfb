package watch

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// LogOptions configures [WatchErrorLogger]. The zero value works.
type LogOptions struct {
	// Policy holds the graces the log follows: TransientGrace and
	// HumanGrace, as [Grade] publishes. Defaults to Policy's defaults.
	Policy Policy
	// Quiet is how long a reflector may hand no error before its next
	// error starts a new stretch of trouble. Defaults to DefaultLogQuiet.
	Quiet time.Duration
	// Clock times the stretches. Defaults to the real clock.
	Clock clock.PassiveClock
}

// DefaultLogQuiet is the default of [LogOptions.Quiet]: a reflector
// resets its backoff after 2 minutes of health.
const DefaultLogQuiet = 2 * time.Minute

// WatchErrorLogger returns a watch error handler for client-go's
// reflector (SharedIndexInformer.SetWatchErrorHandlerWithContext, or
// controller-runtime's cache.Options.DefaultWatchErrorHandler) that logs
// to log as [Grade] grades, where client-go's default logs every failed
// list or watch as an error:
//
//	what the reflector hands over                   logged
//	----------------------------------------------  -----------------------------------------
//	a close (io.EOF), an expired resourceVersion    V(1): routine
//	transient trouble (429, 5xx, timeouts,          V(1), then once at Info when it has gone
//	  connection errors)                              on for TransientGrace (30 s)
//	trouble that needs a human (401, 403, 404,      V(1), then once at Error when it has gone
//	  400, a refused certificate)                     on for HumanGrace (15 s)
//
// "Once" is per stretch of trouble of one reflector: errors that follow
// each other with less than [LogOptions.Quiet] between them and no close
// or expiry (the server answering) among them; the next stretch logs
// again, so a denial repaired and soon made again is logged again. A
// refusal that needs a human more than a minute after the reflector's
// last error (longer than its longest backoff: the server answered in
// between) begins a stretch of its own too: a 9-second denial, two
// minutes of health, then a denial repaired at once log nothing, where
// they logged an error "for 2m2s". Each
// line carries the reflector's type ("type", such as "*v1.ConfigMap"), the
// reason ([Classify]), and the error.
//
// The reflector still logs on its own, at Info, an ERROR event other than
// an expiry and a watch that ends very soon after it opened, and as errors
// a failed type assertion or an unsupported event. Safe for concurrent use.
func WatchErrorLogger(log logr.Logger, opts LogOptions) cache.WatchErrorHandlerWithContext {
	l := &watchErrorLog{log: log, policy: opts.Policy.withDefaults(), quiet: opts.Quiet, clock: opts.Clock, trouble: map[*cache.Reflector]*stretch{}}
	if l.quiet <= 0 {
		l.quiet = DefaultLogQuiet
	}
	if l.clock == nil {
		l.clock = clock.RealClock{}
	}
	return l.handle
}

// The reflector's backoff, as client-go v0.37's reflector configures it:
// its wait after each attempt that failed starts at 800 ms and doubles,
// capped at 30 s, each jittered up to twice as long; it starts again from
// 800 ms once 2 minutes have passed since it last did.
const (
	reflectorBackoffInit  = 800 * time.Millisecond
	reflectorBackoffMax   = 30 * time.Second
	reflectorBackoffReset = 2 * time.Minute
	// refusalLatency is how long a refusal that needs a human (401, 403,
	// 404) may take to come back, generously: the API server
	// authenticates and authorizes before it lists.
	refusalLatency = 5 * time.Second
)

// longestRetry is the longest a reflector that failed attempts times in
// the last reflectorBackoffReset waits before its next attempt, and the
// time a refusal takes to come back: two refusals that need a human
// further apart than that had the server answering in between (a list
// that succeeded, a watch that stayed open).
func longestRetry(attempts int) time.Duration {
	wait := reflectorBackoffInit
	for i := 1; i < attempts && wait < reflectorBackoffMax; i++ {
		wait *= 2
	}
	return 2*min(wait, reflectorBackoffMax) + refusalLatency
}

// forgetAbove is how many reflectors a WatchErrorLogger remembers before it
// forgets those whose trouble is over.
const forgetAbove = 64

type watchErrorLog struct {
	log    logr.Logger
	policy Policy
	quiet  time.Duration
	clock  clock.PassiveClock

	mu      sync.Mutex
	trouble map[*cache.Reflector]*stretch
}

// stretch is one reflector's trouble so far.
type stretch struct {
	// calls are the times of the reflector's errors in the last
	// reflectorBackoffReset, this stretch's and the one before it.
	calls []time.Time
	// over is true once the server answered (a close, an expiry): the
	// next error begins a stretch of its own.
	over          bool
	since, last   time.Time // the first and the latest error
	humanSince    time.Time // the first of the errors in a row that need a human
	logged, paged bool      // logged at Info, at Error
}

// recent returns s.calls of the last reflectorBackoffReset before now.
func (s *stretch) recent(now time.Time) []time.Time {
	return slices.DeleteFunc(s.calls, func(t time.Time) bool { return now.Sub(t) > reflectorBackoffReset })
}

// attempts counts the errors of s.calls in the reflectorBackoffReset up
// to at: at most how many times the reflector's backoff has doubled.
func (s *stretch) attempts(at time.Time) int {
	n := 0
	for _, t := range s.calls {
		if !t.After(at) && at.Sub(t) <= reflectorBackoffReset {
			n++
		}
	}
	return n
}

func (l *watchErrorLog) handle(_ context.Context, r *cache.Reflector, err error) {
	if err == nil {
		return
	}
	class, reason := Classify(err)
	if errors.Is(err, io.EOF) {
		class, reason = ClassNone, "" // a close, not a failed connection
	}
	log := l.log.WithValues("type", r.TypeDescription(), "reason", reason)
	if class == ClassNone || class == ClassExpired {
		// The server answered: a watch opened and closed, or a cursor
		// expired. The trouble, if any, is over: the next error starts a
		// stretch of its own.
		// The reflector's backoff still counts it.
		now := l.clock.Now()
		l.mu.Lock()
		var calls []time.Time
		if s := l.trouble[r]; s != nil {
			calls = s.recent(now)
		}
		l.trouble[r] = &stretch{since: now, last: now, calls: append(calls, now), over: true}
		l.mu.Unlock()
		log.V(1).Info("watch closed", "err", err)
		return
	}
	now := l.clock.Now()
	l.mu.Lock()
	s := l.trouble[r]
	// A refusal that needs a human longer after the reflector's last
	// error than its backoff waits (and the refusal takes) had the
	// server answering in between (a list, a watch that stayed open): it
	// begins trouble of its own.
	if s == nil || s.over || now.Sub(s.last) >= l.quiet || class == ClassNeedsHuman && now.Sub(s.last) > longestRetry(s.attempts(s.last)) {
		if s == nil && len(l.trouble) >= forgetAbove {
			for k, t := range l.trouble {
				if now.Sub(t.last) >= l.quiet {
					delete(l.trouble, k)
				}
			}
		}
		var calls []time.Time
		if s != nil {
			calls = s.calls
		}
		s = &stretch{since: now, calls: calls}
		l.trouble[r] = s
	}
	s.last = now
	s.calls = append(s.recent(now), now)
	if class != ClassNeedsHuman {
		s.humanSince = time.Time{}
	} else if s.humanSince.IsZero() {
		s.humanSince = now
	}
	page := class == ClassNeedsHuman && !s.paged && now.Sub(s.humanSince) >= l.policy.HumanGrace
	info := !page && !s.logged && !s.paged && now.Sub(s.since) >= l.policy.TransientGrace
	s.paged = s.paged || page
	s.logged = s.logged || info
	lasted := now.Sub(s.since).Round(time.Second)
	refused := now.Sub(s.humanSince).Round(time.Second)
	l.mu.Unlock()
	switch {
	case page:
		log.Error(err, "watch refused: a human must act", "for", refused)
	case info:
		log.Info("watch failing, retrying", "for", lasted, "err", err)
	default:
		log.V(1).Info("watch failed, retrying", "err", err)
	}
}
