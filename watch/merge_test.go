package watch_test

import (
	"fmt"
	"testing"

	"github.com/watchgrade/watchgrade/watch"
)

var (
	live   = watch.State{Stream: "ConfigMap.v1", Phase: watch.PhaseStreaming}
	denied = watch.State{Stream: "ConfigMap.v1", Phase: watch.PhaseBlocked, Reason: watch.ReasonForbidden, NeedsHuman: true}
	start  = watch.State{Stream: "ConfigMap.v1", Phase: watch.PhaseStarting}
)

func worst(m *watch.Merge, i int, all bool) string {
	s, ok := m.Worst(i, all)
	if !ok {
		return "none"
	}
	return string(s.Phase) + "/" + fmt.Sprint(s.NeedsHuman)
}

// One namespace denied keeps the kind needing a human while another's
// informer is live; the denied namespace's own state is the denial, the
// other's is live.
func TestMergeWorstOfNamespaces(t *testing.T) {
	var m watch.Merge
	a, b := m.Add("team-a"), m.Add("team-b")
	if got := worst(&m, a, true); got != "none" {
		t.Errorf("before any state: %s, want none", got)
	}
	m.Publish(a, denied)
	m.Publish(b, live)
	if got := worst(&m, b, true); got != "Blocked/true" {
		t.Errorf("every namespace: %s, want Blocked/true", got)
	}
	if got := worst(&m, b, false); got != "Streaming/false" {
		t.Errorf("team-b: %s, want Streaming/false", got)
	}
	if got := worst(&m, a, false); got != "Blocked/true" {
		t.Errorf("team-a: %s, want Blocked/true", got)
	}
}

// An informer stopped while denied and made again: its stall stands while
// the new one starts, and ends once the new one is live.
func TestMergeStallOutlivesAReplacedInformer(t *testing.T) {
	var m watch.Merge
	old := m.Add("team-a")
	m.Publish(old, denied)
	if running := m.Stop(old); running {
		t.Error("Stop reports an informer running with none")
	}
	if got := worst(&m, old, true); got != "none" {
		t.Errorf("none running: %s, want none", got)
	}
	next := m.Add("team-a")
	m.Publish(next, start)
	if got := worst(&m, next, true); got != "Blocked/true" {
		t.Errorf("the new informer starting: %s, want the stall (Blocked/true)", got)
	}
	m.Publish(next, live)
	if got := worst(&m, next, true); got != "Streaming/false" {
		t.Errorf("the new informer live: %s, want Streaming/false", got)
	}
}

// A Run that returns late, after the new informer of its namespace was
// live: its stall does not come back.
func TestMergeLateStopKeepsNoStall(t *testing.T) {
	var m watch.Merge
	old := m.Add("")
	m.Publish(old, denied)
	next := m.Add("")
	m.Publish(next, live)
	if running := m.Stop(old); !running {
		t.Error("Stop reports none running while the new informer runs")
	}
	m.Publish(next, start)
	if got := worst(&m, next, true); got != "Starting/false" {
		t.Errorf("after the late stop: %s, want Starting/false (no stall)", got)
	}
}

// Indices Add did not return are ignored, never a panic.
func TestMergeUnknownIndex(t *testing.T) {
	var m watch.Merge
	m.Publish(3, denied)
	if m.Stop(-1) {
		t.Error("Stop(-1) reports an informer running")
	}
	if _, ok := m.Worst(7, true); ok {
		t.Error("Worst(7) reports a state")
	}
}

// A cache restricted to two namespaces runs two informers of one kind: a
// denial in one keeps the kind needing a human, and an owner that follows
// the other namespace sees it live.
func ExampleMerge() {
	var m watch.Merge
	a, b := m.Add("team-a"), m.Add("team-b")
	m.Publish(a, watch.State{Phase: watch.PhaseBlocked, Reason: watch.ReasonForbidden, NeedsHuman: true})
	m.Publish(b, watch.State{Phase: watch.PhaseStreaming})
	kind, _ := m.Worst(b, true)
	teamB, _ := m.Worst(b, false)
	fmt.Println("the kind:", kind.Phase, kind.Reason)
	fmt.Println("team-b:", teamB.Phase)
	// Output:
	// the kind: Blocked Forbidden
	// team-b: Streaming
}
