package watch_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// A routine close is graded "closed" and resumed from the cursor; an expired
// cursor is graded "expired" and replayed. Neither is a failure.
func ExampleGrade() {
	// The server's routine timeout, after a live session: nothing to say.
	closed := wgwatch.Grade(wgwatch.Ending{
		Stage: wgwatch.StageStream, Cause: wgwatch.CauseClosed, Duration: 42 * time.Minute, Events: 120, Live: true,
	}, wgwatch.Policy{})
	fmt.Println(closed.Outcome, closed.Next, closed.Publish)

	// A 410 after a live session: replay at once; Replaying is published
	// only if the stream is not live again within ReplayGrace.
	expired := wgwatch.Grade(wgwatch.Ending{
		Stage: wgwatch.StageStream, Cause: wgwatch.CauseError, Err: watchtest.Expired(), Live: true,
	}, wgwatch.Policy{})
	first := expired.Escalations[0]
	fmt.Println(expired.Outcome, expired.Next, expired.Publish, first.After, first.State.Phase, first.State.Reason)

	// A Forbidden seen for 20 seconds, past the grace of a fresh install.
	forbidden := wgwatch.Grade(wgwatch.Ending{
		Stage: wgwatch.StageOpen, Cause: wgwatch.CauseError, Err: watchtest.Forbidden(),
		Failures: 5, Trouble: 20 * time.Second, NeedsHumanFor: 20 * time.Second,
	}, wgwatch.Policy{})
	fmt.Println(forbidden.Outcome, forbidden.State.Phase, forbidden.State.Reason, forbidden.State.NeedsHuman, forbidden.Wait)
	// Output:
	// closed Resume false
	// expired Replay false 10s Replaying ExpiredResourceVersion
	// error Blocked Forbidden true Slow
}

func ExampleClassify() {
	for _, err := range []error{watchtest.Expired(), watchtest.Forbidden(), watchtest.TooManyRequests(3), watchtest.ConnectionRefused()} {
		class, reason := wgwatch.Classify(err)
		fmt.Println(class, reason)
	}
	// Output:
	// expired ExpiredResourceVersion
	// needs_human Forbidden
	// transient TooManyRequests
	// transient ConnectionFailed
}

// A stream over a scripted source: a replay delivers a snapshot, live events
// follow, and a routine close resumes from the cursor without a word.
func ExampleStream() {
	lw := watchtest.New(
		watchtest.Session{Events: []apiwatch.Event{
			watchtest.Added(watchtest.ConfigMap("a", "10")),
			watchtest.InitialEventsEnd("11"),
			watchtest.Modified(watchtest.ConfigMap("a", "12")),
		}, Lasts: 1500 * time.Millisecond}, // live after ShortSession (1s), then closed by the server
		watchtest.Session{Events: []apiwatch.Event{watchtest.Bookmark("15")}},
	)
	ctx, cancel := context.WithCancel(context.Background())
	handler := wgwatch.HandlerFuncs{
		SnapshotFunc: func(_ context.Context, snap wgwatch.Snapshot) error {
			fmt.Printf("snapshot of %d objects at %s\n", len(snap.Objects), snap.ResourceVersion)
			return nil
		},
		EventFunc: func(_ context.Context, ev apiwatch.Event) error {
			m, _ := meta.Accessor(ev.Object)
			fmt.Println(ev.Type, m.GetName(), m.GetResourceVersion())
			return nil
		},
	}
	observer := wgwatch.ObserverFuncs{
		StateChangedFunc: func(s wgwatch.State) { fmt.Println("state:", s.Phase, s.Reason) },
		SessionEndedFunc: func(e wgwatch.SessionEnd) {
			fmt.Println("session ended:", e.Verdict.Outcome)
			if lw.Remaining() == 0 && e.Verdict.Outcome != wgwatch.OutcomeTeardown {
				cancel() // the script is played: stop the example
			}
		},
	}
	stream, err := wgwatch.NewStream(lw, handler, wgwatch.StreamOptions{
		Resource: schema.GroupResource{Resource: "configmaps"},
		Observer: observer,
	})
	if err != nil {
		panic(err)
	}
	_ = stream.Run(ctx)
	fmt.Println("cursor:", stream.Cursor())
	// Output:
	// state: Starting Starting
	// state: Replaying InitialSync
	// snapshot of 1 objects at 11
	// MODIFIED a 12
	// state: Streaming Watching
	// session ended: closed
	// session ended: closed
	// cursor: 15
}

