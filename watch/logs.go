package watch

import (
	"context"
	"errors"
	"io"
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
// again, so a denial repaired and soon made again is logged again. Each
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
	since, last   time.Time // the first and the latest error
	humanSince    time.Time // the first of the errors in a row that need a human
	logged, paged bool      // logged at Info, at Error
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
		l.mu.Lock()
		delete(l.trouble, r)
		l.mu.Unlock()
		log.V(1).Info("watch closed", "err", err)
		return
	}
	now := l.clock.Now()
	l.mu.Lock()
	s := l.trouble[r]
	if s == nil || now.Sub(s.last) >= l.quiet {
		if s == nil && len(l.trouble) >= forgetAbove {
			for k, t := range l.trouble {
				if now.Sub(t.last) >= l.quiet {
					delete(l.trouble, k)
				}
			}
		}
		s = &stretch{since: now}
		l.trouble[r] = s
	}
	s.last = now
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
	l.mu.Unlock()
	switch {
	case page:
		log.Error(err, "watch refused: a human must act", "for", lasted)
	case info:
		log.Info("watch failing, retrying", "for", lasted, "err", err)
	default:
		log.V(1).Info("watch failed, retrying", "err", err)
	}
}
