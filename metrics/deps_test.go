package metrics_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportGraph keeps test-only and heavyweight dependencies out of what
// every user of this package builds.
func TestImportGraph(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := []string{
		"testing",
		"github.com/google/go-cmp",
		"github.com/prometheus/client_golang/prometheus/testutil",
		"github.com/prometheus/client_golang/prometheus/promauto",
		"k8s.io/utils/clock/testing",
		"github.com/watchgrade/watchgrade/watch/watchtest",
		"sigs.k8s.io/controller-runtime",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range forbidden {
			if dep == bad || strings.HasPrefix(dep, bad+"/") {
				t.Errorf("package metrics imports %s, want it kept out", dep)
			}
		}
	}
}
