package release_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeLimit is the README's budget: a landing page, not a manual.
const readmeLimit = 16000

// quickStarts maps each quick start section of the README to the program
// of testdata that TestGoGet builds for it.
var quickStarts = map[string]string{
	"## Quick start: client-go":          "clientgo",
	"## Quick start: controller-runtime": "ctrlruntime",
}

// inProgram is what a README line stands for in its program: the README
// names a kubebuilder project's API package and leaves the manager's
// options as scaffolded.
var inProgram = strings.NewReplacer("webappv1.", "", "ctrl.Options{ /* as scaffolded */ }", "ctrl.Options{Scheme: scheme}")

// TestQuickStartsAreBuilt checks that every line of each quick start's Go
// blocks in the README is a line of the program TestGoGet builds for it
// (spaces aside, and a trailing comment), so that a quick start copied
// into a project compiles as the README shows it, nothing left to
// examples/README.md; and that the README stays under its budget.
func TestQuickStartsAreBuilt(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(readme); n >= readmeLimit {
		t.Errorf("README.md is %d bytes, want under %d: it is a landing page", n, readmeLimit)
	}
	for heading, prog := range quickStarts {
		src, err := os.ReadFile(filepath.Join("testdata", prog, "main.go"))
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, line := range strings.Split(string(src), "\n") {
			have[normalize(line)] = true
		}
		lines := goBlockLines(string(readme), heading)
		if len(lines) == 0 {
			t.Errorf("README.md has no Go block under %q", heading)
		}
		for _, line := range lines {
			if n := normalize(inProgram.Replace(line)); n != "" && !have[n] {
				t.Errorf("README.md, %s: %q is not a line of testdata/%s/main.go", heading, line, prog)
			}
		}
	}
}

// goBlockLines returns the lines of the ```go blocks of the README's
// section that starts with heading.
func goBlockLines(readme, heading string) []string {
	_, section, ok := strings.Cut(readme, "\n"+heading+"\n")
	if !ok {
		return nil
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var out []string
	in := false
	for _, line := range strings.Split(section, "\n") {
		switch {
		case line == "```go":
			in = true
		case line == "```":
			in = false
		case in:
			out = append(out, line)
		}
	}
	return out
}

var spaces = regexp.MustCompile(`\s+`)

// normalize drops a line's indentation, its trailing comment (not a line
// that is all comment) and runs of spaces: gofmt aligns those
// differently in a longer file.
func normalize(line string) string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "//") {
		if i := strings.Index(line, " //"); i >= 0 {
			line = line[:i]
		}
	}
	return spaces.ReplaceAllString(strings.TrimSpace(line), " ")
}
