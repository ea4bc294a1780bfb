package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/watchgrade/watchgrade/examples/clientgo"
	"github.com/watchgrade/watchgrade/examples/internal/sandbox"
	"github.com/watchgrade/watchgrade/examples/watchtarget"
	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

type options struct {
	duration   time.Duration
	kubeconfig string
	namespace  string
	routine    bool
	verbose    bool
	out        io.Writer
}

const (
	targetName     = "app"
	controllerUser = "watchgrade-demo-controller"
)

var (
	configmaps = watchtarget.ResourceRef{Version: "v1", Resource: "configmaps"}
	secrets    = watchtarget.ResourceRef{Version: "v1", Resource: "secrets"}
)

// run starts the servers (unless opts.kubeconfig names a cluster), tells
// the story and returns its summary.
func run(ctx context.Context, opts options) (summary, error) {
	if opts.duration < 45*time.Second {
		return summary{}, fmt.Errorf("--duration %v is too short: the story needs at least 45s", opts.duration)
	}
	p := &printer{out: opts.out, start: time.Now(), routine: opts.routine}
	if !opts.verbose {
		// The servers log through klog; the demo's output is its own.
		klog.SetLogger(logr.Discard())
	}
	if opts.kubeconfig != "" {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = opts.kubeconfig
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
		if err != nil {
			return summary{}, err
		}
		p.step("using the cluster at %s (namespace %s); no apiserver restart in this mode", cfg.Host, opts.namespace)
		return tell(ctx, opts, p, cfg, nil)
	}

	p.step("starting etcd and a kube-apiserver on loopback (about 10 s; `go run` compiled them first, minutes on a first build)")
	var serverLog bytes.Buffer
	logTo := io.Writer(&serverLog)
	if opts.verbose {
		logTo = opts.out
	}
	var sum summary
	var err error
	ok := harness.NewProgram("watchgrade-demo", logTo).Run(func(tb harness.TB) {
		c := harness.Start(tb, harness.Options{RBAC: true, Flags: []string{"--min-request-timeout=1"}, QuietEtcd: !opts.verbose})
		p.step("kube-apiserver is up at https://%s (RBAC on, watches end every 1-2 s)", c.Proxy.Addr())
		sum, err = tell(ctx, opts, p, c.Config(), c.RestartAPIServer)
	})
	if !ok && err == nil {
		err = fmt.Errorf("the embedded servers failed:\n%s", serverLog.String())
	}
	return sum, err
}

