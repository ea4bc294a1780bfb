package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/watchgrade/watchgrade/examples/watchtarget"
	"github.com/watchgrade/watchgrade/examples/wgctrl"
	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
)

// TestOwnersFollowTheirNamespace runs an operator built on wgctrl whose
// manager's cache is restricted to two namespaces, team-a and team-b, each
// with a WatchTarget that owns ConfigMaps, on a real kube-apiserver with
// RBAC, as a user bound to a Role in each namespace. Both are Ready; then
// the ConfigMaps of team-b are denied (the watches end every two seconds
// (shortWatches), so RBAC is checked again at once): team-b's WatchTarget must be
// Stalled with one Warning, and team-a's must stay Ready, with no status
// write and no Event, for as long again as team-b took to stall and a
// transient grace more. Then the operator restarts while team-b is still
// denied (its workers wait for team-b's ConfigMaps; the standby writer
// runs): neither WatchTarget may be written or get an Event. Before wgctrl told the informers of the
// namespaces apart, team-a's was Stalled too, with a Warning naming team-b.
func TestOwnersFollowTheirNamespace(t *testing.T) {
	c := harness.Start(t, harness.Options{RBAC: true})
	ctx := t.Context()
	admin := kubernetes.NewForConfigOrDie(c.Config())
	crd, err := watchtarget.CRD()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.InstallCRD(ctx, crd); err != nil {
		t.Fatal(err)
	}
	const user, roleAll, roleNoConfigMaps = "tenants-manager", "tenants", "tenants-no-configmaps"
	wtRules := []rbacv1.PolicyRule{
		{APIGroups: []string{watchtarget.GroupVersion.Group}, Resources: []string{"watchtargets"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{watchtarget.GroupVersion.Group}, Resources: []string{"watchtargets/status"}, Verbs: []string{"get", "update", "patch"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
	}
	for name, rules := range map[string][]rbacv1.PolicyRule{
		roleAll:          append(wtRules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}),
		roleNoConfigMaps: wtRules,
	} {
		if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bind := func(ns, role string) {
		t.Helper()
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}
		_ = admin.RbacV1().RoleBindings(ns).Delete(ctx, user, metav1.DeleteOptions{})
		if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	namespaces := []string{"team-a", "team-b"}
	for _, ns := range namespaces {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		bind(ns, roleAll)
	}

	scheme := watchTargetScheme(t)
	adminClient, err := client.New(c.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range namespaces {
		wt := &watchtarget.WatchTarget{ObjectMeta: metav1.ObjectMeta{Name: "quota", Namespace: ns},
			Spec: watchtarget.Spec{Resources: []watchtarget.ResourceRef{{Version: "v1", Resource: "configmaps"}}}}
		if err := adminClient.Create(ctx, wt); err != nil {
			t.Fatal(err)
		}
	}

	cfg := c.As(user)
	cfg.Wrap(shortWatches)
	cacheOpts := cache.Options{DefaultNamespaces: map[string]cache.Config{namespaces[0]: {}, namespaces[1]: {}}}
	stop := runWatchTargetOperator(t, cfg, scheme, cacheOpts)

	key := func(ns string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: "quota"} }
	get := func(ns string) *watchtarget.WatchTarget {
		t.Helper()
		wt := &watchtarget.WatchTarget{}
		if err := adminClient.Get(ctx, key(ns), wt); err != nil {
			t.Fatal(err)
		}
		return wt
	}
	isTrue := func(wt *watchtarget.WatchTarget, typ string) bool {
		return meta.IsStatusConditionTrue(wt.Status.Conditions, typ) && wt.Status.ObservedGeneration == wt.Generation
	}
	events := func(ns string) (normal, warning int) {
		t.Helper()
		return countEvents(t, admin, ns)
	}
	await := func(what string, timeout time.Duration, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting %s for %s: %v; team-a %v; team-b %v", timeout, what, err, get("team-a").Status.Conditions, get("team-b").Status.Conditions)
		}
	}
	await("both Ready", time.Minute, func() bool {
		return isTrue(get("team-a"), wgreadiness.ConditionReady) && isTrue(get("team-b"), wgreadiness.ConditionReady)
	})
	await("a Normal in each namespace", 10*time.Second, func() bool {
		a, _ := events("team-a")
		b, _ := events("team-b")
		return a >= 1 && b >= 1
	})

	denied := time.Now()
	bind("team-b", roleNoConfigMaps)
	await("team-b Stalled", 2*time.Minute, func() bool { return isTrue(get("team-b"), wgreadiness.ConditionStalled) })
	stalledAfter := time.Since(denied)
	await("team-b's Warning", 10*time.Second, func() bool { _, w := events("team-b"); return w >= 1 })

	// quiet watches both WatchTargets for d, and returns each one's status
	// writes and new Events.
	quiet := func(d time.Duration) (writes, newEvents map[string]int) {
		writes, newEvents = map[string]int{}, map[string]int{}
		rv, count := map[string]string{}, map[string]int{}
		for _, ns := range namespaces {
			rv[ns] = get(ns).ResourceVersion
			n, w := events(ns)
			count[ns] = n + w
		}
		_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, d, true, func(context.Context) (bool, error) {
			for _, ns := range namespaces {
				if get(ns).ResourceVersion != rv[ns] {
					writes[ns] = 1
				}
				n, w := events(ns)
				newEvents[ns] = n + w - count[ns]
			}
			return false, nil
		})
		return writes, newEvents
	}

	// team-a must not move: watched for as long again as team-b took to
	// stall, and a transient grace more.
	watchFor := stalledAfter + 30*time.Second
	writes, newEvents := quiet(watchFor)
	afterA := get("team-a")
	_, warningB := events("team-b")
	if writes["team-a"] != 0 || newEvents["team-a"] != 0 {
		t.Errorf("team-a's WatchTarget moved while only team-b's ConfigMaps were denied: %d writes (conditions now %v), %d Events", writes["team-a"], afterA.Status.Conditions, newEvents["team-a"])
	}
	if warningB != 1 {
		t.Errorf("team-b's Warnings = %d, want 1", warningB)
	}

	// The operator restarted while team-b is denied: the new manager's
	// workers wait for team-b's ConfigMaps, its standby writer sees
	// team-a Ready and team-b Stalled as persisted, and writes nothing.
	stop()
	runWatchTargetOperator(t, cfg, scheme, cacheOpts)
	const restartWatch = time.Minute // the human grace, the informer's retries, and more
	rWrites, rEvents := quiet(restartWatch)
	t.Logf("e2e: namespaces denied=team-b stalled_after=%.1fs watched=%.0fs other_ready=%v other_writes=%d other_events=%d denied_warnings=%d restart_watched=%.0fs stalled_writes=%d stalled_events=%d ready_writes=%d ready_events=%d",
		stalledAfter.Seconds(), watchFor.Seconds(), isTrue(afterA, wgreadiness.ConditionReady), writes["team-a"], newEvents["team-a"], warningB,
		restartWatch.Seconds(), rWrites["team-b"], rEvents["team-b"], rWrites["team-a"], rEvents["team-a"])
	for _, ns := range namespaces {
		if rWrites[ns] != 0 || rEvents[ns] != 0 {
			t.Errorf("a restart that changed nothing: %s's WatchTarget written %d times, %d new Events; conditions now %v", ns, rWrites[ns], rEvents[ns], get(ns).Status.Conditions)
		}
	}
	if !isTrue(get("team-b"), wgreadiness.ConditionStalled) || !isTrue(get("team-a"), wgreadiness.ConditionReady) {
		t.Errorf("after the restart: team-a %v, team-b %v; want Ready, and Stalled", get("team-a").Status.Conditions, get("team-b").Status.Conditions)
	}
}

// runWatchTargetOperator starts, on cfg, an operator wired with wgctrl as
// examples/README.md's steps wire a kubebuilder scaffold: a Grader's
// ManagerOptions (with cacheOpts), an Owner of WatchTargets that watches
// ConfigMaps, and a controller For WatchTargets, Owning ConfigMaps, whose
// Reconcile reads the WatchTarget and ends with Owner.Status. Its
// controllers wait for a kind that needs a human (WaitForHuman), as the
// adoption's do. It returns the function that stops it, which the test's
// end calls too.
func runWatchTargetOperator(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, cacheOpts cache.Options) (stop func()) {
	t.Helper()
	grade, err := wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry(), WaitForHuman: true})
	if err != nil {
		t.Fatal(err)
	}
	_, stop = startWatchTargetOperator(t, cfg, grade, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: new(true)},
	}, func() {})
	return stop
}

