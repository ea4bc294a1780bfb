package release_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/exp/apidiff"
	"golang.org/x/mod/modfile"

	"github.com/watchgrade/watchgrade/internal/e2e/release"
)

var writeAPI = flag.Bool("api.write", false,
	"write the API snapshots of the newest release's modules from the work tree, and remove the others, instead of comparing")

// snapshot is where the API of the module a tag released is kept.
func snapshot(tag release.Tag) string {
	return filepath.Join("testdata", "api", filepath.FromSlash(tag.String())+".api")
}

// TestAPICompatible compares the API of each module of the newest release,
// as it is in the work tree, with its snapshot as released, under
// release.CheckAPI's rule. With -api.write it writes the snapshots instead:
// a step of the release procedure in the changelog's header.
func TestAPICompatible(t *testing.T) {
	root := repoRoot(t)
	cl := readChangelog(t, root)
	keep := map[string]bool{}
	for _, tag := range cl.Tags {
		now, err := release.LoadAPI(filepath.Join(root, filepath.FromSlash(tag.Dir)))
		if err != nil {
			t.Fatal(err)
		}
		if *writeAPI {
			var buf bytes.Buffer
			if err := release.WriteAPI(&buf, now); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Dir(snapshot(tag)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(snapshot(tag), buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			keep[snapshot(tag)] = true
			fmt.Printf("api: wrote %s: %s as released at %s, %d packages\n", snapshot(tag), now.Path, tag, len(now.Packages))
			continue
		}
		f, err := os.Open(snapshot(tag))
		if errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("no API snapshot of %s: write it with `make api-snapshot` when releasing", tag)
		} else if err != nil {
			t.Fatal(err)
		}
		released, err := release.ReadAPI(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", snapshot(tag), err)
		}
		if released.Path != now.Path {
			t.Fatalf("%s holds module %s, the work tree %s", snapshot(tag), released.Path, now.Path)
		}
		v := release.CheckAPI(released, now, tag.Version, cl.Unreleased)
		fmt.Printf("api: %s since %s: incompatible=%d unlisted=%d compatible=%d\n",
			now.Path, tag, len(v.Incompatible), len(v.Unlisted), len(v.Compatible))
		for _, m := range v.Compatible {
			t.Logf("%s: compatible: %s", now.Path, m)
		}
		for _, m := range v.Incompatible {
			t.Logf("%s: incompatible: %s", now.Path, m)
		}
		if len(v.Unlisted) > 0 {
			t.Errorf("%s: %d incompatible changes since %s that %s's Unreleased section does not name (%s):\n- `%s`",
				now.Path, len(v.Unlisted), tag, release.ChangelogPath, rule(tag.Version), strings.Join(v.Unlisted, "\n- `"))
		}
	}
	if *writeAPI {
		filepath.WalkDir(filepath.Join("testdata", "api"), func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".api") && !keep[path] {
				fmt.Printf("api: removed %s\n", path)
				return os.Remove(path)
			}
			return err
		})
	}
}

func rule(version string) string {
	if strings.HasPrefix(version, "v0.") {
		return "before v1, list each one there, as named here"
	}
	return "from v1 on, none is allowed without a new major version"
}

// TestChangelogNamesTheModules checks that each tag of the newest release
// is a module's directory and that a released module requires the others
// at their released versions: a require is what reaches users, so
// examples/wgctrl/go.mod must require the root module at its tag.
func TestChangelogNamesTheModules(t *testing.T) {
	root := repoRoot(t)
	cl := readChangelog(t, root)
	if _, ok := cl.Tag(""); !ok {
		t.Errorf("release %s has no tag for the root module: %v", cl.Release, cl.Tags)
	}
	for _, tag := range cl.Tags {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(tag.Dir), "go.mod"))
		if err != nil {
			t.Errorf("tag %s: %v", tag, err)
			continue
		}
		f, err := modfile.Parse(tag.Dir+"/go.mod", data, nil)
		if err != nil {
			t.Fatal(err)
		}
		if f.Module.Mod.Path != tag.Module() {
			t.Errorf("tag %s: %s/go.mod declares %s, want %s", tag, tag.Dir, f.Module.Mod.Path, tag.Module())
		}
		for _, r := range f.Require {
			for _, other := range cl.Tags {
				if r.Mod.Path == other.Module() && r.Mod.Version != other.Version {
					t.Errorf("%s/go.mod requires %s %s, want %s: the version its tag %s releases",
						tag.Dir, r.Mod.Path, r.Mod.Version, other.Version, other)
				}
			}
		}
	}
}

