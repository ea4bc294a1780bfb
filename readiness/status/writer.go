package status

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/watchgrade/watchgrade/events"
	"github.com/watchgrade/watchgrade/metrics"
	"github.com/watchgrade/watchgrade/readiness"
	"github.com/watchgrade/watchgrade/watch"
)

// GateReconcile is the name of the gate a failed Reconcile sets.
const GateReconcile = "Reconcile"

// Reasons of the [GateReconcile] gate.
const (
	// ReasonReconcileFailed: the Reconcile of this generation failed and is
	// retried (progressing), or failed with a Terminal error or for longer
	// than the progress deadline (stalled).
	ReasonReconcileFailed = "ReconcileFailed"
)

// ConflictRetry is how soon an owner is reconciled again after its status
// write kept conflicting, or its Reconcile returned a conflict.
const ConflictRetry = 200 * time.Millisecond

// Outcome is what a [Writer.Write] or [Writer.Standby] did.
type Outcome string

const (
	// Unchanged: nothing a reader sees would change; nothing was written.
	Unchanged Outcome = "Unchanged"
	// Written: the status was written, and the Event, if any, recorded.
	Written Outcome = "Written"
	// Deleted: the owner is gone; it was forgotten everywhere.
	Deleted Outcome = "Deleted"
	// Conflict: the owner kept being written by someone else; reconcile
	// it again after [Result.RequeueAfter], quietly.
	Conflict Outcome = "Conflict"
	// Cancelled: the context ended (the controller is stopping).
	Cancelled Outcome = "Cancelled"
	// Unavailable: the API server did not take the write, for trouble its
	// streams grade as transient (a refused connection, a timeout, 429,
	// 5xx): reconcile the owner again after [Result.RequeueAfter],
	// quietly; [Result.Retry] says why.
	Unavailable Outcome = "Unavailable"
	// Failed: the write failed; [Result.Err] says why, for an error-level
	// log and a retry.
	Failed Outcome = "Failed"
)

// Retries of transient trouble: the first after RetryFirst, each next
// one twice as late, up to RetryMax.
const (
	RetryFirst = time.Second
	RetryMax   = time.Minute
)

// Result is the outcome of one status step.
type Result struct {
	Outcome Outcome
	// Err is non-nil only with Failed: return it from the Reconcile (it
	// is logged at error level and retried). Every other outcome is
	// routine.
	Err error
	// RequeueAfter, when positive, is when to reconcile the owner again.
	RequeueAfter time.Duration
	// Retry is the error no human need act on yet: the status write's
	// (Outcome Unavailable), or the Reconcile's own, given to Write, when
	// either failed on trouble the API server's streams grade as
	// transient (watch.Classify: a refused connection, a timeout, 429,
	// 5xx). Do not return it as an error (controller-runtime logs those
	// at error level); log it at a verbose level and reconcile again after
	// RequeueAfter (from RetryFirst, doubling to RetryMax). The
	// Reconcile's own is quiet while its gate progresses: once it has
	// failed for the progress deadline the owner is Stalled, with a
	// Warning, and Retry is nil (return the error). The write's is quiet
	// however long it lasts, as the streams' transient trouble is (one
	// Info line once it has lasted the progress deadline): the streams
	// grade the API server's health.
	Retry error
	// ReconcileErr is the error given to Write when the Reconcile is to
	// return it (controller-runtime logs it at error level and retries):
	// nil when none was given, when the owner is gone or the context
	// ended, and when it is the API server's trouble while the gate it
	// set progresses (Retry then holds it, unless the write's own does).
	ReconcileErr error
	// Before and After are the conditions as read and as decided; After
	// was written when Outcome is Written.
	Before, After []metav1.Condition
}

// Terminal marks err as a failure that retrying will not fix (an invalid
// spec): the owner is Stalled at once, with err's first line as the
// message. controller-runtime's reconcile.TerminalError means the same;
// wgctrl translates it.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return terminalError{err}
}

// IsTerminal reports whether err was marked by [Terminal].
func IsTerminal(err error) bool {
	var t terminalError
	return errors.As(err, &t)
}

type terminalError struct{ err error }

func (t terminalError) Error() string { return t.err.Error() }
func (t terminalError) Unwrap() error { return t.err }

// UpdateFunc writes obj's status (the status subresource) and returns the
// object as the API server answered it.
type UpdateFunc func(ctx context.Context, obj runtime.Object) (runtime.Object, error)

