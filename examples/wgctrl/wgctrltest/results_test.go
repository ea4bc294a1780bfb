package wgctrltest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/watchgrade/watchgrade/examples/wgctrl"
	"github.com/watchgrade/watchgrade/examples/wgctrl/wgctrltest"
)

// countingReconciler is the adoption's Reconcile returning what result
// says, counting its calls.
type countingReconciler struct {
	client.Client
	Readiness *wgctrl.Owner
	result    func() (ctrl.Result, error)
	calls     *atomic.Int64
}

func (r *countingReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	r.calls.Add(1)
	gb := &Guestbook{}
	if err := r.Get(ctx, req.NamespacedName, gb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer func() { res, err = r.Readiness.Status(ctx, gb, res, err) }()
	return r.result()
}

// The kit's controller is controller-runtime's own, so what Reconcile
// returns is handled as a manager handles it: a TerminalError is logged
// once and not retried; the deprecated Result{Requeue: true} is retried
// with the rate limiter's backoff. (The kit's model of the controller,
// before it ran the real one, retried a TerminalError: 17 Reconciles and
// 17 error lines in these 10 minutes.)
func TestReconcileResultsAsControllerRuntimeHandlesThem(t *testing.T) {
	key := types.NamespacedName{Namespace: "team-a", Name: "gb"}
	run := func(result func() (ctrl.Result, error)) (calls int64, r *wgctrltest.Result) {
		var n atomic.Int64
		op := guestbookOperator(guestbook(key.Namespace, key.Name))
		op.SetupWithManager, op.Watches = nil, []client.Object{&corev1.ConfigMap{}}
		op.Reconciler = func(c client.Client, readiness *wgctrl.Owner) reconcile.Reconciler {
			return &countingReconciler{Client: c, Readiness: readiness, result: result, calls: &n}
		}
		r = wgctrltest.Run(t, op, wgctrltest.Wait(10*time.Minute))
		return n.Load(), r
	}

	calls, r := run(func() (ctrl.Result, error) {
		return ctrl.Result{}, reconcile.TerminalError(errors.New("spec.replicas: must be at most 5"))
	})
	if calls > 3 || len(r.ErrorLogs()) > 3 {
		t.Errorf("a TerminalError: %d Reconciles and %d error lines in 10 minutes, want a few (not retried): %v", calls, len(r.ErrorLogs()), r.ErrorLogs())
	}
	t.Logf("a TerminalError: reconciles=%d error_lines=%d in 10 minutes", calls, len(r.ErrorLogs()))
	if got := status(r.Conditions(key)); got != "Ready=False/ReconcileFailed Stalled=True/ReconcileFailed" {
		t.Errorf("a TerminalError: %s, want Stalled", got)
	}

	// Five Requeues in a row, then done: six Reconciles at least.
	var requeues atomic.Int64
	calls, _ = run(func() (ctrl.Result, error) {
		if requeues.Add(1) <= 5 {
			//lint:ignore SA1019 what controller-runtime still honours
			return ctrl.Result{Requeue: true}, nil
		}
		return ctrl.Result{}, nil
	})
	t.Logf("Result{Requeue: true} five times: reconciles=%d", calls)
	if calls < 6 {
		t.Errorf("Result{Requeue: true} five times: %d Reconciles, want each requeued (6 at least)", calls)
	}
}

// A Reconciler built without the Owner it is given (its Readiness left
// nil: Status writes nothing) fails the table test, with a message that
// names the mistake. Run fails its t, so the row runs in a process of its
// own.
func TestOwnerNotHandedToTheReconcilerFails(t *testing.T) {
	if os.Getenv("WGCTRLTEST_UNWIRED") == "1" {
		op := guestbookOperator(guestbook("team-a", "gb"))
		op.SetupWithManager, op.Watches = nil, []client.Object{&corev1.ConfigMap{}}
		op.Reconciler = func(c client.Client, _ *wgctrl.Owner) reconcile.Reconciler {
			var n atomic.Int64
			return &countingReconciler{Client: c, result: func() (ctrl.Result, error) { return ctrl.Result{}, nil }, calls: &n}
		}
		wgctrltest.Run(t, op, wgctrltest.Wait(time.Minute))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOwnerNotHandedToTheReconcilerFails$", "-test.count=1")
	cmd.Env = append(os.Environ(), "WGCTRLTEST_UNWIRED=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the table test of a Reconciler without its Owner passed:\n%s", out)
	}
	if want := "is the *wgctrl.Owner that Operator.SetupWithManager (or Reconciler) is given handed to your reconciler"; !strings.Contains(string(out), want) {
		t.Errorf("the failure does not name the mistake (%q):\n%s", want, out)
	}
}

// A setup whose wiring is wrong fails the table test, with a message that
// names the mistake: each row builds the controller with
// ctrl.NewControllerManagedBy, as before Owner.ControllerManagedBy, and
// leaves one thing out. Run fails its t, so each row runs in a process of
// its own.
func TestSetupWiringMistakesFail(t *testing.T) {
	rows := map[string]struct {
		setup func(mgr manager.Manager, readiness *wgctrl.Owner) error
		// ownerWatches is what main passes to grade.Owner.
		ownerWatches []client.Object
		want         string
	}{
		"no Requeue source": {
			setup: func(mgr manager.Manager, readiness *wgctrl.Owner) error {
				return ctrl.NewControllerManagedBy(mgr).For(&Guestbook{}).Owns(&corev1.ConfigMap{}).
					Complete(&GuestbookReconciler{Client: mgr.GetClient(), Readiness: readiness})
			},
			ownerWatches: []client.Object{&corev1.ConfigMap{}},
			want:         "has no Owner.Requeue source",
		},
		"a watched kind left out of grade.Owner": {
			setup: func(mgr manager.Manager, readiness *wgctrl.Owner) error {
				return ctrl.NewControllerManagedBy(mgr).For(&Guestbook{}).Owns(&corev1.ConfigMap{}).
					Watches(&corev1.Secret{}, &handler.EnqueueRequestForObject{}).
					WatchesRawSource(readiness.Requeue()).
					Complete(&GuestbookReconciler{Client: mgr.GetClient(), Readiness: readiness})
			},
			ownerWatches: []client.Object{&corev1.ConfigMap{}},
			want:         "watches Secret.v1, which its Owner does not depend on",
		},
	}
	if name := os.Getenv("WGCTRLTEST_MISWIRED"); name != "" {
		row := rows[name]
		op := guestbookOperator(guestbook("team-a", "gb"))
		op.SetupWithManager, op.OwnerWatches = row.setup, row.ownerWatches
		wgctrltest.Run(t, op, wgctrltest.Wait(time.Minute))
		return
	}
	for name, row := range rows {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSetupWiringMistakesFail$", "-test.count=1")
			cmd.Env = append(os.Environ(), "WGCTRLTEST_MISWIRED="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the table test of a setup with %s passed:\n%s", name, out)
			}
			if !strings.Contains(string(out), row.want) {
				t.Errorf("the failure does not name the mistake (%q):\n%s", row.want, out)
			}
		})
	}
	// Both wired, as the old way wires them: the run passes.
	op := guestbookOperator(guestbook("team-a", "gb"))
	op.OwnerWatches = []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}}
	op.SetupWithManager = func(mgr manager.Manager, readiness *wgctrl.Owner) error {
		return ctrl.NewControllerManagedBy(mgr).For(&Guestbook{}).Owns(&corev1.ConfigMap{}).
			Watches(&corev1.Secret{}, &handler.EnqueueRequestForObject{}).
			WatchesRawSource(readiness.Requeue()).
			Complete(&GuestbookReconciler{Client: mgr.GetClient(), Readiness: readiness})
	}
	res := wgctrltest.Run(t, op, wgctrltest.Wait(time.Minute))
	if got := status(res.Conditions(types.NamespacedName{Namespace: "team-a", Name: "gb"})); got != "Ready=True/Established" {
		t.Errorf("wired the old way: %s, want Ready=True/Established", got)
	}
}

