package clientgo_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"

	"github.com/watchgrade/watchgrade/examples/clientgo"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// A Mirror is a stream's Handler: a snapshot after every replay replaces
// it, then each event applies one change.
func ExampleMirror() {
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, ResourceVersion: "7"}}
	}
	ctx := context.Background()
	m := clientgo.NewMirror()
	_ = m.Snapshot(ctx, wgwatch.Snapshot{Objects: []runtime.Object{cm("a"), cm("b")}})
	_ = m.Event(ctx, apiwatch.Event{Type: apiwatch.Deleted, Object: cm("a")})
	_, hasA := m.Get("shop/a")
	fmt.Println(m.Len(), hasA)
	// Output: 1 false
}
