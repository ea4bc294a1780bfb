package scenarios

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgmetrics "github.com/watchgrade/watchgrade/metrics"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// Scenario 1 (streams): with --min-request-timeout=1 every watch session
// ends within 1–2 s. Three streams under a steady writer see every write
// exactly once and in order, lose no delete, never leave Streaming once
// there, and grade every close "closed".
func TestRoutineCloses(t *testing.T) {
	c := harness.Start(t, harness.Options{Flags: []string{"--min-request-timeout=1"}})
	ctx := t.Context()
	if err := c.InstallCRD(ctx, widgetCRD()); err != nil {
		t.Fatalf("install CRD: %v", err)
	}
	client := dynamic.NewForConfigOrDie(c.Config())
	gvrs := []struct {
		gvr    schema.GroupVersionResource
		prefix string
	}{{configmapsGVR, "cm"}, {secretsGVR, "secret"}, {widgetsGVR, "widget"}}
	ctl := startOwner(t, client, kubernetes.NewForConfigOrDie(c.Config()), "owner",
		configmapsGVR.GroupResource().String(), secretsGVR.GroupResource().String(), widgetsGVR.GroupResource().String())

	var probes []*probe
	var writers []*writer
	for _, g := range gvrs {
		p := newProbe()
		p.onState = func(s wgwatch.State) {
			// Checked on every state change, not sampled: once Streaming,
			// a routine close never publishes anything.
			if streamed(p) && s.Phase != wgwatch.PhaseStreaming {
				t.Errorf("%s: state %s/%s after Streaming, want none", g.gvr.Resource, s.Phase, s.Reason)
			}
		}
		startStream(t, client, g.gvr, p, wgwatch.StreamOptions{Observer: ctl.observer()})
		p.waitFor(t, 30*time.Second, g.gvr.Resource+" Streaming", func() bool { return p.state().Phase == wgwatch.PhaseStreaming })
		probes = append(probes, p)
		writers = append(writers, &writer{client: client, gvr: g.gvr, prefix: g.prefix})
	}

	// Scenario 11: the owner, read back from the API server, is Current.
	ctl.waitKstatus(t, 30*time.Second, status.CurrentStatus)
	start := time.Now()
	runWriters(t, ctx, 60*time.Second, 150*time.Millisecond, writers...)
	closes, errs := 0, 0
	for i, p := range probes {
		w := writers[i]
		last := w.lastRV()
		p.waitFor(t, 30*time.Second, w.gvr.Resource+" catching up", func() bool {
			for _, ev := range p.eventsCopy() {
				if ev.RV == last {
					return true
				}
			}
			return false
		})
		checkExactlyOnceInOrder(t, w.writes(), p.eventsCopy())
		if diff := cmp.Diff(sortedSet(w.live()), withPrefix(p.viewCopy(), w.prefix)); diff != "" {
			t.Errorf("%s: consumer's view differs from what exists (-want +got):\n%s", w.gvr.Resource, diff)
		}
		o := p.outcomes()
		closes += o[wgwatch.OutcomeClosed]
		errs += o[wgwatch.OutcomeError] + o[wgwatch.OutcomeExpired]
		if blocked, _ := p.blocked(); blocked {
			t.Errorf("%s: published Blocked: %v", w.gvr.Resource, p.stateLog())
		}
		res := w.gvr.GroupResource().String()
		if got, want := ctl.sessions(res, "closed"), float64(o[wgwatch.OutcomeClosed]); got != want {
			t.Errorf("%s: metric sessions closed = %v, want %v", res, got, want)
		}
		if got := ctl.sessions(res, "error"); got != 0 {
			t.Errorf("%s: metric sessions error = %v, want 0", res, got)
		}
	}
	if n := ctl.events.count(corev1.EventTypeWarning); n != 0 {
		t.Errorf("%d Warning events, want 0: %v", n, ctl.events.logCopy())
	}
	if ctl.readyLeftTrue() {
		t.Errorf("Ready left True after it was established: verdicts %v", ctl.verdicts)
	}
	ctl.waitKstatus(t, 10*time.Second, status.CurrentStatus)
	ctl.lint(t)
	if closes < 100 {
		t.Errorf("%d routine closes in all, want at least 100", closes)
	}
	if errs != 0 {
		t.Errorf("%d error or expired endings, want 0", errs)
	}
	writes := 0
	for _, w := range writers {
		writes += len(w.writes())
	}
	fmt.Printf("e2e: routine-closes streams=%d seconds=%.0f writes=%d closed=%d error=%d warnings=%d ready_left_true=%v kstatus=Current\n",
		len(probes), time.Since(start).Seconds(), writes, closes, errs, ctl.events.count(corev1.EventTypeWarning), ctl.readyLeftTrue())
}

