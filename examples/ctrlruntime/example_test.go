package ctrlruntime_test

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/watchgrade/watchgrade/examples/ctrlruntime"
)

// An informer's stream is named after its resource and version, as kubectl
// writes them in full; WatchTargets track these names.
func ExampleStreamName() {
	fmt.Println(ctrlruntime.StreamName(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}))
	fmt.Println(ctrlruntime.StreamName(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}))
	// Output:
	// configmaps.v1
	// deployments.v1.apps
}
