package release

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"

	"golang.org/x/mod/semver"
)

// ChangelogPath is the changelog's path from the repository root. It lives
// in the directory of the module users `go get` by name from the README
// (the repository's top level holds no documents of its own), and records
// the releases of both modules.
const ChangelogPath = "examples/wgctrl/CHANGELOG.md"

// RootModule is the module path of the repository's root module.
const RootModule = "github.com/watchgrade/watchgrade"

// ErrChangelog is wrapped by every error [ParseChangelog] returns.
var ErrChangelog = errors.New("changelog")

// A Tag is a module-prefix tag, as the go command reads tags: the module in
// directory Dir of the repository at Version. Its module path is
// [RootModule] followed by Dir.
type Tag struct {
	// Dir is the module's directory from the repository root, "" for the
	// root module.
	Dir string
	// Version is a semantic version with its "v", such as "v0.1.0".
	Version string
}

// ParseTag parses "v0.1.0" or "examples/wgctrl/v0.1.0".
func ParseTag(s string) (Tag, error) {
	dir, v := path.Split(s)
	t := Tag{Dir: strings.TrimSuffix(dir, "/"), Version: v}
	if !semver.IsValid(v) || semver.Canonical(v) != v || semver.Build(v) != "" {
		return Tag{}, fmt.Errorf("%w: tag %q: %q is not a canonical semantic version", ErrChangelog, s, v)
	}
	if path.Clean(s) != s || strings.HasPrefix(s, "/") {
		return Tag{}, fmt.Errorf("%w: tag %q: not a clean module-prefix tag", ErrChangelog, s)
	}
	return t, nil
}

// String returns the tag's name, the one `git tag` takes.
func (t Tag) String() string { return path.Join(t.Dir, t.Version) }

// Module returns the path of the module the tag releases.
func (t Tag) Module() string { return path.Join(RootModule, t.Dir) }

// A Changelog is what the release checks read from the changelog.
type Changelog struct {
	// Release is the heading version of the newest release, "v0.1.0".
	Release string
	// Tags are the newest release's tags, one per module it released, in
	// the order its "Tags:" line names them.
	Tags []Tag
	// Unreleased is the text of the Unreleased section: the changes since
	// that release.
	Unreleased string
}

// Tag returns the newest release's tag of the module in dir, and false
// when that release did not release it.
func (c Changelog) Tag(dir string) (Tag, bool) {
	for _, t := range c.Tags {
		if t.Dir == dir {
			return t, true
		}
	}
	return Tag{}, false
}

var (
	releaseHeading = regexp.MustCompile(`^## (v[0-9][^ ]*)`)
	backquoted     = regexp.MustCompile("`([^`]+)`")
)

// ParseChangelog reads the sections of a changelog written as the
// repository's is: second-level headings, the first "## Unreleased", then
// one "## vX.Y.Z" per release, newest first, each with a line
//
//	Tags: `v0.1.0`, `examples/wgctrl/v0.1.0`.
//
// naming, in back quotes, the tag of each module it released. The newest
// release must name one tag per module, at least one, and nothing about a
// release is read below the first one.
func ParseChangelog(text string) (Changelog, error) {
	var c Changelog
	var unreleased []string
	section := ""
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\r\n")
		if strings.HasPrefix(line, "## ") {
			if c.Release != "" {
				break
			}
			switch m := releaseHeading.FindStringSubmatch(line); {
			case strings.TrimSpace(line) == "## Unreleased":
				section = "unreleased"
			case m != nil:
				if !semver.IsValid(m[1]) {
					return Changelog{}, fmt.Errorf("%w: heading %q: not a semantic version", ErrChangelog, line)
				}
				c.Release, section = m[1], "release"
			default:
				section = ""
			}
			continue
		}
		switch {
		case section == "unreleased":
			unreleased = append(unreleased, line)
		case section == "release" && strings.HasPrefix(line, "Tags:"):
			if c.Tags != nil {
				return Changelog{}, fmt.Errorf("%w: release %s: two Tags lines", ErrChangelog, c.Release)
			}
			c.Tags = []Tag{}
			for _, m := range backquoted.FindAllStringSubmatch(line, -1) {
				t, err := ParseTag(m[1])
				if err != nil {
					return Changelog{}, err
				}
				if _, dup := c.Tag(t.Dir); dup {
					return Changelog{}, fmt.Errorf("%w: release %s: two tags for the module in %q", ErrChangelog, c.Release, t.Dir)
				}
				c.Tags = append(c.Tags, t)
			}
		}
	}
	if c.Release == "" {
		return Changelog{}, fmt.Errorf("%w: no release heading (## vX.Y.Z)", ErrChangelog)
	}
	if len(c.Tags) == 0 {
		return Changelog{}, fmt.Errorf("%w: release %s: no line \"Tags: `vX.Y.Z`, `dir/vX.Y.Z`\"", ErrChangelog, c.Release)
	}
	c.Unreleased = strings.TrimSpace(strings.Join(unreleased, "\n"))
	return c, nil
}
