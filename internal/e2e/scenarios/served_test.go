package scenarios

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// Scenario: a client-go controller whose owners depend on Widgets starts
// before the Widget CRD is installed. The status step's AwaitInformer,
// asking a discovery RESTMapper, reports the kind: the owner's Widget
// stream is Stalled, ResourceNotFound, after the human grace, and the
// probe does not wait for an informer that cannot exist. Once the CRD is
// installed and discovery knows it (the mapper reset after each miss), it
// starts the informer, and the owner follows its stream to Streaming.
func TestAwaitInformerFollowsACRDInstalledLater(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	cfg := c.Config()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(cfg)))
	client := dynamic.NewForConfigOrDie(cfg)

	acc, err := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := newProbe()
	synced := &wgwatch.SyncCheck{}
	streams := &wgwatch.Streams{Observer: wgwatch.Observers(acc, p), InNamespace: acc, Synced: synced}
	w, err := wgstatus.New(wgstatus.Options{
		Accumulator: acc, Streams: streams,
		Update: func(_ context.Context, obj runtime.Object) (runtime.Object, error) { return obj, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	gvk := schema.GroupVersionKind{Group: widgetsGVR.Group, Version: widgetsGVR.Version, Kind: "Widget"}
	name := wgwatch.StreamName(gvk)
	key := types.NamespacedName{Namespace: ns, Name: "orders"}
	w.Track(key, wgstatus.Dependencies{Kinds: []string{name}})
	synced.Expect(name) // as wgctrl expects each watched kind
	gate := func() wgreadiness.Gate {
		for _, g := range acc.Gates(key) {
			if g.Name == name {
				return g
			}
		}
		return wgreadiness.Gate{}
	}

	start := time.Now()
	informerDone := make(chan struct{})
	awaited := make(chan error, 1)
	go func() {
		awaited <- w.AwaitInformer(ctx, wgstatus.Kind{
			Name: name, Resource: widgetsGVR.GroupResource(), Every: time.Second,
			Served: func(context.Context) (bool, error) {
				_, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if meta.IsNoMatchError(err) {
					mapper.Reset() // discovery is asked afresh next time
					return false, nil
				}
				return err == nil, err
			},
			Start: func(ctx context.Context) error {
				member, _ := streams.Add(name, "", nil)
				ilw, err := wgwatch.Instrument(listWatchFor(client, widgetsGVR, ns), wgwatch.InstrumentOptions{Resource: widgetsGVR.GroupResource(), Name: name, Observer: member})
				if err != nil {
					return err
				}
				inf := member.Informer(cache.NewSharedIndexInformer(ilw, &unstructured.Unstructured{}, 0, cache.Indexers{}))
				go func() { defer close(informerDone); inf.RunWithContext(ctx) }()
				return nil
			},
		})
	}()
	t.Cleanup(func() {
		if err := <-awaited; err == nil {
			<-informerDone // the test's context is done: the informer stops
		}
	})

	p.waitFor(t, 60*time.Second, "the owner Stalled for want of the CRD", func() bool {
		g := gate()
		return g.Level == wgreadiness.LevelStalled && g.Reason == string(wgwatch.ReasonResourceNotFound)
	})
	stalledAfter := time.Since(start)
	probeWaits := synced.Check(nil) != nil
	if probeWaits {
		t.Errorf("the probe waits for a kind the API server does not serve: %v", synced.Check(nil))
	}
	if err := c.InstallCRD(ctx, widgetCRD()); err != nil {
		t.Fatal(err)
	}
	installed := time.Now()
	select {
	case err := <-awaited:
		awaited <- err // for the cleanup
		if err != nil {
			t.Fatalf("AwaitInformer: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no informer started within 60 s of the CRD's installation")
	}
	startedAfter := time.Since(installed)
	p.waitFor(t, 60*time.Second, "the owner following the informer's stream to Streaming", func() bool {
		return gate().Level == wgreadiness.LevelEstablished
	})
	fmt.Printf("e2e: await-informer stalled_after=%.1fs reason=ResourceNotFound probe_waits=%v informer_started_after_install=%.1fs streaming_after_install=%.1fs\n",
		stalledAfter.Seconds(), probeWaits, startedAfter.Seconds(), time.Since(installed).Seconds())
}
