package status

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestOneHomeForTheWriteRule checks that the status write rule lives here
// and nowhere else in the repository (every module, tests included: the
// examples, the READMEs' quick starts, wgctrl, the judges, the e2e
// controllers): outside the readiness packages no function calls
// readiness.Observes, and none both applies an accumulator's verdict
// (Apply, ApplyStandby) and writes a status or decides on
// status.observedGeneration, which is what a copy of the rule does.
// Unit tests of the accumulator's verdict alone (events' tests) pass: they
// write nothing. And no Markdown file but the CHANGELOG, which tells the
// rule's history, shows such a call.
func TestOneHomeForTheWriteRule(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s: %v", root, err)
	}
	readinessDir := filepath.Join(root, "readiness")
	markdownCall := regexp.MustCompile(`\bObserves\(|\.Apply\(|\.ApplyStandby\(`)
	var copies []string
	fset := token.NewFileSet()
	goFiles := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || path == readinessDir) {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		switch {
		case strings.HasSuffix(path, ".md") && d.Name() != "CHANGELOG.md":
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for i, line := range strings.Split(string(b), "\n") {
				if markdownCall.MatchString(line) {
					copies = append(copies, rel+":"+strconv.Itoa(i+1)+": "+strings.TrimSpace(line))
				}
			}
		case strings.HasSuffix(path, ".go"):
			goFiles++
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				if why := writeRuleIn(fn.Body); why != "" {
					copies = append(copies, rel+": "+fn.Name.Name+": "+why)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if goFiles < 100 {
		t.Fatalf("walked %d Go files under %s, want the whole repository", goFiles, root)
	}
	slices.Sort(copies)
	for _, c := range copies {
		t.Errorf("a copy of the status write rule (call wgstatus.Writer instead): %s", c)
	}
}

// writeRuleIn says why body holds a copy of the write rule, or "".
func writeRuleIn(body *ast.BlockStmt) string {
	var observes, applies, writes bool
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			name := ""
			switch fun := n.Fun.(type) {
			case *ast.SelectorExpr:
				name = fun.Sel.Name
			case *ast.Ident:
				name = fun.Name
			}
			switch name {
			case "Observes":
				observes = true
			case "ApplyStandby":
				applies = true
			case "Apply":
				// The accumulator's Apply(key, &conds, generation, now);
				// readiness.Apply has five arguments and no owner.
				applies = applies || len(n.Args) == 4
			case "UpdateStatus", "Update":
				writes = true
			}
		case *ast.Ident:
			switch n.Name {
			case "ObservedGeneration", "SetObservedGeneration":
				writes = true
			}
		}
		return true
	})
	switch {
	case observes:
		return "calls Observes"
	case applies && writes:
		return "applies the verdict and writes it"
	}
	return ""
}
