package release

import (
	"bufio"
	"fmt"
	"go/token"
	"go/types"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/mod/semver"
	"golang.org/x/tools/go/gcexportdata"
	"golang.org/x/tools/go/packages"
)

// LoadAPI type-checks the packages of the module whose go.mod is in dir,
// as it is in the work tree, and returns their exported API as apidiff
// compares modules: internal packages left out (its users cannot import
// them), the packages in import path order. The types come from the go
// command's export data, so packages built before are not compiled again.
func LoadAPI(dir string) (*apidiff.Module, error) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedModule,
		Dir:  dir,
		Env:  append(os.Environ(), "GOWORK=off"),
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, err
	}
	if len(pkgs) == 0 || pkgs[0].Module == nil {
		return nil, fmt.Errorf("%s: no packages of a module", dir)
	}
	m := &apidiff.Module{Path: pkgs[0].Module.Path}
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			return nil, fmt.Errorf("%s: %v", p.PkgPath, p.Errors[0])
		}
		if internal(strings.TrimPrefix(p.PkgPath, m.Path)) {
			continue
		}
		m.Packages = append(m.Packages, p.Types)
	}
	slices.SortFunc(m.Packages, func(a, b *types.Package) int { return strings.Compare(a.Path(), b.Path()) })
	return m, nil
}

func internal(rel string) bool {
	return rel == "/internal" || strings.HasPrefix(rel, "/internal/") ||
		strings.HasSuffix(rel, "/internal") || strings.Contains(rel, "/internal/")
}

// WriteAPI writes m as `apidiff -m -w` does, so that the apidiff command
// reads the snapshot too: the module path on a line, then the packages'
// export data bundled (golang.org/x/tools/go/gcexportdata), without source
// positions (they would change with every edit and hold local paths).
func WriteAPI(w io.Writer, m *apidiff.Module) error {
	if _, err := fmt.Fprintln(w, m.Path); err != nil {
		return err
	}
	return gcexportdata.WriteBundle(w, token.NewFileSet(), m.Packages)
}

// ReadAPI reads what WriteAPI wrote.
func ReadAPI(r io.Reader) (*apidiff.Module, error) {
	br := bufio.NewReader(r)
	modPath, err := br.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("API snapshot: module path: %w", err)
	}
	pkgs, err := gcexportdata.ReadBundle(br, token.NewFileSet(), map[string]*types.Package{})
	if err != nil {
		return nil, fmt.Errorf("API snapshot: %w", err)
	}
	return &apidiff.Module{Path: strings.TrimSuffix(modPath, "\n"), Packages: pkgs}, nil
}

// APIVerdict is what [CheckAPI] found.
type APIVerdict struct {
	// Incompatible and Compatible are apidiff's messages, each
	// "NAME: what changed", NAME relative to the module (./watch.Stream).
	Incompatible, Compatible []string
	// Unlisted are the incompatible changes the rule refuses: all of them
	// from v1 on; before v1, those whose NAME the changelog's Unreleased
	// section does not name.
	Unlisted []string
}

// CheckAPI compares the module's API as released at version with its API
// now, under the rule for a module whose path, and so major version, has
// not changed:
//
//	released version | incompatible change (removed, or changed in a way
//	                 | that can break a caller)
//	-----------------+----------------------------------------------------
//	v1 and later     | refused: it needs a new major version, a new module
//	                 | path (/v2), and so another API snapshot
//	v0               | allowed when the changelog's Unreleased section
//	                 | names it as apidiff does, ./watch.Stream.Foo or
//	                 | watch.Stream.Foo, so the next release lists every
//	                 | break; that release then bumps the minor version
//
// Compatible changes (additions) are allowed at every version; they ask
// for a minor release, not a patch, which the rule does not check.
func CheckAPI(released, now *apidiff.Module, version, unreleased string) APIVerdict {
	var v APIVerdict
	for _, c := range apidiff.ModuleChanges(released, now).Changes {
		if c.Compatible {
			v.Compatible = append(v.Compatible, c.Message)
			continue
		}
		v.Incompatible = append(v.Incompatible, c.Message)
		name := ChangeName(c.Message)
		if semver.Major(version) != "v0" || !mentions(unreleased, name) {
			v.Unlisted = append(v.Unlisted, c.Message)
		}
	}
	slices.Sort(v.Incompatible)
	slices.Sort(v.Compatible)
	slices.Sort(v.Unlisted)
	return v
}

// mentions reports whether text holds name not followed by more of an
// identifier: watch.Stream does not mention watch.StreamName.
func mentions(text, name string) bool {
	for i := 0; name != ""; {
		j := strings.Index(text[i:], name)
		if j < 0 {
			return false
		}
		end := i + j + len(name)
		if end == len(text) || !isIdent(text[end]) {
			return true
		}
		i = end
	}
	return false
}

func isIdent(b byte) bool {
	return b == '_' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || b >= 0x80
}

// ChangeName returns the name an apidiff message is about, without the
// "./" that marks a package of the module other than its root: for
// "./watch.(*Stream).Run: removed", "watch.(*Stream).Run"; for "package
// github.com/watchgrade/watchgrade/metrics: removed", that import path.
func ChangeName(message string) string {
	name, _, _ := strings.Cut(message, ": ")
	name = strings.TrimPrefix(name, "package ")
	return strings.TrimPrefix(name, "./")
}
