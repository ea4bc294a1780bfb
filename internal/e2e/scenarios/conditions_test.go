package scenarios

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

	wgevents "github.com/watchgrade/watchgrade/events"
	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// Three followed resources whose streams deliver their first snapshots
// seconds apart: Ready is first written True only after the last of them,
// proven by the times of the snapshot deliveries and of the write.
func TestStartupOrder(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	if err := c.InstallCRD(ctx, widgetCRD()); err != nil {
		t.Fatal(err)
	}
	client := dynamic.NewForConfigOrDie(c.Config())
	createConfigMaps(t, client, "a")
	gvrs := []struct {
		gvr  schema.GroupVersionResource
		hold time.Duration
	}{{configmapsGVR, time.Second}, {secretsGVR, 3 * time.Second}, {widgetsGVR, 5 * time.Second}}
	ctl := startOwner(t, client, kubernetes.NewForConfigOrDie(c.Config()), "owner",
		configmapsGVR.GroupResource().String(), secretsGVR.GroupResource().String(), widgetsGVR.GroupResource().String())
	start := time.Now()
	delivered := make([]time.Time, len(gvrs))
	var probes []*probe
	for _, g := range gvrs {
		p := newProbe()
		p.hold = make(chan struct{})
		// Each snapshot is held by the handler for a while: a slow store.
		release := time.AfterFunc(g.hold, func() { close(p.hold) })
		t.Cleanup(func() { release.Stop() })
		startStream(t, client, g.gvr, p, wgwatch.StreamOptions{Observer: ctl.observer()})
		probes = append(probes, p)
	}
	for i, p := range probes {
		p.waitFor(t, 30*time.Second, gvrs[i].gvr.Resource+" snapshot", func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return len(p.snapshots) > 0
		})
		p.mu.Lock()
		delivered[i] = p.snapshotAt[0]
		p.mu.Unlock()
	}
	ctl.waitReady(t, 30*time.Second)
	firstTrue, ok := ctl.firstWrite(metav1.ConditionTrue)
	if !ok {
		t.Fatalf("no Ready=True write: %v", ctl.writeLog())
	}
	last := delivered[len(delivered)-1]
	for _, d := range delivered {
		last = later(last, d)
	}
	if firstTrue.Before(last) {
		t.Errorf("Ready=True written at %v, before the last snapshot at %v: writes %v", firstTrue.Sub(start), last.Sub(start), ctl.writeLog())
	}
	var at []string
	for i, d := range delivered {
		at = append(at, fmt.Sprintf("%s@%.1fs", gvrs[i].gvr.Resource, d.Sub(start).Seconds()))
	}
	fmt.Printf("e2e: startup-order snapshots=[%s] first_ready_true_write=%.1fs ready_before_last_snapshot=%v writes=%v\n",
		strings.Join(at, " "), firstTrue.Sub(start).Seconds(), firstTrue.Before(last), ctl.writeLog())
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// A gate of the caller's own that escalates from progressing to stalled
// keeping its reason: Ready stays False with the same reason, Stalled goes
// True, and exactly one Warning is recorded, read back from the API server.
func TestEscalationKeepingItsReason(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	if err := c.InstallCRD(ctx, widgetCRD()); err != nil {
		t.Fatal(err)
	}
	client := dynamic.NewForConfigOrDie(c.Config())
	kube := kubernetes.NewForConfigOrDie(c.Config())
	ctl := startOwner(t, client, kube, "owner", configmapsGVR.GroupResource().String())
	startStream(t, client, configmapsGVR, newProbe(), wgwatch.StreamOptions{Observer: ctl.observer()})
	ctl.waitReady(t, 30*time.Second)
	ctl.acc.SetGate(ctl.key, wgreadiness.Progressing("Path", "WaitingForPath", "the path is not accepted yet"))
	ctl.waitReadyReason(t, 30*time.Second, metav1.ConditionFalse, "WaitingForPath", false)
	ctl.acc.SetGate(ctl.key, wgreadiness.Stalled("Path", "WaitingForPath", "the path was not accepted in time"))
	ctl.waitReadyReason(t, 30*time.Second, metav1.ConditionFalse, "WaitingForPath", true)
	ctl.acc.RemoveGate(ctl.key, "Path")
	ctl.waitReady(t, 30*time.Second)
	// Events reach the API server through the broadcaster, in order: the
	// recovery's Normal is the last one, the second Established (a
	// Starting before the first comes or not, by how soon the stream
	// replays). Waiting for five occurrences read the list before it now
	// and then.
	var log []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=owner"})
		if err != nil {
			t.Fatal(err)
		}
		log = eventLog(list.Items)
		if count(log, "Normal/Established") >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the API server: Events arrive asynchronously
	}
	warnings := 0
	for _, e := range log {
		if strings.HasPrefix(e, corev1.EventTypeWarning) {
			warnings++
		}
	}
	if warnings != 1 || !contains(log, "Warning/WaitingForPath") {
		t.Errorf("events %v, want exactly one Warning, for the escalation", log)
	}
	// (Event timestamps have one-second resolution: the order within a
	// second is not kept, so occurrences are counted, not ordered.)
	if n := count(log, "Normal/Established"); n != 2 {
		t.Errorf("events %v: %d Normal/Established, want 2 (the first Ready and the recovery)", log, n)
	}
	fmt.Printf("e2e: escalation warnings=%d events=%v\n", warnings, log)
}