func streamed(p *probe) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, s := range p.states {
		if s.Phase == wgwatch.PhaseStreaming {
			n++
		}
	}
	// The state being checked is already appended: count earlier ones.
	if len(p.states) > 0 && p.states[len(p.states)-1].Phase == wgwatch.PhaseStreaming {
		n--
	}
	return n > 0
}

func (p *probe) eventsCopy() []seen {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]seen(nil), p.events...)
}

// withPrefix returns the sorted names in view that start with prefix.
func withPrefix(view map[string]string, prefix string) []string {
	out := map[string]string{}
	for k, v := range view {
		if strings.HasPrefix(k, prefix+"-") {
			out[k] = v
		}
	}
	return sortedKeys(out)
}

func sortedSet(m map[string]bool) []string {
	s := map[string]string{}
	for k := range m {
		s[k] = ""
	}
	return sortedKeys(s)
}

// Scenario 2: with --watch-cache=false a watch from a compacted revision
// gets 410 at once. The stream grades it expired, replays, and the objects
// deleted during the gap are absent from the snapshot.
func TestExpiryDeterministic(t *testing.T) {
	c := harness.Start(t, harness.Options{Flags: []string{"--watch-cache=false"}})
	ctx := t.Context()
	client := dynamic.NewForConfigOrDie(c.Config())
	w := &writer{client: client, gvr: configmapsGVR, prefix: "exp"}
	for range 4 {
		if err := w.step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.InstallCRD(ctx, widgetCRD()); err != nil {
		t.Fatalf("install CRD: %v", err)
	}
	ctl := startOwner(t, client, kubernetes.NewForConfigOrDie(c.Config()), "owner", configmapsGVR.GroupResource().String())
	p := newProbe()
	s, stop := startStream(t, client, configmapsGVR, p, wgwatch.StreamOptions{Observer: ctl.observer()})
	p.waitFor(t, 30*time.Second, "Streaming", func() bool { return p.state().Phase == wgwatch.PhaseStreaming })
	ctl.waitKstatus(t, 30*time.Second, status.CurrentStatus)
	stop()
	cursor := s.Cursor()

	// While the consumer is away: one delete, one create, then compaction.
	if err := w.step(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx); err != nil {
		t.Fatalf("compact: %v", err)
	}

	p2 := newProbe()
	// Hold the snapshot until the owner has been read back while the stream
	// replays.
	p2.hold = make(chan struct{})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	resumed, err := wgwatch.NewStream(listWatchFor(client, configmapsGVR, ns), p2, wgwatch.StreamOptions{
		Resource: configmapsGVR.GroupResource(), Observer: wgwatch.Observers(ctl.observer(), p2), Cursor: cursor,
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- resumed.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	// A replay that outlasts ReplayGrace is published as Replaying; then
	// (scenario 11) the owner is InProgress (Ready=False, Reconciling=True)
	// for that reason, never Failed.
	p2.waitFor(t, 30*time.Second, "Replaying/ExpiredResourceVersion", func() bool {
		s := p2.state()
		return s.Phase == wgwatch.PhaseReplaying && s.Reason == wgwatch.ReasonExpiredResourceVersion
	})
	ctl.waitKstatus(t, 30*time.Second, status.InProgressStatus, string(wgwatch.ReasonExpiredResourceVersion))
	close(p2.hold)
	p2.waitFor(t, 30*time.Second, "a snapshot after the expiry", func() bool {
		p2.mu.Lock()
		defer p2.mu.Unlock()
		return len(p2.snapshots) > 0 && len(p2.states) > 0 && p2.states[len(p2.states)-1].Phase == wgwatch.PhaseStreaming
	})
	if diff := cmp.Diff(sortedSet(w.live()), sortedKeys(p2.viewCopy())); diff != "" {
		t.Errorf("snapshot after expiry differs from what exists (-want +got):\n%s", diff)
	}
	if got := p2.outcomes()[wgwatch.OutcomeExpired]; got != 1 {
		t.Errorf("%d expired endings, want 1", got)
	}
	want := []string{"Starting/Starting", "Replaying/ExpiredResourceVersion", "Streaming/Watching"}
	if diff := cmp.Diff(want, p2.stateLog()); diff != "" {
		t.Errorf("states mismatch (-want +got):\n%s", diff)
	}
	if blocked, _ := p2.blocked(); blocked {
		t.Errorf("published Blocked after an expiry: %v", p2.stateLog())
	}
	ctl.waitKstatus(t, 30*time.Second, status.CurrentStatus)
	if n := ctl.events.count(corev1.EventTypeWarning); n != 0 {
		t.Errorf("%d Warning events for an expiry, want 0: %v", n, ctl.events.logCopy())
	}
	fmt.Printf("e2e: expiry-deterministic cursor=%s expired=%d snapshot_objects=%d blocked=0 warnings=%d kstatus=InProgress,Current events=%v\n",
		cursor, p2.outcomes()[wgwatch.OutcomeExpired], len(p2.viewCopy()), ctl.events.count(corev1.EventTypeWarning), ctl.events.logCopy())
}

// Scenario 5: connection resets every 2 s mid-stream. The stream resumes
// from its cursor: nothing lost or duplicated, never Blocked.
func TestConnectionResets(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	client := dynamic.NewForConfigOrDie(c.Config())
	p := newProbe()
	startStream(t, client, configmapsGVR, p, wgwatch.StreamOptions{})
	p.waitFor(t, 30*time.Second, "Streaming", func() bool { return p.state().Phase == wgwatch.PhaseStreaming })
	// Writes go straight to the apiserver: the resets are the stream's
	// problem, not the writer's.
	w := &writer{client: dynamic.NewForConfigOrDie(c.DirectConfig()), gvr: configmapsGVR, prefix: "reset"}
	resets := 0
	stopResets := make(chan struct{})
	resetsDone := make(chan struct{})
	go func() {
		defer close(resetsDone)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stopResets:
				return
			case <-tick.C:
				c.Proxy.ResetAll()
				resets++
			}
		}
	}()
	end := time.Now().Add(15 * time.Second)
	for time.Now().Before(end) {
		if err := w.step(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stopResets)
	<-resetsDone
	last := w.lastRV()
	p.waitFor(t, 30*time.Second, "catching up", func() bool {
		for _, ev := range p.eventsCopy() {
			if ev.RV == last {
				return true
			}
		}
		return false
	})
	checkExactlyOnceInOrder(t, w.writes(), p.eventsCopy())
	if blocked, _ := p.blocked(); blocked {
		t.Errorf("published Blocked under connection resets: %v", p.stateLog())
	}
	o := p.outcomes()
	fmt.Printf("e2e: connection-resets resets=%d writes=%d closed=%d error=%d expired=%d blocked=0\n",
		resets, len(w.writes()), o[wgwatch.OutcomeClosed], o[wgwatch.OutcomeError], o[wgwatch.OutcomeExpired])
}

// Scenario 6 (streams): a user without RBAC bindings is denied. A denial
// fixed within the grace publishes nothing; one that outlasts it is Blocked,
// Forbidden, needing a human; once a Role and RoleBinding exist the stream
// recovers by itself.
func TestRBACDenial(t *testing.T) {
	c := harness.Start(t, harness.Options{RBAC: true})
	ctx := t.Context()
	admin := kubernetes.NewForConfigOrDie(c.Config())
	grant := func(user string) { grantConfigMaps(t, admin, user) }

	if err := c.InstallCRD(ctx, widgetCRD()); err != nil {
		t.Fatalf("install CRD: %v", err)
	}
	adminDyn := dynamic.NewForConfigOrDie(c.Config())
	t.Run("fixed within the grace", func(t *testing.T) {
		ctl := startOwner(t, adminDyn, admin, "early", "configmaps")
		p := newProbe()
		start := time.Now()
		startStream(t, dynamic.NewForConfigOrDie(c.As("early")), configmapsGVR, p, wgwatch.StreamOptions{Observer: ctl.observer()})
		p.waitFor(t, 10*time.Second, "a Forbidden ending", func() bool { return p.outcomes()[wgwatch.OutcomeError] > 0 })
		grant("early")
		p.waitFor(t, 30*time.Second, "Streaming", func() bool { return p.state().Phase == wgwatch.PhaseStreaming })
		if blocked, _ := p.blocked(); blocked {
			t.Errorf("published Blocked for a denial fixed within the grace: %v", p.stateLog())
		}
		ctl.waitKstatus(t, 30*time.Second, status.CurrentStatus)
		if n := ctl.events.count(corev1.EventTypeWarning); n != 0 {
			t.Errorf("%d Warning events for a denial fixed within the grace, want 0: %v", n, ctl.events.logCopy())
		}
		fmt.Printf("e2e: rbac-within-grace denied_sessions=%d recovered_after=%.1fs blocked=0 warnings=%d events=%v\n",
			p.outcomes()[wgwatch.OutcomeError], time.Since(start).Seconds(), ctl.events.count(corev1.EventTypeWarning), ctl.events.logCopy())
	})
	t.Run("outlasts the grace", func(t *testing.T) {
		ctl := startOwner(t, adminDyn, admin, "late", "configmaps")
		p := newProbe()
		start := time.Now()
		// A 10 s backoff cap (the default is 60 s) keeps the wait for the
		// retry after the fix short; the grace under test is unchanged.
		startStream(t, dynamic.NewForConfigOrDie(c.As("late")), configmapsGVR, p, wgwatch.StreamOptions{Observer: ctl.observer(), MaxBackoff: 10 * time.Second})
		p.waitFor(t, 90*time.Second, "Blocked Forbidden", func() bool {
			s := p.state()
			return s.Phase == wgwatch.PhaseBlocked && s.Reason == wgwatch.ReasonForbidden && s.NeedsHuman
		})
		blockedAfter := time.Since(start)
		if blockedAfter < wgwatch.DefaultHumanGrace {
			t.Errorf("Blocked after %v, want not before the %v grace", blockedAfter, wgwatch.DefaultHumanGrace)
		}
		// Scenario 11: the owner, read back, is Failed (Stalled=True).
		ctl.waitKstatus(t, 30*time.Second, status.FailedStatus)
		grant("late")
		p.waitFor(t, 120*time.Second, "recovery to Streaming", func() bool { return p.state().Phase == wgwatch.PhaseStreaming })
		want := []string{"Starting/Starting", "Replaying/InitialSync", "Blocked/Forbidden", "Streaming/Watching"}
		if diff := cmp.Diff(want, p.stateLog()); diff != "" {
			t.Errorf("states mismatch (-want +got):\n%s", diff)
		}
		ctl.waitKstatus(t, 30*time.Second, status.CurrentStatus)
		if n := ctl.events.count(corev1.EventTypeWarning); n != 1 {
			t.Errorf("%d Warning events, want exactly 1: %v", n, ctl.events.logCopy())
		}
		// The recovery's Event is recorded once the owner's status write
		// returns, a moment after the write is visible to this read.
		recovered := func(log []string) bool {
			return len(log) > 0 && strings.HasPrefix(log[len(log)-1], corev1.EventTypeNormal+"/")
		}
		log := ctl.events.logCopy()
		for deadline := time.Now().Add(10 * time.Second); !recovered(log) && time.Now().Before(deadline); log = ctl.events.logCopy() {
			time.Sleep(50 * time.Millisecond) // polling the controller's recorder
		}
		if !recovered(log) {
			t.Errorf("events %v, want the recovery recorded as Normal", log)
		}
		fmt.Printf("e2e: rbac-outlasts-grace blocked_after=%.1fs needs_human=true recovered_after=%.1fs denied_sessions=%d warnings=%d events=%v kstatus=Failed,Current\n",
			blockedAfter.Seconds(), time.Since(start).Seconds(), p.outcomes()[wgwatch.OutcomeError], ctl.events.count(corev1.EventTypeWarning), log)
	})
}

// grantConfigMaps creates a Role that may read ConfigMaps and binds user to
// it.
func grantConfigMaps(t *testing.T, admin kubernetes.Interface, user string) {
	t.Helper()
	ctx := t.Context()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}}}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: user},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Scenario 7: a stream of a custom resource whose CRD is not installed is
