// Package kubebuilder holds the adoption of watchgrade by a freshly
// scaffolded kubebuilder project, as patches, and counts it.
//
// The end-to-end test (examples/e2e, TestKubebuilder) installs kubebuilder
// [Version] from the Go module proxy, runs
//
//	kubebuilder init --domain example.com --repo example.com/guestbook
//	kubebuilder create api --group webapp --version v1 --kind Guestbook --resource --controller
//
// applies [OperatorPatch] (the operator's own logic, written the usual way:
// each Guestbook owns a ConfigMap), then [AdoptPatch] (the adoption steps of
// examples/README.md, which must quote it whole: see the package's test),
// then [FaultsPatch] (the adoption's own test file: a table test of the
// Guestbook controller through API server faults, with wgctrltest),
// runs `go get`, `make manifests generate`, the table test, builds the
// manager and runs it against a real kube-apiserver.
package kubebuilder

import (
	_ "embed"
	"strings"
)

// Version is the kubebuilder release the test scaffolds with.
const Version = "v4.16.0"

// The patches, in this directory, applied in this order with git apply.
const (
	OperatorPatch = "operator.patch"
	AdoptPatch    = "adopt.patch"
	FaultsPatch   = "faults.patch"
)

var (
	//go:embed adopt.patch
	adopt string
	//go:embed faults.patch
	faults string
)

// Adopt returns the adoption patch.
func Adopt() string { return adopt }

// Faults returns the patch of the adoption's table test.
func Faults() string { return faults }

// AddedLines returns the lines of code the adoption adds: the patch's
// added lines that are neither blank nor comments. A kubebuilder marker
// (// +kubebuilder:rbac:...) is code: it generates the RBAC. The table
// test ([FaultsLines]) is counted apart.
func AddedLines() int { return codeLines(adopt) }

// FaultsLines returns the lines of code of the adoption's table test, as
// AddedLines counts them.
func FaultsLines() int { return codeLines(faults) }

func codeLines(patch string) int {
	n := 0
	for _, line := range strings.Split(patch, "\n") {
		if !strings.HasPrefix(line, "+") || strings.HasPrefix(line, "+++") {
			continue
		}
		code := strings.TrimSpace(line[1:])
		if code == "" || (strings.HasPrefix(code, "//") && !strings.HasPrefix(code, "// +")) {
			continue
		}
		n++
	}
	return n
}
