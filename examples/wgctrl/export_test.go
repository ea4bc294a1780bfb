package wgctrl

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
)

// NewInformerIn is NewInformer for an informer restricted to namespace, as
// a cache restricted to namespaces makes one: over watchtest, whose
// ListerWatcher does not go through the cache's HTTP client, the Grader
// cannot tell its namespace.
func (g *Grader) NewInformerIn(namespace string, lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	name, gr, _ := g.identify(obj)
	return g.newInformerIn(nil, namespace, name, gr, lw, obj, resync, indexers)
}

// Namespaces returns the namespace each informer named name is restricted
// to ("" for every namespace), sorted.
func (g *Grader) Namespaces(name string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var nss []string
	for _, inf := range g.streams[name] {
		nss = append(nss, inf.namespace)
	}
	slices.Sort(nss)
	return nss
}

var NamespaceInPath = namespaceInPath
