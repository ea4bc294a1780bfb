package watch_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	apiwatch "k8s.io/apimachinery/pkg/watch"

	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// TestEveryWaySessionEndsIsReported plays each way a Stream's session can
// end, and checks that each ends in exactly one graded SessionEnd, in
// order: refusals of a watch-list that the stream answers by listing in
// the same session included (they end no session: the LIST+WATCH that
// follows does), and teardown. A 410 replays at once when it answered a
// resume and after a backoff when it answered a replay, in every shape.
func TestEveryWaySessionEndsIsReported(t *testing.T) {
	cm := watchtest.ConfigMap("a", "11")
	tests := []struct {
		name    string
		cursor  string
		opts    wgwatch.StreamOptions
		lw      func() *watchtest.ListerWatcher
		handler func(apiwatch.Event) error
		want    []string
	}{
		{name: "the open fails", cursor: "10",
			lw: func() *watchtest.ListerWatcher {
				return watchtest.New(watchtest.Session{OpenErr: watchtest.ServiceUnavailable()})
			},
			want: []string{"Open error Resume/Backoff", "Stream teardown Stop/None"}},
		{name: "the server's timeout, live", cursor: "10",
			lw:   func() *watchtest.ListerWatcher { return watchtest.New(watchtest.Session{Lasts: 2 * time.Second}) },
			want: []string{"Stream closed Resume/None", "Stream teardown Stop/None"}},
		{name: "an ERROR event after an event", cursor: "10",
			lw: func() *watchtest.ListerWatcher {
				return watchtest.New(watchtest.Session{Events: []apiwatch.Event{watchtest.Added(cm), watchtest.ErrorEvent(watchtest.ServiceUnavailable())}})
			},
			want: []string{"Stream error Resume/Backoff", "Stream teardown Stop/None"}},
		{name: "an event without an object", cursor: "10",
			lw: func() *watchtest.ListerWatcher {
				return watchtest.New(watchtest.Session{Events: []apiwatch.Event{{Type: apiwatch.Added}}})
			},
			want: []string{"Stream error Resume/Backoff", "Stream teardown Stop/None"}},
		{name: "the handler fails", cursor: "10",
			lw: func() *watchtest.ListerWatcher {
				return watchtest.New(watchtest.Session{Events: []apiwatch.Event{watchtest.Added(cm)}, Hang: true})
			},
			handler: func(apiwatch.Event) error { return errors.New("db down") },
			// Delivered again after each backoff, failing each time.
			want: []string{"Stream error Resume/Backoff", "Stream teardown Stop/None"}},
		{name: "410 as an ERROR event on a resume", cursor: "10",
			lw: func() *watchtest.ListerWatcher {
				return watchtest.New(watchtest.Session{Events: []apiwatch.Event{watchtest.ErrorEvent(watchtest.Expired())}})
			},
			// The replay that follows (a watch-list with no end yet) is
			// torn down.
			want: []string{"Stream expired Replay/None", "Replay teardown Stop/None"}},
		{name: "410 on the open of a resume", cursor: "10",
			lw:   func() *watchtest.ListerWatcher { return watchtest.New(watchtest.Session{OpenErr: watchtest.Expired()}) },
			want: []string{"Open expired Replay/None", "Replay teardown Stop/None"}},
		{name: "410 on a LIST page", opts: wgwatch.StreamOptions{DisableWatchList: true},
			lw: func() *watchtest.ListerWatcher {
				lw := watchtest.New()
				lw.AddLists(watchtest.List{Err: watchtest.Expired()})
				return lw
			},
			want: []string{"List expired Replay/Backoff", "Stream teardown Stop/None"}},
		{name: "410 as the first event of a watch-list",
			lw: func() *watchtest.ListerWatcher {
				return watchtest.New(watchtest.Session{Events: []apiwatch.Event{watchtest.ErrorEvent(watchtest.Expired())}})
			},
			want: []string{"Replay expired Replay/Backoff", "Replay teardown Stop/None"}},
		{name: "a watch-list refused on the open, then a LIST",
			lw: func() *watchtest.ListerWatcher {
				lw := watchtest.New()
				lw.RefuseWatchList = true
				return lw
			},
			want: []string{"Stream teardown Stop/None"}},
		{name: "a watch-list refused by its first event, then a LIST",
			lw: func() *watchtest.ListerWatcher {
				return watchtest.New(watchtest.Session{Events: []apiwatch.Event{watchtest.ErrorEvent(watchtest.ServiceUnavailable())}})
			},
			want: []string{"Stream teardown Stop/None"}},
		{name: "a watch-list past its deadline", opts: wgwatch.StreamOptions{ReplayTimeout: 2 * time.Second},
			lw:   func() *watchtest.ListerWatcher { return watchtest.New(watchtest.Session{Hang: true}) },
			want: []string{"Replay error Replay/Backoff", "Stream teardown Stop/None"}},
		{name: "a cursor the server has not reached", cursor: "100", opts: wgwatch.StreamOptions{CursorCheck: 10 * time.Second},
			lw: func() *watchtest.ListerWatcher { return watchtest.New(watchtest.Session{Hang: true}) },
			// The check's LIST answers resourceVersion 1.
			want: []string{"Stream expired Replay/None", "Replay teardown Stop/None"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var got []string
				opts := tt.opts
				opts.Resource, opts.Cursor = configmaps, tt.cursor
				if opts.CursorCheck == 0 {
					opts.CursorCheck = -1
				}
				opts.Observer = wgwatch.ObserverFuncs{SessionEndedFunc: func(e wgwatch.SessionEnd) {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, fmt.Sprintf("%s %s %s/%s", e.Stage, e.Verdict.Outcome, e.Verdict.Next, e.Verdict.Wait))
				}}
				failed := false
				h := wgwatch.HandlerFuncs{EventFunc: func(_ context.Context, ev apiwatch.Event) error {
					if tt.handler != nil && !failed {
						failed = true
						return tt.handler(ev)
					}
					return nil
				}}
				s, err := wgwatch.NewStream(tt.lw(), h, opts)
				if err != nil {
					t.Fatal(err)
				}
				stop := runStream(t, s)
				time.Sleep(5 * time.Second)
				synctest.Wait()
				stop()
				mu.Lock()
				defer mu.Unlock()
				if !slices.Equal(got, tt.want) {
					t.Errorf("session endings\n  %q\nwant\n  %q", got, tt.want)
				}
			})
		})
	}
}
