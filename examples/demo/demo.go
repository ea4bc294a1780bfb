package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
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
	// timeline, if set, is the file (.html or .svg) the picture goes to.
	timeline   string
	endings    endingsMode
	serverLogs bool
	out        io.Writer
}

const (
	targetName     = "app"
	controllerUser = "watchgrade-demo-controller"
	// minDuration is the shortest story: the denial needs its grace (15 s)
	// plus a session or two, the repair a backoff (up to 10 s).
	minDuration = 45 * time.Second
	// watchTimeout is how long the controller's watches last in kubeconfig
	// mode (timeoutSeconds): the routine closes and the RBAC checks a
	// cluster makes every 30 to 60 minutes, every two seconds.
	watchTimeout = 2 * time.Second
	// oldCursorStream is the stream that, in kubeconfig mode, resumes from
	// a cursor older than the apiserver's watch cache.
	oldCursorStream = "old-cursor/watchtargets"
)

var (
	configmaps = watchtarget.ResourceRef{Version: "v1", Resource: "configmaps"}
	secrets    = watchtarget.ResourceRef{Version: "v1", Resource: "secrets"}
)

// discardKlog sends klog's output nowhere, once per process.
var discardKlog sync.Once

// run starts the servers (unless opts.kubeconfig names a cluster), tells
// the story and returns its summary.
func run(ctx context.Context, opts options) (summary, error) {
	if opts.duration < minDuration {
		return summary{}, fmt.Errorf("--duration %v is too short: the story needs at least %v", opts.duration, minDuration)
	}
	if opts.timeline != "" {
		if _, err := timelineFormat(opts.timeline); err != nil {
			return summary{}, err
		}
	}
	start := time.Now()
	p := newPrinter(opts.out, start, opts.endings)
	rec := newRecorder(start)
	if !opts.serverLogs {
		// The servers and client-go log through klog; the demo's output is
		// its own. klog's logger is process-wide and read by every
		// server goroutine: set it once, before any of them (a second
		// run in the same process, as the test makes, would race them).
		discardKlog.Do(func() { klog.SetLogger(logr.Discard()) })
	}
	if opts.kubeconfig != "" {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = opts.kubeconfig
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
		if err != nil {
			return summary{}, err
		}
		p.step("using the cluster at %s (namespace %s)", cfg.Host, opts.namespace)
		p.step("its apiserver ends a watch after 30-60 min and checks RBAC only when one opens: to show in minutes what it shows in an hour, the controller asks for watches of %v (timeoutSeconds=%d); nothing on the cluster changes",
			watchTimeout, int(watchTimeout/time.Second))
		return tell(ctx, opts, p, rec, cfg, nil)
	}

	p.step("starting etcd and a kube-apiserver on loopback (about 10 s; `go run` compiled them first, minutes on a first build: `go run -v` lists the packages as they compile)")
	var serverLog bytes.Buffer
	logTo := io.Writer(&serverLog)
	if opts.serverLogs {
		logTo = opts.out
	}
	var sum summary
	var err error
	ok := harness.NewProgram("watchgrade-demo", logTo).Run(func(tb harness.TB) {
		c := harness.Start(tb, harness.Options{RBAC: true, Flags: []string{"--min-request-timeout=1"}, QuietEtcd: !opts.serverLogs})
		p.step("kube-apiserver is up at https://%s (RBAC on, --min-request-timeout=1: watches end every 1-2 s, not every 30-60 min)", c.Proxy.Addr())
		sum, err = tell(ctx, opts, p, rec, c.Config(), c.RestartAPIServer)
	})
	if !ok && err == nil {
		err = fmt.Errorf("the embedded servers failed:\n%s", serverLog.String())
	}
	return sum, err
}

// controllerRun is one running instance of the example controller.
type controllerRun struct {
	ctl  *clientgo.Controller
	stop func() // stops it and waits until it has
}