// tell runs the controller and the story on the cluster admin reaches.
// restart, if not nil, restarts the kube-apiserver.
func tell(ctx context.Context, opts options, p *printer, admin *rest.Config, restart func()) (summary, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	env, err := sandbox.New(admin, opts.namespace, controllerUser)
	if err != nil {
		return summary{}, err
	}
	p.step("installing the WatchTarget CRD, namespace %s, and RBAC for user %s to watch configmaps and secrets", env.Namespace, controllerUser)
	if err := env.Install(ctx); err != nil {
		return summary{}, err
	}
	if opts.kubeconfig != "" {
		defer func() {
			if err := env.Delete(context.Background()); err != nil {
				p.step("could not delete namespace %s: %v", env.Namespace, err)
			}
		}()
	}
	both := []schema.GroupResource{configmaps.GVR().GroupResource(), secrets.GVR().GroupResource()}
	if err := env.Grant(ctx, both...); err != nil {
		return summary{}, err
	}
	go env.Write(ctx, 500*time.Millisecond)

	targets, err := env.WatchTargets(ctx, func(t sandbox.Target) { p.line("target", "%s", t) })
	if err != nil {
		return summary{}, err
	}
	events, err := env.WatchEvents(ctx, func(e sandbox.Event) { p.line("event", "%-7s %s: %s", e.Type, e.Reason, e.Message) })
	if err != nil {
		return summary{}, err
	}

	counts := newTally()
	reg := prometheus.NewRegistry()
	ctl, err := clientgo.New(clientgo.Options{
		Config:     env.ControllerConfig(),
		Namespace:  env.Namespace,
		Registerer: reg,
		Observer:   wgwatch.Observers(counts, p),
		// A stream that needs a human retries every 5-10 s instead of
		// watchgrade's default 30-60 s, so the repair shows quickly.
		MaxBackoff: 10 * time.Second,
	})
	if err != nil {
		return summary{}, err
	}
	ctlCtx, stopController := context.WithCancel(ctx)
	ctlDone := make(chan error, 1)
	go func() { ctlDone <- ctl.Run(ctlCtx) }()
	defer func() { stopController(); <-ctlDone }()

	p.step("creating WatchTarget %s following configmaps and secrets", targetName)
	if err := env.CreateTarget(ctx, targetName, configmaps, secrets); err != nil {
		return summary{}, err
	}
	start := time.Now()
	end := start.Add(opts.duration)
	at := func(fraction float64) time.Time { return start.Add(time.Duration(fraction * float64(opts.duration))) }
	sum := summary{Duration: opts.duration}
	if _, err := targets.Await(ctx, targetName, time.Minute, "Ready", sandbox.Target.Ready); err != nil {
		return sum, err
	}
	p.step("Ready. From here on, routine closes come every second or two and change nothing")

	if err := sleepUntil(ctx, at(0.15)); err != nil {
		return sum, err
	}
	if restart != nil {
		p.step("restarting the kube-apiserver, as a rollout would: a watch whose cursor is older than the new watch cache expires (410) and replays")
		restart()
		sum.Restarted = true
	}

	if err := sleepUntil(ctx, at(0.3)); err != nil {
		return sum, err
	}
	p.step("removing the controller's permission to list and watch secrets")
	if err := env.Grant(ctx, configmaps.GVR().GroupResource()); err != nil {
		return sum, err
	}
	if _, err := targets.Await(ctx, targetName, time.Until(at(0.85)), "Stalled", func(t sandbox.Target) bool {
		return t.Status(wgreadiness.ConditionStalled) == metav1.ConditionTrue
	}); err == nil {
		sum.Stalled = true
		p.step("Stalled: a human must act. A human restores the Role")
	} else {
		p.step("not Stalled in time (%v); restoring the Role anyway", err)
	}
	if err := env.Grant(ctx, both...); err != nil {
		return sum, err
	}
	if _, err := targets.Await(ctx, targetName, max(time.Until(end), 5*time.Second), "Ready", sandbox.Target.Ready); err == nil {
		sum.Recovered = true
		p.step("Ready again")
	}
	if err := sleepUntil(ctx, end); err != nil {
		return sum, err
	}

	// Let the last Events reach the API server before the tally.
	_ = events.Await(ctx, 5*time.Second, "the recovery's Normal Event", func(e *sandbox.Events) bool {
		log := e.Log()
		return len(log) > 0 && strings.HasPrefix(log[len(log)-1], corev1.EventTypeNormal)
	})
	sum.Sessions = counts.sessions()
	sum.Events = events.Log()
	sum.Warnings = events.Count(corev1.EventTypeWarning)
	sum.Mirrored = ctl.Mirrored()
	sum.Target, _ = targets.Latest(targetName)
	if u, err := env.Dynamic.Resource(watchtarget.Resource).Namespace(env.Namespace).Get(ctx, targetName, metav1.GetOptions{}); err == nil {
		if res, err := status.Compute(u); err == nil {
			sum.KStatus = res.Status.String()
		}
	}
	sum.print(opts.out)
	return sum, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// printer prints what the streams report, one line each, with the time
// since the demo started.
type printer struct {
	out     io.Writer
	start   time.Time
	routine bool
	mu      sync.Mutex
}

func (p *printer) line(kind, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, "%6.1fs  %-6s  %s\n", time.Since(p.start).Seconds(), kind, fmt.Sprintf(format, args...))
}

func (p *printer) step(format string, args ...any) { p.line("==>", format, args...) }

// StateChanged prints a stream's new state.
func (p *printer) StateChanged(s wgwatch.State) {
	human := ""
	if s.NeedsHuman {
		human = "  [needs a human]"
	}
	p.line("state", "%-26s %s/%s%s  %s", s.Stream, s.Phase, s.Reason, human, s.Message)
}

// SessionEnded prints a session ending and its grade.
func (p *printer) SessionEnded(e wgwatch.SessionEnd) {
	v := e.Verdict
	if !p.routine && !v.Publish && v.Outcome != wgwatch.OutcomeError {
		return
	}
	grade := "routine, nothing published"
	switch {
	case v.Outcome == wgwatch.OutcomeTeardown:
		grade = "teardown"
	case v.Publish && v.PublishAfter > 0:
		grade = fmt.Sprintf("published only if the replay takes over %v", v.PublishAfter)
	case v.Publish:
		grade = "publishes " + string(v.State.Phase) + "/" + string(v.State.Reason)
	case v.Outcome == wgwatch.OutcomeError:
		grade = "not published yet: the next session decides"
	}
	cause := ""
	if e.Err != nil {
		cause = fmt.Sprintf(" (%s)", v.Class)
	}
	p.line("ended", "%-26s %-8s%s after %.1fs, %d events -> %s, %s", e.Stream, v.Outcome, cause, e.Duration.Seconds(), e.Events, strings.ToLower(string(v.Next)), grade)
}

