package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/watchgrade/watchgrade/examples/kubebuilder"
	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// apiserverDown is how long the kube-apiserver restart of TestKubebuilder
// leaves no apiserver behind the load balancer: several retries of each
// informer, and less than the transient grace (30 s) after which a graded
// log says, at info, that a watch has been failing.
const apiserverDown = 10 * time.Second

var guestbooks = schema.GroupVersionResource{Group: "webapp.example.com", Version: "v1", Resource: "guestbooks"}

// TestKubebuilder scaffolds a fresh operator with a pinned kubebuilder,
// fetched from the Go module proxy at test time, gives it the usual logic
// (a Guestbook that Owns a ConfigMap), applies the adoption steps of
// examples/README.md (examples/kubebuilder/adopt.patch), builds it, and runs
// the binary against a real kube-apiserver, as the user "guestbook-manager"
// bound to the ClusterRole that its own RBAC markers generate. The story:
// its CRD missing at startup, then installed; Ready; a quiet restart, then
// routine events under the manager (a rollout and a restart of the
// kube-apiserver, every connection cut); the ConfigMaps denied at startup,
// a quiet restart while the Guestbook is Stalled, the new manager held past
// controller-runtime's two-minute CacheSyncTimeout, and repaired; denied
// while running and repaired; last, deployed as its manifests deploy it
// (--leader-elect, in the namespace its leader election Role is bound in)
// and rolled to a new process as a Deployment rolls it: the new pod must
// be ready while the old one holds the lease, then take over, with no
// status write, no Event and no error line. Each denial must give the
// Guestbook Stalled and exactly one Warning, a restart that changes
// nothing must write nothing and record no Event (Stalled stays True
// through the one while denied), and the manager must never exit by
// itself.
//
// Its log (the scaffold's zap logger, development mode) must hold no line
// at level error, from any logger, across the routine events, and at most
// one per manager during a denial (an escalation, not one per retry). Its
// readiness probe (wgctrl's ReadyzCheck in place of the scaffold's ping)
// must fail while the denied ConfigMaps have never been listed, pass once
// Ready, and keep passing through a denial that begins later.
func TestKubebuilder(t *testing.T) {
	if testing.Short() {
		t.Skip("scaffolds and builds a kubebuilder project")
	}
	ctx := t.Context()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	proj := scaffold(t, root)

	c := harness.Start(t, harness.Options{RBAC: true})
	admin := c.Config()
	kube := kubernetes.NewForConfigOrDie(admin)
	dyn := dynamic.NewForConfigOrDie(admin)
	const user, ns = "guestbook-manager", "shop"

	role := readClusterRole(t, filepath.Join(proj, "config/rbac/role.yaml"))
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	impersonate(t, kubeconfig, user)

	probe := freeAddr(t)
	m := &manager{t: t, bin: filepath.Join(proj, "bin", "manager"), kubeconfig: kubeconfig, log: filepath.Join(proj, "manager.log"), probe: probe, metrics: freeAddr(t)}
	t.Cleanup(m.stop)
	rz := pollReadyz(t, probe)
	setConfigMaps := func(allowed bool) {
		t.Helper()
		r := role.DeepCopy()
		if !allowed {
			r.Rules = nil
			for _, rule := range role.Rules {
				if !(len(rule.APIGroups) == 1 && rule.APIGroups[0] == "" && len(rule.Resources) == 1 && rule.Resources[0] == "configmaps") {
					r.Rules = append(r.Rules, rule)
				}
			}
			if len(r.Rules) == len(role.Rules) {
				t.Fatalf("the generated ClusterRole has no rule for configmaps alone: %v", role.Rules)
			}
		}
		cur, err := kube.RbacV1().ClusterRoles().Get(ctx, role.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Rules = r.Rules
		if _, err := kube.RbacV1().ClusterRoles().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// 1. The Guestbook CRD missing at startup: controller-runtime would exit
	// after two minutes; the manager waits, and works once it is installed.
	// A kind whose CRD is missing has no informer, so it does not hold the
	// readiness probe back (wgctrl's ReadyzCheck): the ConfigMaps' informer
	// syncs, and the probe passes.
	m.start()
	if err := m.awaitLog(ctx, 2*time.Minute, "if kind is a CRD, it should be installed"); err != nil {
		t.Fatal(err)
	}
	if err := rz.await(ctx, 30*time.Second, "200 while the CRD is missing", ready); err != nil {
		t.Error(err)
	}
	readyzMissingCRD := rz.latest()
	missingCRDErrors := m.errorLines(0)
	installed := m.logSize()
	crd := readCRD(t, proj)
	if err := c.InstallCRD(ctx, crd); err != nil {
		t.Fatal(err)
	}
	w := watchGuestbooks(t, dyn, kube, ns)
	created := time.Now()
	gb := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "webapp.example.com/v1", "kind": "Guestbook",
		"metadata": map[string]any{"name": "gb", "namespace": ns},
		"spec":     map[string]any{},
	}}
	if _, err := dyn.Resource(guestbooks).Namespace(ns).Create(ctx, gb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.await(ctx, 2*time.Minute, "Ready=True for its generation", readyForGeneration); err != nil {
		t.Fatal(err)
	}
	readyAfter := time.Since(created)
	if _, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "gb-config", metav1.GetOptions{}); err != nil {
		t.Fatalf("the operator's own logic did not run: %v", err)
	}
	if err := rz.await(ctx, 10*time.Second, "200 once Ready", ready); err != nil {
		t.Error(err)
	}
	readyzReady := rz.latest()

	// 2. A quiet restart: the new manager writes nothing about a Guestbook
	// that is Ready for its generation.
	if err := m.idle(ctx); err != nil {
		t.Fatal(err)
	}
	m.stop()
	// What the first manager logged from the CRD's installation to its
	// stop is reported, not held to zero: a Guestbook's first reconciles
	// can meet a conflict (its status written from a cached copy older
	// than the write the reconcile before made), which controller-runtime
	// logs, as every error a Reconcile returns, at level error.
	firstErrors := m.errorLines(installed)
	writes := w.writes()
	m.start()
	if err := m.awaitLog(ctx, 2*time.Minute, "Starting workers"); err != nil {
		t.Fatal(err)
	}
	w.settle(ctx, 10*time.Second)
	restartWrites := w.writes() - writes

	// Routine events under the running manager, which must log no error:
	// a rollout of the kube-apiserver (a new one serves before the old one
	// goes, as restart_test.go does it); a restart of it as seen through a
	// load balancer, which answers 503 while no apiserver is behind it
	// (apiserverDown), as one that listens before it is ready also does;
	// then every connection cut, as the apiserver's own watch timeout cuts
	// a watch. client-go retries a refused connection, a 429 and a watch
	// cut short without telling the watch error handler, so the first and
	// last events hand it nothing; in the 503s each informer's watches and
	// lists fail, each failure handed to it, which client-go's default
	// handler logs as an error. Each event is over once the manager has
	// acted on a change of each kind it watches (a Guestbook's new
	// generation made Ready, its ConfigMap, altered, made right again):
	// both informers are live again, and nothing is failing that could log
	// an error later, after a grace.
	foo := 0
	acted := func(after string) {
		t.Helper()
		foo++
		// The test's own connections were cut too: a write on one fails
		// (broken pipe) and is tried again. One change at a time: the
		// operator's CreateOrUpdate reads the cache, so a reconcile queued
		// while it writes the ConfigMap would meet a conflict (and log
		// "Reconciler error") that these events do not cause.
		var gen int64
		patch := fmt.Appendf(nil, `{"spec":{"foo":"routine-%d"}}`, foo)
		if err := poll(ctx, 30*time.Second, func() (bool, error) {
			gb, err := dyn.Resource(guestbooks).Namespace(ns).Patch(ctx, "gb", types.MergePatchType, patch, metav1.PatchOptions{})
			if err == nil {
				gen = gb.GetGeneration()
			}
			return err == nil, err
		}); err != nil {
			t.Fatal(err)
		}
		if err := w.await(ctx, 2*time.Minute, "Ready=True for its new generation "+after, func(u *unstructured.Unstructured) bool {
			return u.GetGeneration() >= gen && readyForGeneration(u)
		}); err != nil {
			t.Fatal(err)
		}
		patch = fmt.Appendf(nil, `{"data":{"guestbook":"altered-%d"}}`, foo)
		if _, err := kube.CoreV1().ConfigMaps(ns).Patch(ctx, "gb-config", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		var data map[string]string
		if err := poll(ctx, 2*time.Minute, func() (bool, error) {
			cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "gb-config", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			data = cm.Data
			return data["guestbook"] == "gb", nil
		}); err != nil {
			t.Fatalf("the altered ConfigMap was not made right %s: %v (data %v)", after, err, data)
		}
	}
	routineFrom := w.tally()
	c.RestartAPIServer()
	acted("after the apiserver rollout")
	unavailable := httptest.NewTLSServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(rw, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server is currently unable to handle the request","reason":"ServiceUnavailable","code":503}`)
	}))
	t.Cleanup(unavailable.Close)
	c.Proxy.SetBackend(unavailable.Listener.Addr().String())
	c.Proxy.ResetAll()
	w.settle(ctx, apiserverDown)
	c.RestartAPIServer()
	acted("after the apiserver restart")
	c.Proxy.ResetAll()
	acted("after every connection was cut")
	routineEvents := w.tally().minus(routineFrom).events

	// 3. ConfigMaps denied at startup; the manager restarted while the
	// Guestbook is Stalled; the new one held past controller-runtime's
	// CacheSyncTimeout (two minutes), then repaired. Until its ConfigMaps
	// have been listed once, the readiness probe fails. The manager is
	// stopped once idle: a stop that cuts short a write of the operator's
	// own logic (its ConfigMap's, after the last change) is logged by
	// controller-runtime at level error, as every error a Reconcile
	// returns, which no routine event caused.
	if err := m.idle(ctx); err != nil {
		t.Fatal(err)
	}
	m.stop()
	routineErrors := m.errorLines(0)
	setConfigMaps(false)
	warnings := w.warnings()
	started := time.Now()
	deniedAtStartup := started
	m.start()
	if err := w.await(ctx, 2*time.Minute, "Stalled=True", stalled); err != nil {
		t.Fatal(err)
	}
	stalledAfter := time.Since(started)
	if err := w.await(ctx, 30*time.Second, "a Warning", func(*unstructured.Unstructured) bool { return w.warnings() > warnings }); err != nil {
		t.Fatal(err)
	}
	if err := rz.await(ctx, 10*time.Second, "a failure while the ConfigMaps were never listed", failing); err != nil {
		t.Error(err)
	}

	// The restart while Stalled: the new manager's ConfigMaps are denied
	// too, so its workers wait, and it must keep the Stalled it finds: no
	// write, no Event, Stalled=True throughout, from the restart to the
	// repair. That window covers the moment its informer has seen the
	// denial for the human grace, when a Stalled lost over the restart
	// would be written again.
	// The manager stopped while its ConfigMaps were never listed: the
	// lines it logs once told to stop are counted apart (controller-runtime
	// logs one error there, for the informer that never synced).
	before := w.tally()
	startupErrors := [][]string{m.errorLines(0)}
	m.stop()
	stopErrors := len(m.errorLines(0)) - len(startupErrors[0])
	started = time.Now()
	m.start()
	if err := m.awaitRecurring(ctx, 2*time.Minute, "configmaps is forbidden", wgwatch.DefaultHumanGrace+time.Second); err != nil {
		t.Fatal(err)
	}
	if err := rz.await(ctx, 10*time.Second, "a failure while the ConfigMaps were never listed", failing); err != nil {
		t.Error(err)
	}
	failed := time.Now()
	w.settle(ctx, 2*time.Minute+15*time.Second-time.Since(started))
	held := w.tally().minus(before)
	startupWarnings := w.warnings() - warnings
	repaired := time.Now()
	if n := rz.count(failed, repaired, ready); n > 0 {
		t.Errorf("the readiness probe passed %d times while the ConfigMaps, denied at startup, were never listed", n)
	}
	setConfigMaps(true)
	if err := w.await(ctx, 2*time.Minute, "Ready=True after the repair", readyForGeneration); err != nil {
		t.Fatal(err)
	}
	recoveredAfter := time.Since(repaired)
	startupErrors = append(startupErrors, m.errorLines(0))
	if err := rz.await(ctx, 30*time.Second, "200 after the repair", ready); err != nil {
		t.Error(err)
	}
	readyzDenied, readyzRepaired := rz.codes(deniedAtStartup, repaired), rz.latest()
	t.Logf("e2e: kubebuilder added_lines=%d ready_after=%s restart_writes=%d stalled_writes=%d stalled_events=%d stalled_left=%d stalled_after=%s warnings=%d recovered_after=%s manager_exits=%d error_logs=%d denial_error_logs=%d routine_events=%d stop_error_logs=%d missing_crd_error_logs=%d first_ready_error_logs=%d readyz_missing_crd=%d readyz_ready=%d readyz_denied=%s readyz_repaired=%d denial=startup missing_crd=waited",
		kubebuilder.AddedLines(), round(readyAfter), restartWrites, held.writes, held.events, held.unstalled, round(stalledAfter), startupWarnings, round(recoveredAfter), m.exits(),
		len(routineErrors), len(startupErrors[0])+len(startupErrors[1]), routineEvents, stopErrors, len(missingCRDErrors), len(firstErrors), readyzMissingCRD, readyzReady, readyzDenied, readyzRepaired)

	// 4. ConfigMaps denied while running: RBAC is checked when a watch
	// opens, so the connections are cut (as an apiserver's own watch
	// timeout would, within 5 to 10 minutes for an informer).
	warnings = w.warnings()
	denied := time.Now()
	deniedAt := m.logSize()
	setConfigMaps(false)
	c.Proxy.ResetAll()
	if err := w.await(ctx, 2*time.Minute, "Stalled=True while running", stalled); err != nil {
		t.Fatal(err)
	}
	stalledRunning := time.Since(denied)
	w.settle(ctx, 15*time.Second)
	runningWarnings := w.warnings() - warnings
	repaired = time.Now()
	setConfigMaps(true)
	if err := w.await(ctx, 2*time.Minute, "Ready=True after the repair", readyForGeneration); err != nil {
		t.Fatal(err)
	}
	recoveredRunning := time.Since(repaired)
	runningErrors := m.errorLines(deniedAt)
	notReady := rz.count(denied, time.Now(), func(code int) bool { return !ready(code) })
	t.Logf("e2e: kubebuilder added_lines=%d ready_after=%s restart_writes=%d stalled_writes=%d stalled_events=%d stalled_left=%d stalled_after=%s warnings=%d recovered_after=%s manager_exits=%d error_logs=%d denial_error_logs=%d readyz_denied=%s denial=running",
		kubebuilder.AddedLines(), round(readyAfter), restartWrites, held.writes, held.events, held.unstalled, round(stalledRunning), runningWarnings, round(recoveredRunning), m.exits(),
		len(routineErrors), len(runningErrors), rz.codes(denied, time.Now()))

	if n := kubebuilder.AddedLines(); n > 40 {
		t.Errorf("the adoption adds %d lines of code, want at most 40", n)
	}
	if restartWrites != 0 {
		t.Errorf("the restart wrote the Guestbook %d times, want 0", restartWrites)
	}
	if held != (tally{}) {
		t.Errorf("the restart while Stalled wrote the Guestbook %d times, recorded %d Events, and showed it without Stalled=True %d times; want 0 each",
			held.writes, held.events, held.unstalled)
	}
	if startupWarnings != 1 || runningWarnings != 1 {
		t.Errorf("Warnings: %d for the denial at startup, %d for the one while running; want exactly 1 each", startupWarnings, runningWarnings)
	}
	if n := m.exits(); n != 0 {
		t.Errorf("the manager exited %d times by itself, want 0", n)
	}
	// The logs: routine events log no error, from any logger; a denial one
	// per manager that meets it (an escalation), not one per retry.
	if len(routineErrors) != 0 {
		t.Errorf("the manager logged %d errors across routine events (its start and stop, an apiserver rollout and restart, connections cut), want 0:\n%s",
			len(routineErrors), strings.Join(routineErrors, "\n"))
	}
	for i, lines := range startupErrors {
		if len(lines) > 1 {
			t.Errorf("manager %d of the denial at startup logged %d errors, want at most 1:\n%s", i+1, len(lines), strings.Join(lines, "\n"))
		}
	}
	if len(startupErrors[1]) == 0 {
		t.Errorf("the manager held for %s while its ConfigMaps were denied logged no error, want 1", 2*time.Minute+15*time.Second)
	}
	if len(runningErrors) > 1 {
		t.Errorf("the denial while running logged %d errors, want at most 1:\n%s", len(runningErrors), strings.Join(runningErrors, "\n"))
	}
	// The readiness probe passes for good once every informer has synced:
	// a later denial must not take the pod out of its Services' endpoints.
	if notReady != 0 {
		t.Errorf("the readiness probe failed %d times during the denial while running, want 0 (answers: %s)", notReady, rz.codes(denied, time.Now()))
	}

	// 5. Deployed as kubebuilder's manifests deploy it (--leader-elect, in
	// the namespace of its leader election Role), rolled as a Deployment
	// rolls it: the new pod started while the old one holds the lease, the
	// old one stopped once the new one is ready. The new one must become
	// ready while it waits for the lease (else the rollout hangs: the old
	// pod is never stopped), then take over, and a rollout that changed
	// nothing writes no status, records no Event and logs no error.
	if err := m.idle(ctx); err != nil {
		t.Fatal(err)
	}
	m.stop()
	const podNS = "guestbook-system"
	leaderElection(t, kube, proj, podNS, user)
	m.leaderElect = podNS
	m.start()
	if err := m.awaitLog(ctx, time.Minute, leaseAcquired); err != nil {
		t.Fatal(err)
	}
	if err := rz.await(ctx, time.Minute, "200 from the leader", ready); err != nil {
		t.Fatal(err)
	}
	if err := m.idle(ctx); err != nil {
		t.Fatal(err)
	}
	w.settle(ctx, 5*time.Second)
	rollFrom := w.tally()
	nextProbe := freeAddr(t)
	next := &manager{t: t, bin: m.bin, kubeconfig: kubeconfig, log: filepath.Join(proj, "manager-next.log"), probe: nextProbe, metrics: freeAddr(t), leaderElect: podNS}
	t.Cleanup(next.stop)
	nextRz := pollReadyz(t, nextProbe)
	rolled := time.Now()
	next.start()
	if err := nextRz.await(ctx, time.Minute, "200 from the new pod while the old one holds the lease", ready); err != nil {
		t.Fatal(err)
	}
	rolloutReady := time.Since(rolled)
	if log, _ := os.ReadFile(next.log); bytes.Contains(log, []byte(leaseAcquired)) {
		t.Fatal("the new pod was elected while the old one held the lease")
	}
	oldErrors := m.errorLines(0)
	stopped := time.Now()
	m.stop()
	rollStopErrors := len(m.errorLines(0)) - len(oldErrors)
	if err := next.awaitLog(ctx, 2*time.Minute, leaseAcquired); err != nil {
		t.Fatal(err)
	}
	takeover := time.Since(stopped)
	if err := next.awaitLog(ctx, time.Minute, "Starting workers"); err != nil {
		t.Fatal(err)
	}
	w.settle(ctx, 10*time.Second)
	if err := next.idle(ctx); err != nil {
		t.Fatal(err)
	}
	rollout := w.tally().minus(rollFrom)
	rolloutErrors := append(oldErrors, next.errorLines(0)...)
	t.Logf("e2e: kubebuilder leader-elected rollout rollout_ready=%s takeover=%s status_writes=%d events=%d error_logs=%d stop_error_logs=%d readyz_next=%d",
		round(rolloutReady), round(takeover), rollout.writes, rollout.events, len(rolloutErrors), rollStopErrors, nextRz.latest())
	if rollout.writes != 0 || rollout.events != 0 {
		t.Errorf("the rollout wrote the Guestbook %d times and recorded %d Events, want 0 each", rollout.writes, rollout.events)
	}
	if len(rolloutErrors) != 0 {
		t.Errorf("the rollout logged %d errors, want 0:\n%s", len(rolloutErrors), strings.Join(rolloutErrors, "\n"))
	}
	if n := m.exits() + next.exits(); n != 0 {
		t.Errorf("a leader-elected manager exited %d times by itself, want 0", n)
	}

	if t.Failed() {
		t.Logf("manager logs: %s (the last), %s.N (the earlier ones), %s (the rollout's new pod)\nGuestbook history:\n%s", m.log, m.log, next.log, w.history())
	}
}