// startController starts a client-go example controller that acts as cfg's
// identity in namespace and reports every stream to observer.
func startController(ctx context.Context, cfg *rest.Config, namespace string, observer wgwatch.Observer) (*controllerRun, error) {
	ctl, err := clientgo.New(clientgo.Options{
		Config:    cfg,
		Namespace: namespace,
		// A registry per instance: a new controller registers its metrics
		// afresh, as a new process would.
		Registerer: prometheus.NewRegistry(),
		Observer:   observer,
		// A stream that needs a human retries every 5-10 s instead of
		// watchgrade's default 30-60 s, so the repair shows quickly.
		MaxBackoff: 10 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ctl.Run(ctx) // nil after a teardown
	}()
	return &controllerRun{ctl: ctl, stop: func() { cancel(); <-done }}, nil
}

// tell runs the controller and the story on the cluster admin reaches.
// restart, if not nil, restarts the kube-apiserver (embedded mode).
func tell(ctx context.Context, opts options, p *printer, rec *recorder, admin *rest.Config, restart func()) (summary, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mode := "embedded"
	if restart == nil {
		mode = "kubeconfig"
	}
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
	foldCtx, stopFolding := context.WithCancel(ctx)
	defer stopFolding()
	go p.foldLoop(foldCtx)

	ctlConfig := env.ControllerConfig()
	if restart == nil {
		ctlConfig = sandbox.ShortWatches(ctlConfig, watchTimeout)
	}
	observer := wgwatch.Observers(rec, p)
	ctl, err := startController(ctx, ctlConfig, env.Namespace, observer)
	if err != nil {
		return summary{}, err
	}
	defer func() { ctl.stop() }()

	// scene notes a scene in the record and prints its line.
	scene := func(label, format string, args ...any) time.Duration {
		detail := fmt.Sprintf(format, args...)
		p.step("%s", detail)
		return rec.scene(label, detail)
	}
	// snapshot is the record so far.
	snapshot := func(end time.Duration) *record {
		return rec.finish(mode, end, targetName, targets.History(targetName), targets.Writes(targetName), events.Occurrences())
	}

	scene("target created", "creating WatchTarget %s following configmaps and secrets", targetName)
	if err := env.CreateTarget(ctx, targetName, configmaps, secrets); err != nil {
		return summary{}, err
	}
	start := time.Now()
	end := start.Add(opts.duration)
	at := func(fraction float64) time.Time { return start.Add(time.Duration(fraction * float64(opts.duration))) }
	sum := summary{Mode: mode, Duration: opts.duration}
	if _, err := targets.Await(ctx, targetName, time.Minute, "Ready", sandbox.Target.Ready); err != nil {
		return sum, err
	}
	p.step("Ready. From here on, routine closes come every second or two and change nothing")

	// A rollout of the controller, while the target is Ready: what does
	// the new instance publish about a target that did not change?
	if err := sleepUntil(ctx, at(0.1)); err != nil {
		return sum, err
	}
	restartFrom := scene("controller restart", "restarting the controller, as a rollout would: the old one stops, a new one starts with nothing in memory; the target's Ready=True stays as written")
	ctl.stop()
	if ctl, err = startController(ctx, ctlConfig, env.Namespace, observer); err != nil {
		return sum, err
	}

	if err := sleepUntil(ctx, at(0.2)); err != nil {
		return sum, err
	}
	restartTo := rec.since(time.Now())
	published := snapshot(restartTo).published(restartFrom, restartTo)
	p.step("the controller restart published %s, %s and %s (seen by a watch on the target)",
		plural(published.Writes, "status write", "status writes"), plural(published.Events, "Event", "Events"), plural(published.Dips, "Ready dip", "Ready dips"))

	if restart != nil {
		scene("apiserver restart", "restarting the kube-apiserver, as a rollout would: a watch whose cursor is older than the new watch cache expires (410) and replays")
		restart()
		sum.Restarted = true
	} else {
		scene("old cursor", "a stream of WatchTargets resumes from resourceVersion 1, older than the apiserver's watch cache (as after a long absence): 410 Expired, then a replay. (The embedded run restarts its apiserver here; that cannot be done to your cluster.)")
		done, err := resumeFromOldCursor(ctx, env, observer)
		if err != nil {
			return sum, err
		}
		defer func() { cancel(); <-done }()
		sum.OldCursor = true
	}

	if err := sleepUntil(ctx, at(0.3)); err != nil {
		return sum, err
	}
	scene("Role removed", "removing the controller's permission to list and watch secrets")
	if err := env.Grant(ctx, configmaps.GVR().GroupResource()); err != nil {
		return sum, err
	}
	if _, err := targets.Await(ctx, targetName, time.Until(at(0.85)), "Stalled", func(t sandbox.Target) bool {
		return t.Status(wgreadiness.ConditionStalled) == metav1.ConditionTrue
	}); err == nil {
		sum.Stalled = true
		scene("Role restored", "Stalled: a human must act. A human restores the Role")
	} else {
		scene("Role restored", "not Stalled in time (%v); restoring the Role anyway", err)
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
	stopFolding()
	p.mute()
	r := snapshot(rec.since(time.Now()))
	r.Restart = r.published(restartFrom, restartTo)
	sum.Record = r
	sum.Restart = r.Restart
	sum.Sessions = r.sessions()
	sum.Events = events.Log()
	sum.Warnings = events.Count(corev1.EventTypeWarning)
	sum.Mirrored = ctl.ctl.Mirrored()
	sum.Target, _ = targets.Latest(targetName)
	if u, err := env.Dynamic.Resource(watchtarget.Resource).Namespace(env.Namespace).Get(ctx, targetName, metav1.GetOptions{}); err == nil {
		if res, err := status.Compute(u); err == nil {
			sum.KStatus = res.Status.String()
		}
	}
	var text bytes.Buffer
	if opts.timeline != "" {
		sum.Timeline = opts.timeline
		sum.print(&text)
		if err := writeTimeline(opts.timeline, r, text.String()); err != nil {
			return sum, err
		}
	} else {
		sum.print(&text)
	}
	_, err = opts.out.Write(text.Bytes())
	return sum, err
}

// resumeFromOldCursor starts a graded stream of the namespace's
// WatchTargets from resourceVersion 1. Every apiserver's watch cache of a
// custom resource begins when the resource's CRD is served, long after
// revision 1, so the watch is told 410 Expired and the stream replays, as
// one that kept its cursor through a long absence would. The stream runs
// until ctx ends; the channel closes when it has stopped.
func resumeFromOldCursor(ctx context.Context, env *sandbox.Env, observer wgwatch.Observer) (<-chan struct{}, error) {
	s, err := wgwatch.NewStream(clientgo.ListWatch(env.Dynamic, watchtarget.Resource, env.Namespace), wgwatch.HandlerFuncs{}, wgwatch.StreamOptions{
		Resource:   watchtarget.Resource.GroupResource(),
		Name:       oldCursorStream,
		Cursor:     "1",
		Observer:   observer,
		MaxBackoff: 10 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx) // nil after a teardown
	}()
	return done, nil
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
