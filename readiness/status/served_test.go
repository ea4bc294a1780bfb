package status_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
	"github.com/watchgrade/watchgrade/watch"
)

// awaitFixture is a writer, in a synctest bubble, over Streams whose
// probe expects the kind widget.
type awaitFixture struct {
	acc     *wgreadiness.Accumulator
	synced  *watch.SyncCheck
	streams *watch.Streams
	w       *wgstatus.Writer

	mu     sync.Mutex
	served bool
	starts int
	// startErrs are Start's answers, one per call; nil once used up.
	startErrs []error
}

const widget = "Widget.v1.example.dev"

var widgets = schema.GroupResource{Group: "example.dev", Resource: "widgets"}

func newAwaitFixture(t *testing.T) *awaitFixture {
	t.Helper()
	f := &awaitFixture{synced: &watch.SyncCheck{}}
	var err error
	if f.acc, err = wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{}); err != nil {
		t.Fatal(err)
	}
	f.streams = &watch.Streams{Observer: f.acc, InNamespace: f.acc, Synced: f.synced}
	if f.w, err = wgstatus.New(wgstatus.Options{Accumulator: f.acc, Update: newServer(1).update, Resource: resource, Streams: f.streams}); err != nil {
		t.Fatal(err)
	}
	f.w.Track(key, wgstatus.Dependencies{Kinds: []string{widget}})
	f.synced.Expect(widget)
	return f
}

func (f *awaitFixture) kind() wgstatus.Kind {
	return wgstatus.Kind{
		Name: widget, Resource: widgets, Settle: 15 * time.Second,
		Served: func(context.Context) (bool, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.served, nil
		},
		Start: func(context.Context) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.starts++
			if len(f.startErrs) == 0 {
				return nil
			}
			err := f.startErrs[0]
			f.startErrs = f.startErrs[1:]
			return err
		},
	}
}

func (f *awaitFixture) setServed(served bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.served = served
}

func (f *awaitFixture) startCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.starts
}

// stalled reports whether the owner's widget stream is Blocked for want
// of its CRD.
func (f *awaitFixture) stalled() bool {
	for _, g := range f.acc.Gates(key) {
		if g.Name == widget && g.Level == wgreadiness.LevelStalled && g.Reason == string(watch.ReasonResourceNotFound) {
			return true
		}
	}
	return false
}

// TestAwaitInformerReportsAKindUntilItIsServedThenStartsIt: a kind not
// served is reported after the human grace (and the probe does not wait
// for it), taken back once served; its informer is asked for only after
// the settle time, again after a mapping not known yet, and AwaitInformer
// returns once one is made.
func TestAwaitInformerReportsAKindUntilItIsServedThenStartsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newAwaitFixture(t)
		f.startErrs = []error{&meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "example.dev", Kind: "Widget"}}}
		done := make(chan error, 1)
		go func() { done <- f.w.AwaitInformer(context.Background(), f.kind()) }()
		synctest.Wait()
		if err := f.synced.Check(nil); err != nil {
			t.Errorf("probe %v for a kind not served, want it not to wait for an informer that cannot exist", err)
		}
		time.Sleep(watch.DefaultHumanGrace - time.Second)
		synctest.Wait()
		if f.stalled() {
			t.Fatal("Stalled within the human grace")
		}
		time.Sleep(wgstatus.DefaultServedEvery)
		synctest.Wait()
		if !f.stalled() {
			t.Fatalf("gates %+v once unserved past the human grace, want %s Blocked, %s", f.acc.Gates(key), widget, watch.ReasonResourceNotFound)
		}
		f.setServed(true) // the CRD installed
		time.Sleep(wgstatus.DefaultServedEvery)
		synctest.Wait()
		if f.stalled() {
			t.Error("still Stalled once served")
		}
		if n := f.startCount(); n != 0 {
			t.Errorf("Start called %d times within the settle time, want 0", n)
		}
		time.Sleep(15 * time.Second) // settled: Start, refused by a mapper not caught up
		synctest.Wait()
		if n := f.startCount(); n != 1 {
			t.Fatalf("Start called %d times once settled, want 1", n)
		}
		select {
		case err := <-done:
			t.Fatalf("returned %v after a failed Start, want it to ask again", err)
		default:
		}
		time.Sleep(wgstatus.DefaultServedEvery)
		synctest.Wait()
		select {
		case err := <-done:
			if err != nil || f.startCount() != 2 {
				t.Errorf("returned %v after %d Starts, want nil after 2", err, f.startCount())
			}
		default:
			t.Fatal("still waiting after Start succeeded")
		}
	})
}

// TestAwaitInformerStandsDownForAnInformerOfTheKind: a kind with an
// informer already (the controller's own) is not started again; one
// stopped with its context returns the context's error.
func TestAwaitInformerStandsDownForAnInformerOfTheKind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newAwaitFixture(t)
		f.setServed(true)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.w.AwaitInformer(ctx, f.kind()) }()
		time.Sleep(10 * time.Second) // within the settle time
		f.streams.Add(widget, "", nil)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		select {
		case err := <-done:
			if err != nil || f.startCount() != 0 {
				t.Errorf("returned %v after %d Starts, want nil and none", err, f.startCount())
			}
		default:
			t.Fatal("still waiting once the kind has an informer")
		}

		g := newAwaitFixture(t)
		go func() { done <- g.w.AwaitInformer(ctx, g.kind()) }()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("returned %v once cancelled, want context.Canceled", err)
		}
	})
}
