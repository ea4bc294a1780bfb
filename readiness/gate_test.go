package readiness_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

func streamState(name string, phase wgwatch.Phase, reason wgwatch.Reason, needsHuman bool) wgwatch.State {
	return wgwatch.State{
		Stream: name, Phase: phase, Reason: reason, NeedsHuman: needsHuman,
		Message: string(phase) + " " + string(reason),
	}
}

// TestStreamLevel holds the rows of StreamLevel's doc table.
func TestStreamLevel(t *testing.T) {
	tests := []struct {
		name  string
		state wgwatch.State
		want  wgreadiness.Level
	}{
		{"Streaming", streamState("s", wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false), wgreadiness.LevelEstablished},
		{"Streaming, NeedsHuman ignored", streamState("s", wgwatch.PhaseStreaming, wgwatch.ReasonWatching, true), wgreadiness.LevelEstablished},
		{"Starting", streamState("s", wgwatch.PhaseStarting, wgwatch.ReasonStarting, false), wgreadiness.LevelProgressing},
		{"Replaying, initial sync", streamState("s", wgwatch.PhaseReplaying, wgwatch.ReasonInitialSync, false), wgreadiness.LevelProgressing},
		{"Replaying, expired", streamState("s", wgwatch.PhaseReplaying, wgwatch.ReasonExpiredResourceVersion, false), wgreadiness.LevelProgressing},
		{"Blocked, transient", streamState("s", wgwatch.PhaseBlocked, wgwatch.ReasonServerError, false), wgreadiness.LevelProgressing},
		{"Blocked, flapping", streamState("s", wgwatch.PhaseBlocked, wgwatch.ReasonFlapping, false), wgreadiness.LevelProgressing},
		{"Blocked, needs a human", streamState("s", wgwatch.PhaseBlocked, wgwatch.ReasonForbidden, true), wgreadiness.LevelStalled},
		{"Blocked, past the deadline", streamState("s", wgwatch.PhaseBlocked, wgwatch.ReasonProgressDeadlineExceeded, true), wgreadiness.LevelStalled},
		{"unknown phase", streamState("s", "Bogus", "Bogus", false), wgreadiness.LevelProgressing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := wgreadiness.StreamLevel(tt.state); got != tt.want {
				t.Errorf("StreamLevel(%+v) = %v, want %v", tt.state, got, tt.want)
			}
		})
	}
}

func TestStreamGate(t *testing.T) {
	s := streamState("apps/deployments", wgwatch.PhaseBlocked, wgwatch.ReasonForbidden, true)
	want := wgreadiness.Gate{
		Name: "apps/deployments", Level: wgreadiness.LevelStalled,
		Reason: "Forbidden", Message: "Blocked Forbidden", Stream: true,
	}
	if diff := cmp.Diff(want, wgreadiness.StreamGate(s)); diff != "" {
		t.Errorf("StreamGate() mismatch (-want +got):\n%s", diff)
	}
}

// TestWatchReasonsAreValid: stream reasons are copied into conditions as
// they are.
func TestWatchReasonsAreValid(t *testing.T) {
	for _, r := range []wgwatch.Reason{
		wgwatch.ReasonStarting, wgwatch.ReasonInitialSync, wgwatch.ReasonExpiredResourceVersion,
		wgwatch.ReasonWatching, wgwatch.ReasonFlapping, wgwatch.ReasonReplayTimedOut,
		wgwatch.ReasonProgressDeadlineExceeded, wgwatch.ReasonHandlerFailed, wgwatch.ReasonBadEvent,
		wgwatch.ReasonUnauthorized, wgwatch.ReasonForbidden, wgwatch.ReasonResourceNotFound,
		wgwatch.ReasonInvalidRequest, wgwatch.ReasonTooManyRequests, wgwatch.ReasonServerError,
		wgwatch.ReasonTimeout, wgwatch.ReasonConnectionFailed, wgwatch.ReasonWatchFailed,
	} {
		if !wgreadiness.ValidReason(string(r)) {
			t.Errorf("ValidReason(%q) = false, want true", r)
		}
	}
}
