package wgctrl_test

import (
	"context"
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
		done := make(chan struct{})
		go func() { defer close(done); inf.RunWithContext(ctx) }()
		defer func() { cancel(); <-done }()
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
