// Package status is the status step of a controller that publishes the
// kstatus trio: the one place where an owner's conditions and
// status.observedGeneration are decided, written, and followed by their
// Event and their time-to-first-Ready sighting. Every path calls it:
// a client-go controller, controller-runtime through
// [github.com/watchgrade/watchgrade/examples/wgctrl], and the judges that
// play this repository's histories, so the rule is written once.
//
// Import it as wgstatus:
//
//	import wgstatus "github.com/watchgrade/watchgrade/readiness/status"
//
// At the end of each Reconcile, hand the owner as read and what the
// Reconcile returned to [Writer.Write], and return what it says:
//
//	res := r.status.Write(ctx, obj, reconcileErr)
//	return res.RequeueAfter, res.Err
//
// # The write rule
//
// Write applies the [readiness.Accumulator]'s verdict to the owner's
// conditions and writes them with status.observedGeneration in one status
// update, and only when something a reader sees changes:
//
//   - never over a status that observes a newer generation than the object
//     as read (another process, or a later Reconcile, wrote it);
//   - when the conditions changed;
//   - or, with the conditions unchanged, when status.observedGeneration
//     lags the generation and the conditions observe it (their Ready was
//     decided for this generation): observedGeneration written alone over
//     a stall that a restart holds for an earlier generation would have
//     kstatus read it as this generation's. Once the API server has been
//     seen to drop status.observedGeneration (a status schema without the
//     field), it is not written for again: every Reconcile would write.
//
// The new status is set on obj in place before the update, and obj takes
// the resourceVersion written: a second Write in one Reconcile sees what
// the first wrote, and records no second Event. The Event
// ([events.Recorder.Record]) and the sightings of time-to-first-Ready and
// of the first outcome, Ready or Stalled
// ([metrics.FirstReady.ObserveConditions]) follow the write that
// succeeded, never one that failed.
//
// # A Reconcile that failed
//
// Ready=True means the generation was reconciled and no data is being
// lost, so a Reconcile's error is a gate of its own, named
// [GateReconcile], set before the verdict and removed by the next
// Reconcile that succeeds:
//
//	Reconcile returned                     gate             kstatus
//	-------------------------------------  ---------------  -----------
//	nil                                    none             as the rest
//	an error                               progressing      InProgress
//	an error, failing for ProgressDeadline stalled          Failed
//	a Terminal error                       stalled          Failed
//
// A transient failure's message says which generation failed and that it
// is retried, never the error's text: a message that changes with every
// retry is a status write per retry. A stalled one (Terminal, or past
// [Options.ProgressDeadline] since the generation's first failure) carries
// the error's first line, cut to [readiness.Options.MessageLimit], frozen
// when it stalled: a human must act, and needs the cause. A conflict
// returned by the Reconcile (its own write of a child, read stale) is not
// a failure: nothing is written, and the owner is reconciled again soon.
//
// # The outcome
//
// [Result] says what happened and what the caller does: [Result.Err] is
// non-nil only for what must be logged at error level and retried (a
// status write the API server refused, for RBAC say); a conflict that
// kept conflicting asks for a requeue after [ConflictRetry], quietly; a
// write the API server did not take for being away or overloaded
// ([ServerAway]: a refused connection, a timeout, 429, 5xx) is
// Unavailable, requeued after [Result.RequeueAfter] ([RetryFirst],
// doubling to [RetryMax]) with [Result.Retry] to log at a verbose level,
// however long it lasts, as the streams' own transient trouble is (one
// Info line once it has lasted the progress deadline: the streams, which
// grade the API server's health, Stall the owners by then). A
// Reconcile's own failure of that kind is quiet too (Retry, with no
// error to return) while its gate progresses, and an error again once it
// has failed for the progress deadline and Stalled the owner. A
// Reconcile that could not read its owner hands the read's error to
// [Writer.ReadFailed]: deleted, away, or failed; a NotFound is the
// owner deleted under the Reconcile, forgotten everywhere, unless the
// owner still exists, which means its kind serves no status subresource:
// an error naming the fix. A cancelled context (the controller stopping)
// is nothing to report.
//
// # What an owner depends on
//
// [Writer.Track] says which streams an owner's verdict follows: the kinds
// it depends on ([Dependencies.Kinds], stream names such as
// "ConfigMap.v1") in the namespaces it depends on them in, through the
// process's informers ([Options.Streams], a [watch.Streams]): the kind's
// worst state, or each namespace's own where the cache is restricted to
// namespaces; and further streams by name. What nothing watches is a
// Stalled gate, not a Reconciling that never ends: a stream name no
// informer has ([ReasonUnknownStream]), a namespace the cache made no
// informer of the kind in ([Writer.NotWatched],
// [ReasonNamespaceNotWatched]), and a kind the API server does not serve
// once it has not been served for [Options.HumanGrace]
// ([Writer.NotServed]: its stream Blocked under every name an owner
// follows it by, [watch.ReasonResourceNotFound], until [Writer.Served];
// [Writer.AwaitInformer] asks whether the kind is served, reports it, and
// starts its informer once it is, one call per kind that may not be
// installed yet).
// [Writer.TrackStreams] adds streams one owner depends on beyond its
// Dependencies, kept as it is tracked again. [Writer.Forget] forgets a
// deleted owner everywhere, what it depends on included; [Writer.TrackedNamespaces] says which namespaces the owners
// tracked need informers in. [Writer.OwnerHandler] is the owner
// informer's handler that does all of it: each owner sighted, tracked
// when what it depends on changed, queued when that or its generation
// changed, forgotten when deleted:
//
//	owners.AddEventHandler(status.OwnerHandler(wgstatus.OwnerEvents{
//		Dependencies: func(o metav1.Object) wgstatus.Dependencies {
//			return wgstatus.Dependencies{Kinds: []string{"ConfigMap.v1"}, Namespaces: []string{o.GetNamespace()}}
//		},
//		Changed: queue.Add,
//	}))
//
// # The standby writer
//
// While a controller's workers wait (its caches syncing, its lease not
// yet held), [Writer.Standby] writes only what must not wait for them
// ([readiness.Accumulator.ApplyStandby]), and for the generation an
// earlier process observed, never one no Reconcile handled. It stands down
// at the first Write: from then on the Reconcile writes. [Writer.RunStandby]
// runs it, over a queue of its own that [Writer.QueueStandby] feeds (from
// the accumulator's OnChange and the owner informer's handler): the API
// server away is retried within the step's backoff, quietly, and a key
// queued before it runs waits for it.
package status