// leaderElection grants user the scaffold's leader election Role
// (config/rbac/leader_election_role.yaml: Leases and Events) in namespace,
// which it creates, as the scaffold's kustomization does for the manager's
// own namespace.
func leaderElection(t *testing.T, kube kubernetes.Interface, proj, namespace, user string) {
	t.Helper()
	ctx := t.Context()
	data, err := os.ReadFile(filepath.Join(proj, "config/rbac/leader_election_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		t.Fatal(err)
	}
	role.Namespace = namespace
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().Roles(namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := kube.RbacV1().RoleBindings(namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// scaffold installs kubebuilder, scaffolds the project, applies the
// operator's own logic and the adoption steps, and builds the manager. It
// returns the project's directory.
//
// WATCHGRADE_KUBEBUILDER_DIR, for work on this test, names a directory to
// scaffold in and keep: when it already holds the project, only the build
// runs again.
func scaffold(t *testing.T, root string) string {
	work := os.Getenv("WATCHGRADE_KUBEBUILDER_DIR")
	if work == "" {
		work = t.TempDir()
	} else if _, err := os.Stat(filepath.Join(work, "guestbook", "bin", "manager")); err == nil {
		proj := filepath.Join(work, "guestbook")
		sh(t, proj, nil, "go", "build", "-o", "bin/manager", "./cmd")
		return proj
	}
	gobin := filepath.Join(work, "gobin")
	proj := filepath.Join(work, "guestbook")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	kb := filepath.Join(gobin, "kubebuilder")
	began := time.Now()
	sh(t, work, []string{"GOBIN=" + gobin}, "go", "install", "sigs.k8s.io/kubebuilder/v4@"+kubebuilder.Version)
	sh(t, proj, nil, kb, "init", "--domain", "example.com", "--repo", "example.com/guestbook")
	sh(t, proj, nil, kb, "create", "api", "--group", "webapp", "--version", "v1", "--kind", "Guestbook", "--resource", "--controller")
	scaffolded := time.Since(began)
	for _, patch := range []string{kubebuilder.OperatorPatch, kubebuilder.AdoptPatch, kubebuilder.FaultsPatch} {
		sh(t, proj, nil, "git", "apply", "--verbose", filepath.Join(root, "examples/kubebuilder", patch))
	}
	// What `go get github.com/watchgrade/watchgrade/examples/wgctrl` does
	// for a user. The modules are not published: the test points their
	// paths at this checkout instead, and adds nothing else.
	sh(t, proj, nil, "go", "mod", "edit",
		"-replace=github.com/watchgrade/watchgrade="+root,
		"-replace=github.com/watchgrade/watchgrade/examples/wgctrl="+filepath.Join(root, "examples/wgctrl"))
	sh(t, proj, nil, "go", "mod", "edit", "-require=github.com/watchgrade/watchgrade/examples/wgctrl@v0.0.0-00010101000000-000000000000")
	sh(t, proj, nil, "go", "mod", "tidy")
	// A user's go.mod needs no replace directive: the test's two are the
	// stand-ins above, and k8s.io/kubernetes (whose staging modules would
	// need 31) is not in the build.
	gomod, err := os.ReadFile(filepath.Join(proj, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(gomod), "=>"); n != 2 {
		t.Errorf("the project's go.mod has %d replace directives, want the test's 2:\n%s", n, gomod)
	}
	if strings.Contains(string(gomod), "k8s.io/kubernetes ") {
		t.Errorf("the project requires k8s.io/kubernetes:\n%s", gomod)
	}
	sh(t, proj, nil, "make", "manifests", "generate")
	sh(t, proj, nil, "go", "vet", "./...")
	// The adoption's table test (faults.patch), as its author runs it:
	// the Guestbook controller through API server faults in virtual time.
	// The scaffold's own Ginkgo suite needs envtest's binaries: -run
	// leaves it out.
	out := sh(t, proj, nil, "go", "test", "-count=1", "-v", "-run", "^TestGuestbookThroughFaults$", "./internal/controller/")
	rows := strings.Count(out, "    --- PASS: TestGuestbookThroughFaults/")
	if rows == 0 {
		t.Errorf("the adoption's table test ran no row:\n%s", out)
	}
	t.Logf("e2e: kubebuilder faults_table rows_passed=%d test_lines=%d", rows, kubebuilder.FaultsLines())
	sh(t, proj, nil, "go", "build", "-o", "bin/manager", "./cmd")
	t.Logf("kubebuilder %s: scaffolded in %s, adopted and built in %s", kubebuilder.Version, round(scaffolded), round(time.Since(began)-scaffolded))
	return proj
}

// sh runs a command in dir and returns its output, or fails the test with
// it if the command fails.
func sh(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func round(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }

func readClusterRole(t *testing.T, path string) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		t.Fatal(err)
	}
	return role
}

func readCRD(t *testing.T, proj string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(proj, "config/crd/bases/webapp.example.com_guestbooks.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		t.Fatal(err)
	}
	props := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"].Properties
	if _, ok := props["observedGeneration"]; !ok {
		t.Fatal("the generated CRD has no status.observedGeneration")
	}
	return crd
}

// impersonate makes the kubeconfig act as user, with no groups beyond
// system:authenticated: only the ClusterRole bound to user applies.
func impersonate(t *testing.T, path, user string) {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
}

// manager runs the scaffolded binary, one process at a time, and counts
// the times it exited without being asked to. Each process logs to log;
// the one before is kept as log.1, the one before that as log.2, and so
// on.
type manager struct {
	t          *testing.T
	bin        string
	kubeconfig string
	log        string
	probe      string // the health probes' host:port
	metrics    string // the metrics endpoint's host:port (plain HTTP)
	// leaderElect, when set, runs the manager as kubebuilder's manifests
	// deploy it (--leader-elect) in a pod of this namespace: see
	// inPod.
	leaderElect string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	stopping bool
	exited   int
	started  int
	out      *os.File
}

func (m *manager) start() {
	m.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started > 0 {
		if err := os.Rename(m.log, fmt.Sprintf("%s.%d", m.log, m.started)); err != nil {
			m.t.Fatal(err)
		}
	}
	m.started++
	out, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		m.t.Fatal(err)
	}
	args := []string{"--kubeconfig", m.kubeconfig, "--health-probe-bind-address=" + m.probe, "--metrics-bind-address=" + m.metrics, "--metrics-secure=false"}
	cmd := exec.Command(m.bin, args...)
	if m.leaderElect != "" {
		cmd = inPod(m.leaderElect, m.bin, append(args, "--leader-elect")...)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	m.cmd, m.out, m.stopping, m.done = cmd, out, false, make(chan struct{})
	done := m.done
	go func() {
		err := cmd.Wait()
		m.mu.Lock()
		if !m.stopping {
			m.exited++
			m.t.Logf("the manager exited by itself: %v", err)
		}
		m.mu.Unlock()
		close(done)
	}()
}

// leaseAcquired is what client-go's leader election logs once the
// process holds the lease.
const leaseAcquired = "Successfully acquired lease"

// inPod returns the command that runs bin as if in a pod of namespace,
// as far as controller-runtime's leader election looks: the scaffold sets
// no LeaderElectionNamespace, so the manager reads its namespace from the
// service account's mount, /var/run/secrets/kubernetes.io/serviceaccount/
// namespace, and exits without it. The file is written in a mount
// namespace of the process's own (unshare -m, which keeps its mounts
// private), over a tmpfs on /run: the machine's /run is left as it was.
func inPod(namespace, bin string, args ...string) *exec.Cmd {
	const dir = "/run/secrets/kubernetes.io/serviceaccount"
	script := `mount -t tmpfs tmpfs /run && mkdir -p ` + dir + ` && printf %s "$WATCHGRADE_POD_NAMESPACE" > ` + dir + `/namespace && exec "$@"`
	cmd := exec.Command("unshare", append([]string{"--mount", "sh", "-c", script, "sh", bin}, args...)...)
	cmd.Env = append(os.Environ(), "WATCHGRADE_POD_NAMESPACE="+namespace)
	return cmd
}

// idle waits until the current manager's guestbook controller has had
// nothing queued and no reconcile running for a second, as its /metrics
// tell (workqueue_depth and controller_runtime_active_workers), for at
// most 30 s.
func (m *manager) idle(ctx context.Context) error {
	var quietSince time.Time
	var last string
	err := poll(ctx, 30*time.Second, func() (bool, error) {
		busy, err := m.busy(ctx)
		if err != nil || busy != "" {
			quietSince, last = time.Time{}, busy
			if err != nil {
				last = err.Error()
			}
			return false, nil
		}
		if quietSince.IsZero() {
			quietSince = time.Now()
		}
		return time.Since(quietSince) >= time.Second, nil
	})
	if err != nil {
		return fmt.Errorf("the manager did not go idle: %v (last: %s)", err, last)
	}
	return nil
}

// busy returns the guestbook controller's queue depth and running
// reconciles from the manager's /metrics as "depth=N workers=N", or "" if
// both are zero.
func (m *manager) busy(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.metrics+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return "", err
	}
	depth, okDepth := gauge(families["workqueue_depth"], "name", "guestbook")
	workers, okWorkers := gauge(families["controller_runtime_active_workers"], "controller", "guestbook")
	if !okDepth || !okWorkers {
		return "", fmt.Errorf("no workqueue_depth or controller_runtime_active_workers for the guestbook controller in /metrics")
	}
	if depth == 0 && workers == 0 {
		return "", nil
	}
	return fmt.Sprintf("depth=%g workers=%g", depth, workers), nil
}

// gauge returns the value of the gauge in family whose label is value.
func gauge(family *dto.MetricFamily, label, value string) (float64, bool) {
	for _, metric := range family.GetMetric() {
		for _, l := range metric.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				return metric.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// stop sends SIGTERM and waits for the manager to exit.
func (m *manager) stop() {
	m.mu.Lock()
	cmd, done, out := m.cmd, m.done, m.out
	m.stopping = true
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
	}
	out.Close()
}

func (m *manager) exits() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.exited
}

// logSize returns how many bytes the current manager has logged: an
// offset for errorLines.
func (m *manager) logSize() int64 {
	fi, err := os.Stat(m.log)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// errorLine matches a line logged at level error or above, by the
// scaffold's zap logger in development mode (timestamp, tab, level, tab,
// logger name, tab, message: the stack trace that follows is not matched)
// or by klog (client-go's own logging, "E0102 15:04:05.000000 ...").
var errorLine = regexp.MustCompile(`^[^\t]+\t(ERROR|DPANIC|PANIC|FATAL)\t|^[EF]\d{4} \d\d:\d\d:\d\d\.\d{6} `)

// errorLines returns the lines of the current manager's log, from byte
// offset from on, that were logged at level error or above, from any
// logger.
func (m *manager) errorLines(from int64) []string {
	data, err := os.ReadFile(m.log)
	if err != nil {
		m.t.Fatal(err)
	}
	if from > int64(len(data)) {
		from = int64(len(data))
	}
	var lines []string
	for line := range strings.SplitSeq(string(data[from:]), "\n") {
		if errorLine.MatchString(line) {
			lines = append(lines, line)
		}
	}
	return lines
}

// awaitRecurring waits until the current manager's log shows s again at
// least d after it first showed it: evidence that the manager's own
// requests have met the same failure for d (each failed List or Watch of
// an informer is logged).
func (m *manager) awaitRecurring(ctx context.Context, timeout time.Duration, s string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var first time.Time
	seen := 0
	for {
		data, _ := os.ReadFile(m.log)
		if n := bytes.Count(data, []byte(s)); n > seen {
			if seen == 0 {
				first = time.Now()
			} else if time.Since(first) >= d {
				return nil
			}
			seen = n
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the manager's log does not show %s twice %s apart after %s (%d times):\n%s", s, d, timeout, seen, data)
		case <-tick.C:
		}
	}
}

// awaitLog waits until the current manager's log holds s.
func (m *manager) awaitLog(ctx context.Context, timeout time.Duration, s string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		data, _ := os.ReadFile(m.log)
		if bytes.Contains(data, []byte(s)) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the manager's log has no %s after %s:\n%s", s, timeout, data)
		case <-tick.C:
		}
	}
}

// freeAddr returns a loopback host:port that nothing listens on, below
// Linux's ephemeral range (32768 on): a port the kernel handed out and
// took back would soon be handed out again, to the in-process API
// server, etcd or an outgoing connection (the probe's poller opens one
// every 250 ms), before the manager listens on it ("bind: address
// already in use", once in a few runs).
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 100 {
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ln.Close()
		return addr
	}
	t.Fatal("no free loopback port between 20000 and 32000")
	return ""
}

// readyz asks the manager's readiness probe (GET /readyz on the health
// probe address) every 250 ms, as a kubelet would, across its restarts,
// and keeps the answers: the HTTP status, or 0 for none (no manager
// listening).
type readyz struct {
	mu      sync.Mutex
	answers []readyzAnswer
	changed chan struct{}
}

type readyzAnswer struct {
	at   time.Time
	code int
}

func ready(code int) bool   { return code == http.StatusOK }
func failing(code int) bool { return code != 0 && code != http.StatusOK }

func pollReadyz(t *testing.T, addr string) *readyz {
	r := &readyz{changed: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	t.Cleanup(func() { cancel(); <-stopped })
	client := &http.Client{Timeout: time.Second}
	go func() {
		defer close(stopped)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			code := 0
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
			if resp, err := client.Do(req); err == nil {
				code = resp.StatusCode
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			r.mu.Lock()
			r.answers = append(r.answers, readyzAnswer{at: time.Now(), code: code})
			close(r.changed)
			r.changed = make(chan struct{})
			r.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return r
}

// await waits for an answer, asked after the call, that satisfies ok.
func (r *readyz) await(ctx context.Context, timeout time.Duration, what string, ok func(int) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	since := time.Now()
	for {
		r.mu.Lock()
		changed := r.changed
		for _, a := range r.answers {
			if a.at.After(since) && ok(a.code) {
				r.mu.Unlock()
				return nil
			}
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return fmt.Errorf("readiness probe: no %s within %s (answers: %s)", what, timeout, r.codes(since, time.Now()))
		case <-changed:
		}
	}
}

// latest returns the latest answer.
func (r *readyz) latest() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.answers) == 0 {
		return 0
	}
	return r.answers[len(r.answers)-1].code
}

// count returns how many answers between from and to satisfy ok.
func (r *readyz) count(from, to time.Time, ok func(int) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, a := range r.answers {
		if !a.at.Before(from) && !a.at.After(to) && ok(a.code) {
			n++
		}
	}
	return n
}

// codes returns the answers between from and to, in order, each repeat
// of the one before left out: "0,500,200".
func (r *readyz) codes(from, to time.Time) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var codes []string
	last := -1
	for _, a := range r.answers {
		if !a.at.Before(from) && !a.at.After(to) && a.code != last {
			codes = append(codes, fmt.Sprint(a.code))
			last = a.code
		}
	}
	return strings.Join(codes, ",")
}

// poll calls done every 200 ms until it returns true, and returns its
// last error if it has not within timeout.
func poll(ctx context.Context, timeout time.Duration, done func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := done()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// guestbookWatch records, through informers, every version of the
// Guestbooks the API server stores and every Event about them.
type guestbookWatch struct {
	mu      sync.Mutex
	changed chan struct{}
	lines   []string
	latest  *unstructured.Unstructured
	updates int
	// unstalled counts the versions seen without Stalled=True.
	unstalled int
	warned    map[string]int32 // Warning Events by name, with their counts
	counted   map[string]int32 // every Event by name, with its count
}

func watchGuestbooks(t *testing.T, dyn dynamic.Interface, kube kubernetes.Interface, ns string) *guestbookWatch {
	w := &guestbookWatch{changed: make(chan struct{}), warned: map[string]int32{}, counted: map[string]int32{}}
	began := time.Now()
	df := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, nil)
	df.ForResource(guestbooks).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { w.record(obj, false, began) },
		UpdateFunc: func(_, obj any) {
			w.record(obj, true, began)
		},
	})
	kf := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns))
	onEvent := func(obj any) {
		e, ok := obj.(*corev1.Event)
		if !ok || e.InvolvedObject.Kind != "Guestbook" {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if e.Type == corev1.EventTypeWarning {
			w.warned[e.Name] = max(e.Count, 1)
		}
		w.counted[e.Name] = max(e.Count, 1)
		w.lines = append(w.lines, fmt.Sprintf("%6.1fs event %s %s: %s", time.Since(began).Seconds(), e.Type, e.Reason, e.Message))
		w.notify()
	}
	kf.Core().V1().Events().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onEvent, UpdateFunc: func(_, obj any) { onEvent(obj) },
	})
	df.Start(t.Context().Done())
	kf.Start(t.Context().Done())
	t.Cleanup(func() { df.Shutdown(); kf.Shutdown() })
	df.WaitForCacheSync(t.Context().Done())
	kf.WaitForCacheSync(t.Context().Done())
	return w
}

