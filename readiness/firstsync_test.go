package readiness_test

import (
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// A new owner's first sync is one write: while its streams are still
// starting within StartGrace, Apply leaves an owner with none of the trio
// alone (it wrote Reconciling/InitialSync, then Ready=True a second later:
// two writes and two Events per owner at an install), and writes Ready=True
// once they are live. The neighbouring cases are written at once: a
// caller's gate progressing, a stream blocked, a stream that is still not
// live when the grace ends (OnChange is called then), an owner that
// already has conditions.
func TestANewOwnersFirstSyncIsOneWrite(t *testing.T) {
	type step struct {
		wait  time.Duration
		state func(string) wgwatch.State // of both streams, nil for none
		gate  *wgreadiness.Gate
	}
	for _, tc := range []struct {
		name  string
		conds []metav1.Condition
		steps []step
		// want is Ready's status after each step's Apply, "" for none.
		want []metav1.ConditionStatus
	}{
		{"streams live within the grace", nil,
			[]step{{state: starting}, {wait: time.Second, state: syncing}, {wait: time.Second, state: watching}},
			[]metav1.ConditionStatus{"", "", metav1.ConditionTrue}},
		{"a caller's gate progressing", nil,
			[]step{{state: syncing, gate: &waitingForDB}, {state: watching}},
			[]metav1.ConditionStatus{metav1.ConditionUnknown, metav1.ConditionUnknown}},
		{"a stream blocked", nil,
			[]step{{state: starting}, {wait: time.Second, state: refused}},
			[]metav1.ConditionStatus{"", metav1.ConditionUnknown}},
		{"a stream denied", nil,
			[]step{{state: forbidden}},
			[]metav1.ConditionStatus{metav1.ConditionFalse}},
		{"streams still starting when the grace ends", nil,
			[]step{{state: syncing}, {wait: wgreadiness.DefaultStartGrace + time.Second}},
			[]metav1.ConditionStatus{"", metav1.ConditionUnknown}},
		{"an owner with conditions already (written before the grace)",
			[]metav1.Condition{{Type: wgreadiness.ConditionReady, Status: metav1.ConditionUnknown, ObservedGeneration: gen, Reason: "InitialSync"},
				{Type: wgreadiness.ConditionReconciling, Status: metav1.ConditionTrue, ObservedGeneration: gen - 1, Reason: "InitialSync"}},
			[]step{{state: syncing}},
			[]metav1.ConditionStatus{metav1.ConditionUnknown}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				changes := &calls{}
				a := newAccumulator(t, wgreadiness.AccumulatorOptions{OnChange: changes.add})
				a.Track(ownerA, "configmaps", "secrets")
				conds := tc.conds
				writes := 0
				for i, st := range tc.steps {
					time.Sleep(st.wait)
					if st.state != nil {
						a.StateChanged(st.state("configmaps"))
						a.StateChanged(st.state("secrets"))
					}
					if st.gate != nil {
						a.SetGate(ownerA, *st.gate)
					}
					synctest.Wait()
					if a.Apply(ownerA, &conds, gen, time.Now()) {
						writes++
					}
					var got metav1.ConditionStatus
					if r := meta.FindStatusCondition(conds, wgreadiness.ConditionReady); r != nil {
						got = r.Status
					}
					if got != tc.want[i] {
						t.Errorf("step %d: Ready = %q, want %q (%v)", i, got, tc.want[i], brief(conds))
					}
				}
				if tc.name == "streams live within the grace" && writes != 1 {
					t.Errorf("writes = %d, want 1", writes)
				}
				if tc.name == "streams still starting when the grace ends" && len(changes.take()) == 0 {
					t.Error("no OnChange call when the grace ended: nothing would requeue the owner")
				}
			})
		})
	}
}
