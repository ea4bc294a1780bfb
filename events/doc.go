// Package events records Kubernetes Events about an object's readiness:
// one Event when Ready or Stalled changes, never on a reconcile that
// changes nothing, with a severity that answers "does a human need to act",
// read from Stalled.
//
// Import it as wgevents: its name collides with
// k8s.io/client-go/tools/events.
//
//	import wgevents "github.com/watchgrade/watchgrade/events"
//
// [SeverityOf] picks the type, [Transition] decides whether a status
// write deserves an Event, and a [Recorder] records it through client-go's
// core/v1 recorder ([NewRecorder]) or its events.k8s.io/v1 recorder
// ([NewEventsRecorder]), within the limits the API server enforces
// (reasons and actions of 128 bytes, notes of 1024). The package reads only
// metav1.Condition values; it pairs with
// [github.com/watchgrade/watchgrade/readiness], which writes the trio.
//
// # Severity
//
//	conditions                                     severity
//	---------------------------------------------  --------
//	Stalled=True                                   Warning
//	Reconciling or Stalled present (the trio)      Normal
//	Ready present and not True, without the trio   Warning
//	otherwise (Ready=True, or no Ready)            Normal
//
// # Why Stalled, and not Ready, decides
//
// "Is Ready True" and "does a human need to act" are different questions.
// Ready is False or Unknown whenever an object is progressing: after every
// controller restart while each stream replays, after a cursor expires,
// while a transient failure is retried. Grading those as Warnings buries the
// one Warning that matters among dozens that look the same, and spends the
// client-go spam filter's budget (25 Events per object, then one per five
// minutes, dropped silently) on the protocol working. The readiness roll-up
// has already answered the second question and published the answer as
// Stalled (kstatus Failed), so reading it back cannot drift from the
// conditions.
//
// An object that publishes Ready without Reconciling or Stalled cannot say
// whether it is progressing or stuck, so a Ready that is not True stays a
// Warning there: a caller without the trio stays loud rather than being
// silently downgraded.
//
// # Transitions only
//
// Call [Recorder.Record] after each successful status write, with the
// conditions before and after it. It records one Event when Ready's status
// or reason changed (or Ready first appeared), and when Stalled's status
// changed with Ready as it was: a gate that escalates from progressing to
// stalled keeping its reason leaves Ready=False with the same reason, and
// Stalled going True is the one moment a human must hear of it. So
// Stalled going True is always exactly one Warning, and clearing it one
// Normal Event; while Stalled stays True nothing is recorded, even if its
// reason moves (a second stalled gate surfacing, a cause turning into the
// progress deadline): the human was paged once, and the conditions show
// the new reason. A recovery (Ready back to True) is a Normal Event. A
// reconcile that changes nothing records nothing, and neither does a
// routine watch reconnect, which changes no condition at all.
//
// A controller restart records nothing either, wired as the readiness
// package says: an owner keeps the conditions it had, Ready, Stalled or
// Reconciling, while its streams start over and until they show evidence
// against them ([github.com/watchgrade/watchgrade/readiness.Accumulator]),
// so no status is written and no Event recorded. Record compares with the
// conditions as read before the write, which after a restart are what the
// previous process persisted: a stall already reported is not reported
// again by a new process, however many times the controller restarts.
// Only evidence moves the conditions: a stream established (a recovery,
// one Normal Event), a new cause, or a hold's bound passing without
// either.
//
// # Limits
//
// The API server rejects an events.k8s.io/v1 Event whose reason or action
// is over 128 bytes or whose note is over 1024, and client-go only logs the
// rejection: the Warning would be lost. A condition's reason may be 1024
// bytes. A Recorder cuts reasons to [MaxReasonBytes] (for both APIs) and
// notes to [MaxNoteBytes] (core/v1 messages are not limited by the API and
// are kept whole); [NewEventsRecorder] refuses an action over
// [MaxActionBytes].
//
// # Alerting
//
// Events are for people reading kubectl describe. Alert on conditions:
//
//   - page on Stalled=True: a human must act;
//   - raise a ticket on Ready != True (which includes Unknown) held for
//     longer than a rollout or a replay may take, quoting the Reconciling
//     reason;
//   - never alert on Ready == False alone: it misses Ready=Unknown (an
//     object that has never been Ready), and on its own it cannot tell a
//     replay from an outage.
//
// An Event pipeline that routes on type=Warning sees only Stalled objects
// (and objects without the trio whose Ready is not True).
package events
