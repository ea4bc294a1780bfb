package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/watchgrade/watchgrade/examples/kubebuilder"
	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

var guestbooks = schema.GroupVersionResource{Group: "webapp.example.com", Version: "v1", Resource: "guestbooks"}

// TestKubebuilder scaffolds a fresh operator with a pinned kubebuilder,
// fetched from the Go module proxy at test time, gives it the usual logic
// (a Guestbook that Owns a ConfigMap), applies the adoption steps of
// examples/README.md (examples/kubebuilder/adopt.patch), builds it, and runs
// the binary against a real kube-apiserver, as the user "guestbook-manager"
// bound to the ClusterRole that its own RBAC markers generate. The story:
// its CRD missing at startup, then installed; Ready; a quiet restart; the
// ConfigMaps denied at startup, a quiet restart while the Guestbook is
// Stalled, the new manager held past controller-runtime's two-minute
// CacheSyncTimeout, and repaired; denied while running and repaired. Each
// denial must give the Guestbook Stalled and exactly one Warning, a restart
// that changes nothing must write nothing and record no Event (Stalled
// stays True through the one while denied), and the manager must never
// exit by itself.
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

	m := &manager{t: t, bin: filepath.Join(proj, "bin", "manager"), kubeconfig: kubeconfig, log: filepath.Join(proj, "manager.log")}
	t.Cleanup(m.stop)
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
	m.start()
	if err := m.awaitLog(ctx, 2*time.Minute, "if kind is a CRD, it should be installed"); err != nil {
		t.Fatal(err)
	}
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

	// 2. A quiet restart: the new manager writes nothing about a Guestbook
	// that is Ready for its generation.
	m.stop()
	writes := w.writes()
	m.start()
	if err := m.awaitLog(ctx, 2*time.Minute, "Starting workers"); err != nil {
		t.Fatal(err)
	}
	w.settle(ctx, 10*time.Second)
	restartWrites := w.writes() - writes

	// 3. ConfigMaps denied at startup; the manager restarted while the
	// Guestbook is Stalled; the new one held past controller-runtime's
	// CacheSyncTimeout (two minutes), then repaired.
	m.stop()
	setConfigMaps(false)
	warnings := w.warnings()
	started := time.Now()
	m.start()
	if err := w.await(ctx, 2*time.Minute, "Stalled=True", stalled); err != nil {
		t.Fatal(err)
	}
	stalledAfter := time.Since(started)
	if err := w.await(ctx, 30*time.Second, "a Warning", func(*unstructured.Unstructured) bool { return w.warnings() > warnings }); err != nil {
		t.Fatal(err)
	}

	// The restart while Stalled: the new manager's ConfigMaps are denied
	// too, so its workers wait, and it must keep the Stalled it finds: no
	// write, no Event, Stalled=True throughout, from the restart to the
	// repair. That window covers the moment its informer has seen the
	// denial for the human grace, when a Stalled lost over the restart
	// would be written again.
	before := w.tally()
	m.stop()
	started = time.Now()
	m.start()
	if err := m.awaitRecurring(ctx, 2*time.Minute, "configmaps is forbidden", wgwatch.DefaultHumanGrace+time.Second); err != nil {
		t.Fatal(err)
	}
	w.settle(ctx, 2*time.Minute+15*time.Second-time.Since(started))
	held := w.tally().minus(before)
	startupWarnings := w.warnings() - warnings
	repaired := time.Now()
	setConfigMaps(true)
	if err := w.await(ctx, 2*time.Minute, "Ready=True after the repair", readyForGeneration); err != nil {
		t.Fatal(err)
	}
	recoveredAfter := time.Since(repaired)
	t.Logf("e2e: kubebuilder added_lines=%d ready_after=%s restart_writes=%d stalled_writes=%d stalled_events=%d stalled_left=%d stalled_after=%s warnings=%d recovered_after=%s manager_exits=%d denial=startup missing_crd=waited",
		kubebuilder.AddedLines(), round(readyAfter), restartWrites, held.writes, held.events, held.unstalled, round(stalledAfter), startupWarnings, round(recoveredAfter), m.exits())

	// 4. ConfigMaps denied while running: RBAC is checked when a watch
	// opens, so the connections are cut (as an apiserver's own watch
	// timeout would, within 5 to 10 minutes for an informer).
	warnings = w.warnings()
	denied := time.Now()
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
	t.Logf("e2e: kubebuilder added_lines=%d ready_after=%s restart_writes=%d stalled_writes=%d stalled_events=%d stalled_left=%d stalled_after=%s warnings=%d recovered_after=%s manager_exits=%d denial=running",
		kubebuilder.AddedLines(), round(readyAfter), restartWrites, held.writes, held.events, held.unstalled, round(stalledRunning), runningWarnings, round(recoveredRunning), m.exits())

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
	if t.Failed() {
		t.Logf("manager log: %s\nGuestbook history:\n%s", m.log, w.history())
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
	for _, patch := range []string{kubebuilder.OperatorPatch, kubebuilder.AdoptPatch} {
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
	sh(t, proj, nil, "go", "build", "-o", "bin/manager", "./cmd")
	t.Logf("kubebuilder %s: scaffolded in %s, adopted and built in %s", kubebuilder.Version, round(scaffolded), round(time.Since(began)-scaffolded))
	return proj
}

// sh runs a command in dir and fails the test with its output if it fails.
func sh(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
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
// the times it exited without being asked to.
type manager struct {
	t          *testing.T
	bin        string
	kubeconfig string
	log        string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	stopping bool
	exited   int
	out      *os.File
}

func (m *manager) start() {
	m.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	out, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		m.t.Fatal(err)
	}
	cmd := exec.Command(m.bin, "--kubeconfig", m.kubeconfig, "--health-probe-bind-address=0", "--metrics-bind-address=0")
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
