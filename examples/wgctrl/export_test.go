package wgctrl

import (
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Namespaces returns the namespace each informer named name is restricted
// to ("" for every namespace), sorted.
func (g *Grader) Namespaces(name string) []string {
	nss := g.streams.Namespaces(name)
	slices.Sort(nss)
	return nss
}

var NamespaceInPath = namespaceInPath

// DeleteEvent hands the Owner the owner informer's delete event of obj.
func (o *Owner) DeleteEvent(obj client.Object) { o.ownerHandler().OnDelete(obj) }
