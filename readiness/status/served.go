package status

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"

	"github.com/watchgrade/watchgrade/watch"
)

// DefaultServedEvery is how often [Writer.AwaitInformer] asks again
// whether a kind is served, and for its informer.
const DefaultServedEvery = 5 * time.Second

// Kind is a kind owners depend on whose informer [Writer.AwaitInformer]
// makes sure of.
type Kind struct {
	// Name is the kind's stream name ([watch.StreamName]). Required.
	Name string
	// Resource is the kind's resource, for the report's message.
	Resource schema.GroupResource
	// Served reports whether the API server serves the kind now: a
	// RESTMapper's answer (a meta.NoKindMatchError is "not served"), or
	// discovery's. An error is logged at V(1) and asked again. Nil: the
	// kind is taken as served, and Start's answer decides.
	Served func(ctx context.Context) (bool, error)
	// Start makes the kind's informer, without waiting for it to sync.
	// An error is asked again: one of kind meta.NoKindMatchError (a
	// RESTMapper about to catch up with a CRD just installed) and the
	// API server's transient trouble quietly, at V(1); any other at error
	// level. Required.
	Start func(ctx context.Context) error
	// Settle is how long a served kind is left to the rest of the process
	// before Start: a controller's own sources make the informers of the
	// kinds it watches as it starts, and ask again every 10 s while a
	// kind is not served (controller-runtime), so asking early would
	// make a second informer in another representation. 0: Start at once.
	Settle time.Duration
	// Every is how often the kind is asked about again. Defaults to
	// [DefaultServedEvery].
	Every time.Duration
	// Clock ticks Every and times Settle. Defaults to the real clock.
	Clock clock.WithTicker
}

// AwaitInformer makes sure an informer of k runs, and reports the kind
// while the API server does not serve it (its CustomResourceDefinition
// is not installed, or was removed): each time it is found not served,
// [Writer.NotServed] (every owner that depends on it is Stalled, reason
// ResourceNotFound, once that has lasted [Options.HumanGrace], and the
// probe of [Options.Streams] does not wait for an informer that cannot
// exist), and [Writer.Served] once it is served again. Once the kind has
// been served for k.Settle with no informer in [Options.Streams] named
// k.Name, it calls k.Start. It returns nil once the kind has an informer
// (made by Start or by anyone else), or ctx's error when ctx ends first.
//
// Run one per kind the owners depend on, for the life of the process
// (wgctrl does, for each watched kind); a client-go controller that
// starts its informers itself calls it for a kind that may not be
// installed yet, with Start starting the informer.
func (w *Writer) AwaitInformer(ctx context.Context, k Kind) error {
	if k.Every <= 0 {
		k.Every = DefaultServedEvery
	}
	if k.Clock == nil {
		k.Clock = clock.RealClock{}
	}
	t := k.Clock.NewTicker(k.Every)
	defer t.Stop()
	var servedSince time.Time // zero while the kind is not served
	for !w.streams.Has(k.Name) {
		served, err := true, error(nil)
		if k.Served != nil {
			served, err = k.Served(ctx)
		}
		switch {
		case err != nil:
			w.opts.Logger.V(1).Info("cannot tell whether the API server serves a kind the owners depend on yet; retrying", "kind", k.Name, "err", err.Error())
		case !served:
			servedSince = time.Time{}
			w.NotServed(k.Name, k.Resource)
		default:
			if servedSince.IsZero() {
				servedSince = k.Clock.Now()
			}
			w.Served(k.Name, k.Resource)
			if k.Clock.Since(servedSince) >= k.Settle {
				err := k.Start(ctx)
				if err == nil {
					return nil
				}
				w.startFailed(k.Name, err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
		}
	}
	w.Served(k.Name, k.Resource)
	return nil
}

// startFailed logs an error of [Kind.Start] at the level it deserves.
func (w *Writer) startFailed(kind string, err error) {
	switch class, _ := watch.Classify(err); {
	case meta.IsNoMatchError(err):
		// Served, says the RESTMapper that answered Served, not yet to
		// the one Start asked: no informer, so the probe waits for none.
		w.forgetSynced(kind)
		w.opts.Logger.V(1).Info("the kind's informer cannot be made yet: its mapping is not known everywhere; retrying", "kind", kind, "err", err.Error())
	case class == watch.ClassTransient:
		w.opts.Logger.V(1).Info("cannot make the kind's informer yet; retrying", "kind", kind, "err", err.Error())
	default:
		w.opts.Logger.Error(err, "cannot make the kind's informer; retrying", "kind", kind)
	}
}

// forgetSynced tells the probe of [Options.Streams], if any, not to wait
// for kind: it has no informer.
func (w *Writer) forgetSynced(kind string) {
	if w.streams.Synced != nil {
		w.streams.Synced.Forget(kind)
	}
}
