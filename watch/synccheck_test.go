package watch_test

import (
	"errors"
	"fmt"
	"testing"

	wgwatch "github.com/watchgrade/watchgrade/watch"
)

func TestSyncCheck(t *testing.T) {
	st := func(stream string, phase wgwatch.Phase, needsHuman bool) wgwatch.State {
		return wgwatch.State{Stream: stream, Phase: phase, NeedsHuman: needsHuman}
	}
	tests := []struct {
		name   string
		expect []string
		states []wgwatch.State
		forget []string
		want   string // "" for ready
	}{
		{"expected, not reported yet", []string{"pods"}, nil, nil, "pods never streamed"},
		{"expected, streamed", []string{"pods"}, []wgwatch.State{st("pods", wgwatch.PhaseStreaming, false)}, nil, ""},
		{"expected, not served: forgotten", []string{"pods", "widgets"}, []wgwatch.State{st("pods", wgwatch.PhaseStreaming, false)}, []string{"widgets"}, ""},
		{"nothing reported", nil, nil, nil, ""},
		{"a stream starting", nil, []wgwatch.State{st("pods", wgwatch.PhaseStarting, false)}, nil, "pods never streamed"},
		{"a stream on its first replay", nil, []wgwatch.State{st("pods", wgwatch.PhaseStarting, false), st("pods", wgwatch.PhaseReplaying, false)}, nil, "pods never streamed"},
		{"a stream denied from the start", nil, []wgwatch.State{st("secrets", wgwatch.PhaseStarting, false), st("secrets", wgwatch.PhaseBlocked, true)}, nil, "secrets never streamed"},
		{"every stream streamed", nil, []wgwatch.State{st("pods", wgwatch.PhaseStarting, false), st("pods", wgwatch.PhaseStreaming, false)}, nil, ""},
		{"a stream blocked after it streamed: still ready", nil, []wgwatch.State{st("pods", wgwatch.PhaseStreaming, false), st("pods", wgwatch.PhaseBlocked, true), st("pods", wgwatch.PhaseStarting, false)}, nil, ""},
		{"one of two", nil, []wgwatch.State{st("pods", wgwatch.PhaseStreaming, false), st("secrets", wgwatch.PhaseStarting, false)}, nil, "secrets never streamed"},
		{"a stream that never streamed, forgotten", nil, []wgwatch.State{st("pods", wgwatch.PhaseStreaming, false), st("secrets", wgwatch.PhaseStarting, false)}, []string{"secrets"}, ""},
		{"seven waiting: five named", nil, []wgwatch.State{st("a", "", false), st("b", "", false), st("c", "", false), st("d", "", false), st("e", "", false), st("f", "", false), st("g", "", false)},
			nil, "a, b, c, d, e and 2 more never streamed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c wgwatch.SyncCheck
			c.Expect(tt.expect...)
			for _, s := range tt.states {
				c.StateChanged(s)
			}
			for _, name := range tt.forget {
				c.Forget(name)
			}
			err := c.Check(nil)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Check() = %v, want nil", err)
			case tt.want != "" && (!errors.Is(err, wgwatch.ErrNotSynced) || err.Error() != wgwatch.ErrNotSynced.Error()+": "+tt.want):
				t.Errorf("Check() = %v, want ErrNotSynced: %s", err, tt.want)
			}
		})
	}
}

// SyncCheck answers a readiness probe: not ready until every stream has
// streamed once, ready for good afterwards. With controller-runtime:
// mgr.AddReadyzCheck("watches", check.Check).
func ExampleSyncCheck() {
	var check wgwatch.SyncCheck
	observer := wgwatch.Observers(&check) // with the readiness accumulator and the metrics
	observer.StateChanged(wgwatch.State{Stream: "core/v1/secrets", Phase: wgwatch.PhaseStarting})
	fmt.Println(check.Check(nil))
	observer.StateChanged(wgwatch.State{Stream: "core/v1/secrets", Phase: wgwatch.PhaseStreaming})
	fmt.Println(check.Check(nil))
	observer.StateChanged(wgwatch.State{Stream: "core/v1/secrets", Phase: wgwatch.PhaseBlocked, NeedsHuman: true})
	fmt.Println(check.Check(nil))
	// Output:
	// watchgrade/watch: not synced: core/v1/secrets never streamed
	// <nil>
	// <nil>
}
