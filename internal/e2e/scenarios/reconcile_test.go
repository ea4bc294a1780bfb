package scenarios

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// TestFailedReconcileIsNeverReady: on a real API server, a Reconcile that
// fails takes Ready=True away from the generation it failed (the status
// step's ReconcileFailed gate): kstatus InProgress and observedGeneration
// current while it is retried, Failed with one Warning when the failure is
// terminal, Current again once a Reconcile succeeds. Its streams are
// healthy all along: only the Reconcile's own result differs.
func TestFailedReconcileIsNeverReady(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	if err := c.InstallCRD(ctx, widgetCRD()); err != nil {
		t.Fatal(err)
	}
	client := dynamic.NewForConfigOrDie(c.Config())
	ctl := startOwner(t, client, kubernetes.NewForConfigOrDie(c.Config()), "owner", configmapsGVR.GroupResource().String())
	startStream(t, client, configmapsGVR, newProbe(), wgwatch.StreamOptions{Observer: ctl.observer()})
	ctl.waitReady(t, 30*time.Second)
	ctl.waitKstatus(t, 30*time.Second, status.CurrentStatus, wgreadiness.ReasonEstablished)

	before := len(ctl.writeLog())
	ctl.setFail(errors.New("creating the widget's StatefulSet: the server is currently unable to handle the request"))
	ctl.waitReadyReason(t, 30*time.Second, metav1.ConditionFalse, wgstatus.ReasonReconcileFailed, false)
	ctl.waitKstatus(t, 30*time.Second, status.InProgressStatus, wgstatus.ReasonReconcileFailed)
	transientWarnings := ctl.events.count(corev1.EventTypeWarning)

	ctl.setFail(wgstatus.Terminal(errors.New("spec.replicas: must be at most 5, is 7")))
	ctl.waitReadyReason(t, 30*time.Second, metav1.ConditionFalse, wgstatus.ReasonReconcileFailed, true)
	ctl.waitKstatus(t, 30*time.Second, status.FailedStatus, wgstatus.ReasonReconcileFailed)
	_, obj, err := ctl.kstatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conds, _ := conditionsOf(obj)
	stalled := meta.FindStatusCondition(conds, wgreadiness.ConditionStalled)
	terminalWarnings := ctl.events.count(corev1.EventTypeWarning)

	failingWrites := ctl.writeLog()[before:]
	ctl.setFail(nil)
	ctl.waitReady(t, 30*time.Second)
	ctl.waitKstatus(t, 30*time.Second, status.CurrentStatus, wgreadiness.ReasonEstablished)

	if transientWarnings != 0 {
		t.Errorf("a failure that is retried recorded %d Warnings, want 0: it is in progress, not a human's to fix", transientWarnings)
	}
	if terminalWarnings != 1 {
		t.Errorf("a terminal failure recorded %d Warnings, want 1: %v", terminalWarnings, ctl.events.logCopy())
	}
	if stalled == nil || stalled.Message == "" {
		t.Errorf("Stalled for a terminal failure = %+v, want a message naming the cause", stalled)
	}
	for _, w := range failingWrites {
		if strings.HasPrefix(w, "True/") {
			t.Errorf("Ready=True written while the Reconcile failed: %v", failingWrites)
		}
	}
	log := ctl.writeLog()
	fmt.Printf("e2e: failed-reconcile retried_kstatus=InProgress terminal_kstatus=Failed recovered_kstatus=Current warnings=transient:%d,terminal:%d ready_true_while_failing=%d writes=%v\n",
		transientWarnings, terminalWarnings, countPrefix(failingWrites, "True/"), log)
}

func countPrefix(log []string, prefix string) int {
	n := 0
	for _, l := range log {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}
