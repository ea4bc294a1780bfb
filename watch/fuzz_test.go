package watch

import (
	"context"
	"testing"
	"testing/synctest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"

	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// FuzzStreamEvents feeds a stream arbitrary sequences of events, in both
// replay and streaming sessions, and checks that it never panics and stops
// cleanly, with no watch left open.
func FuzzStreamEvents(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7}, "7", true)
	f.Add([]byte{9, 9, 3, 250, 1}, "", false)
	f.Add([]byte{5, 5, 5}, "x", true)
	f.Fuzz(func(t *testing.T, script []byte, rv string, fromCursor bool) {
		if len(script) > 64 {
			script = script[:64]
		}
		var events []apiwatch.Event
		for i, b := range script {
			events = append(events, fuzzEvent(b, rv, i))
		}
		synctest.Test(t, func(t *testing.T) {
			lw := watchtest.New(watchtest.Session{Events: events}, watchtest.Session{Events: events})
			lw.AddLists(watchtest.List{ResourceVersion: rv})
			opts := StreamOptions{Resource: schema.GroupResource{Resource: "configmaps"}}
			if fromCursor {
				opts.Cursor = "1"
			}
			s, err := NewStream(lw, HandlerFuncs{
				EventFunc: func(context.Context, apiwatch.Event) error { return nil },
			}, opts)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error)
			go func() { done <- s.Run(ctx) }()
			settle()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run() = %v, want nil", err)
			}
			if n := lw.Open(); n != 0 {
				t.Errorf("%d watches open after teardown, want 0", n)
			}
		})
	})
}

// fuzzEvent turns one byte into an event of a shape a server could send,
// valid or not.
func fuzzEvent(b byte, rv string, i int) apiwatch.Event {
	types := []apiwatch.EventType{apiwatch.Added, apiwatch.Modified, apiwatch.Deleted, apiwatch.Bookmark, apiwatch.Error, "WHAT"}
	typ := types[int(b)%len(types)]
	var obj runtime.Object
	switch (b / 8) % 6 {
	case 0:
		obj = nil
	case 1:
		obj = watchtest.ConfigMap("o", rv)
	case 2:
		obj = watchtest.InitialEventsEnd(rv).Object
	case 3:
		obj = &metav1.Status{Code: int32(b) * 3, Reason: metav1.StatusReason(rv)}
	case 4:
		obj = &runtime.Unknown{Raw: []byte(rv)}
	default:
		obj = watchtest.ConfigMap("o", string(rune('a'+i%26)))
	}
	return apiwatch.Event{Type: typ, Object: obj}
}