// GetFunc reads the owner named key from the API server (not a cache):
// to read it again after a conflict, and to tell a deleted owner from a
// kind without a status subresource.
type GetFunc func(ctx context.Context, key types.NamespacedName) (runtime.Object, error)

// Sightings is what the writer feeds time-to-first-Ready and the first
// outcomes (Ready or Stalled): [metrics.FirstReady] implements it.
type Sightings interface {
	ObserveConditions(gr schema.GroupResource, obj metav1.Object, conds []metav1.Condition) metrics.FirstReadyResult
	Delete(uid types.UID)
}

// Options configures a [Writer].
type Options struct {
	// Accumulator decides the verdict. Required.
	Accumulator *readiness.Accumulator
	// Update writes the status. Required.
	Update UpdateFunc
	// Get reads the owner from the API server. Optional: without it a
	// conflict is not retried in the step, and a NotFound is taken for a
	// deletion.
	Get GetFunc
	// Resource is the owner kind's, for time-to-first-Ready and messages.
	Resource schema.GroupResource
	// Events records the Event of each written transition. Optional.
	Events *events.Recorder
	// FirstReady is fed every owner the writer reads and writes. Optional.
	FirstReady Sightings
	// ProgressDeadline is how long a generation's Reconcile may keep
	// failing before the owner is Stalled. Defaults to
	// watch.DefaultProgressDeadline.
	ProgressDeadline time.Duration
	// Clock stamps conditions and times failures. Defaults to the real
	// clock.
	Clock clock.PassiveClock
	// Logger logs, once, that the API server drops
	// status.observedGeneration. Defaults to logr.Discard.
	Logger logr.Logger
	// Streams is the process's informers by stream name: [Writer.Track]
	// follows an owner's kinds through it, and gates a stream that none
	// of its informers is named after. Optional: without it, Track
	// follows each kind's name as it is, and no name is unknown.
	Streams *watch.Streams
	// HumanGrace is how long a kind may go unserved before
	// [Writer.NotServed] reports it. Defaults to watch.DefaultHumanGrace.
	HumanGrace time.Duration
}

// Writer is the status step of one owner kind. It is safe for concurrent
// use by a controller's workers.
type Writer struct {
	opts Options

	mu sync.Mutex
	// failing holds, by owner, the failures of its current generation's
	// Reconciles since the last that succeeded.
	failing map[types.NamespacedName]failure
	// dropped is set once the API server answered a write without
	// status.observedGeneration: its schema drops the field.
	dropped bool
	// reconciling is set at the first Write: the standby writer stands
	// down.
	reconciling bool
	// troubled holds, by owner, its streak of transient trouble (Retry).
	troubled map[types.NamespacedName]trouble
	// streams is Options.Streams, or an empty one.
	streams *watch.Streams
	// tracking serialises Track and Retrack, so that what the
	// accumulator tracks of an owner is what deps holds.
	tracking sync.Mutex
	// deps holds what each owner tracked depends on (Track).
	deps map[types.NamespacedName]Dependencies
	// extra holds, by owner, the streams TrackStreams set.
	extra map[types.NamespacedName][]string
	// notWatched holds, as watch.NamespacedStream, the kinds the cache
	// made no informer of in a namespace (NotWatched).
	notWatched map[string]bool
	// notServed holds, by kind, since when it is not served; the zero
	// time once reported.
	notServed map[string]time.Time
	// standby is the standby writer's queue once RunStandby runs;
	// pending holds the keys queued before it; standbyEnded is set once
	// it has ended.
	standby      workqueue.TypedRateLimitingInterface[types.NamespacedName]
	pending      map[types.NamespacedName]struct{}
	standbyEnded bool
	// gone holds the owners forgotten as deleted.
	gone map[types.NamespacedName]goneOwner
}

// trouble is an owner's streak of transient failures: since the first,
// and how many.
type trouble struct {
	since time.Time
	n     int
	told  bool // logged, once it lasted the progress deadline
}

// failure is an owner's streak of failed Reconciles of one generation.
type failure struct {
	generation int64
	since      time.Time
	n          int // failures so far
	// stalled is the message the gate was stalled with, frozen; empty
	// while it is progressing. terminal is true when a terminal error
	// stalled it: a later failure that is retried takes that back.
	stalled  string
	terminal bool
}

