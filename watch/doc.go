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
// minutes, and a server shutdown, a GOAWAY or a connection reset look the
// same to a client: a session ending says only that it ended, and whether
// anything is wrong is the next session's answer.
//
// The stream keeps a cursor, the resourceVersion of the last event or
// bookmark it delivered (bookmarks are always requested). After a routine
// close it reopens at once from the cursor: nothing is missed and nothing
// is delivered twice. [Stream.Cursor] exposes it; [StreamOptions.Cursor]
// starts from one.
//
// At start without a cursor, after an expiry, and when a stale cursor is
// suspected, the stream replays the collection: a watch-list
// (sendInitialEvents=true, ended by the bookmark annotated
// k8s.io/initial-events-end) where the server supports it, otherwise a
// paginated LIST and a WATCH from the list's resourceVersion. Its
// [Handler] gets the whole collection in one [Snapshot], then incremental
// events.
//
// # Health over time
//
// Health is judged over time, not per session. Only a live session (below)
// makes a stream Streaming, and a live session is healthy however it ended:
// it resets the backoff and the history, as client-go's reflector forgives
// a long healthy run. What a failure publishes depends on how long the
// stream has gone without a live session ([Ending.Trouble]), and a stream
// also publishes on a timer ([Verdict.Escalations]): with no live session
// for [Policy.TransientGrace] it is Blocked, for [Policy.ProgressDeadline]
// it needs a human, and after an expiry it is Replaying at
// [Policy.ReplayGrace].
//
// # When a session is live
//
// A session counts [Policy.ShortSession] from when it opened, or from the
// end of its replay; what it delivers meanwhile does not make it live
// (behind a proxy that cuts every watch at once, an event slipping through
// a cut session is not health). Then, for a stream and an informer alike:
//
//	once the count has run out                                   the session
//	-----------------------------------------------------------  ---------------------------------
//	no event within a millisecond (quiet)                        is live
//	an event, not a close or an ERROR, after ShortSession more   is live (busy, and keeping up)
//	  in which the consumer once found nothing waiting
//	an event the consumer found waiting every time it asked      is not live yet (a backlog)
//	a close or an ERROR                                          is not made live by it
//	the consumer held an event ShortSession or more              counts again from then
//	a stream's handler stall was published                       counts again once the call returns
//	in doubt, resumed from a cursor the server has not confirmed is live once it confirms it
//
// "In doubt" is the cursor check's (see "A server behind the cursor"):
// after a session that did not go live, a cursor must be confirmed by an
// event, a bookmark or a check.
//
// # What is published when
//
// What a stream or an instrumented informer publishes is one fold over the
// facts it observes: each fact, given the history so far, publishes the
// state below or nothing, and arms or cancels escalations. Nothing else
// publishes. Within a fact the first row that matches decides.
//
//	fact           so far                          a stream                            an informer
//	-------------  ------------------------------  ----------------------------------  ---------------------------------
//	start          resuming from a cursor          Starting; arms Blocked              (an informer never resumes)
//	                                                 (NoLiveSession) at TransientGrace,
//	                                                 the deadline at ProgressDeadline
//	start          replaying                       Starting; arms the deadline         nothing; arms the deadline
//	replay began   Starting, never had a cursor    Replaying (InitialSync)             Replaying (InitialSync)
//	replay began   otherwise                       nothing                             nothing
//	live           not Streaming                   Streaming; cancels what is armed    the same
//	live           Streaming                       nothing; cancels what is armed      the same
//	ended          teardown                        nothing; cancels what is armed      the same; its next call starts
//	ended          a stall published since live    graded as not live, trouble from    (handlers are not watched)
//	                                                 the stalled call's start
//	ended          otherwise                       Grade's State if it publishes;      the same
//	                                                 arms its Escalations
//	tick           an escalation is due            its State                           the same, unless the context of
//	                                                                                     the informer's last call is done
//	handler stuck  live, ProgressDeadline long     Blocked, needs a human              (handlers are not watched)
//	                                                 (ProgressDeadlineExceeded)
//	handler stuck  live, TransientGrace long       Blocked (HandlerStalled)            (handlers are not watched)
//	handler stuck  otherwise                       nothing                             (handlers are not watched)
//
// A stall is found within a sixth of TransientGrace. Under one fault,
// sessions end in different ways (a cut session, a replay after an expiry,
// a refused connection), and in a controller each publication is a Ready
// flip, a status write and an Event; so a state a row gives is kept back:
//
//	the state a row gives                                        while the stream is
//	-----------------------------------------------------------  ----------------------------------
//	the same phase, reason and NeedsHuman                        in it
//	Replaying                                                    Blocked
//	Blocked, needs a human (ProgressDeadlineExceeded)            needing a human for its own cause
//	Blocked, not needing a human, asked for fewer than three     Blocked, not needing a human
//	  times in a row
//
// Instrument cannot follow what an informer's reflector decides for
// itself: there is no cursor check, replay spread or budget, session cap
// or stall watch (its event handlers run apart from the watch), and the
// reflector retries with its own backoff, except on a refused connection
// (see Informers).
//
// # A server behind the cursor
//
// A kube-apiserver answers a watch from a resourceVersion its watch cache
// has not reached with silence: it drops every event and every bookmark at
// or below it, and no error ever comes. That happens after an etcd restore
// without a revision bump, to a cluster rebuilt behind the same address,
// to a cursor persisted from another cluster, and to a cursor a LIST took
// from etcd while the watch cache lags.
//
// A stream checks its cursor ([StreamOptions.CursorCheck]) with one
// consistent LIST of at most one object: the list's resourceVersion is the
// server's current revision, and a cursor beyond it, compared as integers
// (apimachinery's resourceversion.CompareResourceVersion), is ahead. Where
// resourceVersions are not integers (some aggregated APIs), it lists at the
// cursor with resourceVersionMatch NotOlderThan instead, which a server
// behind answers "too large resource version" once client-go's REST client
// has retried as the server's Retry-After says (about 45 s for a
// kube-apiserver). A cursor ahead ends the session as never live, with
// [ErrCursorAhead] (class expired, reason ResourceVersionTooLarge), and the
// stream replays. The check comes:
//
//   - ShortSession/2 into a session, before it may go live, when the stream
//     is in doubt: at the start from [StreamOptions.Cursor], and after any
//     session that did not go live (the server that answers after trouble
//     may be another one). An event or a bookmark from the cursor confirms
//     it as well.
//   - Otherwise after CursorCheck of silence, counted across the sessions
//     since the server last delivered anything.
//
// Never sooner than ShortSession/2 into a session: a server that has let
// the cursor expire answers the watch with a 410 first. So a cursor ahead
// of the server is replayed within CursorCheck and the server's answer;
// the cost is one LIST of one object per session that hears nothing for
// CursorCheck, and one per session in doubt that the server does not
// confirm within ShortSession/2.
//
// Two cases stay out of reach, for every client: writes that carry a
// restored etcd past the cursor before the stream checks it lose the
// changes between (restore etcd with etcdutl's --bump-revision and
// --mark-compacted, and every cursor expires instead); and a watch cache
// that stops following etcd under an open session looks like a quiet
// collection until the session ends, when a replay's LIST from etcd gives
// the stream a cursor the cache has not reached.
//
// # The grading table
//
// [Grade]'s doc comment holds the table. Why each row is what it is:
//
//   - Teardown is checked first: cancelling a watch races with the watch's
//     own close and with decode errors, and a controller shutting down must
//     never log or count a failure.
//   - A live session's ending publishes nothing. The clean close is the
//     server's timeout, and a cursor within the watch cache's window
//     catches up on everything: this is what lets Ready=True mean that no
//     data is being lost.
//   - A 410 in any shape replays: retrying the same cursor can never
//     succeed (client-go's RetryWatcher loops on it forever). So does a
//     cursor the server answers "too large resource version", on which the
//     reflector relists too. A replay that did not help (its watch expired
//     again, or closed before going live) is a failure, and the next one
//     backs off.
//   - A session that closes before it goes live is short. One is routine
//     (a close racing the open); the second in a row tries a replay, since
//     a stale cursor behind some proxies, or for resources without a watch
//     cache, looks exactly like this; after [Policy.FlapAfter] with a
//     replay tried, a proxy that cuts every watch is reported
//     ([ReasonFlapping]) and the stream resumes rather than replay again.
//   - Failures that need a human are published only on evidence, at an
//     ending, once the stream's own requests have seen them for
//     [Policy.HumanGrace]: a cause fixed during a backoff is not paged on
//     a timer. They are retried slowly, so they heal when fixed.
//   - Transient failures back off and publish nothing until the stream
//     has gone TransientGrace without a live session: an apiserver rolling
//     over is not news.
//   - A watch-list replay that never reaches its end bookmark times out
//     ([StreamOptions.ReplayTimeout]); replays then use LIST+WATCH for an
//     hour, as they do after two watch-lists in a row were cut before their
//     end. A server that refuses watch-list (400, 405 or 422 on the open,
//     or a first event that is an ERROR other than a 429 or a 410) gets a
//     LIST+WATCH for that replay and is asked again the next time, as the
//     reflector does.
//   - Whatever the cause, a stream with no live session for
//     [Policy.ProgressDeadline] needs a human.
//
// [Classify] sorts errors into a [Class] and [Reason] by status code and
// reason, never by error text, and is total.
//
// # Bounds
//
// With the defaults, a stream keeps these promises whatever the server
// does:
//
//   - It publishes NeedsHuman only for a cause that needs a human and that
//     its requests have seen for HumanGrace, after ProgressDeadline without
//     a live session, or when its consumer has been missing a change for
//     ProgressDeadline.
//   - A cause that needs a human is published within HumanGrace and one
//     MaxBackoff of the first request it failed (75 s); no live session for
//     ProgressDeadline is published within a second of it.
//   - It is not Streaming once it has gone TransientGrace without a live
//     session; it publishes Streaming only while a session is live.
//   - While it is Streaming, every change the server makes is in its
//     consumer's view within TransientGrace, a sixth of it and 8 s (43 s):
//     a stream not live for TransientGrace is Blocked, a handler stuck that
//     long is found within a sixth of it, and a cursor the server has not
//     reached within CursorCheck and the server's answer. A change still
//     missing ProgressDeadline later (5 min 43 s) is a stall, and the
//     stream needs a human by then. A handler call in progress holds these
//     back until it returns or is itself a stall.
//   - Once the server is healthy again it is Streaming within two
//     MaxBackoffs and one ShortSession (2 min 1 s): one wait, and one more
//     if it must replay and has used its replays. An outage over sooner
//     than TransientGrace less twice the time to go live again (three
//     ShortSessions and two ReplaySpreads: 20 s) publishes nothing, unless
//     a server's Retry-After or the replay budget holds the stream back.
//   - Under faults that do not change it publishes at most 3 states,
//     however long they last (Blocked, then needing a human; Streaming
//     once they end).
//   - It makes at most 3 full replays (LIST or watch-list, whose server
//     served at least its first page) at once, then one per MaxBackoff: at
//     most 63 in any hour.
//   - After a routine close nothing is delivered twice and resourceVersions
//     increase; after an expiry the snapshot holds exactly what the server
//     has, deletes made in the gap included.
//
// TestJudge (make judge) checks each of these against generated fault
// histories on package watchtest's simulated server, exempting only the
// two cases out of reach above. It leaves to other tests input no server
// sends (FuzzStreamEvents), resourceVersions that are not integers, a
// controller restarted in the middle of a fault (the e2e restart
// scenarios) and watchtest's scripted ListerWatcher.
//
// # What a replay costs the control plane
//
// Every cursor expires at once when an apiserver restarts (its new watch
// cache starts after them all), or when a compaction passes them and the
// connections are cut: every stream of every controller then replays
// against one apiserver. Two things make a stream's share of that burst no
// larger than an informer's:
//
//   - Spread. A replay that a verdict asks for at once (after an expiry, or
//     a replay cut before it was complete) starts after a random wait in
//     [ReplaySpread/2, 3·ReplaySpread/2), so the resumes that every cut
//     watch makes first (each answered 410) drain, and the replays of many
//     streams arrive spread out; after a 410 client-go's reflector waits
//     much the same before it relists. A replay that waits for a backoff or
//     for the replay budget waits no longer; the first replay of a stream
//     that starts without a cursor does not wait.
//   - Served from the watch cache. The first replay after a 410 asks for
//     the collection not older than the expired cursor (resourceVersionMatch
//     NotOlderThan), as the reflector does, which the watch cache serves
//     from memory. A replay at resourceVersion "" is a consistent read: it
//     costs etcd a request and waits for the cache to catch up. The
//     snapshot is then at or after the cursor, which is all a consumer
//     needs. If that replay fails for a transient reason (a 429, a
//     connection cut) or is cut, the next one asks the same; after any
//     other cause of a replay, the replay asks for the latest.
//
// Neither changes what a consumer sees: a complete snapshot, then events
// in order. [StreamOptions.ReplaySpread] and
// [StreamOptions.ConsistentReplays] turn them off.
//
// # Backoff
//
// Waits grow exponentially with full jitter from
// [StreamOptions.InitialBackoff] to [StreamOptions.MaxBackoff]; a live
// session resets the curve. A server's Retry-After is a floor: a wait drawn
// below it is drawn again above it, within the current step, so that the
// streams an apiserver tells "Retry-After: 1" at once do not all come back
// in the same instant. A wait that would end too close to the next
// escalation for the stream to go live before it is drawn again earlier:
// at the defaults the stream looks again 20 to 25 s into its trouble, and
// a look that fails backs off as before. Replays have a budget of their
// own (Bounds). Each watch may ask the server to end it after
// [StreamOptions.WatchTimeout], and the stream ends a session that
// outlives what it asked for (2 hours if it asked for nothing), so a
// connection that died without a word cannot hold a stream. Time comes
// from an injected k8s.io/utils/clock, so tests drive it with a fake clock
// or testing/synctest.
//
// # Informers
//
// Most controllers watch through client-go informers, directly or through
// controller-runtime. [Instrument] wraps the ListerWatcher an informer is
// built from, so the informer's lists, opens and session endings are
// graded by the same function, over time in the same way, and reported to
// the same [Observer], while the informer keeps its own retries. Its
// relist is its replay. The reflector's own fallback from a refused
// watch-list to a LIST is routine and reported as nothing.
//
// One retry is Instrument's own. For a refused connection (an apiserver
// restarting) the reflector's backoff doubles up to 30 s, and nothing
// outside it can shorten it: the informer could publish Blocked for an
// outage that had healed. So until the trouble is published, a List or
// watch open refused so is retried inside the call, with a Stream's
// backoff and its look before the escalation: a short outage publishes
// nothing, for an informer as for a stream, and the requests are those the
// reflector would have made, no more often. Once the trouble is published,
// errors pass to the reflector as they come. Instrument cannot shorten the
// reflector's wait between its rounds: it relists after every watch that
// ends in an error or a 410, each round after a delay that grows from
// 0.8 s to 30 s until two minutes pass without one, so an informer through
// outages less than two minutes apart may publish Replaying at
// ReplayGrace, its cache indeed behind meanwhile.
//
// client-go's default watch error handler logs every failed list or watch
// at error level: an apiserver restart writes one error per informer, a
// denied watch one per retry. [WatchErrorLogger] grades these as Grade
// grades endings. Streams log nothing of their own: they publish states.
//
// # Observers
//
// Streams report to an [Observer]: state changes ([Phase], [Reason],
// NeedsHuman) and every session ending ([SessionEnd] with its [Verdict]).
// The readiness and metrics packages of this module implement it;
// [Observers] fans out to several.
//
// # Testing
//
// Package [github.com/watchgrade/watchgrade/watch/watchtest] provides a
// simulated API server to run streams and informers over for hours of
// virtual time, and a scripted ListerWatcher that plays exactly the
// sessions a test names. For client-go's fake clientset, see [NewStream].
package watch
