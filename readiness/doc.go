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
// progressing, or established if [Options.Empty] says so. After a
// controller restart, an owner keeps the conditions it had until its
// streams show evidence against them (see Restarts).
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
// until its streams show evidence, an owner keeps the conditions it had:
// see Restarts). The
// metrics package relies on this for its time-to-first-Ready histogram: an
// object first seen with Ready Unknown or absent has never been established,
// and one first seen with Ready True or False was established before, so its
// first Ready is not in the future.
//
// # Restarts
//
// A controller restart is the common case in production: every rollout,
// node drain and leader-election failover. Its streams start over, and each
// owner's gates are progressing until they are established again. Written
// out, that would flip every owner from Ready=True to Ready=False with
// Reconciling=True and back, and every Stalled owner to Reconciling and
// back to Stalled with a second Warning: thousands of status writes and
// Events for a rollout of a controller that owns thousands of objects,
// every GitOps tool seeing them InProgress while nothing changed, and the
// human paged again about a problem they were already told of.
//
// So after a restart an owner's persisted conditions are the prior: the
// new process changes them only on evidence. While they stand,
// [Accumulator.Apply] changes nothing, byte for byte,
// [Options.StreamsCondition] included, so a reconcile writes no status and
// records no Event. The rule, exactly: the conditions must be for the
// generation passed to Apply (a new generation is not held: the
// controller has work to do; but for a stall on streams alone, below),
// and then the persisted trio decides ([Rollup]'s restart table):
//
//	persisted          stands while                                  at most
//	-----------------  --------------------------------------------  ------------
//	Ready=True         every gate that is not established is a       StartGrace
//	                   stream still starting (Starting, or its
//	                   first replay, whatever its reason), and
//	                   there is one
//	Stalled=True       a stream the Stalled message names has shown  NotReadyHold
//	                   neither health nor a stall yet (or, when it
//	                   names none of the gates, a stream is still
//	                   starting), and every stalled gate is one it
//	                   names
//	Reconciling=True   a stream is still starting, a gate the        NotReadyHold
//	                   message names is not established (or it names
//	                   none of the gates), no gate is stalled, and
//	                   every other gate that is not established is
//	                   one the message names
//	none of the trio   as Ready=True: a new owner's first write      StartGrace
//	(a new owner)      waits for its streams to go live, so it is
//	                   one write (Ready=True) and one Event, not
//	                   Reconciling then Ready
//
// A message that names none of the gates comes from a process that named
// its streams otherwise (wgctrl names a stream of a cache restricted to
// namespaces "team-a/ConfigMap.v1" once the cache has made that
// namespace's informer): a stream still starting is no evidence against
// it.
//
// An owner held with none of the trio has nothing to write: a writer that
// also writes status.observedGeneration when the conditions did not change
// must not write it alone then ([HasTrio]; [Observes] is false then too),
// or kstatus reads the owner as Current.
//
// A stall on streams alone (its message names a stream still Unconfirmed
// and none of the caller's gates) persisted for an earlier generation
// stands over a restart that comes with a spec change too, as it was,
// for the generation it observed: a spec change does not give back a
// watch that RBAC denies, and writing the stall away until the new
// process sees the stream would page the human a second time. kstatus
// reads the owner as in progress meanwhile (status.observedGeneration
// behind); a writer must not write status.observedGeneration alone over
// conditions that do not observe the generation ([Observes]). Once the
// stream shows its evidence the conditions are written for the new
// generation: the stall again (no Event: Stalled did not move), or health.
//
// A stream's first replay is still starting whatever its reason: one
// resumed from a persisted cursor ([watch.StreamOptions.Cursor]) that
// expired while the controller was down replays as ExpiredResourceVersion,
// and that is the restart, not news.
//
// "Still starting" and "shown neither" are counted from when the
// accumulator first heard of the stream (first [Accumulator.Track] or
// first state, whichever came first), by [AccumulatorOptions.Clock]; a
// stream that has been established once is not starting again, even if it
// publishes Starting (Run called again), until [Accumulator.RemoveStream]
// forgets it, and one that has stalled once has shown its evidence. A
// caller's own gate is never starting ([Accumulator.SetGate] drops the
// flags): set it in the reconcile, before Apply, as it is, and a gate the
// conditions name is confirmed by being set again. Conditions that read
// as the verdict this accumulator's Apply last changed them to are its own
// verdict, written, and never held; a verdict the caller did not write (a
// writer that writes only some, see [Accumulator.ApplyStandby], or a write
// that failed) changes nothing of the hold, which follows what is
// persisted.
//
// What ends a hold: for Ready=True, any gate that is not a stream still
// starting (a stream that fails during the grace is published as it is);
// for Stalled=True, a named stream established (the owner recovers, one
// Normal Event) or a stall the message does not name (the new cause; no
// second Warning, see package events), while transient trouble, a replay
// or flapping is not news: a stall needs a human, and the human was told;
// for Reconciling=True, a stall (one Warning), a gate progressing that the
// message does not name, or every gate it names established; once no
// stream is still starting, the owner is written as its gates are (a
// named gate's new reason shows then).
//
// The bounds. [AccumulatorOptions.StartGrace] (30 s) bounds the hold of a
// Ready=True, which claims that no data is being lost: it was true when it
// was written, no change was made since, and a stream that does not
// establish within the grace ends the hold at once. Ready=Unknown stays
// reserved for owners never established. [AccumulatorOptions.NotReadyHold]
// (5m30s) bounds the others, which claim nothing is healthy: a stream that
// has not gone live publishes a stall at the latest ProgressDeadline (5
// min by default, package watch) after it starts, so a stall that outlives
// the restart is shown again within the hold, and the 30 s more cover the
// time the controller takes to reach the owner. The hold follows the
// streams' Policy ([AccumulatorOptions.Policy]): with a ProgressDeadline of
// 10 minutes it is 10m30s, and a hold shorter than the deadline is refused
// (the stall would be dropped, then reported a second time). At either bound the
// accumulator calls OnChange for every owner tracking a stream still
// without evidence, and the reconcile that follows (whatever now it passes
// to Apply) writes the owner as its gates are: a stream that has shown
// neither health nor a stall for NotReadyHold is progressing, so a held
// Stalled then goes Reconciling with one Normal Event. After a restart the
// accumulator hears of every stream at the first reconcile, so persisted
// conditions stand at most the bound past it, plus the time the caller's
// queue takes to reconcile the owner.
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