// indexingReconciler lists the ConfigMaps of its Guestbook by the index
// its setup adds, as a scaffolded controller often does.
type indexingReconciler struct {
	GuestbookReconciler
}

func (r *indexingReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cms corev1.ConfigMapList
	if err := r.List(ctx, &cms, client.InNamespace(req.Namespace), client.MatchingFields{"guestbook": req.Name}); err != nil {
		return ctrl.Result{}, err
	}
	return r.GuestbookReconciler.Reconcile(ctx, req)
}

// The indexes a setup adds (mgr.GetFieldIndexer().IndexField) reach the
// client the Reconcile lists with: without them, every List by the field
// fails.
func TestSetupIndexesReachTheClient(t *testing.T) {
	key := types.NamespacedName{Namespace: "team-a", Name: "gb"}
	op := guestbookOperator(guestbook(key.Namespace, key.Name))
	op.SetupWithManager = func(mgr manager.Manager, readiness *wgctrl.Owner) error {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.ConfigMap{}, "guestbook", func(o client.Object) []string {
			return []string{o.GetLabels()["guestbook"]}
		}); err != nil {
			return err
		}
		r := &indexingReconciler{GuestbookReconciler{Client: mgr.GetClient(), Readiness: readiness}}
		return readiness.ControllerManagedBy(mgr).For(&Guestbook{}).Owns(&corev1.ConfigMap{}).Complete(r)
	}
	res := wgctrltest.Run(t, op, wgctrltest.Wait(time.Minute), wgctrltest.Restart(), wgctrltest.Wait(time.Minute))
	if lines := res.ErrorLogs(); len(lines) > 0 {
		t.Errorf("error-level lines: %q", lines)
	}
	if got := status(res.Conditions(key)); got != "Ready=True/Established" {
		t.Errorf("%s, want Ready=True/Established", got)
	}
}

