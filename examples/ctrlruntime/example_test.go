package ctrlruntime_test

import (
	"fmt"
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/watchgrade/watchgrade/examples/ctrlruntime"
	"github.com/watchgrade/watchgrade/examples/watchtarget"
	"github.com/watchgrade/watchgrade/examples/wgctrl"
)

// The manager's options pass through the Instrumentation before the manager
// is made: the cache is restricted to the namespace, and wgctrl's Grader
// sets the hook that grades every informer and the graded watch error
// handler.
func ExampleInstrumentation_ManagerOptions() {
	in, err := ctrlruntime.NewInstrumentation(ctrlruntime.Options{Namespace: "shop", Registerer: prometheus.NewRegistry()})
	if err != nil {
		panic(err)
	}
	opts := in.ManagerOptions(manager.Options{})
	fmt.Println("namespaces:", slices.Collect(maps.Keys(opts.Cache.DefaultNamespaces)))
	fmt.Println("graded informers:", opts.Cache.NewInformer != nil)
	fmt.Println("graded watch error logs:", opts.Cache.DefaultWatchErrorHandler != nil)
	// Output:
	// namespaces: [shop]
	// graded informers: true
	// graded watch error logs: true
}

// A WatchTarget names resources; the informers that follow them are named
// after their kinds, as wgctrl names every informer of the cache, so
// Reconcile maps each resource to its kind with the manager's RESTMapper
// to find the name it tracks.
func Example_streamNames() {
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("ConfigMap"), meta.RESTScopeNamespace)
	mapper.Add(appsv1.SchemeGroupVersion.WithKind("Deployment"), meta.RESTScopeNamespace)
	for _, ref := range []watchtarget.ResourceRef{
		{Version: "v1", Resource: "configmaps"},
		{Group: "apps", Version: "v1", Resource: "deployments"},
	} {
		gvk, err := mapper.KindFor(ref.GVR())
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s -> %s\n", ref.GVR(), wgctrl.StreamName(gvk))
	}
	fmt.Println("the WatchTargets' own informer ->", ctrlruntime.TargetsStream)
	// Output:
	// /v1, Resource=configmaps -> ConfigMap.v1
	// apps/v1, Resource=deployments -> Deployment.v1.apps
	// the WatchTargets' own informer -> WatchTarget.v1alpha1.examples.watchgrade.dev
}