// New returns a Writer, or an error naming what Options lack.
func New(opts Options) (*Writer, error) {
	var errs []error
	if opts.Accumulator == nil {
		errs = append(errs, errors.New("Options.Accumulator is required"))
	}
	if opts.Update == nil {
		errs = append(errs, errors.New("Options.Update is required"))
	}
	if opts.ProgressDeadline < 0 {
		errs = append(errs, fmt.Errorf("Options.ProgressDeadline %s is negative", opts.ProgressDeadline))
	}
	if opts.HumanGrace < 0 {
		errs = append(errs, fmt.Errorf("Options.HumanGrace %s is negative", opts.HumanGrace))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("watchgrade/readiness/status: invalid options: %w", err)
	}
	if opts.ProgressDeadline == 0 {
		opts.ProgressDeadline = watch.DefaultProgressDeadline
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	if opts.HumanGrace == 0 {
		opts.HumanGrace = watch.DefaultHumanGrace
	}
	streams := opts.Streams
	if streams == nil {
		streams = &watch.Streams{}
	}
	return &Writer{
		opts: opts, streams: streams,
		failing:    make(map[types.NamespacedName]failure),
		troubled:   make(map[types.NamespacedName]trouble),
		deps:       make(map[types.NamespacedName]Dependencies),
		extra:      make(map[types.NamespacedName][]string),
		notWatched: make(map[string]bool),
		notServed:  make(map[string]time.Time),
		pending:    make(map[types.NamespacedName]struct{}),
		gone:       make(map[types.NamespacedName]goneOwner),
	}, nil
}

// Write is the status step at the end of a Reconcile of obj (the owner as
// the Reconcile read it, typed or unstructured), which returned
// reconcileErr: see the package documentation. obj takes the status
// written and its resourceVersion. Call it after the Reconcile has set its
// own gates ([readiness.Accumulator.SetGate]) and tracked the owner's
// streams.
func (w *Writer) Write(ctx context.Context, obj runtime.Object, reconcileErr error) Result {
	w.mu.Lock()
	w.reconciling = true
	w.mu.Unlock()
	m, err := meta.Accessor(obj)
	if err != nil {
		return Result{Outcome: Failed, Err: fmt.Errorf("watchgrade/readiness/status: %w", err)}
	}
	switch {
	case ctx.Err() != nil:
		return Result{Outcome: Cancelled}
	case apierrors.IsConflict(reconcileErr):
		// The Reconcile's own write read a stale object: routine, and the
		// next Reconcile reads afresh.
		return Result{Outcome: Conflict, RequeueAfter: ConflictRetry}
	}
	key := types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}
	if w.wasDeleted(key, m.GetUID()) {
		return Result{Outcome: Deleted}
	}
	w.gate(key, m.GetGeneration(), reconcileErr)
	res := w.write(ctx, obj, key, m.GetGeneration(), false)
	if reconcileErr != nil && res.Outcome != Cancelled && res.Outcome != Deleted {
		res.ReconcileErr = reconcileErr
		w.mu.Lock()
		f := w.failing[key]
		w.mu.Unlock()
		if !IsTerminal(reconcileErr) && ServerAway(reconcileErr) && f.stalled == "" {
			// The Reconcile's own transient failure: quiet while its
			// gate progresses (it stalls at the progress deadline).
			res.ReconcileErr = nil
			if res.Retry == nil && res.Outcome != Failed {
				res.Retry, res.RequeueAfter = reconcileErr, backoff(f.n)
			}
		}
	}
	return res
}

// ServerAway reports whether err is the API server away or overloaded,
// as the streams grade it (watch.Classify): a refused or reset
// connection, a timeout, 429 Too Many Requests, a 5xx. Such trouble is
// retried quietly (Retry); anything else, an error of the Reconcile's own
// making included, is not.
func ServerAway(err error) bool {
	class, reason := watch.Classify(err)
	return class == watch.ClassTransient && reason != watch.ReasonWatchFailed
}

// troubledFor counts one more transient failure, err, of key's status
// write and returns when to try again. A streak that has lasted the
// progress deadline is logged once, at Info, as watch.WatchErrorLogger
// logs a stream's transient trouble: never at error level, since the
// streams grade the API server's health (an outage that long Stalls the
// owners that depend on them).
func (w *Writer) troubledFor(key types.NamespacedName, err error) time.Duration {
	now := w.opts.Clock.Now()
	w.mu.Lock()
	t, ok := w.troubled[key]
	if !ok {
		t = trouble{since: now}
	}
	t.n++
	long := !t.told && now.Sub(t.since) >= w.opts.ProgressDeadline
	t.told = t.told || long
	w.troubled[key] = t
	w.mu.Unlock()
	if long {
		w.opts.Logger.Info("the API server has not taken the owner's status writes for the progress deadline; retrying", "resource", w.kind(), "name", key, "for", now.Sub(t.since).String(), "err", err.Error())
	}
	return backoff(t.n)
}

