package wgctrl_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// A cache restricted to two namespaces makes two ConfigMap informers under
// one stream name. One namespace's watch is denied: the Guestbook is
// Stalled, and stays Stalled, with its one Warning, while the other
// namespace's informer goes through an outage longer than the transient
// grace and recovers (its Streaming, passed on alone, would have made the
// Guestbook Ready while a namespace is still denied).
func TestInformersOfSeveralNamespacesShareOneVerdict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, &corev1.ConfigMap{})
		denied := watchtest.NewServer(watchtest.ServerOptions{})
		denied.SetFaults(watchtest.Faults{Err: watchtest.Forbidden()})
		other := watchtest.NewServer(watchtest.ServerOptions{})
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for _, srv := range []*watchtest.Server{denied, other} {
			inf := f.grade.NewInformer(srv, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
			wg.Go(func() { inf.RunWithContext(ctx) })
		}
		defer func() { cancel(); wg.Wait() }()
		if got := f.grade.Streams(); len(got) != 1 || got[0] != "ConfigMap.v1" {
			t.Fatalf("Streams() = %v, want one ConfigMap.v1", got)
		}

		time.Sleep(wgwatch.DefaultHumanGrace + time.Minute)
		synctest.Wait()
		f.reconcile(t)
		if s, r := condition(f.guestbook(t), wgreadiness.ConditionStalled); s != metav1.ConditionTrue {
			t.Fatalf("one namespace denied: Stalled = %s (%s), want True", s, r)
		}

		// The other namespace's informer: an outage it publishes, then
		// back.
		other.SetFaults(watchtest.Faults{Refuse: true})
		other.CloseWatches()
		time.Sleep(wgwatch.DefaultTransientGrace + 30*time.Second)
		other.SetFaults(watchtest.Faults{})
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		f.reconcile(t)
		if s, r := condition(f.guestbook(t), wgreadiness.ConditionStalled); s != metav1.ConditionTrue {
			t.Errorf("the other namespace recovered: Stalled = %s (%s), want True while one is denied", s, r)
		}
		if evs := f.events(); warnings(evs) != 1 {
			t.Errorf("Warnings = %d, want 1: %v", warnings(evs), evs)
		}

		denied.SetFaults(watchtest.Faults{})
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		f.reconcile(t)
		if s, r := condition(f.guestbook(t), wgreadiness.ConditionReady); s != metav1.ConditionTrue {
			t.Errorf("both namespaces served: Ready = %s (%s), want True", s, r)
		}
	})
}
