package watchtest_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"

	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// store is the handler under test: a map of names to resourceVersions, as
// a controller's cache would keep them.
type store struct {
	mu        sync.Mutex
	objects   map[string]string
	snapshots chan []string // the names after each snapshot
	events    chan string
}

func (s *store) Snapshot(_ context.Context, snap wgwatch.Snapshot) error {
	s.mu.Lock()
	s.objects = map[string]string{}
	for _, o := range snap.Objects {
		m, _ := meta.Accessor(o)
		s.objects[m.GetName()] = m.GetResourceVersion()
	}
	names := slices.Sorted(maps.Keys(s.objects))
	s.mu.Unlock()
	s.snapshots <- names
	return nil
}

func (s *store) Event(_ context.Context, ev apiwatch.Event) error {
	m, _ := meta.Accessor(ev.Object)
	s.mu.Lock()
	if ev.Type == apiwatch.Deleted {
		delete(s.objects, m.GetName())
	} else {
		s.objects[m.GetName()] = m.GetResourceVersion()
	}
	s.mu.Unlock()
	s.events <- fmt.Sprintf("%s %s", ev.Type, m.GetName())
	return nil
}

// A handler checked through an expiry with a delete in the gap: while the
// server refuses connections, b is deleted and the server restarts, so the
// stream's cursor expires and no DELETED event is ever sent. The snapshot
// after the replay is how the handler learns that b is gone.
func ExampleServer() {
	srv := watchtest.NewServer(watchtest.ServerOptions{})
	h := &store{snapshots: make(chan []string, 4), events: make(chan string, 4)}
	stream, err := wgwatch.NewStream(srv, h, wgwatch.StreamOptions{
		Resource:       schema.GroupResource{Resource: "configmaps"},
		InitialBackoff: 10 * time.Millisecond, // retries come fast in an example
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- stream.Run(ctx) }()

	fmt.Println("first snapshot:", <-h.snapshots)
	for _, name := range []string{"a", "b"} {
		if _, err := srv.Create(watchtest.ConfigMap(name, "")); err != nil {
			panic(err)
		}
		fmt.Println("event:", <-h.events)
	}

	srv.SetFaults(watchtest.Faults{Refuse: true})
	srv.CloseWatches()
	if err := srv.Delete("default", "b"); err != nil {
		panic(err)
	}
	srv.Restart() // the new watch cache starts after the stream's cursor
	srv.SetFaults(watchtest.Faults{})

	fmt.Println("after the expiry:", <-h.snapshots)
	cancel()
	<-done
	// Output:
	// first snapshot: []
	// event: ADDED a
	// event: ADDED b
	// after the expiry: [a]
}
