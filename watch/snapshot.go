package watch

import (
	"cmp"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"
)

// apierrorsFromObject turns an ERROR event's object into an error.
func apierrorsFromObject(obj runtime.Object) error {
	if obj == nil {
		return fmt.Errorf("ERROR event: %w", ErrNilObject)
	}
	return apierrors.FromObject(obj)
}

// resourceVersionOf returns obj's resourceVersion, "" if it has none, or an
// error if it is not an object with metadata.
func resourceVersionOf(obj runtime.Object) (string, error) {
	if obj == nil {
		return "", ErrNilObject
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", err
	}
	return m.GetResourceVersion(), nil
}

func isInitialEventsEnd(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	return err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
}

// replayBuffer collects a watch-list's initial events by namespace and
// name, in the order they came (the server's key order).
type replayBuffer struct {
	// index holds the place in arrived of each key's object.
	index map[objectKey]int
	// arrived holds the objects in arrival order; a deleted one is nil.
	arrived []keyedObject
}

type objectKey struct{ namespace, name string }

func keyOf(obj runtime.Object) objectKey {
	m, err := meta.Accessor(obj)
	if err != nil {
		return objectKey{}
	}
	return objectKey{m.GetNamespace(), m.GetName()}
}

func (b *replayBuffer) apply(ev apiwatch.Event) {
	if b.index == nil {
		b.index = make(map[objectKey]int)
	}
	key := keyOf(ev.Object)
	i, ok := b.index[key]
	switch {
	case ev.Type == apiwatch.Deleted:
		if ok {
			b.arrived[i].obj = nil
			delete(b.index, key)
		}
	case ok:
		b.arrived[i].obj = ev.Object
	default:
		b.index[key] = len(b.arrived)
		b.arrived = append(b.arrived, keyedObject{key: key, pos: len(b.arrived), obj: ev.Object})
	}
}

// snapshot returns the collection; the buffer is of no use after it.
func (b *replayBuffer) snapshot(rv string) Snapshot {
	keyed := slices.DeleteFunc(b.arrived, func(k keyedObject) bool { return k.obj == nil })
	return Snapshot{Objects: sortKeyed(keyed, make([]runtime.Object, len(keyed))), ResourceVersion: rv}
}

// keyedObject is an object with its key, and its place in a list.
type keyedObject struct {
	key objectKey
	pos int
	obj runtime.Object
}

// sortObjects sorts objs by namespace and name, keeping the order of
// objects with the same key; each key is computed once.
func sortObjects(objs []runtime.Object) {
	keyed := make([]keyedObject, len(objs))
	for i, o := range objs {
		keyed[i] = keyedObject{key: keyOf(o), pos: i, obj: o}
	}
	sortKeyed(keyed, objs)
}

// sortKeyed sorts keyed by key, then place, into dst, which it returns.
func sortKeyed(keyed []keyedObject, dst []runtime.Object) []runtime.Object {
	slices.SortFunc(keyed, func(a, b keyedObject) int {
		return cmp.Or(cmp.Compare(a.key.namespace, b.key.namespace), cmp.Compare(a.key.name, b.key.name), cmp.Compare(a.pos, b.pos))
	})
	for i := range keyed {
		dst[i] = keyed[i].obj
	}
	return dst
}