// stalled with ResourceNotFound; once the CRD is installed it recovers
// without a restart.
func TestMissingCRD(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	client := dynamic.NewForConfigOrDie(c.Config())
	p := newProbe()
	start := time.Now()
	// A 10 s backoff cap (the default is 60 s) keeps the wait for the retry
	// after the CRD is installed short; the grace under test is unchanged.
	startStream(t, client, widgetsGVR, p, wgwatch.StreamOptions{MaxBackoff: 10 * time.Second})
	p.waitFor(t, 90*time.Second, "Blocked ResourceNotFound", func() bool {
		s := p.state()
		return s.Phase == wgwatch.PhaseBlocked && s.Reason == wgwatch.ReasonResourceNotFound && s.NeedsHuman
	})
	blockedAfter := time.Since(start)
	if err := c.InstallCRD(ctx, widgetCRD()); err != nil {
		t.Fatal(err)
	}
	p.waitFor(t, 120*time.Second, "recovery to Streaming", func() bool { return p.state().Phase == wgwatch.PhaseStreaming })
	fmt.Printf("e2e: missing-crd blocked_after=%.1fs reason=ResourceNotFound recovered_after=%.1fs\n",
		blockedAfter.Seconds(), time.Since(start).Seconds())
}

// Scenario 10: teardown in the middle of a session is graded teardown,
// publishes nothing, and leaves no goroutine behind.
func TestTeardownMidSession(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	client := dynamic.NewForConfigOrDie(c.Config())
	// Baseline after the servers start and the client's connection exists.
	if _, err := client.Resource(configmapsGVR).Namespace(ns).List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	baseline := runtime.NumGoroutine()
	p := newProbe()
	_, stop := startStream(t, client, configmapsGVR, p, wgwatch.StreamOptions{})
	p.waitFor(t, 30*time.Second, "Streaming", func() bool { return p.state().Phase == wgwatch.PhaseStreaming })
	states := len(p.stateLog())
	stop()
	p.mu.Lock()
	last := p.endings[len(p.endings)-1]
	p.mu.Unlock()
	if last.Verdict.Outcome != wgwatch.OutcomeTeardown {
		t.Errorf("last ending %s, want teardown", last.Verdict.Outcome)
	}
	if n := len(p.stateLog()); n != states {
		t.Errorf("teardown published %d states, want none", n-states)
	}
	deadline := time.Now().Add(10 * time.Second)
	n := runtime.NumGoroutine()
	for n > baseline && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // goroutines exit on their own time; nothing to signal on
		n = runtime.NumGoroutine()
	}
	if n > baseline {
		t.Errorf("%d goroutines after teardown, baseline %d", n, baseline)
	}
	fmt.Printf("e2e: teardown outcome=%s goroutines_baseline=%d goroutines_after=%d\n", last.Verdict.Outcome, baseline, n)
}

