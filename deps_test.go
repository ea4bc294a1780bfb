package watchgrade_test

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestImportGraph keeps the runtime packages lean: what a package imports
// reaches every user's build.
func TestImportGraph(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	everywhere := []string{
		"sigs.k8s.io/controller-runtime",
		"k8s.io/kubernetes",
		"github.com/onsi/gomega",
		"github.com/onsi/ginkgo",
		"github.com/stretchr/testify",
	}
	tests := []struct {
		pkg       string
		forbidden []string
	}{
		{"./watch", []string{"github.com/prometheus/", "github.com/google/go-cmp", "github.com/watchgrade/watchgrade/watch/watchtest", "testing"}},
		{"./watch/watchtest", []string{"github.com/prometheus/", "testing"}},
		{"./internal/...", []string{"k8s.io/", "github.com/prometheus/"}},
	}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", tt.pkg).Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", tt.pkg, err)
			}
			for _, dep := range strings.Fields(string(out)) {
				for _, bad := range append(tt.forbidden, everywhere...) {
					if dep == bad || strings.HasPrefix(dep, bad+"/") || (strings.HasSuffix(bad, "/") && strings.HasPrefix(dep, bad)) {
						t.Errorf("%s imports %s (via its dependencies), want it kept out", tt.pkg, dep)
					}
				}
			}
		})
	}
}

// TestGoModIsLean checks the root go.mod itself: through minimum version
// selection, whatever it requires changes what every user builds with.
func TestGoModIsLean(t *testing.T) {
	f, err := os.Open("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		for _, bad := range []string{"sigs.k8s.io/controller-runtime ", "k8s.io/kubernetes "} {
			if strings.HasPrefix(line, bad) || strings.HasPrefix(line, "require "+bad) {
				t.Errorf("go.mod requires %q, want it only in the nested examples/ and internal/e2e/ modules", line)
			}
		}
	}
}