// startWatchTargetOperator starts the operator runWatchTargetOperator
// describes with grade and the manager options opts (which go through
// grade.ManagerOptions), the Grader's probe as its readyz check;
// reconciled is called after each Reconcile, its status step included.
func startWatchTargetOperator(t *testing.T, cfg *rest.Config, grade *wgctrl.Grader, opts ctrl.Options, reconciled func()) (ctrl.Manager, func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, grade.ManagerOptions(opts))
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.AddReadyzCheck("watches", grade.ReadyzCheck); err != nil {
		t.Fatal(err)
	}
	readiness, err := grade.Owner(mgr, &watchtarget.WatchTarget{})
	if err != nil {
		t.Fatal(err)
	}
	reconciler := ctrlReconcileFunc(func(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
		defer reconciled()
		wt := &watchtarget.WatchTarget{}
		if err := mgr.GetClient().Get(ctx, req.NamespacedName, wt); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		defer func() { res, err = readiness.Status(ctx, wt, res, err) }()
		return ctrl.Result{}, nil
	})
	if err := readiness.ControllerManagedBy(mgr).For(&watchtarget.WatchTarget{}).Owns(&corev1.ConfigMap{}).
		Complete(reconciler); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return mgr, stopOnce(t, cancel, done)
}

// countEvents counts the Normal and the Warning Events in namespace ns,
// each Event as many times as it occurred.
func countEvents(t *testing.T, kube kubernetes.Interface, ns string) (normal, warning int) {
	t.Helper()
	list, err := kube.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		n := max(int(e.DeprecatedCount), 1)
		if e.Type == corev1.EventTypeWarning {
			warning += n
		} else {
			normal += n
		}
	}
	return normal, warning
}

// watchTargetScheme is client-go's scheme with WatchTarget.
func watchTargetScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, watchtarget.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return scheme
}

// ctrlReconcileFunc is a reconcile.Reconciler from a function.
type ctrlReconcileFunc func(context.Context, ctrl.Request) (ctrl.Result, error)

func (f ctrlReconcileFunc) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return f(ctx, req)
}
