package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/watchgrade/watchgrade/examples/internal/sandbox"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// summary is what the demo showed.
type summary struct {
	// Mode is "embedded" or "kubeconfig".
	Mode     string
	Duration time.Duration
	// Restarted: the kube-apiserver was restarted (embedded mode only).
	Restarted bool
	// OldCursor: a stream resumed from a cursor older than the watch
	// cache, the expiry of the kubeconfig mode.
	OldCursor bool
	Stalled   bool
	Recovered bool
	// Restart is what the controller restart published.
	Restart restartWindow
	// Sessions counts session endings by stream and outcome.
	Sessions map[string]map[wgwatch.Outcome]int
	// Events are the Events about the WatchTarget, "Type/Reason", in order.
	Events   []string
	Warnings int
	Mirrored map[string]int
	Target   sandbox.Target
	KStatus  string
	// Timeline is the file the picture was written to, if any.
	Timeline string
	// Record is the run's record, which the timeline draws.
	Record *record
}

// total sums session endings of one outcome over every stream.
func (s summary) total(o wgwatch.Outcome) int {
	n := 0
	for _, byOutcome := range s.Sessions {
		n += byOutcome[o]
	}
	return n
}

// told reports whether the story ended as promised: one Warning, for the
// one thing a human had to fix, and Ready for the current generation.
func (s summary) told() bool {
	return s.Stalled && s.Recovered && s.Warnings == 1 && s.Target.Ready()
}

func (s summary) print(w io.Writer) {
	fmt.Fprintf(w, "\nSummary after %v\n", s.Duration)
	fmt.Fprintf(w, "  session endings by stream (watchgrade_watch_sessions_ended_total):\n")
	for _, name := range slices.Sorted(maps.Keys(s.Sessions)) {
		var parts []string
		for _, o := range wgwatch.Outcomes() {
			parts = append(parts, fmt.Sprintf("%s=%d", o, s.Sessions[name][o]))
		}
		fmt.Fprintf(w, "    %-38s %s\n", name, strings.Join(parts, " "))
	}
	var mirrored []string
	for _, name := range slices.Sorted(maps.Keys(s.Mirrored)) {
		mirrored = append(mirrored, fmt.Sprintf("%s=%d", name, s.Mirrored[name]))
	}
	fmt.Fprintf(w, "  mirrored objects: %s\n", strings.Join(mirrored, " "))
	fmt.Fprintf(w, "  WatchTarget %s\n", s.Target)
	fmt.Fprintf(w, "  kstatus: %s\n", s.KStatus)
	fmt.Fprintf(w, "  Events (%d, %d Warning): %s\n", len(s.Events), s.Warnings, strings.Join(s.Events, " "))
	fmt.Fprintf(w, "  restart: writes=%d events=%d dips=%d (what the controller restart published, as a watch on the target saw it)\n",
		s.Restart.Writes, s.Restart.Events, s.Restart.Dips)
	routine := s.total(wgwatch.OutcomeClosed) + s.total(wgwatch.OutcomeExpired)
	fmt.Fprintf(w, "  %d routine endings (closes and expiries) produced no Warning; %d Warning for the denial a human had to fix.\n", routine, s.Warnings)
	if s.Timeline != "" {
		fmt.Fprintf(w, "  timeline: %s (opens from disk in any browser)\n", s.Timeline)
	}
	fmt.Fprintf(w, "demo: mode=%s closed=%d expired=%d error=%d restarted=%t old_cursor=%t stalled=%t recovered=%t warnings=%d kstatus=%s ready=%t\n",
		s.Mode, s.total(wgwatch.OutcomeClosed), s.total(wgwatch.OutcomeExpired), s.total(wgwatch.OutcomeError),
		s.Restarted, s.OldCursor, s.Stalled, s.Recovered, s.Warnings, s.KStatus, s.Target.Ready())
	fmt.Fprintf(w, "demo: mode=%s restart writes=%d events=%d dips=%d\n", s.Mode, s.Restart.Writes, s.Restart.Events, s.Restart.Dips)
	if !s.told() {
		fmt.Fprintln(w, "demo: the story did not end as expected (see above); a longer --duration may help")
	}
}