func readChangelog(t *testing.T, root string) release.Changelog {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(release.ChangelogPath)))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := release.ParseChangelog(string(data))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func TestParseChangelog(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    release.Changelog
		wantErr bool
	}{{
		name: "first release",
		text: "# Changelog\n\nHow to release.\n\n## Unreleased\n\n## v0.1.0\n\nTags: `v0.1.0`, `examples/wgctrl/v0.1.0`.\n\n- the first\n",
		want: release.Changelog{Release: "v0.1.0", Tags: []release.Tag{{Dir: "", Version: "v0.1.0"}, {Dir: "examples/wgctrl", Version: "v0.1.0"}}},
	}, {
		name: "changes since, and an older release below",
		text: "## Unreleased\n\n- `watch.Old`: removed\n\n## v0.2.0\n\nTags: `examples/wgctrl/v0.2.1`, `v0.2.0`\n\n## v0.1.0\n\nTags: `v0.1.0`\n",
		want: release.Changelog{Release: "v0.2.0", Tags: []release.Tag{{Dir: "examples/wgctrl", Version: "v0.2.1"}, {Dir: "", Version: "v0.2.0"}},
			Unreleased: "- `watch.Old`: removed"},
	}, {
		name:    "no release",
		text:    "## Unreleased\n\n- something\n",
		wantErr: true,
	}, {
		name:    "no Tags line",
		text:    "## v0.1.0\n\nThe first.\n",
		wantErr: true,
	}, {
		name:    "two tags for one module",
		text:    "## v0.1.0\n\nTags: `v0.1.0`, `v0.1.1`\n",
		wantErr: true,
	}, {
		name:    "not a semantic version",
		text:    "## v0.1.0\n\nTags: `examples/wgctrl/v0.1`\n",
		wantErr: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := release.ParseChangelog(tt.text)
			if tt.wantErr {
				if !errors.Is(err, release.ErrChangelog) {
					t.Errorf("ParseChangelog() error = %v, want one wrapping ErrChangelog", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseChangelog() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseChangelog() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckAPI(t *testing.T) {
	const released = "package p\n\nfunc Old() {}\n\nfunc Kept(int) {}\n"
	tests := []struct {
		name       string
		version    string
		now        string
		unreleased string
		want       release.APIVerdict
	}{{
		name:    "unchanged",
		version: "v0.1.0",
		now:     released,
	}, {
		name:    "an addition",
		version: "v1.0.0",
		now:     released + "\nfunc New() {}\n",
		want:    release.APIVerdict{Compatible: []string{"./p.New: added"}},
	}, {
		name:       "v0: a removal the changelog names",
		version:    "v0.1.0",
		now:        "package p\n\nfunc Kept(int) {}\n",
		unreleased: "- `p.Old`: removed, use Kept",
		want:       release.APIVerdict{Incompatible: []string{"./p.Old: removed"}},
	}, {
		name:       "v0: a change the changelog does not name",
		version:    "v0.1.0",
		now:        "package p\n\nfunc Old() {}\n\nfunc Kept(string) {}\n",
		unreleased: "- `p.Kept2`: added",
		want: release.APIVerdict{
			Incompatible: []string{"./p.Kept: changed from func(int) to func(string)"},
			Unlisted:     []string{"./p.Kept: changed from func(int) to func(string)"},
		},
	}, {
		name:       "v1: a removal the changelog names",
		version:    "v1.2.0",
		now:        "package p\n\nfunc Kept(int) {}\n",
		unreleased: "- `p.Old`: removed",
		want: release.APIVerdict{
			Incompatible: []string{"./p.Old: removed"},
			Unlisted:     []string{"./p.Old: removed"},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := release.CheckAPI(typeCheck(t, released), typeCheck(t, tt.now), tt.version, tt.unreleased)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("CheckAPI(%s) mismatch (-want +got):\n%s", tt.version, diff)
			}
		})
	}
}

func TestAPISnapshotRoundTrip(t *testing.T) {
	m := typeCheck(t, "package p\n\n// T is a type.\ntype T struct{ F int }\n\nfunc (T) M() error { return nil }\n")
	var buf bytes.Buffer
	if err := release.WriteAPI(&buf, m); err != nil {
		t.Fatal(err)
	}
	got, err := release.ReadAPI(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got.Path != m.Path {
		t.Errorf("ReadAPI(WriteAPI(m)).Path = %q, want %q", got.Path, m.Path)
	}
	if changes := apidiff.ModuleChanges(m, got).Changes; len(changes) != 0 {
		t.Errorf("ReadAPI(WriteAPI(m)) differs from m: %v", changes)
	}
}

// typeCheck type-checks src as package example.com/m/p of module example.com/m.
func typeCheck(t *testing.T, src string) *apidiff.Module {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := new(types.Config).Check("example.com/m/p", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &apidiff.Module{Path: "example.com/m", Packages: []*types.Package{pkg}}
}
