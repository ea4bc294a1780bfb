package wgctrl

import "slices"

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

var AnsweredHandler = answeredHandler
