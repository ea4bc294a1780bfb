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
// # Health over time
//
// A stream's health is judged over time, not per session. A session is
// live once, after its replay if it had one, it delivers an event or a
// bookmark or stays open for [Policy.ShortSession]; only then is Streaming
// published, so a stream that keeps replaying is not Streaming. A live
// session is healthy however it ended: forty minutes of events ended by an
// HTTP/2 stream reset reset the backoff and the history, as client-go's
// reflector forgives a long healthy run. What a failure publishes depends
// on how long the stream has gone without a live session ([Ending.Trouble]),
// measured from the end of the last live one, and a stream publishes on a
// timer, not only when a session ends: with no live session for
// [Policy.TransientGrace] it is Blocked, for [Policy.ProgressDeadline] it
// needs a human, and after an expiry it is Replaying at [Policy.ReplayGrace]
// ([Verdict.Escalations]). A session going live cancels them.
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
//   - A live session's ending publishes nothing and retries at once (after
//     a clean close or an expiry) or after a backoff that starts over (after
//     an error). The clean close is the server's timeout, and a cursor within
//     the watch cache's window catches up on everything: this is what lets
//     Ready=True mean that no data is being lost.
//   - A 410 in any shape replays. The server usually sends it as an ERROR
//     event carrying a Status (code 410, reason Expired) after an HTTP 200;
//     older servers say Gone, aggregated servers and proxies may answer the
//     open with a 410, and a LIST can expire too. Retrying the same cursor can
//     never succeed (client-go's RetryWatcher loops on it forever), so the
//     cursor is dropped and the collection replayed. So is a cursor the
//     server answers "too large resource version" (504, cause
//     ResourceVersionTooLarge: an etcd restored from a backup, a cluster
//     rebuilt behind the same address): the reflector relists on it too.
//     Replaying is published only if the stream is not live again within
//     [Policy.ReplayGrace] (10 s): every apiserver restart expires every
//     cursor, since the new watch cache starts after them, and a replay done
//     within seconds loses nothing. A replay that did not help (its watch
//     expired again, or closed before going live) is a failure: the next one
//     backs off, whatever stage the 410 came in.
//   - A session that closes before it goes live is short. One is routine
//     (a close racing the open); the second in a row tries a replay, since a
//     stale cursor behind some proxies, or for resources without a watch
//     cache, looks exactly like this; after [Policy.FlapAfter] with a replay
//     tried the stream is Blocked with [ReasonFlapping], and it resumes from
//     the replay's cursor rather than replay again. A proxy that cuts every
//     watch right after its replay is a replay loop, and it is reported.
//   - Failures that need a human (401, 403, 404 for a missing CRD, 400 or
//     422 for a bad selector, a refused TLS certificate) are published as
//     Blocked with NeedsHuman once the stream's own requests have seen them
//     for [Policy.HumanGrace]: a RoleBinding or a CRD applied with the
//     controller takes seconds to take effect, and a fresh install must not
//     raise a Warning. They keep being retried, slowly, so they heal when
//     fixed. This one is published on evidence only, at an ending: a cause
//     that may have been fixed during a backoff is not paged on a timer.
//   - Transient failures (429, 5xx, timeouts, refused or reset connections,
//     decode errors, a handler's error) back off and publish nothing until
//     the stream has gone TransientGrace without a live session: an
//     apiserver rolling over is not news.
//   - A watch-list replay that never reaches its end bookmark times out
//     ([StreamOptions.ReplayTimeout]); replays then use LIST+WATCH for an
//     hour. A server that refuses watch-list (400, 405, 422) gets a
//     LIST+WATCH for that replay and is asked again the next time, as the
//     reflector does; a bad selector then fails the LIST too.
//   - Whatever the cause, a stream with no live session for
//     [Policy.ProgressDeadline] needs a human.
//
// [Classify] sorts errors into a [Class] and [Reason] by status code and
// reason, never by error text, and is total.
//
// # Bounds
//
// With the defaults, a stream keeps these promises whatever the server does
// (the package's tests check them over thousands of generated fault
// schedules against the simulated server of package watchtest):
//
//   - It publishes NeedsHuman only for a cause that needs a human and that
//     its requests have seen for HumanGrace, or after ProgressDeadline
//     without a live session.
//   - A cause that needs a human is published within HumanGrace and one
//     MaxBackoff of the first request it failed (75 s); no live session for
//     ProgressDeadline is published within a second of it.
//   - It is not Streaming once it has gone TransientGrace without a live
//     session; it publishes Streaming only while a session is live.
//   - Once the server is healthy again it is Streaming within two
//     MaxBackoffs and one ShortSession (2 min 1 s): one wait, and one more
//     if it must replay and has used its replays.
//   - It makes at most 3 full replays (LIST or watch-list, served by the
//     server) at once, then one per MaxBackoff: at most 63 in any hour.
//   - After a routine close nothing is delivered twice and resourceVersions
//     increase; after an expiry the snapshot holds exactly what the server
//     has, deletes made in the gap included.
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
// a live session resets the curve (not a wall-clock timer), and a server's
// Retry-After is a floor. Replays have a budget of their own on top (3 at
// once, then one per MaxBackoff). Each watch may ask the server to end it
// after [StreamOptions.WatchTimeout], and the stream ends a session that
// outlives what it asked for (2 hours if it asked for nothing), so a
// connection that died without a word cannot hold a stream. Time comes from
// an injected k8s.io/utils/clock, so tests drive it with a fake clock or
// testing/synctest.
//
// # Informers
//
// Most controllers watch through client-go informers, directly or through
// controller-runtime. [Instrument] wraps the ListerWatcher an informer is
// built from, so the informer's lists, opens and session endings are graded
// by the same function, over time in the same way, and reported to the same
// [Observer], while the informer keeps its own retries. The informer's
// relist is its replay: Replaying is published only if the informer is not
// live again within ReplayGrace. The reflector's own fallback from a
// refused watch-list to a LIST is routine and reported as nothing.
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
// simulated API server to run streams and informers over for hours of
// virtual time, and a scripted ListerWatcher that plays exactly the
// sessions a test names. Over client-go's fake clientset, wrap
// your cache.ListWatch with cache.ToListWatcherWithWatchListSemantics as
// informers do; events of objects the fake stores without a
// resourceVersion are delivered (they move no cursor).
package watch
