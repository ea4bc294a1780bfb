package wgctrl_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/watchgrade/watchgrade/examples/wgctrl"
	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// The probe follows each informer of a cache restricted to two
// namespaces, as client-go's HasSynced says: ready once both have
// listed (10 ms in, where a stream is Streaming only a second later), not
// while one of them has never synced, though the other has. The operator
// judge checks it over random histories (probe_wrong).
func TestReadyzCheckFollowsEachInformer(t *testing.T) {
	for _, tt := range []struct {
		name    string
		deniedB bool
		laterB  time.Duration // team-b's informer is made this long after team-a's
		want    string        // "" for ready
	}{
		{"both namespaces served: ready once both have listed", false, 0, ""},
		{"team-b denied from the start: not ready, naming team-b", true, 0, "team-b/ConfigMap.v1"},
		// The cache makes team-b's once team-a's has synced; team-a's
		// stream is Streaming by then.
		{"team-b's informer made 2 s after team-a's, denied: not ready, naming team-b", true, 2 * time.Second, "team-b/ConfigMap.v1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				grade, err := wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry()})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				var wg sync.WaitGroup
				defer func() { cancel(); wg.Wait() }()
				for _, ns := range []string{"team-a", "team-b"} {
					srv := watchtest.NewServer(watchtest.ServerOptions{Latency: watchtest.Latency{Request: time.Millisecond}})
					if ns == "team-b" && tt.deniedB {
						srv.SetFaults(watchtest.Faults{Err: watchtest.Forbidden()})
					}
					if ns == "team-b" && tt.laterB > 0 {
						time.Sleep(tt.laterB)
					}
					inf := grade.NewInformerInNamespace(ns, srv, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
					if err := inf.SetWatchErrorHandlerWithContext(wgwatch.WatchErrorLogger(logr.Discard(), wgwatch.LogOptions{})); err != nil {
						t.Fatal(err)
					}
					wg.Go(func() { inf.RunWithContext(ctx) })
				}
				synctest.Wait()
				if err := grade.ReadyzCheck(nil); !errors.Is(err, wgwatch.ErrNotSynced) {
					t.Errorf("before any list: ReadyzCheck() = %v, want ErrNotSynced", err)
				}
				time.Sleep(10 * time.Millisecond)
				synctest.Wait()
				err = grade.ReadyzCheck(nil)
				switch {
				case tt.want == "" && err != nil:
					t.Errorf("10 ms in, both listed: ReadyzCheck() = %v, want nil", err)
				case tt.want != "" && (!errors.Is(err, wgwatch.ErrNotSynced) || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "team-a")):
					t.Errorf("10 ms in: ReadyzCheck() = %v, want ErrNotSynced naming %s only", err, tt.want)
				}
				time.Sleep(10 * time.Minute)
				synctest.Wait()
				if err := grade.ReadyzCheck(nil); (err == nil) != (tt.want == "") {
					t.Errorf("10 minutes in: ReadyzCheck() = %v, want ready: %v", err, tt.want == "")
				}
			})
		})
	}
}
