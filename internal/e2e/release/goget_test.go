package release_test

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"

	"github.com/watchgrade/watchgrade/internal/e2e/release"
)

var (
	rev = flag.String("release.rev", "HEAD",
		"the commit TestGoGet publishes as tagged with the newest release's tags")
	worktree = flag.Bool("release.worktree", false,
		"publish the work tree as `git add -A && git commit` would commit it, instead of -release.rev")
)

// programs names, for each module a README `go get` line fetches, the
// program in testdata that is built over it.
var programs = map[string]string{
	release.RootModule:                      "clientgo",
	release.RootModule + "/examples/wgctrl": "ctrlruntime",
}

// goGetLine is a README line a user copies to add a module of ours.
var goGetLine = regexp.MustCompile(`(?m)^go get ` + regexp.QuoteMeta(release.RootModule) + `\S*$`)

// TestGoGet publishes the commit to a file GOPROXY as the tags of the
// changelog's newest release would publish it, then, for each `go get`
// line of the README at that commit, in a fresh module: runs the line as
// it is, adds the program of testdata that uses what it fetched as the
// README's quick start does, `go mod tidy`, and builds it. Everything else
// comes from the module cache or the GOPROXY of the environment, which
// the sum database is asked about as usual; our modules, which it cannot
// know before they are published, are left out of it (GONOSUMDB).
//
// The module cache is the environment's, so that the dependencies build
// from the build cache; the published versions of our modules are removed
// from it before and after, so that no run reads an earlier run's.
func TestGoGet(t *testing.T) {
	began := time.Now()
	root := repoRoot(t)
	commit := *rev
	if *worktree {
		objects := t.TempDir()
		c, err := release.WorkTreeCommit(root, objects)
		if err != nil {
			t.Fatal(err)
		}
		gitDir := strings.TrimSpace(run(t, root, nil, "git", "rev-parse", "--absolute-git-dir"))
		t.Setenv("GIT_OBJECT_DIRECTORY", objects)
		t.Setenv("GIT_ALTERNATE_OBJECT_DIRECTORIES", filepath.Join(gitDir, "objects"))
		commit = c
	}
	short := strings.TrimSpace(run(t, root, nil, "git", "rev-parse", "--short", commit))
	cl, err := release.ParseChangelog(run(t, root, nil, "git", "show", commit+":"+release.ChangelogPath))
	if err != nil {
		t.Fatal(err)
	}
	proxy := filepath.Join(t.TempDir(), "proxy")
	if err := release.Publish(proxy, root, commit, cl.Tags); err != nil {
		t.Fatal(err)
	}
	modcache := strings.TrimSpace(run(t, root, nil, "go", "env", "GOMODCACHE"))
	forget(t, modcache, cl.Tags)
	t.Cleanup(func() { forget(t, modcache, cl.Tags) })

	upstream := strings.TrimSpace(run(t, root, nil, "go", "env", "GOPROXY"))
	env := []string{
		"GOPROXY=file://" + filepath.ToSlash(proxy) + "," + upstream,
		"GONOSUMDB=" + release.RootModule, "GONOPROXY=", "GOPRIVATE=",
		"GOWORK=off", "GOTOOLCHAIN=local",
		// The go command indexes each module directory of the module
		// cache in the build cache, trusting a version's files never to
		// change. Ours do, from one commit to the next under the same
		// version: a file split or renamed since the last run would be
		// looked for where it no longer is. The index off, the build
		// reads the files as they are; the build cache still serves the
		// dependencies.
		"GODEBUG=goindex=0",
	}
	lines := goGetLine.FindAllString(run(t, root, nil, "git", "show", commit+":README.md"), -1)
	if len(lines) == 0 {
		t.Fatalf("README.md at %s has no line %q", short, goGetLine)
	}
	for _, line := range lines {
		t.Run(strings.TrimPrefix(line, "go get "), func(t *testing.T) {
			start := time.Now()
			mod, _, _ := strings.Cut(strings.Fields(line)[2], "@")
			prog, ok := programs[mod]
			if !ok {
				t.Fatalf("README.md: %q: no program in testdata for module %s", line, mod)
			}
			user := t.TempDir()
			run(t, user, env, "go", "mod", "init", "example.com/user")
			args := strings.Fields(line)
			run(t, user, env, args[0], args[1:]...)
			src, err := os.ReadFile(filepath.Join("testdata", prog, "main.go"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(user, "main.go"), src, 0o644); err != nil {
				t.Fatal(err)
			}
			run(t, user, env, "go", "mod", "tidy")
			run(t, user, env, "go", "build", "-o", filepath.Join(user, prog), ".")

			data, err := os.ReadFile(filepath.Join(user, "go.mod"))
			if err != nil {
				t.Fatal(err)
			}
			f, err := modfile.Parse("go.mod", data, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Replace) != 0 {
				t.Errorf("the user's go.mod has %d replace directives, want none:\n%s", len(f.Replace), data)
			}
			got := map[string]string{}
			for _, r := range f.Require {
				got[r.Mod.Path] = r.Mod.Version
			}
			for _, tag := range cl.Tags {
				if v, ok := got[tag.Module()]; ok && v != tag.Version {
					t.Errorf("the user's go.mod requires %s %s, want %s (the release's tag %s)", tag.Module(), v, tag.Version, tag)
				}
			}
			if _, ok := got[mod]; !ok {
				t.Errorf("the user's go.mod does not require %s:\n%s", mod, data)
			}
			fmt.Printf("e2e: release module=%s go_get=ok got=%s root=%s build=ok replace_lines=%d rev=%s seconds=%.1f\n",
				mod, got[mod], got[release.RootModule], len(f.Replace), short, time.Since(start).Seconds())
		})
	}
	if !t.Failed() {
		t.Logf("published %v at %s and got them as the README says in %s", cl.Tags, short, time.Since(began).Round(100*time.Millisecond))
	}
}

// forget removes the tags' versions from the module cache: the download
// cache's files and the extracted tree (read-only, as the go command
// leaves it). Nothing else of the cache is touched.
func forget(t *testing.T, modcache string, tags []release.Tag) {
	t.Helper()
	for _, tag := range tags {
		p, err := module.EscapePath(tag.Module())
		if err != nil {
			t.Fatal(err)
		}
		v, err := module.EscapeVersion(tag.Version)
		if err != nil {
			t.Fatal(err)
		}
		for _, ext := range []string{".info", ".mod", ".zip", ".ziphash", ".partial"} {
			if err := os.Remove(filepath.Join(modcache, "cache", "download", p, "@v", v+ext)); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
		tree := filepath.Join(modcache, p+"@"+v)
		filepath.WalkDir(tree, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(path, 0o755)
			}
			return nil
		})
		if err := os.RemoveAll(tree); err != nil {
			t.Fatal(err)
		}
	}
}

// repoRoot returns the repository's root directory, checked by its go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if got := modfile.ModulePath(data); got != release.RootModule {
		t.Fatalf("%s/go.mod declares %q, want %q", root, got, release.RootModule)
	}
	return root
}

// run runs a command in dir with env added to the test's environment and
// returns its standard output; it fails the test with both outputs if the
// command fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s (in %s): %v\n%s%s", name, strings.Join(args, " "), dir, err, out, stderr.String())
	}
	return string(out)
}
