package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	wgwatch "github.com/watchgrade/watchgrade/watch"
)

func TestConsoleFoldsRoutineEndings(t *testing.T) {
	closed := func(stream string) wgwatch.SessionEnd {
		return wgwatch.SessionEnd{Stream: stream, Verdict: wgwatch.Verdict{Outcome: wgwatch.OutcomeClosed, Healthy: true, Next: wgwatch.NextResume}, Duration: 2 * time.Second, Events: 4}
	}
	teardown := func(stream string) wgwatch.SessionEnd {
		return wgwatch.SessionEnd{Stream: stream, Verdict: wgwatch.Verdict{Outcome: wgwatch.OutcomeTeardown, Next: wgwatch.NextStop}}
	}
	denied := wgwatch.SessionEnd{Stream: "secrets", Err: errors.New("forbidden"),
		Verdict: wgwatch.Verdict{Outcome: wgwatch.OutcomeError, Class: wgwatch.ClassNeedsHuman, Next: wgwatch.NextResume}}
	blocked := wgwatch.State{Stream: "configmaps", Phase: wgwatch.PhaseBlocked, Reason: wgwatch.ReasonForbidden, NeedsHuman: true, Message: "denied"}
	// feed is a run: routine endings of two streams, a state change of
	// one, an ending that is not routine, a teardown, then the flush
	// that the timer or the summary does.
	feed := func(p *printer) {
		for range 3 {
			p.SessionEnded(closed("configmaps"))
		}
		p.SessionEnded(closed("secrets"))
		p.StateChanged(blocked)
		p.SessionEnded(denied)
		p.SessionEnded(closed("configmaps"))
		p.SessionEnded(teardown("configmaps"))
		p.flush()
	}
	tests := []struct {
		name string
		mode endingsMode
		want []string
	}{
		{name: "folded", mode: endingsFolded, want: []string{
			"ended configmaps 3 routine closes, nothing published",
			"state configmaps Blocked/Forbidden [needs a human] denied",
			"ended secrets 1 routine close, nothing published",
			"ended secrets error (needs_human) after 0.0s, 0 events -> resume, not published yet: the next session decides",
			"ended configmaps 1 routine close and 1 teardown, nothing published",
		}},
		{name: "verbose", mode: endingsEach, want: []string{
			"ended configmaps closed after 2.0s, 4 events -> resume, routine, nothing published",
			"ended configmaps closed after 2.0s, 4 events -> resume, routine, nothing published",
			"ended configmaps closed after 2.0s, 4 events -> resume, routine, nothing published",
			"ended secrets closed after 2.0s, 4 events -> resume, routine, nothing published",
			"state configmaps Blocked/Forbidden [needs a human] denied",
			"ended secrets error (needs_human) after 0.0s, 0 events -> resume, not published yet: the next session decides",
			"ended configmaps closed after 2.0s, 4 events -> resume, routine, nothing published",
			"ended configmaps teardown after 0.0s, 0 events -> stop, teardown",
		}},
		{name: "hidden", mode: endingsHidden, want: []string{
			"state configmaps Blocked/Forbidden [needs a human] denied",
			"ended secrets error (needs_human) after 0.0s, 0 events -> resume, not published yet: the next session decides",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			p := newPrinter(&out, time.Now(), tt.mode)
			feed(p)
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				// Drop the time column; collapse the padding.
				fields := strings.Fields(line)
				got = append(got, strings.Join(fields[1:], " "))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("console (-want +got):\n%s", diff)
			}
		})
	}
}
