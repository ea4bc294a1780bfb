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
// controller which owner to requeue. Package
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
// progressing, or established if [Options.Empty] says so.
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
// back to Unknown, not even when every stream replays after a restart. The
// metrics package relies on this for its time-to-first-Ready histogram: an
// object first seen with Ready Unknown or absent has never been established,
// and one first seen with Ready True or False was established before, so its
// first Ready is not in the future.
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