// backoff is the wait before the retry that follows the n-th failure of
// a streak: RetryFirst, doubling, at most RetryMax.
func backoff(n int) time.Duration {
	after := RetryFirst
	for i := 1; i < n && after < RetryMax; i++ {
		after *= 2
	}
	return min(after, RetryMax)
}

// untroubled ends key's streak of transient failures.
func (w *Writer) untroubled(key types.NamespacedName) {
	w.mu.Lock()
	delete(w.troubled, key)
	w.mu.Unlock()
}

// Standby is the standby writer's step for obj, while the controller's
// workers wait: it writes what must not wait for them, for the generation
// an earlier process observed. Once [Writer.Write] has run it does
// nothing (Unchanged): the Reconcile writes.
func (w *Writer) Standby(ctx context.Context, obj runtime.Object) Result {
	w.mu.Lock()
	done := w.reconciling
	w.mu.Unlock()
	if done {
		return Result{Outcome: Unchanged}
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return Result{Outcome: Failed, Err: fmt.Errorf("watchgrade/readiness/status: %w", err)}
	}
	if ctx.Err() != nil {
		return Result{Outcome: Cancelled}
	}
	key := types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}
	if w.wasDeleted(key, m.GetUID()) {
		return Result{Outcome: Deleted}
	}
	return w.write(ctx, obj, key, m.GetGeneration(), true)
}

// ReadFailed is the status step of a Reconcile that could not read its
// owner, err being the read's error: a NotFound is the owner deleted
// (Deleted: forgotten everywhere, as [Writer.Forget] does); trouble the
// API server's streams grade as transient (a refused connection, a
// timeout, 429, 5xx) is Unavailable, retried quietly, from RetryFirst
// doubling to RetryMax; a cancelled context is Cancelled; anything else
// Failed, with err.
func (w *Writer) ReadFailed(ctx context.Context, key types.NamespacedName, err error) Result {
	switch {
	case ctx.Err() != nil:
		return Result{Outcome: Cancelled}
	case apierrors.IsNotFound(err):
		w.Forget(key, "")
		return Result{Outcome: Deleted}
	case ServerAway(err):
		return Result{Outcome: Unavailable, Retry: err, RequeueAfter: w.troubledFor(key, err)}
	}
	return Result{Outcome: Failed, Err: err}
}

// Forget forgets a deleted owner everywhere: its streams and gates in the
// Accumulator, what it depends on ([Writer.Track]), its time-to-first-Ready
// claim, its failures. Call it from the owner informer's delete handler
// ([Writer.OwnerHandler] does). With uid, the owner stays forgotten: a
// Reconcile that read it before it was deleted, and tracked it again,
// writes nothing (Deleted), and it is forgotten again. OwnerHandler keeps
// an owner without a UID (a fake client's) forgotten too, until it sees
// one added under the name.
func (w *Writer) Forget(key types.NamespacedName, uid types.UID) {
	w.forget(key, uid, uid != "")
}

// forget is Forget; remember keeps the owner forgotten (see wasDeleted).
func (w *Writer) forget(key types.NamespacedName, uid types.UID, remember bool) {
	w.tracking.Lock()
	defer w.tracking.Unlock()
	w.opts.Accumulator.RemoveOwner(key)
	if w.opts.FirstReady != nil && uid != "" {
		w.opts.FirstReady.Delete(uid)
	}
	w.mu.Lock()
	delete(w.failing, key)
	delete(w.troubled, key)
	delete(w.deps, key)
	delete(w.extra, key)
	delete(w.pending, key)
	now := w.opts.Clock.Now()
	for k, g := range w.gone {
		if now.Sub(g.at) > rememberDeleted {
			delete(w.gone, k)
		}
	}
	if remember {
		w.gone[key] = goneOwner{uid: uid, at: now}
	}
	w.mu.Unlock()
}

// rememberDeleted is how long the writer remembers an owner forgotten as
// deleted, so that a Reconcile that read it before its deletion does not
// bring it back: far longer than any Reconcile.
const rememberDeleted = 10 * time.Minute

