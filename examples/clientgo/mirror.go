package clientgo

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"

	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// Mirror is an in-memory copy of one collection, kept by a graded stream:
// it implements [wgwatch.Handler]. A snapshot replaces everything (so an
// object deleted while the stream was replaying after an expiry is gone,
// not kept forever), and each event applies one change.
type Mirror struct {
	mu      sync.RWMutex
	objects map[string]runtime.Object
}

// NewMirror returns an empty mirror.
func NewMirror() *Mirror { return &Mirror{objects: map[string]runtime.Object{}} }

var _ wgwatch.Handler = (*Mirror)(nil)

// Snapshot replaces the mirror's contents with the collection.
func (m *Mirror) Snapshot(_ context.Context, snap wgwatch.Snapshot) error {
	objects := make(map[string]runtime.Object, len(snap.Objects))
	for _, obj := range snap.Objects {
		key, err := keyOf(obj)
		if err != nil {
			return err
		}
		objects[key] = obj
	}
	m.mu.Lock()
	m.objects = objects
	m.mu.Unlock()
	return nil
}

// Event applies one change. The stream hands over only Added, Modified and
// Deleted events whose objects have metadata.
func (m *Mirror) Event(_ context.Context, ev apiwatch.Event) error {
	key, err := keyOf(ev.Object)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if ev.Type == apiwatch.Deleted {
		delete(m.objects, key)
	} else {
		m.objects[key] = ev.Object
	}
	return nil
}

// Len returns how many objects the mirror holds.
func (m *Mirror) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.objects)
}

// Get returns the object with this namespace/name key.
func (m *Mirror) Get(key string) (runtime.Object, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	obj, ok := m.objects[key]
	return obj, ok
}

func keyOf(obj runtime.Object) (string, error) {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return "", fmt.Errorf("mirror: %w", err)
	}
	if acc.GetNamespace() == "" {
		return acc.GetName(), nil
	}
	return acc.GetNamespace() + "/" + acc.GetName(), nil
}

// list returns the mirror's objects sorted by key.
func (m *Mirror) list() []runtime.Object {
	m.mu.RLock()
	defer m.mu.RUnlock()
	keys := make([]string, 0, len(m.objects))
	for k := range m.objects {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]runtime.Object, 0, len(keys))
	for _, k := range keys {
		out = append(out, m.objects[k])
	}
	return out
}
