package status

import (
	"context"
	"errors"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

// QueueStandby hands key to the standby writer ([Writer.RunStandby])
// until a Reconcile has reached the status step: call it from the
// accumulator's OnChange and the owner informer's handler, beside queueing
// the key for the controller. A key queued before RunStandby starts waits
// for it (each once); none is kept once it has ended. It never blocks.
func (w *Writer) QueueStandby(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.reconciling || w.standbyEnded:
	case w.standby != nil:
		w.standby.Add(key)
	default:
		w.pending[key] = struct{}{}
	}
}

// RunStandby runs the standby writer until ctx is done, and returns nil
// then, once its goroutine has ended: each owner handed to
// [Writer.QueueStandby] is read with read (the controller's cache, say)
// and written by [Writer.Standby], until the first [Writer.Write], when it
// stands down for good. An owner read as NotFound is deleted, and
// dropped; a write the API server did not take ([ServerAway]) is tried
// again after the step's backoff ([RetryFirst] doubling to [RetryMax]),
// logged at V(1), so that the write follows the API server's return
// within a minute however long it was away; a conflict is retried with
// the queue's backoff, quietly; any other failure is logged at error
// level and retried with it. It fails if it already runs.
func (w *Writer) RunStandby(ctx context.Context, read GetFunc) error {
	if read == nil {
		return errors.New("watchgrade/readiness/status: RunStandby needs a read function")
	}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName]())
	w.mu.Lock()
	if w.standby != nil || w.standbyEnded {
		w.mu.Unlock()
		q.ShutDown()
		return errors.New("watchgrade/readiness/status: the standby writer already runs")
	}
	w.standby = q
	for key := range w.pending {
		q.Add(key)
	}
	clear(w.pending)
	w.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() {
		for w.standbyNext(ctx, q, read) {
		}
	})
	<-ctx.Done()
	w.mu.Lock()
	w.standbyEnded = true
	w.mu.Unlock()
	q.ShutDown()
	wg.Wait()
	return nil
}

// standbyNext writes the next owner of the standby queue, unless a
// Reconcile has reached the status step. It returns false once the queue
// has shut down.
func (w *Writer) standbyNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[types.NamespacedName], read GetFunc) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	w.mu.Lock()
	done := w.reconciling
	w.mu.Unlock()
	if done {
		q.Forget(key)
		return true
	}
	obj, err := read(ctx, key)
	switch {
	case apierrors.IsNotFound(err):
		q.Forget(key) // deleted: its delete event forgets it
		return true
	case err != nil && ServerAway(err):
		w.opts.Logger.V(1).Info("cannot read the owner for the standby status write; retrying", "name", key, "err", err.Error())
		q.AddRateLimited(key)
		return true
	case err != nil:
		if ctx.Err() == nil {
			w.opts.Logger.Error(err, "cannot read the owner for the standby status write; retrying", "name", key)
			q.AddRateLimited(key)
		}
		return true
	}
	out := w.Standby(ctx, obj)
	switch out.Outcome {
	case Unavailable:
		w.opts.Logger.V(1).Info("the API server did not take the standby status write; retrying", "name", key, "after", out.RequeueAfter, "err", out.Retry.Error())
		q.Forget(key)
		q.AddAfter(key, out.RequeueAfter)
	case Conflict:
		q.AddRateLimited(key)
	case Failed:
		w.opts.Logger.Error(out.Err, "standby status write failed; retrying", "name", key)
		q.AddRateLimited(key)
	case Cancelled:
	default:
		q.Forget(key)
	}
	return true
}
