// Package watch runs graded watch streams: long-lived watches of one
// collection whose every session ending is judged by one pure function,
// [Grade], so that routine endings stay silent and real trouble is reported
// once, with a reason.
//
// Import it as wgwatch: its name collides with
// k8s.io/apimachinery/pkg/watch.
//
//	import wgwatch "github.com/watchgrade/watchgrade/watch"
//
// # Streams and sessions
//
// A [Stream] watches one collection through any cache.ListerWatcher (typed,
// dynamic or metadata clients). It runs as a series of sessions, each one
// open watch. The kube-apiserver ends every watch after a random 30–60
// minutes; a server shutdown, a GOAWAY and a connection reset look exactly
// the same to a client. So a session ending says only that it ended: whether
// anything is wrong is the next session's answer.
//
// The stream keeps a cursor, the resourceVersion of the last event or
// bookmark it delivered (bookmarks are always requested, and a bookmark's
// resourceVersion can be newer than any object's). After a routine close it
// reopens at once from the cursor, so nothing is missed and nothing is
// delivered twice. [Stream.Cursor] exposes it; [StreamOptions.Cursor] starts
// from one.
//
// # The grading table
//
// [Grade] decides, for each ending, the [Outcome] label, whether to publish
// a [State], and what to do next. Its doc comment holds the table; the
// reasons for each row:
//
//   - Teardown is checked first. Cancelling a watch races with the watch's
//     own close and with decode errors; a controller shutting down must never
//     log or count a failure.
//   - A healthy clean close publishes nothing and resumes at once. It is
//     the server's timeout, and a cursor within the watch cache's window
//     catches up on everything. This is what lets Ready=True mean that no
//     data is being lost: the stream never leaves Streaming.
//   - A 410 in any shape replays. The server usually sends it as an ERROR
//     event carrying a Status (code 410, reason Expired) after an HTTP 200;
//     older servers say Gone, aggregated servers and proxies may answer the
//     open with a 410, and a LIST can expire too. Retrying the same cursor can
//     never succeed (client-go's RetryWatcher loops on it forever), so the
//     cursor is dropped and the collection replayed. The stream publishes
//     Replaying only if the replay outlasts [Policy.ReplayGrace] (10 s):
//     every apiserver restart expires every cursor, since the new watch
//     cache starts after them, and a replay done within seconds loses
//     nothing. (Instrumented informers publish it at once: the wrapper
//     does not see when the informer's relist is done.)
//   - Transient failures (429, 5xx, timeouts, refused or reset connections,
//     decode errors) back off and publish nothing until they outlast
//     [Policy.TransientGrace]: an apiserver rolling over is not news.
//   - Failures that need a human (401, 403, 404 for a missing CRD, 400 or
//     422 for a bad selector) are published as Blocked with NeedsHuman, but
//     only after [Policy.HumanGrace]: a RoleBinding or a CRD applied with
//     the controller takes seconds to take effect, and a fresh install must
//     not raise a Warning. They keep being retried, slowly, so they heal
//     when fixed.
//   - A close that is short, empty and leaves the cursor where it was is
//     suspicious when it repeats: a stale cursor behind some proxies, or for
//     resources without a watch cache, looks exactly like this. The second
//     in a row tries one replay; if closes keep coming the stream is Blocked
//     with [ReasonFlapping].
//   - A watch-list replay that never reaches its end bookmark times out
//     ([StreamOptions.ReplayTimeout]); the next replay uses LIST+WATCH.
//   - Whatever the cause, a stream with no healthy session for
//     [Policy.ProgressDeadline] needs a human.
//
// [Classify] sorts errors into a [Class] and [Reason] by status code and
// reason, never by error text, and is total.
//
// # Replay and the consumer's contract
//
// At start without a cursor, after an expiry, and when a stale cursor is
// suspected, the stream replays the collection: a watch-list
// (sendInitialEvents=true, ended by the bookmark annotated
// k8s.io/initial-events-end) where the server supports it, a paginated LIST
// and a WATCH from the list's resourceVersion otherwise. Its [Handler] then
// gets the whole collection in one [Snapshot], and incremental events after
// it. An object missing from a snapshot was deleted, even if no DELETED event
// was ever seen: that is how deletes made while the cursor was expired reach
// the consumer. A handler error ends the session and the same event (or
// snapshot) is delivered again after a backoff: at least once, never
// skipped.
//
// # Backoff
//
// Waits grow exponentially with full jitter, from
// [StreamOptions.InitialBackoff] (1 s) to [StreamOptions.MaxBackoff] (60 s);
// a healthy session resets the curve (not a wall-clock timer), and a
// server's Retry-After is a floor. Time comes from an injected
// k8s.io/utils/clock, so tests drive it with a fake clock or
// testing/synctest.
//
// # Informers
//
// Most controllers watch through client-go informers, directly or through
// controller-runtime. [Instrument] wraps the ListerWatcher an informer is
// built from, so the informer's lists, opens and session endings are graded
// by the same function and reported to the same [Observer], while the
// informer keeps its own retries.
//
// # Observers
//
// Streams report to an [Observer]: state changes ([Phase], [Reason],
// NeedsHuman) and every session ending ([SessionEnd] with its [Verdict]).
// The readiness and metrics packages of this module implement it;
// [Observers] fans out to several. Observers are called synchronously and
// must not block.
//
// # Testing
//
// Package [github.com/watchgrade/watchgrade/watch/watchtest] provides a
// scripted ListerWatcher that produces every ending in the table, for this
// package's tests and for yours.
package watch
