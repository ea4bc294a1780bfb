package clientgo

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"

	wgwatch "github.com/watchgrade/watchgrade/watch"
)

func cm(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, ResourceVersion: "1"}}
}

// A snapshot replaces the mirror: an object deleted while the stream
// replayed after an expiry is gone, not kept forever.
func TestMirrorSnapshotReplaces(t *testing.T) {
	m := NewMirror()
	ctx := t.Context()
	if err := m.Snapshot(ctx, wgwatch.Snapshot{Objects: []runtime.Object{cm("a"), cm("b")}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Snapshot(ctx, wgwatch.Snapshot{Objects: []runtime.Object{cm("b")}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Get("shop/a"); ok || m.Len() != 1 {
		t.Errorf("after a snapshot without a: len %d, a present %t; want 1, false", m.Len(), ok)
	}
}

func TestMirrorEvents(t *testing.T) {
	m := NewMirror()
	ctx := t.Context()
	for _, ev := range []apiwatch.Event{
		{Type: apiwatch.Added, Object: cm("a")},
		{Type: apiwatch.Added, Object: cm("b")},
		{Type: apiwatch.Modified, Object: cm("a")},
		{Type: apiwatch.Deleted, Object: cm("b")},
	} {
		if err := m.Event(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := m.Get("shop/a"); !ok || m.Len() != 1 {
		t.Errorf("len %d, a present %t; want 1, true", m.Len(), ok)
	}
	// The stream grades an object without metadata as a bad event and never
	// hands it over; the mirror still refuses one with an error, not a panic.
	if err := m.Event(ctx, apiwatch.Event{Type: apiwatch.Added, Object: &metav1.Status{}}); err == nil {
		t.Error("Event accepted an object without metadata")
	}
}
