package release

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// Publish writes into dir what a module proxy serves for each tag once the
// tags are pushed on commit rev of the git repository at repo, laid out as
// `go help goproxy` says and GOPROXY=file://dir reads: for each module,
// @v/list, and for each version its .info (the commit's time), .mod (the
// go.mod at rev) and .zip, which golang.org/x/mod/zip makes from `git
// archive` of rev as the Go module mirror does (files of nested modules,
// vendor directories and what .gitattributes exports not left out; the
// repository's LICENSE added to a module in a subdirectory that has none).
// A tag whose directory's go.mod at rev does not declare the tag's module
// path is an error, as the go command would refuse it.
func Publish(dir, repo, rev string, tags []Tag) error {
	commit, err := git(repo, "rev-parse", "--verify", rev+"^{commit}")
	if err != nil {
		return err
	}
	commit = strings.TrimSpace(commit)
	when, err := git(repo, "show", "-s", "--format=%cI", commit)
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(when))
	if err != nil {
		return fmt.Errorf("commit time of %s: %w", rev, err)
	}
	for _, tag := range tags {
		if err := publish(dir, repo, commit, t.UTC(), tag); err != nil {
			return fmt.Errorf("publish %s at %s: %w", tag, rev, err)
		}
	}
	return nil
}

func publish(dir, repo, commit string, t time.Time, tag Tag) error {
	mv := module.Version{Path: tag.Module(), Version: tag.Version}
	if err := module.Check(mv.Path, mv.Version); err != nil {
		return err
	}
	gomod, err := git(repo, "show", commit+":"+path.Join(tag.Dir, "go.mod"))
	if err != nil {
		return err
	}
	if got := modfile.ModulePath([]byte(gomod)); got != mv.Path {
		return fmt.Errorf("%s/go.mod declares module %q, want %q", tag.Dir, got, mv.Path)
	}
	escPath, err := module.EscapePath(mv.Path)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(mv.Version)
	if err != nil {
		return err
	}
	v := filepath.Join(dir, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(v, 0o755); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
		Origin  any `json:",omitempty"`
	}{mv.Version, t, struct{ VCS, Hash, Ref string }{"git", commit, "refs/tags/" + tag.String()}})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(v, escVersion+".info"), info, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(v, escVersion+".mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(v, escVersion+".zip"))
	if err != nil {
		return err
	}
	if err := zip.CreateFromVCS(f, mv, repo, commit, tag.Dir); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	list, err := os.OpenFile(filepath.Join(v, "list"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(list, mv.Version); err != nil {
		list.Close()
		return err
	}
	return list.Close()
}

// WorkTreeCommit returns a commit, on no branch and named by no ref, whose
// tree is what `git add -A && git commit` would commit in the work tree of
// repo: tracked files as they are now, untracked ones .gitignore does not
// name. Its objects go to objects, a directory outside the repository that
// GIT_OBJECT_DIRECTORY must name, with the repository's own objects as
// alternates (GIT_ALTERNATE_OBJECT_DIRECTORIES), for every git command that
// reads the commit: the repository's index, work tree, refs and object
// store stay as they were.
func WorkTreeCommit(repo, objects string) (string, error) {
	index := filepath.Join(objects, "index")
	env := []string{"GIT_INDEX_FILE=" + index, "GIT_OBJECT_DIRECTORY=" + objects}
	gitDir, err := git(repo, "rev-parse", "--absolute-git-dir")
	if err != nil {
		return "", err
	}
	env = append(env, "GIT_ALTERNATE_OBJECT_DIRECTORIES="+filepath.Join(strings.TrimSpace(gitDir), "objects"),
		"GIT_AUTHOR_NAME=release", "GIT_AUTHOR_EMAIL=release@localhost",
		"GIT_COMMITTER_NAME=release", "GIT_COMMITTER_EMAIL=release@localhost")
	if _, err := gitEnv(repo, env, "read-tree", "HEAD"); err != nil {
		return "", err
	}
	if _, err := gitEnv(repo, env, "add", "-A", "."); err != nil {
		return "", err
	}
	tree, err := gitEnv(repo, env, "write-tree")
	if err != nil {
		return "", err
	}
	commit, err := gitEnv(repo, env, "commit-tree", "-p", "HEAD", "-m", "work tree", strings.TrimSpace(tree))
	return strings.TrimSpace(commit), err
}

func git(dir string, args ...string) (string, error) { return gitEnv(dir, nil, args...) }

func gitEnv(dir string, env []string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return string(out), nil
}
