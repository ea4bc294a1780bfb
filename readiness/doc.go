// Package readiness turns what an object's readiness depends on (its gates:
// watch streams and dependencies of the caller's own) into the kstatus trio
// of conditions, Ready, Reconciling and Stalled, that kstatus, kubectl wait,
// Flux, Argo CD and alerting all read.
//
// Import it as wgreadiness, next to wgwatch and wgevents:
//
//	import wgreadiness "github.com/watchgrade/watchgrade/readiness"
//
// One pure function decides, [Rollup]; [Apply] writes its result onto an
// object's conditions with apimachinery's semantics; an [Accumulator]
// collects stream states from [watch.Observer] calls and tells the
// controller which owner to requeue, at a cost per state change that does
// not grow with the number of owners. Package
// [github.com/watchgrade/watchgrade/readiness/readinesstest] checks
// conditions against every rule below, for your tests.
//
// # Gates
//
// A [Gate] is established, progressing or stalled ([Level]), with a reason
// and a message. Streams map onto gates by their state ([StreamLevel]):
//
//	stream state                                  gate
//	--------------------------------------------  -----------
//	Streaming                                     established
//	Starting, Replaying                           progressing
//	Blocked, transient (being retried)            progressing
//	Blocked, needs a human or past the deadline   stalled
//
// A routine session ending publishes no state (see package watch), so a
// stream that reconnects from its cursor stays established, and Ready=True
// keeps meaning that no data is being lost.
//
// # The mapping
//
// The worst gate decides:
//
//	worst gate   Ready                                     Reconciling  Stalled  kstatus
//	-----------  ----------------------------------------  -----------  -------  ----------
//	stalled      False                                     absent       True     Failed
//	progressing  Unknown while never established, else     True         absent   InProgress
//	             False
//	established  True                                      absent       absent   Current
//
// Reasons and messages come from the worst gate (ties are broken by name);
// [Rollup]'s documentation holds the full table. An owner with no gates is
// progressing, or established if [Options.Empty] says so. An owner that was
// Ready for its generation and whose only unestablished gates are streams
// still starting keeps its conditions (see Restarts).
//
// # Invariants
//
// [Rollup] and [Apply] guarantee, and the tests of this package check with
// kstatus's own status.Compute:
//
//   - Reconciling and Stalled are never both present. The one that is not
//     True is removed, never written False: kstatus reads conditions in list
//     order, so both True would be ambiguous.
//   - Ready=Unknown implies Reconciling=True; Stalled=True implies
//     Ready=False; Ready is not True without Reconciling or Stalled being
//     True.
//   - Every condition's observedGeneration is the object's generation. Set
//     status.observedGeneration in the same write: kstatus reports
//     InProgress while it is behind metadata.generation (even for a stalled
//     object), and kubectl wait --for=condition=Ready waits for it.
//   - lastTransitionTime moves only when a condition's status moves
//     ([meta.SetStatusCondition] semantics), so a reconcile that changes
//     nothing writes nothing.
//   - The same gates give byte-identical conditions, in any order. Messages
//     change only when a gate does: keep timestamps, counters and
//     retry-by-retry error text out of gate messages (streams already do).
//   - Messages name at most [Options.MaxListed] gates, end with
//     "… and N more", and fit [Options.MessageLimit] (at most 32768 bytes);
//     reasons match the CRD pattern ([ValidReason]).
//
// # Ever established
//
// Ready=Unknown is written only while the owner has never been established;
// afterwards a progressing owner is Ready=False. Whether it ever was is
// read from the owner's persisted conditions, the existing argument of
// [Rollup] and [Apply], not from memory, so it survives a controller
// restart ([EverEstablished]):
//
//   - an existing Ready that is True or False means established before. This
//     is conservative: an owner that stalled before it was ever Ready has
//     Ready=False and counts as established after a restart;
//   - an existing Ready that is Unknown, or no Ready, means never.
//
// So once an owner has been written Ready=True or Ready=False, it never goes
// back to Unknown, not even when every stream replays after a restart (and
// within the start grace, an owner that was Ready stays Ready: see
// Restarts). The
// metrics package relies on this for its time-to-first-Ready histogram: an
// object first seen with Ready Unknown or absent has never been established,
// and one first seen with Ready True or False was established before, so its
// first Ready is not in the future.
//
// # Restarts
//
// A controller restart is the common case in production: every rollout.
// Its streams start over, and each owner's gates are progressing until
// they are established again. Written out, that would flip every owner
// from Ready=True to Ready=False with Reconciling=True and back: thousands
// of status writes and Events for a rollout of a controller that owns
// thousands of objects, and every GitOps tool seeing them InProgress while
// nothing changed.
//
// So an [Accumulator] lets the persisted conditions stand while the
// owner's streams start over. [Accumulator.Apply] then changes nothing,
// byte for byte, [Options.StreamsCondition] included, so a reconcile
// writes no status and records no Event.
//
// The rule, exactly. An owner is held when all of these are true:
//
//   - its persisted Ready is True, with observedGeneration equal to the
//     generation passed to Apply (a new generation is never held: the
//     controller has work to do);
//   - none of its gates is stalled;
//   - every gate that is not established is a stream gate that is
//     [Gate.Starting], and there is at least one: a stream that the
//     accumulator has not seen established since it first heard of it
//     (first [Accumulator.Track] or first state, whichever came first),
//     whose last state is Starting or its first replay (InitialSync), or
//     that has not reported, and that it first heard of less than
//     [AccumulatorOptions.StartGrace] (30 s) ago by
//     [AccumulatorOptions.Clock]. A caller's own gate is never Starting
//     ([Accumulator.SetGate] drops the flag, and [Rollup] ignores it off a
//     stream gate), and a stream that has been established once is not
//     Starting again, even if it publishes Starting (Run called again),
//     until [Accumulator.RemoveStream] forgets it.
//
// While held, Ready keeps its status, reason, message and
// lastTransitionTime, and the streams condition stays as it was (or
// absent, if none was written before).
//
// The bound: an owner is held for at most StartGrace after the accumulator
// first heard of the streams it waits for, by its own clock. At that
// instant the accumulator calls OnChange for every owner tracking a stream
// that has not been established, so the reconcile that follows (whatever
// now it passes to Apply) writes the owner Reconciling, and Stalled as the
// table says. After a restart the accumulator hears of every stream at
// the first reconcile, so a persisted Ready=True stands at most StartGrace
// past it, plus the time the caller's queue takes to reconcile the owner.
//
// The trade-off: for up to that bound, a Ready=True written by the
// previous process stands while the new one catches up, and the stream's
// view is not complete yet. It was true when it was written, no change was
// made since (a new generation is not held), and a stream that does not
// establish within the grace ends the hold at once. A stream that fails
// during the grace (Blocked, or a replay after an expiry) is not starting
// any more, and is published as it is. Ready=Unknown stays reserved for
// owners never established.
//
// An apiserver restart is quiet too, one layer down: every cursor
// expires, and a stream that replays within its ReplayGrace publishes
// nothing (see package watch). So is an informer's relist.
//
// # Alerting
//
// Page on Stalled=True: a human must act. Raise a ticket on Ready != True
// (which includes Unknown) held for longer than a rollout or a replay may
// take, quoting the Reconciling reason. Never alert on Ready == False alone:
// it misses Unknown, and it fires for every owner while streams replay after
// a controller restart.
//
// Package [github.com/watchgrade/watchgrade/events] picks an Event's
// severity from Stalled in the same spirit.
package readiness
