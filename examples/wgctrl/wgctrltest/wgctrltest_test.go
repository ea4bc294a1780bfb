package wgctrltest_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/watchgrade/watchgrade/examples/wgctrl/wgctrltest"
)

// The faults an operator lives through, each a row of what its users must
// see: a Warning only when a human must act, nothing for what is routine,
// nothing for a restart that changed nothing.
func TestGuestbookThroughFaults(t *testing.T) {
	a := types.NamespacedName{Namespace: "team-a", Name: "gb"}
	b := types.NamespacedName{Namespace: "team-b", Name: "gb"}
	type want struct {
		status   string
		writes   int
		events   int
		warnings int
	}
	for _, tc := range []struct {
		name       string
		namespaces []string
		steps      []wgctrltest.Step
		want       map[types.NamespacedName]want
		// slack is how many more writes and Events than want's may come:
		// an informer denied while running may be published Blocked (not
		// yet needing a human) when TransientGrace ends just before the
		// reflector's retry confirms the denial, a moment later; a
		// Reconcile in between writes Ready=False with a Normal, then the
		// Stalled with its Warning (3 runs in 30).
		slack int
	}{{
		name: "a 410 storm and a short outage are routine",
		steps: []wgctrltest.Step{wgctrltest.Wait(time.Minute), wgctrltest.ExpiryStorm(&corev1.ConfigMap{}, 5, 10*time.Minute),
			wgctrltest.Outage(10 * time.Second), wgctrltest.Wait(time.Minute)},
		want: map[types.NamespacedName]want{a: {"Ready=True/Established", 1, 1, 0}},
	}, {
		name:  "ConfigMaps denied from the start",
		steps: []wgctrltest.Step{wgctrltest.Deny(&corev1.ConfigMap{}, ""), wgctrltest.Wait(time.Minute)},
		want:  map[types.NamespacedName]want{a: {"Ready=False/Forbidden Stalled=True/Forbidden", 1, 1, 1}},
	}, {
		name: "the controller restarted while Stalled",
		steps: []wgctrltest.Step{wgctrltest.Deny(&corev1.ConfigMap{}, ""), wgctrltest.Wait(time.Minute),
			wgctrltest.Restart(), wgctrltest.Wait(20 * time.Minute)},
		want: map[types.NamespacedName]want{a: {"Ready=False/Forbidden Stalled=True/Forbidden", 1, 1, 1}},
	}, {
		name: "denied while running, restarted, repaired",
		steps: []wgctrltest.Step{wgctrltest.Wait(time.Minute), wgctrltest.Deny(&corev1.ConfigMap{}, ""), wgctrltest.Wait(time.Minute),
			wgctrltest.Restart(), wgctrltest.Wait(20 * time.Minute), wgctrltest.Allow(&corev1.ConfigMap{}, ""), wgctrltest.Wait(3 * time.Minute)},
		want:  map[types.NamespacedName]want{a: {"Ready=True/Established", 3, 3, 1}},
		slack: 1,
	}, {
		name:       "ConfigMaps denied in one namespace of two",
		namespaces: []string{"team-a", "team-b"},
		steps:      []wgctrltest.Step{wgctrltest.Wait(time.Minute), wgctrltest.Deny(&corev1.ConfigMap{}, "team-b"), wgctrltest.Wait(time.Minute), wgctrltest.Restart(), wgctrltest.Wait(20 * time.Minute)},
		want: map[types.NamespacedName]want{
			a: {"Ready=True/Established", 1, 1, 0},
			b: {"Ready=False/Forbidden Stalled=True/Forbidden", 2, 2, 1},
		},
		slack: 1,
	}, {
		// The cache makes team-b's informer first: it never syncs, and
		// the controller's source never asks for team-a's.
		name:       "ConfigMaps denied in one namespace of two, whose informer the cache makes first, then restarted",
		namespaces: []string{"team-b", "team-a"},
		steps:      []wgctrltest.Step{wgctrltest.Wait(time.Minute), wgctrltest.Deny(&corev1.ConfigMap{}, "team-b"), wgctrltest.Wait(time.Minute), wgctrltest.Restart(), wgctrltest.Wait(20 * time.Minute)},
		want: map[types.NamespacedName]want{
			a: {"Ready=True/Established", 1, 1, 0},
			b: {"Ready=False/Forbidden Stalled=True/Forbidden", 2, 2, 1},
		},
		slack: 1,
	}, {
		name:       "ConfigMaps denied from the start in one namespace of two, whose informer the cache makes first",
		namespaces: []string{"team-b", "team-a"},
		steps:      []wgctrltest.Step{wgctrltest.Deny(&corev1.ConfigMap{}, "team-b"), wgctrltest.Wait(20 * time.Minute)},
		want: map[types.NamespacedName]want{
			// The controller's workers wait for team-b's informer to
			// sync: nothing reconciles team-a's owner, nothing writes
			// it, nothing pages it.
			a: {"", 0, 0, 0},
			b: {"Ready=False/Forbidden Stalled=True/Forbidden", 1, 1, 1},
		},
	}, {
		// cache.RemoveInformer, then GetInformer, during the denial: the
		// new informer starting does not write the stall away.
		name: "informers replaced while denied, then repaired",
		steps: []wgctrltest.Step{wgctrltest.Wait(time.Minute), wgctrltest.Deny(&corev1.ConfigMap{}, ""), wgctrltest.Wait(time.Minute),
			wgctrltest.ReplaceInformers(&corev1.ConfigMap{}), wgctrltest.Wait(time.Minute), wgctrltest.Allow(&corev1.ConfigMap{}, ""), wgctrltest.Wait(3 * time.Minute)},
		want:  map[types.NamespacedName]want{a: {"Ready=True/Established", 3, 3, 1}},
		slack: 1,
	}, {
		// The control plane down past ProgressDeadline, the controller
		// restarted during it: nothing can be written until it is back,
		// then the stall with one Warning, then Ready.
		name: "restarted during an outage past ProgressDeadline",
		steps: []wgctrltest.Step{wgctrltest.Wait(time.Minute), wgctrltest.OutageBegins(), wgctrltest.Wait(6 * time.Minute),
			wgctrltest.Restart(), wgctrltest.Wait(10 * time.Minute), wgctrltest.OutageEnds(), wgctrltest.Wait(3 * time.Minute)},
		want:  map[types.NamespacedName]want{a: {"Ready=True/Established", 3, 3, 1}},
		slack: 1,
	}, {
		// Deleted between Reconcile's read and its status write: the
		// NotFound is routine, nothing more is written, nothing logged.
		name:  "an owner deleted during its reconcile",
		steps: []wgctrltest.Step{wgctrltest.Wait(time.Minute), wgctrltest.DeleteDuringReconcile(a), wgctrltest.Wait(time.Minute)},
		want:  map[types.NamespacedName]want{a: {"", 1, 1, 0}},
	}, {
		name:  "status writes that conflict",
		steps: []wgctrltest.Step{wgctrltest.StatusConflicts(3), wgctrltest.Wait(time.Minute)},
		want:  map[types.NamespacedName]want{a: {"Ready=True/Established", 1, 1, 0}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			op := guestbookOperator(guestbook(a.Namespace, a.Name), guestbook(b.Namespace, b.Name))
			op.Namespaces = tc.namespaces
			res := wgctrltest.Run(t, op, tc.steps...)
			for key, w := range tc.want {
				got := want{status(res.Conditions(key)), res.StatusWrites(key), len(res.Events(key)), res.Warnings(key)}
				if got.writes > w.writes && got.writes <= w.writes+tc.slack {
					got.writes = w.writes
				}
				if got.events > w.events && got.events <= w.events+tc.slack {
					got.events = w.events
				}
				if got != w {
					t.Errorf("%s: got %+v, want %+v; Events %q", key, got, w, res.Events(key))
				}
			}
			// An error-level line means a human must act: none without a
			// denial.
			if !slices.ContainsFunc(tc.steps, func(s wgctrltest.Step) bool { return strings.HasPrefix(s.String(), "deny ") }) {
				if lines := res.ErrorLogs(); len(lines) > 0 {
					t.Errorf("error-level lines with no denial: %q", lines)
				}
			}
		})
	}
}
