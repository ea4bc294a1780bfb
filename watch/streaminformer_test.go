package watch_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// TestStreamInformerTellsTheProbe: an informer made with
// StreamInformer.Informer holds the probe until it has synced; one whose
// lists are refused holds it until it is told to stop, and its Run
// returns (synctest fails the test on a goroutine left behind).
func TestStreamInformerTellsTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var synced watch.SyncCheck
		streams := &watch.Streams{Synced: &synced, Observer: &synced}
		configmaps := schema.GroupResource{Resource: "configmaps"}
		run := func(ctx context.Context, srv *watchtest.Server, namespace string) chan struct{} {
			member, _ := streams.Add("ConfigMap.v1", namespace, nil)
			ilw, err := watch.Instrument(srv, watch.InstrumentOptions{Resource: configmaps, Name: "ConfigMap.v1", Observer: member})
			if err != nil {
				t.Fatal(err)
			}
			inf := member.Informer(cache.NewSharedIndexInformer(ilw, &corev1.ConfigMap{}, 0, cache.Indexers{}))
			done := make(chan struct{})
			go func() { defer close(done); inf.RunWithContext(ctx) }()
			return done
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		aDone := run(ctx, watchtest.NewServer(watchtest.ServerOptions{}), "team-a")
		refused := watchtest.NewServer(watchtest.ServerOptions{})
		refused.SetFaults(watchtest.Faults{Refuse: true})
		bCtx, stopB := context.WithCancel(ctx)
		bDone := run(bCtx, refused, "team-b")
		time.Sleep(time.Minute) // virtual: team-a's informer lists, team-b's is refused
		synctest.Wait()
		err := streams.Check(nil)
		if !errors.Is(err, watch.ErrNotSynced) || !strings.Contains(err.Error(), "team-b/ConfigMap.v1") || strings.Contains(err.Error(), "team-a/") {
			t.Fatalf("probe %v, want it waiting for team-b's informer only", err)
		}
		stopB() // the cache's RemoveInformer
		<-bDone
		if err := streams.Check(nil); err != nil {
			t.Errorf("probe %v once team-b's informer stopped, want it to pass", err)
		}
		cancel()
		<-aDone
	})
}

// A watch that opened between two of a reflector's errors is a close to
// the watch error handler, handed before the second: a denial repaired
// and made again is two stretches of trouble. Errors with no watch
// opened between them (a watch refused at its opening every time) stay
// one.
func TestWatchErrorHandlerLearnsOfAWatchOpenedBetweenErrors(t *testing.T) {
	var got []string
	opened := 0
	h := watch.AnsweredHandler(func(_ context.Context, _ *cache.Reflector, err error) {
		got = append(got, err.Error())
	}, func() int { return opened })
	forbidden := errors.New("forbidden")
	h(context.Background(), nil, forbidden)
	h(context.Background(), nil, forbidden)
	opened++ // a watch opened, and ended
	h(context.Background(), nil, forbidden)
	h(context.Background(), nil, forbidden)
	opened++
	h(context.Background(), nil, io.EOF) // a close: not doubled
	want := []string{"forbidden", "forbidden", "EOF", "forbidden", "forbidden", "EOF"}
	if !slices.Equal(got, want) {
		t.Errorf("handed %q, want %q", got, want)
	}
}