// Scenario 8: every watch is accepted and closed at once, forever. The
// stream tries a replay, then reports Flapping after the documented
// threshold, and backoff bounds how often it opens.
func TestHotFlap(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	flap := harness.NewFlapServer(t, c)
	client := dynamic.NewForConfigOrDie(flap.Config())
	reg := prometheus.NewRegistry()
	wm, err := wgmetrics.NewWatchMetrics(reg, wgmetrics.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := newProbe()
	start := time.Now()
	_, stop := startStream(t, client, configmapsGVR, p, wgwatch.StreamOptions{Cursor: "1", Observer: wm})
	p.waitFor(t, 60*time.Second, "Blocked Flapping", func() bool {
		s := p.state()
		return s.Phase == wgwatch.PhaseBlocked && s.Reason == wgwatch.ReasonFlapping
	})
	flappingAfter := time.Since(start)
	// Let it run on: the open rate stays bounded by the backoff.
	window := 20 * time.Second
	before := flap.Watches()
	time.Sleep(window) // measuring a rate over a fixed window
	opens := flap.Watches() - before
	stop()
	// Full-jitter waits grow to the 60 s cap: a loop without backoff would
	// open thousands of times in 20 s.
	if opens > 10 {
		t.Errorf("%d watch opens in %v while flapping, want at most 10 (backoff)", opens, window)
	}
	if s := p.state(); s.NeedsHuman {
		t.Errorf("Flapping needs a human after %v, want not before the progress deadline", time.Since(start))
	}
	// Visible in the metrics: every close counted "closed", all of them in
	// the shortest lifetime buckets, and the stream gauged Blocked.
	closed := p.outcomes()[wgwatch.OutcomeClosed]
	short := histogramCount(t, reg, "watchgrade_watch_session_duration_seconds", "closed", 1)
	if short != uint64(closed) || closed == 0 {
		t.Errorf("session lifetime histogram has %d closes at or under 1 s, want all %d", short, closed)
	}
	if got := gaugeValue(t, reg, "watchgrade_watch_streams", "Blocked"); got != 1 {
		t.Errorf("streams{phase=Blocked} = %v, want 1", got)
	}
	fmt.Printf("e2e: hot-flap flapping_after=%.1fs opens_in_%ds=%d total_watches=%d short_closes=%d metric_closes_le_1s=%d\n",
		flappingAfter.Seconds(), int(window.Seconds()), opens, flap.Watches(), closed, short)
}

// series returns the series of metric name in reg whose labels include
// every pair of match.
func series(t *testing.T, reg prometheus.Gatherer, name string, match map[string]string) []*dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.Metric
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for k, v := range match {
				if label(m.GetLabel(), k) != v {
					continue metrics
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// histogramCount returns how many observations of a histogram with the
// given outcome label fell at or under le.
func histogramCount(t *testing.T, reg prometheus.Gatherer, name, outcome string, le float64) uint64 {
	t.Helper()
	var n uint64
	for _, m := range series(t, reg, name, map[string]string{wgmetrics.LabelOutcome: outcome}) {
		for _, b := range m.GetHistogram().GetBucket() {
			if b.GetUpperBound() == le {
				n += b.GetCumulativeCount()
			}
		}
	}
	return n
}

// gaugeValue returns a gauge's value for the given phase label.
func gaugeValue(t *testing.T, reg prometheus.Gatherer, name, phase string) float64 {
	t.Helper()
	var v float64
	for _, m := range series(t, reg, name, map[string]string{wgmetrics.LabelPhase: phase}) {
		v += m.GetGauge().GetValue()
	}
	return v
}

func label(pairs []*dto.LabelPair, name string) string {
	for _, l := range pairs {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
