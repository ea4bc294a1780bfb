package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// demoDuration is the length of the tests' runs: the 45 s floor plus room
// for a loaded machine.
const demoDuration = 75 * time.Second

// TestDemoTellsTheStoryInBothModes runs the demo as `go run ./demo --duration=75s --timeline ...`
// would, in both modes side by side: on its embedded servers, and with
// --kubeconfig against a kube-apiserver started with default flags (watches
// of 30 to 60 minutes, as on a real cluster). Each must tell the same story:
// routine closes and an expiry with no Warning, one Warning for the RBAC
// denial, Ready again after the repair, exit code 0; and its timeline must
// show what its record holds.
func TestDemoTellsTheStoryInBothModes(t *testing.T) {
	// Started before the subtests, one after the other: servers must not
	// start concurrently (process-wide state). The embedded run starts its
	// own while this one is already up, as an apiserver restart does.
	c := harness.Start(t, harness.Options{RBAC: true, QuietEtcd: true})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		sum := runDemo(t, "--duration", demoDuration.String(), "--timeline", filepath.Join(dir, "embedded.html"))
		if !sum.Restarted {
			t.Error("the kube-apiserver was not restarted")
		}
	})
	t.Run("kubeconfig", func(t *testing.T) {
		t.Parallel()
		sum := runDemo(t, "--kubeconfig", kubeconfig, "--duration", demoDuration.String(), "--timeline", filepath.Join(dir, "kubeconfig.svg"))
		if sum.Restarted {
			t.Error("the kube-apiserver was restarted in kubeconfig mode")
		}
		if !sum.OldCursor {
			t.Error("no stream resumed from an old cursor")
		}
		if n := sum.Sessions[oldCursorStream][wgwatch.OutcomeExpired]; n != 1 {
			t.Errorf("%s: %d expired sessions, want 1 (resourceVersion 1 is older than the watch cache)", oldCursorStream, n)
		}
	})
}

// runDemo runs the demo with args as main does, checks the summary both
// modes share and the timeline it wrote, and returns the summary.
func runDemo(t *testing.T, args ...string) summary {
	t.Helper()
	var out, errOut bytes.Buffer
	opts, err := parseFlags(args, &out, &errOut)
	if err != nil {
		t.Fatalf("parseFlags(%q): %v\n%s", args, err, errOut.String())
	}
	began := time.Now()
	sum, err := run(t.Context(), opts)
	code := exitCode(sum, err, &errOut)
	t.Logf("demo %s: exit code %d after %v\n%s%s", strings.Join(args, " "), code, time.Since(began).Round(time.Second), out.String(), errOut.String())
	if code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	if n := sum.total(wgwatch.OutcomeClosed); n < 10 {
		t.Errorf("%d closed sessions, want at least 10 (watches end every 1-2 s)", n)
	}
	if n := sum.total(wgwatch.OutcomeExpired); n < 1 {
		t.Errorf("%d expired sessions, want at least 1", n)
	}
	if !sum.Stalled || !sum.Recovered {
		t.Errorf("stalled=%t recovered=%t, want both", sum.Stalled, sum.Recovered)
	}
	if sum.Warnings != 1 {
		t.Errorf("%d Warnings, want exactly 1: %v", sum.Warnings, sum.Events)
	}
	if !sum.Target.Ready() || sum.KStatus != "Current" {
		t.Errorf("at the end: %v, kstatus %q; want Ready for its generation and Current", sum.Target, sum.KStatus)
	}
	if sum.Restart.To <= sum.Restart.From {
		t.Errorf("no controller restart window in the record: %+v", sum.Restart)
	}
	// A restart that changed nothing publishes nothing: the target's
	// Ready=True stands (the accumulator's start grace).
	if r := sum.Restart; r.Writes+r.Events+r.Dips != 0 {
		t.Errorf("the controller restart published writes=%d events=%d dips=%d, want all 0", r.Writes, r.Events, r.Dips)
	}
	t.Logf("demo: mode=%s restart writes=%d events=%d dips=%d", sum.Mode, sum.Restart.Writes, sum.Restart.Events, sum.Restart.Dips)
	for _, want := range []string{
		"Summary after " + demoDuration.String(),
		fmt.Sprintf("restart: writes=%d events=%d dips=%d", sum.Restart.Writes, sum.Restart.Events, sum.Restart.Dips),
		"demo: mode=" + sum.Mode + " closed=",
		"warnings=1 kstatus=Current ready=true",
		"routine closes, nothing published", // the folded console
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}

	root := readTimeline(t, sum.Timeline)
	checkTimeline(t, root, sum.Record)
	warnings := root.find(func(n *node) bool { return n.hasClass("flag") && n.attrs["data-type"] == "Warning" })
	if len(warnings) != 1 {
		t.Errorf("the timeline shows %d Warning flags, want 1", len(warnings))
	}
	ticks := root.find(func(n *node) bool {
		return n.hasClass("tick") && n.attrs["data-outcome"] == string(wgwatch.OutcomeClosed)
	})
	if len(ticks) != sum.total(wgwatch.OutcomeClosed) {
		t.Errorf("the timeline shows %d closed ticks, the summary counts %d", len(ticks), sum.total(wgwatch.OutcomeClosed))
	}
	if strings.HasSuffix(sum.Timeline, ".html") {
		checkRendered(t, sum.Timeline)
	}
	return sum
}
