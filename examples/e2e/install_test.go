package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/watchgrade/watchgrade/examples/watchtarget"
	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
)

// installOwners is how many WatchTargets TestInstallWritesEachOwnerOnce
// installs at once.
const installOwners = 1000

// TestInstallWritesEachOwnerOnce installs 1,000 WatchTargets at once under
// a running operator wired with wgctrl (runWatchTargetOperator) on a real
// kube-apiserver, as a chart that ships many custom resources does, and
// counts, from a watch opened before the first is created, each owner's
// status writes until every one is Ready for its generation, and then its
// Events. A new owner's first sync must be one status write (Ready=True)
// and one Event (a Normal): before, it was Reconciling, then Ready, up to
// three writes and two Events each.
func TestInstallWritesEachOwnerOnce(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	admin := kubernetes.NewForConfigOrDie(c.Config())
	crd, err := watchtarget.CRD()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.InstallCRD(ctx, crd); err != nil {
		t.Fatal(err)
	}
	const ns = "install"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scheme := watchTargetScheme(t)
	adminClient, err := client.NewWithWatch(c.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	runWatchTargetOperator(t, c.Config(), scheme, cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}})

	w, err := adminClient.Watch(ctx, &watchtarget.WatchTargetList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	began := time.Now()
	for i := range installOwners {
		wt := &watchtarget.WatchTarget{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("wt-%04d", i), Namespace: ns},
			Spec: watchtarget.Spec{Resources: []watchtarget.ResourceRef{{Version: "v1", Resource: "configmaps"}}}}
		if err := adminClient.Create(ctx, wt); err != nil {
			t.Fatal(err)
		}
	}
	created := time.Since(began)

	writes := map[string]int{} // status writes per owner
	ready := map[string]bool{}
	timeout := time.After(3 * time.Minute)
	for len(ready) < installOwners {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch closed with %d of %d Ready", len(ready), installOwners)
			}
			wt, ok := e.Object.(*watchtarget.WatchTarget)
			if !ok || e.Type != watch.Modified {
				continue
			}
			writes[wt.Name]++
			if meta.IsStatusConditionTrue(wt.Status.Conditions, wgreadiness.ConditionReady) && wt.Status.ObservedGeneration == wt.Generation {
				ready[wt.Name] = true
			}
		case <-timeout:
			t.Fatalf("3 minutes after the install began, %d of %d are Ready", len(ready), installOwners)
		}
	}
	allReady := time.Since(began)

	// The Events are recorded after the writes, a moment later: wait for
	// one per owner, then count them all.
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		n, w := countEvents(t, admin, ns)
		return n+w >= installOwners, nil
	})
	normal, warning := countEvents(t, admin, ns)
	maxWrites, total := 0, 0
	for _, n := range writes {
		maxWrites = max(maxWrites, n)
		total += n
	}
	t.Logf("e2e: install owners=%d created_in=%.1fs all_ready_after=%.1fs status_writes=%d writes_per_owner=%.2f max_writes_per_owner=%d events_normal=%d events_warning=%d events_per_owner=%.2f",
		installOwners, created.Seconds(), allReady.Seconds(), total, float64(total)/installOwners, maxWrites, normal, warning, float64(normal+warning)/installOwners)
	if maxWrites != 1 {
		t.Errorf("an owner was written %d times before it was Ready, want 1 write each", maxWrites)
	}
	if normal+warning > installOwners || warning != 0 {
		t.Errorf("Events: %d Normal and %d Warning for %d owners, want at most one Normal each", normal, warning, installOwners)
	}
}