// goneOwner is an owner forgotten as deleted: its UID, and when.
type goneOwner struct {
	uid types.UID
	at  time.Time
}

// wasDeleted reports whether the owner key of uid was forgotten as
// deleted ([Writer.Forget]); if so, it forgets it again: a Reconcile that
// read the owner before it was deleted tracked it since, and writes
// nothing. Without UIDs (a fake client's objects), only OwnerHandler's
// delete remembers the owner, until it sees one added under the name.
func (w *Writer) wasDeleted(key types.NamespacedName, uid types.UID) bool {
	w.mu.Lock()
	g, ok := w.gone[key]
	w.mu.Unlock()
	gone := ok && g.uid == uid
	if gone {
		w.Forget(key, uid)
	}
	return gone
}

// Sight feeds time-to-first-Ready one sighting of obj with its conditions
// as they are: call it from the owner informer's handlers, so that an
// owner that became Ready while no Reconcile ran is still seen once.
func (w *Writer) Sight(obj runtime.Object) {
	if w.opts.FirstReady == nil {
		return
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	if conds, _, err := readObject(obj); err == nil {
		w.sight(m, conds)
	}
}

func (w *Writer) sight(m metav1.Object, conds []metav1.Condition) {
	if w.opts.FirstReady != nil {
		w.opts.FirstReady.ObserveConditions(w.opts.Resource, m, conds)
	}
}

// gate sets or removes key's GateReconcile for a Reconcile of generation
// that returned err.
func (w *Writer) gate(key types.NamespacedName, generation int64, err error) {
	acc := w.opts.Accumulator
	if err == nil {
		w.mu.Lock()
		delete(w.failing, key)
		w.mu.Unlock()
		acc.RemoveGate(key, GateReconcile)
		return
	}
	now := w.opts.Clock.Now()
	w.mu.Lock()
	f, ok := w.failing[key]
	if !ok || f.generation != generation {
		f = failure{generation: generation, since: now}
	}
	f.n++
	if f.terminal && !IsTerminal(err) {
		// Run again (a spec change, a child's event) and failing in a way
		// that is retried: in progress again, not a human's to fix.
		f.stalled, f.terminal = "", false
	}
	if f.stalled == "" {
		f.terminal = IsTerminal(err)
		switch {
		case IsTerminal(err):
			f.stalled = fmt.Sprintf("the reconcile of generation %d failed and will not be retried: %s", generation, firstLine(err))
		case now.Sub(f.since) >= w.opts.ProgressDeadline:
			f.stalled = fmt.Sprintf("the reconcile of generation %d has failed for %s: %s", generation, w.opts.ProgressDeadline, firstLine(err))
		}
	}
	w.failing[key] = f
	w.mu.Unlock()
	if f.stalled != "" {
		acc.SetGate(key, readiness.Stalled(GateReconcile, ReasonReconcileFailed, f.stalled))
		return
	}
	acc.SetGate(key, readiness.Progressing(GateReconcile, ReasonReconcileFailed,
		fmt.Sprintf("the reconcile of generation %d failed; retrying", generation)))
}

// firstLine is err's text up to its first line break.
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return strings.TrimSpace(s)
}

// write is one status step for obj of generation, with the conflict
// retries: each reads the owner again (Options.Get) and writes for the
// same generation, the one the Reconcile handled.
func (w *Writer) write(ctx context.Context, obj runtime.Object, key types.NamespacedName, generation int64, standby bool) Result {
	var res Result
	var err error
	if w.opts.Get == nil {
		res, err = w.writeOnce(ctx, obj, obj, generation, standby)
	} else {
		read := obj
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if read == nil {
				fresh, err := w.opts.Get(ctx, key)
				if err != nil {
					return err
				}
				read = fresh
			}
			var err error
			res, err = w.writeOnce(ctx, read, obj, generation, standby)
			read = nil
			return err
		})
	}
	if err == nil || apierrors.IsConflict(err) {
		w.untroubled(key)
	} else if ServerAway(err) && ctx.Err() == nil {
		return Result{Outcome: Unavailable, Retry: err, RequeueAfter: w.troubledFor(key, err), Before: res.Before, After: res.After}
	}
	switch {
	case err == nil:
		return res
	case ctx.Err() != nil:
		return Result{Outcome: Cancelled, Before: res.Before, After: res.After}
	case apierrors.IsConflict(err):
		return Result{Outcome: Conflict, RequeueAfter: ConflictRetry, Before: res.Before, After: res.After}
	case apierrors.IsNotFound(err):
		return w.notFound(ctx, obj, key, res, err)
	}
	return Result{Outcome: Failed, Err: err, Before: res.Before, After: res.After}
}