// A rollout of a leader-elected operator (the new process started while
// the old one holds the lease, the old one stopped once the new one is
// ready, the lease taken over 15 s later) changes nothing an owner shows:
// no write, no Event, no error-level line, over healthy streams and over
// a denial alike. The new process's probe passes while it waits for the
// lease, or the rollout would hang.
func TestRolloutChangesNothing(t *testing.T) {
	key := types.NamespacedName{Namespace: "team-a", Name: "gb"}
	for _, tc := range []struct {
		name   string
		before []wgctrltest.Step
		status string
	}{
		{"healthy", []wgctrltest.Step{wgctrltest.Wait(time.Minute)}, "Ready=True/Established"},
		{"denied", []wgctrltest.Step{wgctrltest.Deny(&corev1.ConfigMap{}, ""), wgctrltest.Wait(time.Minute)}, "Ready=False/Forbidden Stalled=True/Forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps := append(slices.Clone(tc.before), wgctrltest.Rollout(), wgctrltest.Wait(5*time.Minute), wgctrltest.Rollout(), wgctrltest.Wait(5*time.Minute))
			res := wgctrltest.Run(t, guestbookOperator(guestbook(key.Namespace, key.Name)), steps...)
			if got := status(res.Conditions(key)); got != tc.status {
				t.Errorf("%s, want %s", got, tc.status)
			}
			if w, e := res.StatusWrites(key), len(res.Events(key)); w != 1 || e != 1 {
				t.Errorf("writes=%d events=%d, want 1 and 1 (the first, before the rollouts): %q", w, e, res.Events(key))
			}
			if tc.name == "healthy" && len(res.ErrorLogs()) > 0 {
				t.Errorf("error-level lines: %q", res.ErrorLogs())
			}
			waited := 0
			for _, r := range res.Timeline() {
				if r.What == wgctrltest.RecordProbe && strings.Contains(r.Detail, "waiting for the lease") {
					waited++
				}
			}
			if waited != 2 {
				t.Errorf("the new process was ready while it waited for the lease %d times, want 2", waited)
			}
		})
	}
}

// A denial names the kind denied and the namespace, as the real API
// server words it: the Stalled message tells the human which Role to fix.
func TestDenyNamesTheKindAndTheNamespace(t *testing.T) {
	key := types.NamespacedName{Namespace: "team-a", Name: "gb"}
	op := guestbookOperator(guestbook(key.Namespace, key.Name))
	op.SetupWithManager = nil
	op.Namespaces = []string{"team-a", "team-b"}
	op.Watches = []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}}
	op.Reconciler = func(c client.Client, readiness *wgctrl.Owner) reconcile.Reconciler {
		return &GuestbookReconciler{Client: c, Readiness: readiness}
	}
	res := wgctrltest.Run(t, op, wgctrltest.Wait(time.Minute), wgctrltest.Deny(&corev1.Secret{}, "team-a"), wgctrltest.Wait(time.Minute))
	var stalled string
	for _, c := range res.Conditions(key) {
		if c.Type == "Stalled" {
			stalled = c.Message
		}
	}
	for _, want := range []string{`resource "secrets"`, `in the namespace "team-a"`} {
		if !strings.Contains(stalled, want) {
			t.Errorf("Stalled message %q does not say %s", stalled, want)
		}
	}
}