// After a 410 a stream replays from the apiserver's watch cache: its
// watch-list asks for the collection not older than the cursor that
// expired, which the cache serves from memory, where one at
// resourceVersion "" (ConsistentReplays) costs etcd a read. The replay
// starts within ReplaySpread of the 410 (here 20ms, for the example; 1s by
// default), so that the streams an apiserver restart expires together do
// not all replay in the same instant.
func ExampleStreamOptions_replays() {
	for _, consistent := range []bool{false, true} {
		lw := watchtest.New(
			watchtest.Session{Events: []apiwatch.Event{watchtest.ErrorEvent(watchtest.Expired())}},
			watchtest.Session{Events: []apiwatch.Event{
				watchtest.Added(watchtest.ConfigMap("a", "7")),
				watchtest.InitialEventsEnd("8"),
			}, Hang: true},
		)
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := wgwatch.NewStream(lw, wgwatch.HandlerFuncs{
			SnapshotFunc: func(context.Context, wgwatch.Snapshot) error {
				cancel() // replayed: stop the example
				return nil
			},
		}, wgwatch.StreamOptions{
			Resource:          schema.GroupResource{Resource: "configmaps"},
			Cursor:            "4",
			ReplaySpread:      20 * time.Millisecond,
			ConsistentReplays: consistent,
		})
		if err != nil {
			panic(err)
		}
		_ = stream.Run(ctx)
		fmt.Println("ConsistentReplays:", consistent)
		for _, c := range lw.Calls() {
			o := c.Options
			watchList := o.SendInitialEvents != nil && *o.SendInitialEvents
			fmt.Printf("  %s watch-list=%t resourceVersion=%q match=%q\n", c.Kind, watchList, o.ResourceVersion, o.ResourceVersionMatch)
		}
	}
	// Output:
	// ConsistentReplays: false
	//   Watch watch-list=false resourceVersion="4" match=""
	//   Watch watch-list=true resourceVersion="4" match="NotOlderThan"
	// ConsistentReplays: true
	//   Watch watch-list=false resourceVersion="4" match=""
	//   Watch watch-list=true resourceVersion="" match="NotOlderThan"
}

// Instrument the ListerWatcher an informer is built from; with
// controller-runtime, return the same from cache.Options.NewInformer.
func ExampleInstrument() {
	lw := watchtest.New(watchtest.Session{OpenErr: watchtest.Forbidden()})
	ilw, err := wgwatch.Instrument(lw, wgwatch.InstrumentOptions{
		Resource: schema.GroupResource{Resource: "configmaps"},
		Observer: wgwatch.ObserverFuncs{SessionEndedFunc: func(e wgwatch.SessionEnd) {
			fmt.Println(e.Stage, e.Verdict.Outcome, e.Verdict.Class)
		}},
	})
	if err != nil {
		panic(err)
	}
	// An informer would make this call; here we make it ourselves.
	_ = cache.NewSharedIndexInformer(ilw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	_, err = ilw.Watch(metav1.ListOptions{ResourceVersion: "7"})
	fmt.Println("error passed through:", err != nil)
	// Output:
	// Open error needs_human
	// error passed through: true
}

func ExampleObservers() {
	log := wgwatch.ObserverFuncs{StateChangedFunc: func(s wgwatch.State) { fmt.Println("log:", s.Phase) }}
	count := 0
	counter := wgwatch.ObserverFuncs{StateChangedFunc: func(wgwatch.State) { count++ }}
	both := wgwatch.Observers(log, nil, counter)
	both.StateChanged(wgwatch.State{Phase: wgwatch.PhaseStreaming})
	fmt.Println("count:", count)
	// Output:
	// log: Streaming
	// count: 1
}

// Validate refuses thresholds that cannot all be honoured; NewStream and
// Instrument refuse them the same way.
func ExamplePolicy_Validate() {
	err := wgwatch.Policy{ProgressDeadline: 20 * time.Second}.Validate()
	fmt.Println(errors.Is(err, wgwatch.ErrInvalidOptions))
	fmt.Println(err)
	_, err = wgwatch.NewStream(watchtest.New(), wgwatch.HandlerFuncs{}, wgwatch.StreamOptions{
		Resource:     schema.GroupResource{Resource: "configmaps"},
		WatchTimeout: 500 * time.Millisecond,
	})
	fmt.Println(err)
	// Output:
	// true
	// watchgrade/watch: invalid options: ProgressDeadline 20s is shorter than TransientGrace 30s
	// NewStream: watchgrade/watch: invalid options: WatchTimeout 500ms is shorter than twice ShortSession 1s: no session could go live
}
