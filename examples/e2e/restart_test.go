package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/watchgrade/watchgrade/examples/clientgo"
	"github.com/watchgrade/watchgrade/examples/ctrlruntime"
	"github.com/watchgrade/watchgrade/examples/internal/sandbox"
	"github.com/watchgrade/watchgrade/examples/watchtarget"
	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// services is what the WatchTarget "denied" follows: the sandbox's Role
// never grants it unless a test says so, so its stream is Forbidden.
var services = watchtarget.ResourceRef{Version: "v1", Resource: "services"}

// runController starts a controller as cfg's identity in namespace,
// reporting to observer, and returns the function that stops it and waits
// for it to return.
type runController func(t *testing.T, cfg *rest.Config, namespace string, observer wgwatch.Observer) (stop func())

func runClientGo(t *testing.T, cfg *rest.Config, namespace string, observer wgwatch.Observer) func() {
	ctl, err := clientgo.New(clientgo.Options{Config: cfg, Namespace: namespace, Observer: observer, MaxBackoff: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()
	return stopOnce(t, cancel, done)
}

func runCtrlRuntime(t *testing.T, cfg *rest.Config, namespace string, observer wgwatch.Observer) func() {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(shortWatches)
	mgr, _, err := ctrlruntime.NewManager(cfg, ctrlruntime.Options{Namespace: namespace, Observer: observer, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return stopOnce(t, cancel, done)
}

func stopOnce(t *testing.T, cancel context.CancelFunc, done <-chan error) func() {
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("controller: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// live follows the controller's streams: which resources have had a live
// session end, any session end, or been published Blocked needing a human,
// since a mark. A restart that publishes nothing is over once every stream
// has been live again, or has met its denial again.
type live struct {
	wgwatch.ObserverFuncs
	mu      sync.Mutex
	since   map[schema.GroupResource]bool // a live session ended
	tried   map[schema.GroupResource]bool // a session ended, the owner's teardown apart
	human   map[schema.GroupResource]bool // Blocked, needing a human, was published
	changed chan struct{}
}

func newLive() *live {
	l := &live{changed: make(chan struct{})}
	l.mark()
	l.SessionEndedFunc = func(e wgwatch.SessionEnd) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if e.Verdict.Healthy {
			l.since[e.Resource] = true
		}
		if e.Verdict.Outcome != wgwatch.OutcomeTeardown {
			l.tried[e.Resource] = true
		}
		l.notifyLocked()
	}
	l.StateChangedFunc = func(s wgwatch.State) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if s.Phase == wgwatch.PhaseBlocked && s.NeedsHuman {
			l.human[s.Resource] = true
		}
		l.notifyLocked()
	}
	return l
}

func (l *live) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// mark forgets the sessions and states so far.
func (l *live) mark() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.since = map[schema.GroupResource]bool{}
	l.tried = map[schema.GroupResource]bool{}
	l.human = map[schema.GroupResource]bool{}
}

// await waits until a live session of every resource in want has ended
// since the mark (routine closes come every second or two here).
func (l *live) await(ctx context.Context, timeout time.Duration, want ...schema.GroupResource) error {
	return l.wait(ctx, timeout, fmt.Sprintf("a live session of each of %v", want), func() bool {
		for _, gr := range want {
			if !l.since[gr] {
				return false
			}
		}
		return true
	})
}

// awaitTried waits until a session of gr has ended since the mark, however
// it ended (an informer's failed List included): the stream has asked the
// server again.
func (l *live) awaitTried(ctx context.Context, timeout time.Duration, gr schema.GroupResource) error {
	return l.wait(ctx, timeout, fmt.Sprintf("a session of %v", gr), func() bool { return l.tried[gr] })
}

// awaitHuman waits until the stream of gr has been published Blocked,
// needing a human, since the mark: a restarted controller has then seen
// its denial for the human grace (15 s, plus a retry) and judged it again.
func (l *live) awaitHuman(ctx context.Context, timeout time.Duration, gr schema.GroupResource) error {
	return l.wait(ctx, timeout, fmt.Sprintf("%v Blocked, needing a human", gr), func() bool { return l.human[gr] })
}

// wait checks ok, with l.mu held, after every change, for at most timeout.
func (l *live) wait(ctx context.Context, timeout time.Duration, what string, ok func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		l.mu.Lock()
		changed, done := l.changed, ok()
		l.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("no %s within %v", what, timeout)
		}
	}
}

// scene is one example controller at work on a real kube-apiserver with
// RBAC, while a writer runs, beside two WatchTargets: "app" follows
// ConfigMaps and Secrets, which the controller's Role grants, and is Ready;
// "denied" follows Services, which it does not grant, and is Stalled
// (Forbidden) with one Warning. It is watched the way kubectl and a human
// would: every status each target shows, and every Event about it.
type scene struct {
	cluster  *harness.Cluster
	env      *sandbox.Env
	targets  *sandbox.Targets
	events   *sandbox.Events
	sessions *live
	run      runController
	stop     func()
	began    time.Time
	restarts []time.Time
}

// stage sets the scene up with run's controller; streams is the
// controller's streams condition, if it writes one, which "app" must show
// True too before the scene is set.
func stage(t *testing.T, run runController, streams string) *scene {
	t.Helper()
	c := harness.Start(t, harness.Options{RBAC: true, Flags: []string{"--min-request-timeout=1"}})
	ctx := t.Context()
	s := &scene{cluster: c, run: run, began: time.Now(), sessions: newLive()}
	var err error
	if s.env, err = sandbox.New(c.Config(), "shop", "watchtarget-controller"); err != nil {
		t.Fatal(err)
	}
	if err := s.env.Install(ctx); err != nil {
		t.Fatal(err)
	}
	cm, sec := configmaps.GVR().GroupResource(), secrets.GVR().GroupResource()
	if err := s.env.Grant(ctx, cm, sec); err != nil {
		t.Fatal(err)
	}
	go s.env.Write(ctx, 200*time.Millisecond)
	if s.targets, err = s.env.WatchTargets(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if s.events, err = s.env.WatchEvents(ctx, nil); err != nil {
		t.Fatal(err)
	}
	s.stop = run(t, s.env.ControllerConfig(), s.env.Namespace, s.sessions)
	if err := s.env.CreateTarget(ctx, "app", configmaps, secrets); err != nil {
		t.Fatal(err)
	}
	if err := s.env.CreateTarget(ctx, "denied", services); err != nil {
		t.Fatal(err)
	}
	if _, err := s.targets.Await(ctx, "app", time.Minute, "Ready", sandbox.Target.Ready); err != nil {
		t.Fatal(err)
	}
	if err := s.sessions.await(ctx, time.Minute, cm, sec); err != nil {
		t.Fatal(err)
	}
	if streams != "" {
		if _, err := s.targets.Await(ctx, "app", time.Minute, streams+"=True", func(s sandbox.Target) bool {
			return s.Status(streams) == metav1.ConditionTrue
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.targets.Await(ctx, "denied", 2*time.Minute, "Stalled=True", stalledTarget); err != nil {
		t.Fatal(err)
	}
	if err := s.events.Await(ctx, 30*time.Second, `a Warning about "denied"`, func(*sandbox.Events) bool {
		return s.since("denied", s.began, stalledTarget).warnings >= 1
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

func stalledTarget(s sandbox.Target) bool {
	return s.Status(wgreadiness.ConditionStalled) == metav1.ConditionTrue
}

// restart stops the controller, calls between while it is down (if not
// nil), and starts a new one; it returns when the new one was started.
func (s *scene) restart(t *testing.T, between func()) time.Time {
	// A controller's recorder posts Events on its own goroutine: a stop
	// while one is on its way cuts the POST short, which client-go's event
	// sink logs at level error ("Unable to write event"), an error that no
	// routine event caused (seen with the suite's processes side by side).
	// Stop once no new Event has been seen for 2 s.
	s.events.Quiet(t.Context(), 2*time.Second)
	s.stop()
	if between != nil {
		between()
	}
	s.sessions.mark()
	at := time.Now()
	s.restarts = append(s.restarts, at)
	s.stop = s.run(t, s.env.ControllerConfig(), s.env.Namespace, s.sessions)
	return at
}

// shown is what one WatchTarget showed over a stretch of time.
type shown struct {
	// writes counts the status writes seen.
	writes int
	// warnings and normals count the Events, repeats included.
	warnings, normals int
	// broke counts the distinct statuses seen that broke the rule the
	// stretch was measured against (Ready, or Stalled, throughout).
	broke int
}

func (s shown) events() int { return s.warnings + s.normals }

// since returns what the WatchTarget name showed from `from` on, against
// the rule that keep holds for every status it shows.
func (s *scene) since(name string, from time.Time, keep func(sandbox.Target) bool) shown {
	var out shown
	for _, w := range s.targets.Writes(name) {
		if !w.Before(from) {
			out.writes++
		}
	}
	for _, e := range s.events.Occurrences() {
		if e.Target != name || e.Seen.Before(from) {
			continue
		}
		if e.Type == corev1.EventTypeWarning {
			out.warnings++
		} else {
			out.normals++
		}
	}
	for _, h := range s.targets.History(name) {
		if !h.Seen.Before(from) && !keep(h) {
			out.broke++
		}
	}
	return out
}

// story is what the WatchTarget name showed, and the controller restarts,
// in order, one per line, with the seconds since the scene began: for a
// failure message.
func (s *scene) story(name string) string {
	type line struct {
		at   time.Time
		text string
	}
	var lines []line
	for _, h := range s.targets.History(name) {
		text := "status " + h.String()
		if c := meta.FindStatusCondition(h.Conditions, wgreadiness.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
			text += fmt.Sprintf(" Stalled.message=%q", c.Message)
		}
		lines = append(lines, line{h.Seen, text})
	}
	for _, w := range s.targets.Writes(name) {
		lines = append(lines, line{w, "status write"})
	}
	for _, e := range s.events.Occurrences() {
		if e.Target == name {
			lines = append(lines, line{e.Seen, fmt.Sprintf("event %s/%s: %s", e.Type, e.Reason, e.Message)})
		}
	}
	for _, r := range s.restarts {
		lines = append(lines, line{r, "controller restarted"})
	}
	slices.SortStableFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "\n    %6.1fs %s", l.at.Sub(s.began).Seconds(), l.text)
	}
	return b.String()
}

// TestRestartsAreQuiet stops and starts each example controller twice
// while a writer runs, and restarts the kube-apiserver under it, with one
// target Ready throughout and one Stalled throughout (RBAC denies the
// resource it follows). A restart that changed nothing publishes nothing:
// counted by watches on the targets and their Events (never by polling),
// no status write, no Event, no Ready dip of the Ready one, and Stalled
// never leaving True on the Stalled one. The client-go controller also
// writes a streams condition (readiness.Options.StreamsCondition), which
// a restart must leave alone too.
func TestRestartsAreQuiet(t *testing.T) {
	for _, tc := range []struct {
		name      string
		run       runController
		streams   string // the controller's streams condition, if it writes one
		errorLogs bool   // count what the controller logs at error level (checkErrorLogs)
	}{{"clientgo", runClientGo, clientgo.StreamsCondition, false}, {"ctrlruntime", runCtrlRuntime, "", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := stage(t, tc.run, tc.streams)
			ctx := t.Context()
			cm, sec, svc := configmaps.GVR().GroupResource(), secrets.GVR().GroupResource(), services.GVR().GroupResource()

			// quiet waits out a window in which a write would show: each
			// piece of evidence seen since the restart, then 3 s more.
			quiet := func(what string, evidence ...func() error) {
				t.Helper()
				for _, seen := range evidence {
					if err := seen(); err != nil {
						t.Fatalf("%s: %v", what, err)
					}
				}
				time.Sleep(3 * time.Second) // measuring absence over a window
			}
			// Every resource "app" follows has been live again.
			appLive := func() error { return s.sessions.await(ctx, time.Minute, cm, sec) }
			// A new controller has judged the denial again (its stream
			// published Blocked, needing a human, after the human grace):
			// a Stalled lost over the restart would be back by then.
			deniedJudged := func() error { return s.sessions.awaitHuman(ctx, 2*time.Minute, svc) }
			// The denied stream has asked the new apiserver.
			deniedAsked := func() error { return s.sessions.awaitTried(ctx, 2*time.Minute, svc) }

			// Two rollouts of the controller, one after the other.
			restarted := time.Now()
			for range 2 {
				s.restart(t, nil)
				quiet("controller restart", appLive, deniedJudged)
			}
			ready, stalled := s.since("app", restarted, sandbox.Target.Ready), s.since("denied", restarted, stalledTarget)

			// A rollout of the kube-apiserver under it, marked once the
			// proxy has switched: from then on every session is with the
			// new apiserver.
			restarted = time.Now()
			s.cluster.RestartAPIServer()
			s.sessions.mark()
			quiet("apiserver restart", appLive, deniedAsked)
			aready, astalled := s.since("app", restarted, sandbox.Target.Ready), s.since("denied", restarted, stalledTarget)
			s.stop()

			if ready.writes+ready.events()+ready.broke+aready.writes+aready.events()+aready.broke != 0 {
				t.Errorf(`restarts published about "app" (Ready): controller writes=%d events=%d dips=%d, apiserver writes=%d events=%d dips=%d; want all 0%s`,
					ready.writes, ready.events(), ready.broke, aready.writes, aready.events(), aready.broke, s.story("app"))
			}
			if stalled.writes+stalled.events()+stalled.broke+astalled.writes+astalled.events()+astalled.broke != 0 {
				t.Errorf(`restarts published about "denied" (Stalled): controller writes=%d events=%d left_stalled=%d, apiserver writes=%d events=%d left_stalled=%d; want all 0%s`,
					stalled.writes, stalled.events(), stalled.broke, astalled.writes, astalled.events(), astalled.broke, s.story("denied"))
			}
			fmt.Printf("e2e: restart-quiet controller=%s streams_condition=%q controller_restart writes=%d events=%d dips=%d stalled_writes=%d stalled_events=%d stalled_left=%d apiserver_restart writes=%d events=%d dips=%d stalled_writes=%d stalled_events=%d stalled_left=%d\n",
				tc.name, tc.streams, ready.writes, ready.events(), ready.broke, stalled.writes, stalled.events(), stalled.broke,
				aready.writes, aready.events(), aready.broke, astalled.writes, astalled.events(), astalled.broke)
			if tc.errorLogs {
				// Services are denied throughout: each controller process
				// escalates once; the apiserver restart, the routine closes
				// and the controller restarts log no error.
				checkErrorLogs(t, "restart-quiet", s.began, s.began, fmt.Sprintf("%T", &corev1.Service{}), 1+len(s.restarts))
			}
		})
	}
}

// TestRestartRecoversRepairedOwner repairs the RBAC denial that keeps a
// target Stalled while each example controller is down, and starts it
// again: the target recovers as from a repair while the controller ran,
// Ready=True with exactly one Normal Event and no Warning. A Stalled held
// over a restart gives way to the evidence of health.
func TestRestartRecoversRepairedOwner(t *testing.T) {
	for _, tc := range []struct {
		name      string
		run       runController
		errorLogs bool // count what the controller logs at error level (checkErrorLogs)
	}{{"clientgo", runClientGo, false}, {"ctrlruntime", runCtrlRuntime, true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := stage(t, tc.run, "")
			ctx := t.Context()
			cm, sec, svc := configmaps.GVR().GroupResource(), secrets.GVR().GroupResource(), services.GVR().GroupResource()

			restarted := s.restart(t, func() {
				if err := s.env.Grant(ctx, cm, sec, svc); err != nil {
					t.Fatal(err)
				}
			})
			if _, err := s.targets.Await(ctx, "denied", 2*time.Minute, "Ready=True after the repair", sandbox.Target.Ready); err != nil {
				t.Fatalf("%v%s", err, s.story("denied"))
			}
			recoveredAfter := time.Since(restarted)
			if err := s.events.Await(ctx, 30*time.Second, `a Normal Event about "denied" since the restart`, func(*sandbox.Events) bool {
				return s.since("denied", restarted, sandbox.Target.Ready).normals >= 1
			}); err != nil {
				t.Fatalf("%v%s", err, s.story("denied"))
			}
			// A window in which a second write or Event would show: a live
			// session of Services since the restart, then 3 s more.
			if err := s.sessions.await(ctx, time.Minute, svc); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * time.Second) // measuring absence over a window
			got := s.since("denied", restarted, sandbox.Target.Ready)
			s.stop()

			if got.warnings != 0 || got.normals != 1 {
				t.Errorf(`the restart after the repair recorded %d Warnings and %d Normal Events about "denied", want 0 and 1%s`,
					got.warnings, got.normals, s.story("denied"))
			}
			fmt.Printf("e2e: restart-repaired controller=%s writes=%d warnings=%d normals=%d recovered_after=%s\n",
				tc.name, got.writes, got.warnings, got.normals, round(recoveredAfter))
			if tc.errorLogs {
				// The first controller process escalates the denial of
				// Services once; the one started after the repair, never.
				checkErrorLogs(t, "restart-repaired", s.began, s.began, fmt.Sprintf("%T", &corev1.Service{}), 1)
			}
		})
	}
}
