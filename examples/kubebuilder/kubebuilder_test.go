package kubebuilder_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/watchgrade/watchgrade/examples/kubebuilder"
)

// The guide cannot go stale: examples/README.md quotes the adoption patch
// the end-to-end test applies, whole, and states its count.
func TestREADMEQuotesTheAdoptionPatch(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"```diff\n" + kubebuilder.Adopt() + "```\n",
		"```diff\n" + kubebuilder.Faults() + "```\n",
		fmt.Sprintf("**%d lines of code**, counted apart", kubebuilder.FaultsLines()),
		fmt.Sprintf("**%d lines of code**", kubebuilder.AddedLines()),
		"kubebuilder " + kubebuilder.Version,
		"`kubebuilder init --domain example.com --repo example.com/guestbook`",
		"`make manifests generate`",
		"go get github.com/watchgrade/watchgrade/examples/wgctrl@latest",
	} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("examples/README.md does not quote %.80q", want)
		}
	}
	if n := kubebuilder.AddedLines(); n > 40 {
		t.Errorf("AddedLines() = %d, want at most 40", n)
	}
}

func TestAddedLinesCountsCodeOnly(t *testing.T) {
	// 35 lines start with "+": 3 file headers, 5 blank lines and 3
	// comment lines are not code; the kubebuilder markers are.
	if got, want := kubebuilder.AddedLines(), 24; got != want {
		t.Errorf("AddedLines() = %d, want %d", got, want)
	}
}
