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
// suspected, the stream replays the collection, with a watch-list where
// the server supports it ([StreamOptions.DisableWatchList]); its [Handler]
// gets the whole collection in one [Snapshot], then incremental events.
//
// # Health over time
//
// Only a live session (below) makes a stream Streaming, and a live session
// is healthy however it ended: it resets the backoff and the history, as
// client-go's reflector forgives a long healthy run. What a failure
// publishes depends on how long the stream has gone without a live session
// ([Ending.Trouble]), and a stream also publishes on a timer
// ([Verdict.Escalations]): Blocked at [Policy.TransientGrace], needing a
// human at [Policy.ProgressDeadline], Replaying at [Policy.ReplayGrace]
// after an expiry.
//
// # When a session is live
//
// A session counts [Policy.ShortSession] from when it opened, or from the
// end of its replay; what it delivers meanwhile does not make it live
// (behind a proxy that cuts every watch, events slip through cut
// sessions). Then, for a stream and an informer alike:
//
//	once the count has run out                                    the session
//	------------------------------------------------------------  ---------------------------------
//	no event within a millisecond (quiet)                         is live
//	an event, not a close or an ERROR, after ShortSession more    is live (busy, and keeping up)
//	  in which the consumer once found nothing waiting
//	an event the consumer found waiting every time it asked       is not live yet (a backlog)
//	a close or an ERROR                                           is not made live by it
//	the consumer held an event ShortSession or more               counts again from then
//	a stream's consumer stall was published                       counts again once the call returns
//	in doubt, resumed from a cursor the server has not confirmed  is live once it confirms it
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
//	behind         live, ProgressDeadline long     Blocked, needs a human              (handlers are not watched)
//	                                                 (ProgressDeadlineExceeded)
//	behind         live, TransientGrace long       Blocked (HandlerStalled)            (handlers are not watched)
//	behind         otherwise                       nothing                             (handlers are not watched)
//
// The consumer is behind while a [Handler] call has not returned, or while
// its calls follow one another without the stream once finding the watch
// with nothing waiting (once a session has had ShortSession to deliver
// what the server holds for it): a backlog the handler does not drain,
// however fast each call is, which a server with a large watch buffer
// never cuts. How long is counted from the first call since it last
// caught up, across sessions, and a consumer behind again before its
// session went live again is still in the first stall: a handler that
// hangs on every call needs a human ProgressDeadline after its first.
// "Live" in these rows also covers a stream still Streaming after a live
// session ended (which publishes nothing) whose consumer fell behind
// before the ending. A stall is found within a sixth of TransientGrace,
// and as each threshold is reached. Under one fault,
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
//	Blocked, not needing a human                                 Blocked, needing a human
//
// Instrument cannot follow what an informer's reflector decides for
// itself: it adds no cursor check, replay spread or budget, session cap
// or stall watch, and the reflector retries with its own backoff, except
// on a connection refused or reset (see Informers).
//
// # A server behind the cursor
//
// A kube-apiserver answers a watch from a resourceVersion its watch cache
// has not reached with silence, never an error: after an etcd restore
// without a revision bump, for a cluster rebuilt behind the same address,
// a cursor persisted from another cluster, or a cursor a LIST took from
// etcd while the watch cache lags. So a stream checks its cursor
// ([StreamOptions.CursorCheck]) with a LIST of at most one object, whose
// resourceVersion is the server's current revision (where resourceVersions
// are not integers, a LIST at the cursor, which a server behind answers
// "too large resource version" after about 45 s of client-go's retries).
// A cursor ahead ends the session as never live, with [ErrCursorAhead],
// and the stream replays. In doubt (at the start from
// [StreamOptions.Cursor], and after any session that did not go live), the
// check comes ShortSession/2 into a session, unless an event or a bookmark
// confirms the cursor first; otherwise after CursorCheck of silence,
// counted across sessions. Never sooner than ShortSession/2: a server that
// let the cursor expire answers with a 410 first.
//
// Two cases stay out of reach, for every client: writes that carry a
// restored etcd past the cursor before the check lose the changes between
// (restore etcd with etcdutl's --bump-revision and --mark-compacted, and
// every cursor expires instead); and a watch cache that stops following
// etcd under an open session looks like a quiet collection until the
// session ends and a replay's LIST from etcd gives the stream a cursor the
// cache has not reached.
//
// # The grading table
//
// [Grade]'s doc comment holds the table. Why each row is what it is:
//
//   - Teardown comes first: a controller shutting down must never log or
//     count a failure, and cancelling races with closes and decode errors.
//   - A live session's ending publishes nothing: a clean close is the
//     server's timeout, and a cursor within the watch cache's window
//     catches up on everything. This is what lets Ready=True mean that no
//     data is being lost.
//   - A 410 in any shape, or "too large resource version", replays:
//     retrying the cursor can never succeed. A replay that did not help is
//     a failure, and the next backs off.
//   - A short session is routine once (a close racing the open); twice in a
//     row it tries a replay, since a stale cursor behind some proxies looks
//     just like this; after [Policy.FlapAfter] with a replay tried, the
//     stream is Blocked with [ReasonFlapping] and resumes rather than
//     replays again.
//   - Failures that need a human are published only on evidence, at an
//     ending, after [Policy.HumanGrace]: a cause fixed during a backoff is
//     not paged on a timer. They are retried slowly, to heal when fixed. A
//     handler's error of that class (its own requests denied) is one too,
//     with [ReasonHandlerFailed]: its consumer gets nothing through until
//     someone acts.
//   - Transient failures publish nothing before TransientGrace: an
//     apiserver rolling over is not news.
//   - A watch-list replay past [StreamOptions.ReplayTimeout], or two in a
//     row cut before their end, make replays use LIST+WATCH for an hour. A
//     watch-list refused (400, 405 or 422 on the open, or a first event
//     that is an ERROR other than a 429 or a 410) gets a LIST+WATCH for
//     that replay only.
//   - Whatever the cause, ProgressDeadline without a live session needs a
//     human; a cause of its own that needs a human (a denial after a long
//     outage) is published as itself, not as the deadline.
//
// [Classify] sorts errors into a [Class] and [Reason] by status code and
// reason, never by error text, and is total.
//
// # Bounds
//
// With the defaults, whatever the server does, a stream:
//
//   - publishes NeedsHuman only for a cause that needs a human and that its
//     requests, or its handler, have met for HumanGrace, after
//     ProgressDeadline without a live session, or when its consumer has
//     been missing a change for ProgressDeadline;
//   - publishes a cause that needs a human within HumanGrace and one
//     MaxBackoff of the first request it failed (75 s), and no live
//     session for ProgressDeadline within a second of it;
//   - is not Streaming once it has gone TransientGrace without a live
//     session, and publishes Streaming only while a session is live;
//   - while Streaming, has every change the server makes in its consumer's
//     view within TransientGrace, a sixth of it and 8 s (43 s): not live
//     that long it is Blocked, a consumer behind that long (a handler
//     call stuck, or a backlog it does not drain) is found within a
//     sixth of it, a cursor the server has not reached within CursorCheck
//     and the server's answer. A change still missing ProgressDeadline
//     later (5 min 43 s) is a stall that needs a human, however many
//     calls it took. A handler call in
//     progress holds these back until it returns or is itself a stall;
//   - once the server is healthy again, is Streaming within two MaxBackoffs
//     and one ShortSession (2 min 1 s);
//   - publishes nothing for an outage over sooner than TransientGrace less
//     twice the time to go live again (three ShortSessions and two
//     ReplaySpreads: 20 s), unless a server's Retry-After or the replay
//     budget holds it back;
//   - publishes at most 3 states under faults that do not change, however
//     long they last (Blocked, needing a human, Streaming once they end);
//   - makes at most 3 full replays (LIST or watch-list, whose server served
//     at least its first page) at once, then one per MaxBackoff: at most 63
//     in any hour;
//   - after a routine close delivers nothing twice, in increasing
//     resourceVersions; after an expiry, delivers a snapshot of exactly
//     what the server has, deletes made in the gap included.
//
// TestJudge checks each of these on generated fault histories against
// watchtest's simulated server, exempting only the two cases out of reach
// above; input no server sends, resourceVersions that are not integers
// and a controller restarted mid-fault are left to other tests.
//
// # What a replay costs the control plane
//
// When an apiserver restarts, or a compaction passes the cursors and the
// connections are cut, every stream of every controller replays at once.
// Two things keep a stream's share of that burst no larger than an
// informer's, without changing what a consumer sees:
//
//   - Spread ([StreamOptions.ReplaySpread]). A replay that a verdict asks
//     for at once starts after a random wait, as the reflector's relist
//     after a 410 does; a replay that waits for a backoff or the replay
//     budget, or the first of a stream started without a cursor, does not.
//   - Served from the watch cache ([StreamOptions.ConsistentReplays]). The
//     first replay after a 410 asks, as the reflector does, for the
//     collection not older than the expired cursor, which the watch cache
//     serves from memory; a consistent read costs etcd a request. After a
//     transient failure or a cut the next replay asks the same; after any
//     other cause, a replay asks for the latest.
//
// # Backoff
//
// Waits grow exponentially with full jitter from
// [StreamOptions.InitialBackoff] to [StreamOptions.MaxBackoff]; a live
// session resets the curve. A server's Retry-After is a floor: a wait drawn
// below it is drawn again above it, within the current step, so that the
// streams told "Retry-After: 1" at once do not come back in one instant. A
// wait that would end too close to the next escalation for the stream to
// go live before it is drawn again earlier: at the defaults the stream
// looks again 20 to 25 s into its trouble. Time comes from an injected
// k8s.io/utils/clock, so tests drive it with a fake clock or
// testing/synctest.
//
// # Informers
//
// [Instrument] wraps the ListerWatcher a client-go informer is built from
// (directly or through controller-runtime), so the informer's lists,
// opens and session endings are graded, over time, as a stream's are and
// reported to an [Observer], while the informer keeps its own retries. Its
// relist is its replay.
//
// One retry is Instrument's own: the reflector's backoff for a connection
// refused or reset (an apiserver restarting, behind a proxy or a load
// balancer too) doubles up to 30 s, so the informer could publish Blocked
// for an outage that had healed, or Replaying for the relist that follows
// a restart, its resume expired by the new apiserver's empty watch cache.
// (client-go's REST client retries a GET whose connection was reset
// itself, up to 10 times a second apart; what it gives up on reaches the
// reflector.) Until the trouble is published, Instrument retries a List
// or watch open refused or reset so inside the call, with a Stream's backoff and its
// look before the escalation: an informer through such an outage and a
// restart publishes nothing, as a stream does (see Bounds). A refused
// connection costs the server nothing, so its waits are at most 2 s: the
// informer catches up within 2 s of the apiserver accepting connections
// again (a doubling wait had it catch up up to 16 s later). It cannot
// shorten the reflector's wait between rounds (it relists after every
// watch that ends in an error or a 410, after a delay that grows from
// 0.8 s to 30 s until two minutes pass without one), so an informer
// through outages less than two minutes apart may publish Replaying, its
// cache indeed behind.
//
// client-go's default watch error handler logs every failed list or watch
// at error level; [WatchErrorLogger] grades these logs as Grade grades
// endings. Streams log nothing of their own: they publish states.
//
// Where several informers serve one stream (one per namespace, or an
// informer removed and made again), [Merge] gives the state the stream
// shows: the worst of those that run, with a stopped informer's stall
// standing until its namespace's new informer is live. [Streams] keeps a
// process's informers by stream name and namespace over Merge: it passes
// on each name's state and each namespace's ([NamespacedStream]), says
// which streams an owner that depends on a kind in some namespaces
// follows ([Streams.Dependencies]) and which of those namespaces no
// informer serves ([Streams.Missing]), and answers a readiness probe from
// the informers' HasSynced ([Streams.Check]). wgctrl's Grader keeps a
// controller-runtime cache's informers in one; a client-go process with
// several informers of a kind uses it the same way.
//
// # Observers
//
// Streams report state changes and every session ending to an
// [Observer]; the readiness and metrics packages of this module implement
// it, and [Observers] fans out to several.
//
// # Testing
//
// Package [github.com/watchgrade/watchgrade/watch/watchtest] provides a
// simulated API server to run streams and informers over for hours of
// virtual time, and a scripted ListerWatcher that plays exactly the
// sessions a test names. For client-go's fake clientset, see [NewStream].
package watch