// notFound tells an owner deleted under the Reconcile from a kind whose
// status write is answered 404 because it serves no status subresource.
func (w *Writer) notFound(ctx context.Context, obj runtime.Object, key types.NamespacedName, res Result, err error) Result {
	if w.opts.Get != nil {
		if _, gerr := w.opts.Get(ctx, key); gerr == nil {
			return Result{Outcome: Failed, Before: res.Before, After: res.After, Err: fmt.Errorf(
				"watchgrade/readiness/status: the status write of %s %s was answered NotFound while the object exists: "+
					"its kind serves no status subresource (add `// +kubebuilder:subresource:status` to the type and regenerate the CRD): %w",
				w.kind(), key, err)}
		}
	}
	var uid types.UID
	if m, merr := meta.Accessor(obj); merr == nil {
		uid = m.GetUID()
	}
	w.Forget(key, uid)
	return Result{Outcome: Deleted, Before: res.Before, After: res.After}
}

func (w *Writer) kind() string {
	if w.opts.Resource.Empty() {
		return "owner"
	}
	return w.opts.Resource.String()
}

// writeOnce applies the verdict to read (the owner as read) and writes it
// when the rule says so; on success orig (the caller's object) takes the
// status written and its resourceVersion.
func (w *Writer) writeOnce(ctx context.Context, read, orig runtime.Object, generation int64, standby bool) (Result, error) {
	m, err := meta.Accessor(read)
	if err != nil {
		return Result{}, err
	}
	key := types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}
	before, observed, err := readObject(read)
	if err != nil {
		return Result{}, fmt.Errorf("watchgrade/readiness/status: %s %s: %w", w.kind(), key, err)
	}
	w.sight(m, before)
	if standby && observed > 0 {
		// No Reconcile of this process has run: write for the generation
		// an earlier one observed, never for one no Reconcile handled (a
		// spec change while the workers wait).
		generation = observed
	}
	res := Result{Outcome: Unchanged, Before: before}
	if observed > generation {
		return res, nil // a newer generation's status: not ours to write over
	}
	after := slices.Clone(before)
	now := w.opts.Clock.Now()
	var changed bool
	if standby {
		changed = w.opts.Accumulator.ApplyStandby(key, &after, generation, now)
	} else {
		changed = w.opts.Accumulator.Apply(key, &after, generation, now)
	}
	res.After = after
	w.mu.Lock()
	dropped := w.dropped
	w.mu.Unlock()
	if !changed && (standby || observed == generation || dropped || !readiness.Observes(after, generation)) {
		// Nothing a reader sees would change. observedGeneration alone
		// over conditions that do not observe it would have kstatus read
		// them as this generation's.
		return res, nil
	}
	out := read.DeepCopyObject()
	if err := writeObject(out, after, generation); err != nil {
		return res, fmt.Errorf("watchgrade/readiness/status: %s %s: %w", w.kind(), key, err)
	}
	written, err := w.opts.Update(ctx, out)
	if err != nil {
		return res, err
	}
	if written == nil {
		written = out
	}
	if _, got, rerr := readObject(written); rerr == nil && got == 0 && generation != 0 {
		w.mu.Lock()
		first := !w.dropped
		w.dropped = true
		w.mu.Unlock()
		if first {
			w.opts.Logger.Error(errors.New("status.observedGeneration was dropped by the API server"),
				"add `ObservedGeneration int64 `json:\"observedGeneration,omitempty\"`` to the status type and regenerate the CRD: kstatus and kubectl wait read it",
				"resource", w.kind())
		}
	}
	// The caller's object takes what was written: a second step in the
	// same Reconcile sees it. Both accessors succeed: read's did, and
	// written and orig are of its kind.
	wm, werr := meta.Accessor(written)
	om, oerr := meta.Accessor(orig)
	if werr == nil && oerr == nil && writeObject(orig, after, generation) == nil {
		om.SetResourceVersion(wm.GetResourceVersion())
	}
	if werr == nil {
		w.sight(wm, after)
	}
	if w.opts.Events != nil {
		w.opts.Events.Record(orig, before, after)
	}
	res.Outcome = Written
	return res, nil
}
