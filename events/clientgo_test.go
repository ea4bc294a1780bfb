// This file runs the Recorder against client-go's own fakes.

package events_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	eventsapi "k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record"

	wgevents "github.com/watchgrade/watchgrade/events"
)

var (
	_ wgevents.CoreV1Recorder   = record.EventRecorder(nil)
	_ wgevents.EventsV1Recorder = eventsapi.EventRecorder(nil)
)

func drain(ch chan string) []string {
	var out []string
	for {
		select {
		case e := <-ch:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestClientGoFakes(t *testing.T) {
	stalled := []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Forbidden", Message: "nodes: 100% forbidden"},
		{Type: "Stalled", Status: metav1.ConditionTrue, Reason: "Forbidden", Message: "nodes: 100% forbidden"},
	}
	ready := []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Established", Message: strings.Repeat("é", 600)}}

	core := record.NewFakeRecorder(10)
	rec := mustRecorder(wgevents.NewRecorder(core))
	rec.Record(nil, nil, stalled)
	rec.Record(nil, stalled, stalled)
	rec.Record(nil, stalled, ready)
	want := []string{"Warning Forbidden nodes: 100% forbidden", "Normal Established " + strings.Repeat("é", 600)}
	if diff := cmp.Diff(want, drain(core.Events)); diff != "" {
		t.Errorf("record.FakeRecorder events mismatch (-want +got):\n%s", diff)
	}

	ev := eventsapi.NewFakeRecorder(10)
	rec = mustRecorder(wgevents.NewEventsRecorder(ev, wgevents.EventsOptions{}))
	rec.Record(nil, nil, stalled)
	rec.Record(nil, stalled, stalled)
	rec.Record(nil, stalled, ready)
	want = []string{"Warning Forbidden nodes: 100% forbidden", "Normal Established " + strings.Repeat("é", 510) + "…"}
	if diff := cmp.Diff(want, drain(ev.Events)); diff != "" {
		t.Errorf("events.FakeRecorder events mismatch (-want +got):\n%s", diff)
	}
}