func (w *guestbookWatch) record(obj any, update bool, began time.Time) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if update {
		w.updates++
	}
	if !stalled(u) {
		w.unstalled++
	}
	w.latest = u
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	og, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	var parts []string
	for _, c := range conds {
		m, _ := c.(map[string]any)
		parts = append(parts, fmt.Sprintf("%v=%v(%v)", m["type"], m["status"], m["reason"]))
	}
	w.lines = append(w.lines, fmt.Sprintf("%6.1fs guestbook gen=%d observed=%d %s", time.Since(began).Seconds(), u.GetGeneration(), og, strings.Join(parts, " ")))
	w.notify()
}

// notify wakes the waiters; w.mu is held.
func (w *guestbookWatch) notify() {
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *guestbookWatch) writes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.updates
}

// warnings returns the number of Warning Events recorded so far,
// repetitions included.
func (w *guestbookWatch) warnings() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.warned {
		n += int(c)
	}
	return n
}

// tally is what the Guestbooks showed up to a moment: status writes
// (updates), Events (repeats included), and versions without
// Stalled=True. The difference of two is what a stretch of time showed.
type tally struct{ writes, events, unstalled int }

func (w *guestbookWatch) tally() tally {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.counted {
		n += int(c)
	}
	return tally{writes: w.updates, events: n, unstalled: w.unstalled}
}

func (a tally) minus(b tally) tally {
	return tally{writes: a.writes - b.writes, events: a.events - b.events, unstalled: a.unstalled - b.unstalled}
}

func (w *guestbookWatch) history() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines, "\n")
}

// await waits until the latest Guestbook satisfies ok.
func (w *guestbookWatch) await(ctx context.Context, timeout time.Duration, what string, ok func(*unstructured.Unstructured) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		w.mu.Lock()
		latest, changed := w.latest, w.changed
		w.mu.Unlock()
		if latest != nil && ok(latest) {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("no " + what + " within " + timeout.String() + ":\n" + w.history())
		case <-changed:
		}
	}
}

// settle lets d pass, for what must not happen in it.
func (w *guestbookWatch) settle(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func condition(u *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

func readyForGeneration(u *unstructured.Unstructured) bool {
	og, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	return og == u.GetGeneration() && condition(u, "Ready") == "True"
}

func stalled(u *unstructured.Unstructured) bool { return condition(u, "Stalled") == "True" }
