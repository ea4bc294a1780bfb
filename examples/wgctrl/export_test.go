package wgctrl

import "slices"

// Namespaces returns the namespace each informer named name is restricted
// to ("" for every namespace), sorted.
func (g *Grader) Namespaces(name string) []string {
	nss := g.streams.Namespaces(name)
	slices.Sort(nss)
	return nss
}

var NamespaceInPath = namespaceInPath

var AnsweredHandler = answeredHandler
