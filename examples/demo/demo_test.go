package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// TestDemoShortRun runs the demo as `go run ./demo --duration=75s` would,
// on its embedded servers, and checks the story its summary tells: routine
// closes and an expiry with no Warning, one Warning for the RBAC denial,
// and Ready again after the repair.
func TestDemoShortRun(t *testing.T) {
	var out bytes.Buffer
	sum, err := run(t.Context(), options{duration: 75 * time.Second, namespace: "watchgrade-demo", routine: true, out: &out})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !sum.Restarted {
		t.Error("the kube-apiserver was not restarted")
	}
	if n := sum.total(wgwatch.OutcomeExpired); n < 1 {
		t.Errorf("%d expired sessions after the apiserver restart, want at least 1", n)
	}
	if n := sum.total(wgwatch.OutcomeClosed); n < 10 {
		t.Errorf("%d closed sessions, want at least 10 (watches end every 1-2 s)", n)
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
	for _, want := range []string{"Summary after 1m15s", "demo: closed=", "warnings=1 kstatus=Current ready=true"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
