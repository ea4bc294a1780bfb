package depgraph_test

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
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
		pkg string
		// forbidden may not be reached at all, through any dependency.
		forbidden []string
		// notDirect may not be imported by the package's own files.
		notDirect []string
	}{
		{pkg: "github.com/watchgrade/watchgrade/watch", forbidden: []string{"github.com/prometheus/", "github.com/google/go-cmp", "github.com/watchgrade/watchgrade/watch/watchtest", "testing"}},
		{pkg: "github.com/watchgrade/watchgrade/watch/watchtest", forbidden: []string{"github.com/prometheus/", "testing"}},
		// readiness reaches client-go only through watch, whose Stream is
		// built on client-go's ListerWatcher; its own code needs none.
		{pkg: "github.com/watchgrade/watchgrade/readiness", forbidden: []string{"github.com/prometheus/", "github.com/google/go-cmp", "sigs.k8s.io/cli-utils", "testing"}, notDirect: []string{"k8s.io/client-go"}},
		{pkg: "github.com/watchgrade/watchgrade/readiness/readinesstest", forbidden: []string{"github.com/prometheus/"}},
		// events takes one-method recorder interfaces that client-go's
		// recorders satisfy, so it needs no client-go at all.
		{pkg: "github.com/watchgrade/watchgrade/events", forbidden: []string{"k8s.io/client-go", "github.com/prometheus/", "github.com/google/go-cmp", "testing"}},
		{pkg: "github.com/watchgrade/watchgrade/metrics", forbidden: []string{"github.com/google/go-cmp", "testing", "github.com/prometheus/client_golang/prometheus/promauto"}, notDirect: []string{"k8s.io/client-go"}},
	}
	// Every internal package but the judges' kit, which only the judges
	// import: it may reach client-go and watchtest, and no runtime
	// package may reach it.
	const judgekit = "github.com/watchgrade/watchgrade/internal/judgekit"
	everywhere = append(everywhere, judgekit)
	internal, err := exec.Command("go", "list", "github.com/watchgrade/watchgrade/internal/...").Output()
	if err != nil {
		t.Fatalf("go list internal/...: %v", err)
	}
	for _, pkg := range strings.Fields(string(internal)) {
		if pkg != judgekit {
			tests = append(tests, struct {
				pkg                  string
				forbidden, notDirect []string
			}{pkg: pkg, forbidden: []string{"k8s.io/", "github.com/prometheus/"}})
		}
	}
	matches := func(dep, bad string) bool {
		return dep == bad || strings.HasPrefix(dep, bad+"/") || (strings.HasSuffix(bad, "/") && strings.HasPrefix(dep, bad))
	}
	list := func(t *testing.T, format, pkg string) []string {
		t.Helper()
		out, err := exec.Command("go", "list", "-deps="+strconv.FormatBool(format == "deps"), "-f", "{{join .Imports \"\\n\"}}\n{{.ImportPath}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			for _, dep := range list(t, "deps", tt.pkg) {
				for _, bad := range append(tt.forbidden, everywhere...) {
					if matches(dep, bad) {
						t.Errorf("%s reaches %s through its imports, want it kept out", tt.pkg, dep)
					}
				}
			}
			for _, dep := range list(t, "direct", tt.pkg) {
				for _, bad := range tt.notDirect {
					if matches(dep, bad) {
						t.Errorf("%s imports %s itself, want it kept out", tt.pkg, dep)
					}
				}
			}
		})
	}
}

// TestGoModIsLean checks the root go.mod itself: through minimum version
// selection, whatever it requires changes what every user builds with.
func TestGoModIsLean(t *testing.T) {
	f, err := os.Open("../../go.mod")
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
