package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/watchgrade/watchgrade/examples/watchtarget"
	"github.com/watchgrade/watchgrade/examples/wgctrl"
	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
)

// TestLeaderElectedRollout deploys an adopted operator as kubebuilder's
// manifests do (--leader-elect) and rolls it as a Deployment's default
// rolling update does: the new process starts while the old one holds
// the lease, must pass its readiness probe (the Grader's ReadyzCheck)
// before the old one is stopped, and then takes the lease over. A probe
// that waited, on a replica not yet elected, for informers only the
// leader's controllers make never passed: the rollout hung with the old
// process leading for good. The rollout changed nothing, so it writes no
// status, records no Event and logs no error.
func TestLeaderElectedRollout(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	crd, err := watchtarget.CRD()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.InstallCRD(ctx, crd); err != nil {
		t.Fatal(err)
	}
	// The WatchTarget's namespace, apart from the lease's (default), whose
	// Events (LeaderElection, controller-runtime's) are not the rollout's
	// writes.
	const ns = "shop"
	kube := kubernetes.NewForConfigOrDie(c.Config())
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scheme := watchTargetScheme(t)
	admin, err := client.New(c.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: "app"}
	if err := admin.Create(ctx, &watchtarget.WatchTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name},
		Spec: watchtarget.Spec{Resources: []watchtarget.ResourceRef{{Version: "v1", Resource: "configmaps"}}}}); err != nil {
		t.Fatal(err)
	}

	old := runLeaderElected(t, c.Config(), "old")
	if err := old.readyz.await(ctx, time.Minute, "200 from the leader", ready); err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.elected:
	case <-time.After(time.Minute):
		t.Fatal("the first process was not elected within a minute")
	}
	wt := &watchtarget.WatchTarget{}
	if err := poll(ctx, time.Minute, func() (bool, error) {
		if err := admin.Get(ctx, key, wt); err != nil {
			return false, err
		}
		r := metaCondition(wt.Status.Conditions, wgreadiness.ConditionReady)
		return r != nil && r.Status == metav1.ConditionTrue && wt.Status.ObservedGeneration == wt.Generation, nil
	}); err != nil {
		t.Fatalf("the WatchTarget never became Ready: %v", err)
	}
	rv := wt.ResourceVersion
	normal, warning := countEvents(t, kube, ns)

	// The rollout: the new process starts while the old one leads.
	began := time.Now()
	next := runLeaderElected(t, c.Config(), "new")
	if err := next.readyz.await(ctx, time.Minute, "200 from the replica waiting for the lease", ready); err != nil {
		t.Fatalf("the new process never passed its readiness probe while the old one held the lease, so a rolling update would never stop the old one: %v", err)
	}
	rolloutReady := time.Since(began)
	select {
	case <-next.elected:
		t.Fatal("the new process was elected while the old one held the lease")
	default:
	}
	// Ready, so the Deployment stops the old process; it releases the
	// lease (LeaderElectionReleaseOnCancel, as kubebuilder's main.go sets).
	stopped := time.Now()
	oldErrors := old.errors()
	old.stop()
	// What the old process logs once told to stop is counted apart:
	// controller-runtime logs "leader election lost" at error level when a
	// manager that releases its lease stops.
	stopErrors := len(old.errors()) - len(oldErrors)
	select {
	case <-next.elected:
	case <-time.After(time.Minute):
		t.Fatal("the new process did not take the lease over within a minute of the old one's stop")
	}
	takeover := time.Since(stopped)
	if err := next.readyz.await(ctx, time.Minute, "200 from the new leader", ready); err != nil {
		t.Fatal(err)
	}
	// The new leader's first Reconcile of the WatchTarget, status step
	// included, is where it would write.
	select {
	case <-next.reconciled:
	case <-time.After(time.Minute):
		t.Fatal("the new leader did not reconcile the WatchTarget within a minute")
	}
	if err := admin.Get(ctx, key, wt); err != nil {
		t.Fatal(err)
	}
	writes := 0
	if wt.ResourceVersion != rv {
		writes = 1
	}
	n2, w2 := countEvents(t, kube, ns)
	events := n2 - normal + w2 - warning
	errs := append(oldErrors, next.errors()...)
	if writes != 0 {
		t.Errorf("the rollout wrote the WatchTarget (resourceVersion %s, was %s): %v", wt.ResourceVersion, rv, wt.Status.Conditions)
	}
	if events != 0 {
		t.Errorf("the rollout recorded %d Events", events)
	}
	if len(errs) != 0 {
		t.Errorf("the rollout logged %d errors: %v", len(errs), errs)
	}
	fmt.Printf("e2e: leader-elected rollout rollout_ready=%.1fs takeover=%.1fs status_writes=%d events=%d error_logs=%d stop_error_logs=%d\n",
		rolloutReady.Seconds(), takeover.Seconds(), writes, events, len(errs), stopErrors)
}

func metaCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// electedOperator is one process of a leader-elected operator.
type electedOperator struct {
	readyz  *readyz
	elected <-chan struct{}
	stop    func()
	log     *errorLog
	// reconciled is closed when a Reconcile of this process, its status
	// step included, has returned.
	reconciled chan struct{}
}

func (o *electedOperator) errors() []string { return o.log.lines() }

// runLeaderElected starts an operator wired as examples/README.md's steps
// wire a kubebuilder scaffold (runWatchTargetOperator), deployed as
// kubebuilder's manifests deploy it: leader election on, the lease
// released when the manager stops, the Grader's probe as /readyz.
func runLeaderElected(t *testing.T, cfg *rest.Config, name string) *electedOperator {
	t.Helper()
	log := &errorLog{name: name}
	logger := logr.New(log)
	grade, err := wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry(), WaitForHuman: true, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	probe := freeAddr(t)
	lease, renew, retry := 6*time.Second, 4*time.Second, 500*time.Millisecond
	reconciled := make(chan struct{})
	var once sync.Once
	mgr, stop := startWatchTargetOperator(t, cfg, grade, ctrl.Options{
		Scheme:                        watchTargetScheme(t),
		Logger:                        logger,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        probe,
		LeaderElection:                true,
		LeaderElectionID:              "watchtarget-operator.example.com",
		LeaderElectionNamespace:       "default",
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &lease,
		RenewDeadline:                 &renew,
		RetryPeriod:                   &retry,
		Controller:                    config.Controller{SkipNameValidation: new(true)},
	}, func() { once.Do(func() { close(reconciled) }) })
	return &electedOperator{readyz: pollReadyz(t, probe), elected: mgr.Elected(), stop: stop, log: log, reconciled: reconciled}
}

// errorLog is a logr sink that keeps the error-level lines and drops the
// rest.
type errorLog struct {
	name string
	mu   sync.Mutex
	errs []string
}

func (l *errorLog) Init(logr.RuntimeInfo)          {}
func (l *errorLog) Enabled(int) bool               { return false }
func (l *errorLog) Info(int, string, ...any)       {}
func (l *errorLog) WithValues(...any) logr.LogSink { return l }
func (l *errorLog) WithName(string) logr.LogSink   { return l }
func (l *errorLog) Error(err error, msg string, kv ...any) {
	l.add(fmt.Sprintf("%s: %s: %v %v", l.name, msg, err, kv))
}

func (l *errorLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, s)
}

func (l *errorLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errs...)
}