// eventLog is Events as "Type/Reason", one per occurrence (the core/v1
// correlator counts a repeated Event on one object), by first timestamp.
func eventLog(items []corev1.Event) []string {
	slices.SortStableFunc(items, func(a, b corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
	var out []string
	for _, e := range items {
		for range max(e.Count, 1) {
			out = append(out, e.Type+"/"+e.Reason)
		}
	}
	return out
}

func count(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// The limits of Events, proven against the API server: it refuses an
// events.k8s.io/v1 Event with a reason over 128 bytes (so a Recorder that
// copied a 1024-byte condition reason would lose the Warning); a Recorder
// records one, cut to 128 bytes, that the server keeps; an action over 128
// bytes is refused when the Recorder is made.
func TestEventLimits(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(c.Config())
	target, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "limits"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	long := "Reason" + strings.Repeat("X", 994)
	regarding := corev1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1", Namespace: ns, Name: target.Name, UID: target.UID}
	_, err = kube.EventsV1().Events(ns).Create(ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "too-long", Namespace: ns},
		EventTime:  metav1.NowMicro(), ReportingController: "watchgrade.dev/e2e", ReportingInstance: "e2e",
		Action: "Reconcile", Reason: long, Regarding: regarding, Type: corev1.EventTypeWarning, Note: "x",
	}, metav1.CreateOptions{})
	serverRefuses := apierrors.IsInvalid(err)
	if !serverRefuses {
		t.Errorf("creating an Event with a %d-byte reason: %v, want 422 Invalid", len(long), err)
	}

	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	t.Cleanup(broadcaster.Shutdown)
	recorder := broadcaster.NewRecorder(scheme.Scheme, "watchgrade.dev/e2e")
	if _, err := wgevents.NewEventsRecorder(recorder, wgevents.EventsOptions{Action: strings.Repeat("a", 129)}); !errors.Is(err, wgevents.ErrInvalidAction) {
		t.Errorf("NewEventsRecorder(129-byte action) = %v, want ErrInvalidAction", err)
	}
	rec, err := wgevents.NewEventsRecorder(recorder, wgevents.EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	note := strings.Repeat("é", 700) // 1400 bytes
	after := []metav1.Condition{
		{Type: wgreadiness.ConditionReady, Status: metav1.ConditionFalse, Reason: long, Message: note},
		{Type: wgreadiness.ConditionStalled, Status: metav1.ConditionTrue, Reason: long, Message: note},
	}
	if _, ok := rec.Record(target, nil, after); !ok {
		t.Fatal("Record() recorded nothing")
	}
	var got *eventsv1.Event
	deadline := time.Now().Add(30 * time.Second)
	for got == nil && time.Now().Before(deadline) {
		list, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=limits"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			if list.Items[i].Name != "too-long" {
				got = &list.Items[i]
			}
		}
		if got == nil {
			time.Sleep(100 * time.Millisecond) // polling the API server: Events arrive asynchronously
		}
	}
	if got == nil {
		t.Fatal("the Recorder's Event never reached the API server")
	}
	if len(got.Reason) != wgevents.MaxReasonBytes || !strings.HasPrefix(long, got.Reason) || got.Type != corev1.EventTypeWarning {
		t.Errorf("Event read back: %s, reason of %d bytes; want a Warning with the first %d bytes of the reason", got.Type, len(got.Reason), wgevents.MaxReasonBytes)
	}
	if len(got.Note) > wgevents.MaxNoteBytes {
		t.Errorf("note of %d bytes, want at most %d", len(got.Note), wgevents.MaxNoteBytes)
	}
	fmt.Printf("e2e: event-limits server_refuses_reason_over_128=%v recorded_type=%s reason_bytes=%d note_bytes=%d action=%s\n",
		serverRefuses, got.Type, len(got.Reason), len(got.Note), got.Action)
}