// tally counts session endings by stream and outcome.
type tally struct {
	mu     sync.Mutex
	counts map[string]map[wgwatch.Outcome]int
}

func newTally() *tally { return &tally{counts: map[string]map[wgwatch.Outcome]int{}} }

func (t *tally) StateChanged(wgwatch.State) {}

func (t *tally) SessionEnded(e wgwatch.SessionEnd) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counts[e.Stream] == nil {
		t.counts[e.Stream] = map[wgwatch.Outcome]int{}
	}
	t.counts[e.Stream][e.Verdict.Outcome]++
}

func (t *tally) sessions() map[string]map[wgwatch.Outcome]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]map[wgwatch.Outcome]int, len(t.counts))
	for k, v := range t.counts {
		out[k] = maps.Clone(v)
	}
	return out
}

// summary is what the demo showed.
type summary struct {
	Duration  time.Duration
	Restarted bool
	Stalled   bool
	Recovered bool
	// Sessions counts session endings by stream and outcome.
	Sessions map[string]map[wgwatch.Outcome]int
	// Events are the Events about the WatchTarget, "Type/Reason", in order.
	Events   []string
	Warnings int
	Mirrored map[string]int
	Target   sandbox.Target
	KStatus  string
}

// total sums session endings of one outcome over every stream.
func (s summary) total(o wgwatch.Outcome) int {
	n := 0
	for _, byOutcome := range s.Sessions {
		n += byOutcome[o]
	}
	return n
}

// told reports whether the story ended as promised: one Warning, for the
// one thing a human had to fix, and Ready for the current generation.
func (s summary) told() bool {
	return s.Stalled && s.Recovered && s.Warnings == 1 && s.Target.Ready()
}

func (s summary) print(w io.Writer) {
	fmt.Fprintf(w, "\nSummary after %v\n", s.Duration)
	fmt.Fprintf(w, "  session endings by stream (watchgrade_watch_sessions_ended_total):\n")
	outcomes := []wgwatch.Outcome{wgwatch.OutcomeClosed, wgwatch.OutcomeExpired, wgwatch.OutcomeError, wgwatch.OutcomeTeardown}
	for _, name := range slices.Sorted(maps.Keys(s.Sessions)) {
		var parts []string
		for _, o := range outcomes {
			parts = append(parts, fmt.Sprintf("%s=%d", o, s.Sessions[name][o]))
		}
		fmt.Fprintf(w, "    %-26s %s\n", name, strings.Join(parts, " "))
	}
	mirrored := make([]string, 0, len(s.Mirrored))
	for name, n := range s.Mirrored {
		mirrored = append(mirrored, fmt.Sprintf("%s=%d", name, n))
	}
	sort.Strings(mirrored)
	fmt.Fprintf(w, "  mirrored objects: %s\n", strings.Join(mirrored, " "))
	fmt.Fprintf(w, "  WatchTarget %s\n", s.Target)
	fmt.Fprintf(w, "  kstatus: %s\n", s.KStatus)
	fmt.Fprintf(w, "  Events (%d, %d Warning): %s\n", len(s.Events), s.Warnings, strings.Join(s.Events, " "))
	routine := s.total(wgwatch.OutcomeClosed) + s.total(wgwatch.OutcomeExpired)
	fmt.Fprintf(w, "  %d routine endings (closes and expiries) produced no Warning; %d Warning for the denial a human had to fix.\n", routine, s.Warnings)
	fmt.Fprintf(w, "demo: closed=%d expired=%d error=%d restarted=%t stalled=%t recovered=%t warnings=%d kstatus=%s ready=%t\n",
		s.total(wgwatch.OutcomeClosed), s.total(wgwatch.OutcomeExpired), s.total(wgwatch.OutcomeError),
		s.Restarted, s.Stalled, s.Recovered, s.Warnings, s.KStatus, s.Target.Ready())
	if !s.told() {
		fmt.Fprintln(w, "demo: the story did not end as expected (see above); a longer --duration may help")
	}
}
