package status_test

import (
	"context"
	"net/url"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
)

// TestRunStandby runs the standby writer in a bubble: a key queued before
// it starts is written once it does, a write the API server does not
// take is written once it is back (within the step's backoff), and
// nothing is written after the first Write; cancelled, it returns and
// leaves no goroutine (synctest fails the test otherwise).
func TestRunStandby(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 1)
		// The writer's goroutine and the test share the server.
		var mu sync.Mutex
		locked := func(do func()) { mu.Lock(); defer mu.Unlock(); do() }
		get := func(ctx context.Context, k types.NamespacedName) (out runtime.Object, err error) {
			locked(func() { out, err = f.srv.get(ctx, k) })
			return out, err
		}
		w, err := wgstatus.New(wgstatus.Options{
			Accumulator: f.acc, Resource: resource, Clock: f.clock,
			Update: func(ctx context.Context, obj runtime.Object) (out runtime.Object, err error) {
				locked(func() { out, err = f.srv.update(ctx, obj) })
				return out, err
			},
			Get: get,
		})
		if err != nil {
			t.Fatal(err)
		}
		f.w = w
		writes := func() (n int) { locked(func() { n = f.srv.writes }); return n }
		f.acc.SetGate(key, wgreadiness.Stalled("Secrets", "Forbidden", "secrets is forbidden"))
		f.srv.down = &url.Error{Op: "Put", URL: "https://apiserver:6443", Err: syscall.ECONNREFUSED}
		f.w.QueueStandby(key) // before it runs: waits for it
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- f.w.RunStandby(ctx, get) }()
		synctest.Wait()
		if writes() != 0 {
			t.Fatalf("writes = %d with the API server away, want 0", writes())
		}
		if err := f.w.RunStandby(ctx, get); err == nil {
			t.Error("a second RunStandby did not fail")
		}
		time.Sleep(2500 * time.Millisecond) // virtual: retried after 1 s, next at 3 s
		synctest.Wait()
		locked(func() { f.srv.down = nil })
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if writes() != 1 {
			t.Fatalf("writes = %d once the API server is back, want 1 (the key queued before the writer ran)", writes())
		}

		var obj runtime.Object
		locked(func() { obj = f.srv.read() })
		f.w.Write(ctx, obj, nil)
		n := writes()
		f.acc.SetGate(key, wgreadiness.Stalled("Secrets", "Forbidden", "secrets is forbidden, and a ConfigMap is missing"))
		f.w.QueueStandby(key)
		synctest.Wait()
		if writes() != n {
			t.Errorf("the standby writer wrote after the first Write")
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunStandby = %v, want nil once cancelled", err)
		}
	})
}
