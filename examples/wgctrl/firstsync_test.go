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
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// A new Guestbook reconciled as soon as its controller's informer has
// synced, while the informer's stream is still replaying: one status
// write (Ready=True, once the stream is live) and one Event. It was
// Reconciling/InitialSync with a Normal Event, then Ready=True with
// another, a second apart, for every owner of an install.
func TestANewOwnersFirstSyncIsOneWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, &corev1.ConfigMap{})
		inf := f.grade.NewInformer(watchtest.NewServer(watchtest.ServerOptions{}), &corev1.ConfigMap{}, 0, toolscache.Indexers{})
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { inf.RunWithContext(ctx) })
		defer func() { cancel(); wg.Wait() }()
		for !inf.HasSynced() {
			time.Sleep(time.Millisecond)
		}
		rv := f.guestbook(t).ResourceVersion
		writes := 0
		for range 10 { // a reconcile now and then, as requeues bring them
			f.reconcile(t)
			if got := f.guestbook(t).ResourceVersion; got != rv {
				writes++
				rv = got
			}
			time.Sleep(time.Second)
			synctest.Wait()
		}
		if s, r := condition(f.guestbook(t), wgreadiness.ConditionReady); s != metav1.ConditionTrue {
			t.Errorf("Ready = %s (%s), want True", s, r)
		}
		if writes != 1 {
			t.Errorf("status writes = %d, want 1", writes)
		}
		if evs := f.events(); len(evs) != 1 {
			t.Errorf("Events = %q, want one Normal", evs)
		}
	})
}

// An owner deleted under a reconcile that writes nothing (its status
// already says it all) is forgotten: nothing else would, once its delete
// event has come and gone.
func TestStatusOfADeletedReadyOwnerIsForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, &corev1.ConfigMap{})
		inf := f.grade.NewInformer(watchtest.NewServer(watchtest.ServerOptions{}), &corev1.ConfigMap{}, 0, toolscache.Indexers{})
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { inf.RunWithContext(ctx) })
		defer func() { cancel(); wg.Wait() }()
		time.Sleep(time.Minute)
		synctest.Wait()
		f.reconcile(t)
		gb := f.guestbook(t)
		if s, r := condition(gb, wgreadiness.ConditionReady); s != metav1.ConditionTrue {
			t.Fatalf("Ready = %s (%s), want True", s, r)
		}
		if err := f.client.Delete(t.Context(), gb); err != nil {
			t.Fatal(err)
		}
		if err := f.owner.Status(t.Context(), gb); err != nil {
			t.Errorf("Status() of a deleted owner = %v, want nil", err)
		}
		if g := f.owner.Accumulator().Gates(gbKey); g != nil {
			t.Errorf("Gates() of the deleted owner = %+v, want none: it is still tracked", g)
		}
	})
}