// wire is the Guestbook operator's wiring as its main runs it once the
// manager is made (Operator.Main): the Owner, the controller, the probe.
func wire(mgr manager.Manager, grade *wgctrl.Grader) error {
	readiness, err := grade.Owner(mgr, &Guestbook{})
	if err != nil {
		return err
	}
	if err := (&GuestbookReconciler{Client: mgr.GetClient(), Readiness: readiness}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("watches", grade.ReadyzCheck)
}

// The operator wired by the function its main calls (Operator.Main): the
// kit runs that wiring, its probe included, through a denial and a
// rollout as it runs SetupWithManager's.
func TestMainRunsTheWiringMainRuns(t *testing.T) {
	key := types.NamespacedName{Namespace: "team-a", Name: "gb"}
	op := guestbookOperator(guestbook(key.Namespace, key.Name))
	op.SetupWithManager, op.Main = nil, wire
	res := wgctrltest.Run(t, op, wgctrltest.Wait(time.Minute), wgctrltest.Deny(&corev1.ConfigMap{}, ""), wgctrltest.Wait(time.Minute),
		wgctrltest.Rollout(), wgctrltest.Wait(time.Minute), wgctrltest.Allow(&corev1.ConfigMap{}, ""), wgctrltest.Wait(time.Minute))
	if got := status(res.Conditions(key)); got != "Ready=True/Established" {
		t.Errorf("%s, want Ready=True/Established", got)
	}
	if w := res.Warnings(key); w != 1 {
		t.Errorf("%d Warnings, want 1 (the denial; the rollout adds none)", w)
	}
	var probes []string
	for _, r := range res.Timeline() {
		if r.What == wgctrltest.RecordProbe {
			probes = append(probes, r.Detail)
		}
	}
	if len(probes) == 0 || !strings.HasPrefix(probes[0], "not ready") {
		t.Errorf("probe records %q, want the first not ready (Main's check is the Grader's: it waits for the informers)", probes)
	}
}

// Wiring mistakes in the function main calls fail the table test, naming
// the mistake, as SetupWithManager's do (TestSetupWiringMistakesFail).
func TestMainWiringMistakesFail(t *testing.T) {
	controller := func(mgr manager.Manager, readiness *wgctrl.Owner) error {
		return (&GuestbookReconciler{Client: mgr.GetClient(), Readiness: readiness}).SetupWithManager(mgr)
	}
	rows := map[string]struct {
		main func(mgr manager.Manager, grade *wgctrl.Grader) error
		want string
	}{
		"healthz.Ping as the readiness check": {
			main: func(mgr manager.Manager, grade *wgctrl.Grader) error {
				readiness, err := grade.Owner(mgr, &Guestbook{})
				if err != nil {
					return err
				}
				if err := controller(mgr, readiness); err != nil {
					return err
				}
				return mgr.AddReadyzCheck("readyz", healthz.Ping)
			},
			want: `not healthz.Ping`,
		},
		"no readiness check": {
			main: func(mgr manager.Manager, grade *wgctrl.Grader) error {
				readiness, err := grade.Owner(mgr, &Guestbook{})
				if err != nil {
					return err
				}
				return controller(mgr, readiness)
			},
			want: "registers no readiness check",
		},
		"no Owner": {
			main: func(mgr manager.Manager, grade *wgctrl.Grader) error {
				if err := ctrl.NewControllerManagedBy(mgr).For(&Guestbook{}).Owns(&corev1.ConfigMap{}).Complete(&GuestbookReconciler{Client: mgr.GetClient()}); err != nil {
					return err
				}
				return mgr.AddReadyzCheck("watches", grade.ReadyzCheck)
			},
			want: "made 0 Owners",
		},
		"no Requeue source": {
			main: func(mgr manager.Manager, grade *wgctrl.Grader) error {
				readiness, err := grade.Owner(mgr, &Guestbook{}, &corev1.ConfigMap{})
				if err != nil {
					return err
				}
				if err := ctrl.NewControllerManagedBy(mgr).For(&Guestbook{}).Owns(&corev1.ConfigMap{}).
					Complete(&GuestbookReconciler{Client: mgr.GetClient(), Readiness: readiness}); err != nil {
					return err
				}
				return mgr.AddReadyzCheck("watches", grade.ReadyzCheck)
			},
			want: "has no Owner.Requeue source",
		},
	}
	if name := os.Getenv("WGCTRLTEST_MAIN_MISWIRED"); name != "" {
		op := guestbookOperator(guestbook("team-a", "gb"))
		op.SetupWithManager, op.Main = nil, rows[name].main
		wgctrltest.Run(t, op, wgctrltest.Wait(time.Minute))
		return
	}
	for name, row := range rows {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestMainWiringMistakesFail$", "-test.count=1")
			cmd.Env = append(os.Environ(), "WGCTRLTEST_MAIN_MISWIRED="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the table test of a main with %s passed:\n%s", name, out)
			}
			if !strings.Contains(string(out), row.want) {
				t.Errorf("the failure does not name the mistake (%q):\n%s", row.want, out)
			}
		})
	}
}
