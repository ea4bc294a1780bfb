package watch

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"
)

// A watch-list's buffer keeps the latest of each object, forgets deleted
// ones, and hands them out sorted by namespace and name, whatever order
// they came in.
func TestReplayBufferSnapshot(t *testing.T) {
	var b replayBuffer
	for _, ev := range []apiwatch.Event{
		{Type: apiwatch.Added, Object: cm("b", "2")},
		{Type: apiwatch.Added, Object: cm("a", "3")},
		{Type: apiwatch.Modified, Object: cm("b", "4")},
		{Type: apiwatch.Deleted, Object: cm("a", "5")},
		{Type: apiwatch.Added, Object: cm("d", "6")},
		{Type: apiwatch.Added, Object: cm("c", "7")},
		{Type: apiwatch.Added, Object: cm("a", "8")},
		{Type: apiwatch.Deleted, Object: cm("x", "9")}, // never added
	} {
		b.apply(ev)
	}
	snap := b.snapshot("10")
	var got []string
	for _, o := range snap.Objects {
		got = append(got, keyAndRV(o))
	}
	want := []string{"a@8", "b@4", "c@7", "d@6"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("snapshot(10) objects mismatch (-want +got):\n%s", diff)
	}
	if snap.ResourceVersion != "10" {
		t.Errorf("snapshot(10).ResourceVersion = %q, want 10", snap.ResourceVersion)
	}
}

// sortObjects sorts by namespace and name and keeps the order of objects
// with the same key (or none: objects without metadata).
func TestSortObjectsIsStable(t *testing.T) {
	objs := []runtime.Object{cm("b", "1"), cm("a", "2"), cm("b", "3"), cm("a", "4")}
	sortObjects(objs)
	var got []string
	for _, o := range objs {
		got = append(got, keyAndRV(o))
	}
	if diff := cmp.Diff([]string{"a@2", "a@4", "b@1", "b@3"}, got); diff != "" {
		t.Errorf("sortObjects() mismatch (-want +got):\n%s", diff)
	}
}

func keyAndRV(o runtime.Object) string {
	k := keyOf(o)
	rv, _ := resourceVersionOf(o)
	return k.name + "@" + rv
}
