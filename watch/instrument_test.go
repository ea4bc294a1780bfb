package watch

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// A real client-go informer over an instrumented ListerWatcher: its
// sessions are graded, its own retries are untouched, and its store ends up
// as it would without the wrapper.
func TestInstrumentGradesInformerSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := watchtest.New(
			watchtest.Session{Events: []apiwatch.Event{watchtest.Added(cm("a", "2")), watchtest.InitialEventsEnd("5")}},
			watchtest.Session{Events: []apiwatch.Event{watchtest.Added(cm("b", "6")), watchtest.ErrorEvent(watchtest.Expired())}},
			watchtest.Session{Hang: true, Events: []apiwatch.Event{
				watchtest.Added(cm("a", "2")), watchtest.Added(cm("c", "7")), watchtest.InitialEventsEnd("8")}},
		)
		rec := &recorder{}
		ilw, err := Instrument(lw, InstrumentOptions{Resource: configmaps, Observer: rec})
		if err != nil {
			t.Fatalf("Instrument() = %v", err)
		}
		informer := cache.NewSharedIndexInformer(ilw, &corev1.ConfigMap{}, 0, cache.Indexers{})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); informer.RunWithContext(ctx) }()
		settle()
		var keys []string
		for _, o := range informer.GetStore().List() {
			keys = append(keys, o.(*corev1.ConfigMap).Name)
		}
		cancel()
		<-done
		synctest.Wait()

		if diff := cmp.Diff([]string{"a", "c"}, sorted(keys)); diff != "" {
			t.Errorf("informer store mismatch (-want +got):\n%s", diff)
		}
		want := []string{
			"state Replaying/InitialSync human=false",
			// The first session closes right after its replay: it never
			// went live, so Streaming waits.
			"end closed Stream",
			// The reflector answers the short first session with a
			// watch-list from its last resourceVersion, so the 410 comes
			// during that replay; the next replay is done within
			// ReplayGrace, so Replaying is never published.
			"end expired Replay",
			"state Streaming/Watching human=false",
			"end teardown Stream",
		}
		if diff := cmp.Diff(want, rec.Log()); diff != "" {
			t.Errorf("log mismatch (-want +got):\n%s", diff)
		}
		if n := lw.Open(); n != 0 {
			t.Errorf("%d watches still open after the informer stopped, want 0", n)
		}
	})
}

func TestInstrumentGradesFailedListAndOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := watchtest.New(watchtest.Session{OpenErr: watchtest.Forbidden()})
		lw.AddLists(watchtest.List{Err: watchtest.NotFound()})
		rec := &recorder{}
		ilw, err := Instrument(lw, InstrumentOptions{Resource: configmaps, Observer: rec})
		if err != nil {
			t.Fatalf("Instrument() = %v", err)
		}
		// The informer's context ends the escalations armed after a
		// failure, as it does when an informer stops.
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		if _, err := ilw.ListWithContext(ctx, metav1.ListOptions{}); !errors.Is(err, watchtest.NotFound()) && err == nil {
			t.Fatalf("List() = %v, want the NotFound passed through", err)
		}
		if _, err := ilw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "3"}); err == nil {
			t.Fatalf("Watch() = nil error, want the Forbidden passed through")
		}
		var got []string
		for _, e := range rec.endings {
			got = append(got, fmt.Sprintf("%s %s %s", e.Verdict.Outcome, e.Stage, e.Verdict.Class))
		}
		want := []string{"error List needs_human", "error Open needs_human"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("endings mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestInstrumentRejectsBadInput(t *testing.T) {
	if _, err := Instrument(nil, InstrumentOptions{Resource: configmaps}); !errors.Is(err, ErrNilListerWatcher) {
		t.Errorf("Instrument(nil) = %v, want ErrNilListerWatcher", err)
	}
	if _, err := Instrument(watchtest.New(), InstrumentOptions{}); !errors.Is(err, ErrNoResource) {
		t.Errorf("Instrument(no resource) = %v, want ErrNoResource", err)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}
