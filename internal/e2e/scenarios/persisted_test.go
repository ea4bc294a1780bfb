package scenarios

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// A controller that persists its stream's cursor (and its consumer's view)
// and resumes from it after a restart, as one that checkpoints does. While
// it is down a write lands and the kube-apiserver restarts, so the cursor
// expires; the new process's consumer takes 13 s over the replay (more than
// ReplayGrace, so the stream publishes Replaying/ExpiredResourceVersion,
// less than StartGrace). The restart is not news: the owner's persisted
// Ready=True stands, with no status write and no Event (package readiness,
// Restarts: a first replay is still starting, whatever its reason).
func TestRestartFromAPersistedCursorThatExpired(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	if err := c.InstallCRD(ctx, widgetCRD()); err != nil {
		t.Fatal(err)
	}
	client := dynamic.NewForConfigOrDie(c.Config())
	kube := kubernetes.NewForConfigOrDie(c.Config())
	createConfigMaps(t, client, "a", "b")
	stream := configmapsGVR.GroupResource().String()

	first := startOwner(t, client, kube, "owner", stream)
	p1 := newProbe()
	s1, stop1 := startStream(t, client, configmapsGVR, p1, wgwatch.StreamOptions{Observer: first.observer()})
	first.waitReady(t, 30*time.Second)
	// The controller stops; it persisted its cursor and its view.
	stop1()
	first.stop()
	cursor := s1.Cursor()
	p1.mu.Lock()
	view := maps.Clone(p1.view)
	p1.mu.Unlock()
	if cursor == "" {
		t.Fatal("the stream has no cursor to persist")
	}
	// While it is down: a write, and an apiserver rollout.
	if _, err := client.Resource(configmapsGVR).Namespace(ns).Update(ctx, object(configmapsGVR, "a", 1), metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update: %v", err)
	}
	c.RestartAPIServer()

	second := restartOwner(t, client, kube, "owner", stream)
	p2 := newProbe()
	p2.view = view
	p2.hold = make(chan struct{})
	start := time.Now()
	release := time.AfterFunc(13*time.Second, func() { close(p2.hold) })
	t.Cleanup(func() { release.Stop() })
	startStream(t, client, configmapsGVR, p2, wgwatch.StreamOptions{Observer: second.observer(), Cursor: cursor})
	p2.waitFor(t, time.Minute, "the resumed stream Streaming", func() bool {
		p2.mu.Lock()
		defer p2.mu.Unlock()
		n := len(p2.states)
		return n > 0 && p2.states[n-1].Phase == wgwatch.PhaseStreaming
	})
	// The window the restart hold covers, and a little more.
	select {
	case <-time.After(time.Until(start.Add(wgreadiness.DefaultStartGrace + 5*time.Second))):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	p2.mu.Lock()
	var states []string
	replayed := false
	for _, s := range p2.states {
		states = append(states, string(s.Phase)+"/"+string(s.Reason))
		replayed = replayed || (s.Phase == wgwatch.PhaseReplaying && s.Reason == wgwatch.ReasonExpiredResourceVersion)
	}
	p2.mu.Unlock()
	second.mu.Lock()
	writes := second.writes
	second.mu.Unlock()
	events := second.events.count("Normal") + second.events.count("Warning")
	fmt.Printf("e2e: persisted-start cursor_expired=%v states=%v writes=%d events=%d\n", replayed, states, writes, events)
	if !replayed {
		t.Errorf("the resumed stream published %v, want Replaying/ExpiredResourceVersion (the cursor expired, the replay slower than ReplayGrace): the case did not happen", states)
	}
	if writes != 0 || events != 0 {
		t.Errorf("the restart wrote %d statuses (%v) and recorded %d Events, want none", writes, second.writeLog(), events)
	}
	if _, obj, err := second.kstatus(context.Background()); err == nil {
		if conds, err := conditionsOf(obj); err == nil {
			if r := meta.FindStatusCondition(conds, wgreadiness.ConditionReady); r == nil || r.Status != metav1.ConditionTrue {
				t.Errorf("Ready after the restart = %+v, want True", r)
			}
		}
	}
}

// A controller rolled out while its owner is Stalled on a denial that
// persists. The old process met the denial when its watch reopened from
// its cursor (RBAC revoked, the connection cut), the new one meets it when
// it lists, having no cursor: the server's messages differ ("cannot watch
// resource", "cannot list resource"), the cause does not. The persisted
// Stalled stands as it is: no status write and no Event (package watch:
// a State's message says what is wrong, not which request met it).
func TestRestartOverAPersistingDenial(t *testing.T) {
	c := harness.Start(t, harness.Options{RBAC: true})
	ctx := t.Context()
	admin := kubernetes.NewForConfigOrDie(c.Config())
	adminDyn := dynamic.NewForConfigOrDie(c.Config())
	if err := c.InstallCRD(ctx, widgetCRD()); err != nil {
		t.Fatal(err)
	}
	createConfigMaps(t, adminDyn, "a")
	grantConfigMaps(t, admin, "ctl")
	as := dynamic.NewForConfigOrDie(c.As("ctl"))
	opts := wgwatch.StreamOptions{MaxBackoff: 10 * time.Second}

	first := startOwner(t, adminDyn, admin, "owner", "configmaps")
	p1 := newProbe()
	opts.Observer = first.observer()
	_, stop1 := startStream(t, as, configmapsGVR, p1, opts)
	first.waitReady(t, 30*time.Second)
	// RBAC revoked; the open watch is cut, and its resume denied.
	if err := admin.RbacV1().RoleBindings(ns).Delete(ctx, "ctl", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.Proxy.ResetAll()
	first.waitKstatus(t, 90*time.Second, status.FailedStatus)
	stop1()
	first.stop()
	_, obj, err := first.kstatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conds, err := conditionsOf(obj)
	if err != nil {
		t.Fatal(err)
	}
	before := meta.FindStatusCondition(conds, wgreadiness.ConditionStalled)

	second := restartOwner(t, adminDyn, admin, "owner", "configmaps")
	p2 := newProbe()
	opts.Observer = second.observer()
	startStream(t, as, configmapsGVR, p2, opts)
	p2.waitFor(t, 90*time.Second, "Blocked Forbidden in the new process", func() bool {
		s := p2.state()
		return s.Phase == wgwatch.PhaseBlocked && s.Reason == wgwatch.ReasonForbidden && s.NeedsHuman
	})
	// The new process has its own evidence now: what it writes, it writes
	// at once; a few seconds more for the write to land.
	select {
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	second.mu.Lock()
	writes := second.writes
	second.mu.Unlock()
	events := second.events.count("Normal") + second.events.count("Warning")
	_, obj, err = second.kstatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if conds, err = conditionsOf(obj); err != nil {
		t.Fatal(err)
	}
	after := meta.FindStatusCondition(conds, wgreadiness.ConditionStalled)
	fmt.Printf("e2e: restart-over-denial stalled_writes=%d stalled_events=%d message_kept=%v\n", writes, events, before != nil && after != nil && before.Message == after.Message)
	if writes != 0 || events != 0 {
		t.Errorf("the restart over a persisting denial wrote %d statuses (%v) and recorded %d Events, want none", writes, second.writeLog(), events)
	}
	if before == nil || after == nil || before.Message != after.Message {
		t.Errorf("Stalled before the restart %+v, after it %+v: want it kept as it was", before, after)
	}
}
