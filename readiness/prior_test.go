package readiness_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// The restart hold for owners that were not Ready: a persisted Stalled or
// Reconciling stands over a restart until the streams it names show health
// or a new cause, or NotReadyHold passes (package doc, Restarts).

// persisted is what a controller's previous process wrote for an owner
// that was Ready once and then tracked streams in the given states and had
// the given gates of its own: the conditions as Apply wrote them.
func persisted(t *testing.T, states []wgwatch.State, gates ...wgreadiness.Gate) []metav1.Condition {
	t.Helper()
	return persistedOver(t, persistedReady(), states, gates...)
}

// persistedOver is persisted, over the given earlier conditions (nil: an
// owner never established).
func persistedOver(t *testing.T, conds []metav1.Condition, states []wgwatch.State, gates ...wgreadiness.Gate) []metav1.Condition {
	t.Helper()
	return persistedWith(t, wgreadiness.AccumulatorOptions{}, conds, states, gates...)
}

// persistedWith is persistedOver, with the given options. Each stream was
// established in that process before it came to its state: a replay there
// is not a first one.
func persistedWith(t *testing.T, opts wgreadiness.AccumulatorOptions, conds []metav1.Condition, states []wgwatch.State, gates ...wgreadiness.Gate) []metav1.Condition {
	t.Helper()
	a := newAccumulator(t, opts)
	var names []string
	for _, s := range states {
		names = append(names, s.Stream)
	}
	a.Track(ownerA, names...)
	for _, s := range states {
		a.StateChanged(watching(s.Stream))
		a.StateChanged(s)
	}
	for _, g := range gates {
		a.SetGate(ownerA, g)
	}
	a.Apply(ownerA, &conds, gen, time.Date(2026, 11, 30, 9, 30, 0, 0, time.UTC))
	return conds
}

// in returns a stream's state by the stream's name, for the tables below.
func in(phase wgwatch.Phase, reason wgwatch.Reason, needsHuman bool) func(string) wgwatch.State {
	return func(s string) wgwatch.State { return streamState(s, phase, reason, needsHuman) }
}

var (
	watching      = in(wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false)
	starting      = in(wgwatch.PhaseStarting, wgwatch.ReasonStarting, false)
	syncing       = in(wgwatch.PhaseReplaying, wgwatch.ReasonInitialSync, false)
	forbidden     = in(wgwatch.PhaseBlocked, wgwatch.ReasonForbidden, true)
	notFound      = in(wgwatch.PhaseBlocked, wgwatch.ReasonResourceNotFound, true)
	expired       = in(wgwatch.PhaseReplaying, wgwatch.ReasonExpiredResourceVersion, false)
	refused       = in(wgwatch.PhaseBlocked, wgwatch.ReasonConnectionFailed, false)
	flapping      = in(wgwatch.PhaseBlocked, wgwatch.ReasonFlapping, false)
	pastDeadline  = in(wgwatch.PhaseBlocked, wgwatch.ReasonProgressDeadlineExceeded, true)
	waitingForDB  = wgreadiness.Progressing("Database", "WaitingForDatabase", "the database is not reachable yet")
	invalidSpec   = wgreadiness.Stalled("Spec", "InvalidSpec", "spec.size must be positive")
	databaseReady = wgreadiness.Established("Database", "Reachable", "the database answers")
)

// TestRestartHoldsWhatWasPersisted plays a controller restart for an owner
// in each state it can be in, with the new process's streams going through
// the states of each case, one reconcile after each. Every case says how
// many status writes the restart makes and what the owner ends with.
func TestRestartHoldsWhatWasPersisted(t *testing.T) {
	type step struct {
		state wgwatch.State     // a stream's new state, or
		gate  *wgreadiness.Gate // a gate of the caller's own
		after time.Duration     // how long after the previous step
	}
	st := func(s wgwatch.State) step { return step{state: s, after: time.Second} }
	later := func(d time.Duration, s wgwatch.State) step { return step{state: s, after: d} }
	gate := func(g wgreadiness.Gate) step { return step{gate: &g, after: time.Second} }
	tests := []struct {
		name    string
		before  []metav1.Condition
		streams []string
		// gates are the caller's own, set by the reconcile before Apply.
		gates      []wgreadiness.Gate
		steps      []step
		wantWrites int
		// What the owner ends with: Ready's status and reason, and whether
		// Stalled is True.
		wantReady   metav1.ConditionStatus
		wantReason  string
		wantStalled bool
	}{{
		name:    "stalled, the denial persists: seen again after HumanGrace",
		before:  persisted(t, []wgwatch.State{watching("configmaps"), forbidden("secrets")}),
		streams: []string{"configmaps", "secrets"},
		steps: []step{st(syncing("configmaps")), st(watching("configmaps")),
			later(15*time.Second, forbidden("secrets"))},
		wantWrites: 0, wantReady: metav1.ConditionFalse, wantReason: "Forbidden", wantStalled: true,
	}, {
		name:    "stalled, the denial repaired during the restart: one write, to Ready",
		before:  persisted(t, []wgwatch.State{watching("configmaps"), forbidden("secrets")}),
		streams: []string{"configmaps", "secrets"},
		steps: []step{st(syncing("secrets")), st(syncing("configmaps")),
			st(watching("configmaps")), st(watching("secrets"))},
		wantWrites: 1, wantReady: metav1.ConditionTrue, wantReason: wgreadiness.ReasonEstablished,
	}, {
		name:    "stalled, transient trouble after the restart: still the stall",
		before:  persisted(t, []wgwatch.State{forbidden("secrets")}),
		streams: []string{"secrets"},
		steps:   []step{later(30*time.Second, refused("secrets"))},
		// Neither health nor a stall: the stall stands.
		wantWrites: 0, wantReady: metav1.ConditionFalse, wantReason: "Forbidden", wantStalled: true,
	}, {
		name:    "stalled by the deadline, a proxy still cutting every watch: flapping, then the deadline again",
		before:  persisted(t, []wgwatch.State{pastDeadline("secrets")}),
		streams: []string{"secrets"},
		steps: []step{later(30*time.Second, flapping("secrets")),
			later(4*time.Minute+30*time.Second, pastDeadline("secrets"))},
		wantWrites: 0, wantReady: metav1.ConditionFalse, wantReason: "ProgressDeadlineExceeded", wantStalled: true,
	}, {
		name:    "stalled, a cause the conditions do not name: published at once",
		before:  persisted(t, []wgwatch.State{forbidden("secrets"), watching("widgets")}),
		streams: []string{"secrets", "widgets"},
		steps:   []step{st(notFound("widgets"))},
		// Stalled stays True, with the new cause's reason (no second Warning:
		// package events).
		wantWrites: 1, wantReady: metav1.ConditionFalse, wantReason: "ResourceNotFound", wantStalled: true,
	}, {
		name:    "stalled by two streams, the second seen first: no reason flip",
		before:  persisted(t, []wgwatch.State{forbidden("configmaps"), notFound("secrets")}),
		streams: []string{"configmaps", "secrets"},
		steps: []step{later(15*time.Second, notFound("secrets")),
			later(3*time.Second, forbidden("configmaps"))},
		wantWrites: 0, wantReady: metav1.ConditionFalse, wantReason: "Forbidden", wantStalled: true,
	}, {
		name:       "stalled by the caller's gate: the gate set again, the streams start over",
		before:     persisted(t, []wgwatch.State{watching("configmaps")}, invalidSpec),
		streams:    []string{"configmaps"},
		gates:      []wgreadiness.Gate{invalidSpec},
		steps:      []step{st(syncing("configmaps")), st(watching("configmaps"))},
		wantWrites: 0, wantReady: metav1.ConditionFalse, wantReason: "InvalidSpec", wantStalled: true,
	}, {
		name:    "stalled by the caller's gate, fixed: not held by a stream the stall does not name",
		before:  persisted(t, []wgwatch.State{watching("configmaps")}, invalidSpec),
		streams: []string{"configmaps"},
		gates:   []wgreadiness.Gate{wgreadiness.Established("Spec", "Valid", "the spec is valid")},
		steps:   []step{st(syncing("configmaps"))},
		// The stall's cause is gone: the stream starting, then syncing, is
		// what the owner waits for now, written as it comes.
		wantWrites: 2, wantReady: metav1.ConditionFalse, wantReason: "InitialSync",
	}, {
		name:    "reconciling on a replay: held until the stream is established",
		before:  persisted(t, []wgwatch.State{watching("configmaps"), expired("secrets")}),
		streams: []string{"configmaps", "secrets"},
		steps: []step{st(syncing("secrets")), st(watching("configmaps")),
			later(40*time.Second, watching("secrets"))},
		wantWrites: 1, wantReady: metav1.ConditionTrue, wantReason: wgreadiness.ReasonEstablished,
	}, {
		name:    "reconciling on a replay, resumed from a persisted cursor that expired meanwhile: held",
		before:  persisted(t, []wgwatch.State{watching("configmaps"), expired("secrets")}),
		streams: []string{"configmaps", "secrets"},
		steps: []step{st(expired("secrets")), st(watching("configmaps")),
			later(40*time.Second, watching("secrets"))},
		wantWrites: 1, wantReady: metav1.ConditionTrue, wantReason: wgreadiness.ReasonEstablished,
	}, {
		name:       "reconciling on the caller's gate, a stream resumed from an expired cursor: held",
		before:     persisted(t, []wgwatch.State{watching("configmaps")}, waitingForDB),
		streams:    []string{"configmaps"},
		gates:      []wgreadiness.Gate{waitingForDB},
		steps:      []step{st(expired("configmaps")), st(watching("configmaps"))},
		wantWrites: 0, wantReady: metav1.ConditionFalse, wantReason: "WaitingForDatabase",
	}, {
		name:       "reconciling on a transient failure that persists: the same cause again",
		before:     persisted(t, []wgwatch.State{refused("secrets")}),
		streams:    []string{"secrets"},
		steps:      []step{later(30*time.Second, refused("secrets"))},
		wantWrites: 0, wantReady: metav1.ConditionFalse, wantReason: "ConnectionFailed",
	}, {
		name:       "reconciling on the caller's gate, set again",
		before:     persisted(t, []wgwatch.State{watching("configmaps")}, waitingForDB),
		streams:    []string{"configmaps"},
		gates:      []wgreadiness.Gate{waitingForDB},
		steps:      []step{st(watching("configmaps"))},
		wantWrites: 0, wantReady: metav1.ConditionFalse, wantReason: "WaitingForDatabase",
	}, {
		name:       "reconciling, never established, on the caller's gate, set again",
		before:     persistedOver(t, nil, []wgwatch.State{watching("configmaps")}, waitingForDB),
		streams:    []string{"configmaps"},
		gates:      []wgreadiness.Gate{waitingForDB},
		steps:      []step{st(syncing("configmaps")), st(watching("configmaps"))},
		wantWrites: 0, wantReady: metav1.ConditionUnknown, wantReason: "WaitingForDatabase",
	}, {
		name:    "reconciling on the caller's gate, fixed during the restart",
		before:  persisted(t, []wgwatch.State{watching("configmaps")}, waitingForDB),
		streams: []string{"configmaps"},
		gates:   []wgreadiness.Gate{databaseReady},
		steps:   []step{st(watching("configmaps"))},
		// The gate's new level is news; the stream starting is then what
		// the owner waits for, and it is established a second later.
		wantWrites: 2, wantReady: metav1.ConditionTrue, wantReason: wgreadiness.ReasonEstablished,
	}, {
		name:       "reconciling, a new cause: published",
		before:     persisted(t, []wgwatch.State{expired("secrets")}),
		streams:    []string{"secrets"},
		steps:      []step{gate(waitingForDB)},
		wantWrites: 1, wantReady: metav1.ConditionFalse, wantReason: "WaitingForDatabase",
	}, {
		name:       "reconciling, a stall: published at once",
		before:     persisted(t, []wgwatch.State{expired("secrets")}),
		streams:    []string{"secrets"},
		steps:      []step{later(15*time.Second, forbidden("secrets"))},
		wantWrites: 1, wantReady: metav1.ConditionFalse, wantReason: "Forbidden", wantStalled: true,
	}, {
		name:       "ready, a stall: published at once",
		before:     persistedReady(),
		streams:    []string{"secrets"},
		steps:      []step{later(15*time.Second, forbidden("secrets"))},
		wantWrites: 1, wantReady: metav1.ConditionFalse, wantReason: "Forbidden", wantStalled: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var got calls
				a := newAccumulator(t, wgreadiness.AccumulatorOptions{OnChange: got.add})
				conds := slices.Clone(tt.before)
				writes := 0
				reconcile := func() {
					synctest.Wait()
					got.take()
					if a.Apply(ownerA, &conds, gen, time.Now()) {
						writes++
					}
				}
				for _, g := range tt.gates {
					a.SetGate(ownerA, g)
				}
				a.Track(ownerA, tt.streams...)
				for _, name := range tt.streams {
					a.StateChanged(starting(name))
				}
				reconcile()
				for _, s := range tt.steps {
					time.Sleep(s.after)
					if s.gate != nil {
						a.SetGate(ownerA, *s.gate)
					} else {
						a.StateChanged(s.state)
					}
					reconcile()
				}
				if writes != tt.wantWrites {
					t.Errorf("the restart wrote %d times, want %d: %v -> %v", writes, tt.wantWrites, brief(tt.before), brief(conds))
				}
				r := meta.FindStatusCondition(conds, wgreadiness.ConditionReady)
				if r == nil || r.Status != tt.wantReady || r.Reason != tt.wantReason ||
					meta.IsStatusConditionTrue(conds, wgreadiness.ConditionStalled) != tt.wantStalled {
					t.Errorf("after the restart: %v, want Ready=%s/%s Stalled=%v", brief(conds), tt.wantReady, tt.wantReason, tt.wantStalled)
				}
			})
		})
	}
}

// brief shows conditions as Type=Status/Reason.
func brief(conds []metav1.Condition) []string {
	var out []string
	for _, c := range conds {
		out = append(out, c.Type+"="+string(c.Status)+"/"+c.Reason)
	}
	return out
}

// The bound: a stream that shows neither health nor a stall for
// NotReadyHold ends the hold; the accumulator requeues the owner at that
// instant and the owner is rolled up from its gates as they are.
func TestNotReadyHoldEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got calls
		a := newAccumulator(t, wgreadiness.AccumulatorOptions{OnChange: got.add})
		conds := persisted(t, []wgwatch.State{forbidden("secrets")})
		a.Track(ownerA, "secrets")
		a.StateChanged(refused("secrets"))
		synctest.Wait()
		got.take()
		if a.Apply(ownerA, &conds, gen, time.Now()) {
			t.Fatalf("Apply() within the hold changed the conditions to %v", brief(conds))
		}
		time.Sleep(wgreadiness.DefaultNotReadyHold - time.Second)
		synctest.Wait()
		if a.Apply(ownerA, &conds, gen, time.Now()) {
			t.Fatalf("Apply() a second before the hold ends changed the conditions to %v", brief(conds))
		}
		got.take() // the start grace's end
		time.Sleep(time.Second)
		synctest.Wait()
		if diff := cmp.Diff([]types.NamespacedName{ownerA}, got.take()); diff != "" {
			t.Errorf("OnChange when the hold ended (-want +got):\n%s", diff)
		}
		if !a.Apply(ownerA, &conds, gen, time.Now()) {
			t.Fatalf("Apply() at the end of the hold changed nothing: held for good")
		}
		want := []string{"Ready=False/ConnectionFailed", "Reconciling=True/ConnectionFailed"}
		if diff := cmp.Diff(want, brief(conds)); diff != "" {
			t.Errorf("conditions after the hold (-want +got):\n%s", diff)
		}
	})
}

// A stream that stalls and then only fails transiently has shown its
// evidence: the stall it showed is not held over what follows.
func TestStalledStreamIsNotUnconfirmedAgain(t *testing.T) {
	a := newAccumulator(t, wgreadiness.AccumulatorOptions{})
	conds := persisted(t, []wgwatch.State{forbidden("secrets")})
	a.Track(ownerA, "secrets")
	a.StateChanged(forbidden("secrets"))
	if a.Apply(ownerA, &conds, gen, time.Now()) {
		t.Fatalf("Apply() with the same stall changed the conditions to %v", brief(conds))
	}
	a.StateChanged(refused("secrets"))
	if !a.Apply(ownerA, &conds, gen, time.Now()) || meta.IsStatusConditionTrue(conds, wgreadiness.ConditionStalled) {
		t.Errorf("after the stall turned transient: %v, want Reconciling", brief(conds))
	}
}

// Conditions this accumulator wrote are its own verdict: an owner first
// seen with none (created after the start) and written is never held, so
// its first sync's reasons are written as they come.
func TestOwnConditionsAreNotHeld(t *testing.T) {
	a := newAccumulator(t, wgreadiness.AccumulatorOptions{})
	var conds []metav1.Condition
	a.Track(ownerA, "secrets")
	a.StateChanged(refused("secrets"))
	if !a.Apply(ownerA, &conds, gen, time.Now()) {
		t.Fatalf("Apply() on a new owner changed nothing")
	}
	a.StateChanged(syncing("secrets"))
	if !a.Apply(ownerA, &conds, gen, time.Now()) {
		t.Fatalf("Apply() once the stream syncs changed nothing: %v", brief(conds))
	}
	if r := meta.FindStatusCondition(conds, wgreadiness.ConditionReady); r.Reason != "InitialSync" {
		t.Errorf("Ready = %+v, want reason InitialSync", r)
	}
	if g := a.Gates(ownerA); g[0].Unconfirmed {
		t.Errorf("Gates() = %+v, want no gate unconfirmed on an owner the accumulator wrote", g)
	}
}

func TestNewAccumulatorRefusesAHoldShorterThanTheGrace(t *testing.T) {
	_, err := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{StartGrace: time.Minute, NotReadyHold: 30 * time.Second})
	if !errors.Is(err, wgreadiness.ErrInvalidOptions) {
		t.Errorf("NewAccumulator(NotReadyHold < StartGrace) = %v, want ErrInvalidOptions", err)
	}
	// A StartGrace longer than the default hold, with the hold left at its
	// default: the hold follows the grace.
	if _, err := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{StartGrace: 10 * time.Minute}); err != nil {
		t.Errorf("NewAccumulator(StartGrace 10m) = %v", err)
	}
}

// TestRollupRestartRows holds the rows of Rollup's restart table: for each
// persisted trio, gates that keep it and the neighbouring gates that do
// not.
func TestRollupRestartRows(t *testing.T) {
	mark := func(g wgreadiness.Gate, starting, unconfirmed bool) wgreadiness.Gate {
		g.Starting, g.Unconfirmed = starting, unconfirmed
		return g
	}
	stream := func(s wgwatch.State) wgreadiness.Gate { return wgreadiness.StreamGate(s) }
	pending := func(s wgwatch.State) wgreadiness.Gate { return mark(stream(s), true, true) }
	unconfirmed := func(s wgwatch.State) wgreadiness.Gate { return mark(stream(s), false, true) }
	ready := persistedReady()
	stalled := persisted(t, []wgwatch.State{watching("configmaps"), forbidden("secrets")})
	stalledTwo := persisted(t, []wgwatch.State{forbidden("configmaps"), notFound("secrets")})
	reconciling := persisted(t, []wgwatch.State{expired("secrets")}, waitingForDB)
	stalledMany := persisted(t, []wgwatch.State{forbidden("a"), forbidden("b"), forbidden("c"), forbidden("d")})
	// A gate's own message cut short ("…", an error text at its bound)
	// leaves no gate out; a message cut to the roll-up's limit may.
	cutShort := forbidden("secrets")
	cutShort.Message = "requests to the API server fail: secrets is forbidden: User cannot list/watch resource…"
	stalledCutShort := persisted(t, []wgwatch.State{cutShort, watching("configmaps")})
	cutToLimit := forbidden("secrets")
	cutToLimit.Message = strings.Repeat("x", 2*wgreadiness.DefaultMessageLimit)
	stalledCutToLimit := persisted(t, []wgwatch.State{cutToLimit, watching("configmaps")})
	tests := []struct {
		name      string
		persisted []metav1.Condition
		gates     []wgreadiness.Gate
		kept      bool
	}{
		{"Ready: a stream starting", ready, []wgreadiness.Gate{pending(syncing("secrets")), stream(watching("configmaps"))}, true},
		{"Ready: a stream unconfirmed, not starting", ready, []wgreadiness.Gate{unconfirmed(syncing("secrets"))}, false},
		{"Ready: a caller's gate progressing", ready, []wgreadiness.Gate{pending(syncing("secrets")), waitingForDB}, false},
		{"Ready: every gate established", ready, []wgreadiness.Gate{stream(watching("secrets"))}, false},

		{"Stalled: the named stream unconfirmed", stalled, []wgreadiness.Gate{unconfirmed(refused("secrets")), stream(watching("configmaps"))}, true},
		{"Stalled: the named stream starting", stalled, []wgreadiness.Gate{pending(starting("secrets")), pending(starting("configmaps"))}, true},
		{"Stalled: the named stream stalled again", stalled, []wgreadiness.Gate{stream(forbidden("secrets")), pending(starting("configmaps"))}, false},
		{"Stalled: only a stream it does not name unconfirmed", stalled, []wgreadiness.Gate{stream(watching("secrets")), pending(starting("configmaps"))}, false},
		{"Stalled: a stall it does not name", stalled, []wgreadiness.Gate{pending(starting("secrets")), stream(forbidden("configmaps"))}, false},
		{"Stalled: one of two named stalls seen, the other unconfirmed", stalledTwo, []wgreadiness.Gate{stream(notFound("secrets")), unconfirmed(starting("configmaps"))}, true},
		{"Stalled: the caller's gate progressing beside", stalled, []wgreadiness.Gate{unconfirmed(starting("secrets")), waitingForDB}, true},
		{"Stalled: a stream unconfirmed but not marked a stream", stalled, []wgreadiness.Gate{mark(wgreadiness.Progressing("secrets", "Starting", "x"), true, true)}, false},
		{"Stalled: a message of N more names every gate", stalledMany, []wgreadiness.Gate{unconfirmed(starting("z"))}, true},
		{"Stalled: a gate's message cut short names no other gate", stalledCutShort, []wgreadiness.Gate{unconfirmed(starting("secrets")), stream(forbidden("configmaps"))}, false},
		{"Stalled: a message cut to the limit names every gate", stalledCutToLimit, []wgreadiness.Gate{unconfirmed(starting("secrets")), stream(forbidden("configmaps"))}, true},

		{"Reconciling: the named stream starting, the gate as quoted", reconciling, []wgreadiness.Gate{pending(syncing("secrets")), waitingForDB}, true},
		{"Reconciling: the named stream starting, the gate fixed", reconciling, []wgreadiness.Gate{pending(syncing("secrets")), databaseReady}, true},
		{"Reconciling: only the gate as quoted, a stream it does not name starting", reconciling, []wgreadiness.Gate{pending(syncing("widgets")), waitingForDB}, true},
		{"Reconciling: nothing it names still reported", reconciling, []wgreadiness.Gate{pending(syncing("widgets")), databaseReady, stream(watching("secrets"))}, false},
		{"Reconciling: the gate with other words", reconciling, []wgreadiness.Gate{pending(syncing("secrets")), wgreadiness.Progressing("Database", "WaitingForDatabase", "another sentence")}, true},
		{"Reconciling: a gate it does not name", reconciling, []wgreadiness.Gate{pending(syncing("secrets")), waitingForDB, wgreadiness.Progressing("Cache", "Warming", "x")}, false},
		{"Reconciling: the named stream blocked, another starting", reconciling, []wgreadiness.Gate{unconfirmed(refused("secrets")), pending(starting("widgets")), waitingForDB}, true},
		{"Reconciling: the named stream blocked, nothing starting", reconciling, []wgreadiness.Gate{unconfirmed(refused("secrets")), waitingForDB}, false},
		{"Reconciling: a stall", reconciling, []wgreadiness.Gate{pending(syncing("secrets")), waitingForDB, invalidSpec}, false},
		{"Reconciling: nothing starting", reconciling, []wgreadiness.Gate{waitingForDB, stream(watching("secrets"))}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Ready's message is read by no row: marked, it tells a kept
			// trio from one the gates decide again.
			before := slices.Clone(tt.persisted)
			meta.FindStatusCondition(before, wgreadiness.ConditionReady).Message = "as persisted"
			got := wgreadiness.Rollup(tt.gates, before, gen, wgreadiness.Options{})
			want := slices.Clone(before)
			for i := range want {
				want[i].LastTransitionTime = metav1.Time{}
			}
			if kept := cmp.Equal(want, got); kept != tt.kept {
				t.Errorf("Rollup(%v) over %v = %v, want kept=%v", tt.gates, brief(tt.persisted), brief(got), tt.kept)
			}
			// A new generation is never kept, but for a stall on streams
			// alone: a spec change does not give back a denied watch.
			onStreams := false
			if st := meta.FindStatusCondition(tt.persisted, wgreadiness.ConditionStalled); st != nil && st.Status == metav1.ConditionTrue {
				onStreams = !slices.ContainsFunc(tt.gates, func(g wgreadiness.Gate) bool { return !g.Stream && strings.Contains(st.Message, g.Name) })
			}
			got = wgreadiness.Rollup(tt.gates, before, gen+1, wgreadiness.Options{})
			if r := meta.FindStatusCondition(got, wgreadiness.ConditionReady); (r.Message == "as persisted") != (tt.kept && onStreams) {
				t.Errorf("Rollup at a new generation = %v, want kept=%v", brief(got), tt.kept && onStreams)
			} else if tt.kept && onStreams && (r.ObservedGeneration != gen || wgreadiness.Observes(got, gen+1)) {
				t.Errorf("Rollup at a new generation kept %v for generation %d, want them as they were, for %d", brief(got), r.ObservedGeneration, gen)
			}
		})
	}
}

// The streams condition is held as the trio is: an owner stalled by a
// gate of the caller's own, whose streams start over after a restart,
// keeps StreamsRunning=True while they are only starting, and a
// StreamsRunning=False for a stream still without evidence stands too.
func TestRestartHoldsTheStreamsCondition(t *testing.T) {
	opts := wgreadiness.AccumulatorOptions{Rollup: wgreadiness.Options{StreamsCondition: streamsRunning}}
	prev := func(states []wgwatch.State, gates ...wgreadiness.Gate) []metav1.Condition {
		return persistedWith(t, opts, persistedWithStreams(), states, gates...)
	}
	for _, tt := range []struct {
		name   string
		before []metav1.Condition
		gates  []wgreadiness.Gate
		states []wgwatch.State
	}{
		{"streams running, stalled by the caller's gate", prev([]wgwatch.State{watching("configmaps")}, invalidSpec),
			[]wgreadiness.Gate{invalidSpec}, []wgwatch.State{starting("configmaps"), syncing("configmaps"), watching("configmaps")}},
		{"streams not running, reconciling on the caller's gate", prev([]wgwatch.State{refused("configmaps")}, waitingForDB),
			[]wgreadiness.Gate{waitingForDB}, []wgwatch.State{starting("configmaps"), syncing("configmaps")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := newAccumulator(t, opts)
			conds := slices.Clone(tt.before)
			for _, g := range tt.gates {
				a.SetGate(ownerA, g)
			}
			a.Track(ownerA, "configmaps")
			for _, s := range tt.states {
				a.StateChanged(s)
				if a.Apply(ownerA, &conds, gen, time.Now()) {
					t.Errorf("%s/%s: the restart wrote %v -> %v", s.Phase, s.Reason, brief(tt.before), brief(conds))
				}
			}
		})
	}
}

// The hold follows the streams' Policy: with a ProgressDeadline of 10
// minutes, a stall persisted before a restart, over a fault that persists
// as transient trouble (its stream shows the stall again only at the
// deadline), stands past the default hold, until the deadline and
// DefaultStartGrace more; a hold shorter than the Policy's deadline is
// refused.
func TestNotReadyHoldFollowsThePolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		policy := wgwatch.Policy{ProgressDeadline: 10 * time.Minute}
		a := newAccumulator(t, wgreadiness.AccumulatorOptions{Policy: policy, OnChange: func(types.NamespacedName) {}})
		conds := persisted(t, []wgwatch.State{pastDeadline("secrets")})
		a.Track(ownerA, "secrets")
		a.StateChanged(refused("secrets"))
		time.Sleep(wgreadiness.DefaultNotReadyHold + time.Minute)
		synctest.Wait()
		if a.Apply(ownerA, &conds, gen, time.Now()) {
			t.Fatalf("Apply() past the default hold, within the Policy's: changed the conditions to %v", brief(conds))
		}
		time.Sleep(policy.ProgressDeadline + wgreadiness.DefaultStartGrace - wgreadiness.DefaultNotReadyHold - time.Minute)
		synctest.Wait()
		if !a.Apply(ownerA, &conds, gen, time.Now()) {
			t.Fatalf("Apply() at the Policy's hold's end changed nothing: held for good")
		}
	})
	_, err := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{Policy: wgwatch.Policy{ProgressDeadline: 10 * time.Minute}, NotReadyHold: 6 * time.Minute})
	if !errors.Is(err, wgreadiness.ErrInvalidOptions) {
		t.Errorf("NewAccumulator(NotReadyHold 6m < ProgressDeadline 10m) = %v, want ErrInvalidOptions", err)
	}
	_, err = wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{Policy: wgwatch.Policy{ProgressDeadline: time.Second, TransientGrace: time.Minute}})
	if !errors.Is(err, wgreadiness.ErrInvalidOptions) {
		t.Errorf("NewAccumulator(a Policy watch refuses) = %v, want ErrInvalidOptions", err)
	}
}

// A verdict Apply returned but the caller did not write (a standby writer
// that writes only some, before the reconcile tracks every stream) leaves
// the persisted conditions held: the hold follows what is persisted.
// Before, the first Apply made them the accumulator's own, and a restart
// over a persisting stall wrote it away (a Normal) and then reported it
// again (a second Warning).
func TestUnwrittenVerdictKeepsTheHold(t *testing.T) {
	a := newAccumulator(t, wgreadiness.AccumulatorOptions{})
	conds := persisted(t, []wgwatch.State{forbidden("secrets")})
	// The standby writer knows the kinds, not the stream the reconcile
	// tracks: its verdict differs (configmaps live), and it does not
	// write it.
	a.Track(ownerA, "configmaps")
	a.StateChanged(watching("configmaps"))
	discarded := slices.Clone(conds)
	if !a.Apply(ownerA, &discarded, gen, time.Now()) {
		t.Fatalf("the standby's Apply changed nothing: the case is not set up")
	}
	// The reconcile tracks every stream, the stall's included.
	a.Track(ownerA, "configmaps", "secrets")
	a.StateChanged(starting("secrets"))
	if a.Apply(ownerA, &conds, gen, time.Now()) {
		t.Errorf("Apply() over the persisted stall changed the conditions to %v, want them held", brief(conds))
	}
	// Once written, a verdict is the accumulator's own: never held.
	if !a.Apply(ownerA, &discarded, gen, time.Now()) && meta.IsStatusConditionTrue(discarded, wgreadiness.ConditionStalled) {
		t.Errorf("Apply() over its own verdict %v held it", brief(discarded))
	}
}

// ApplyStandby writes what must not wait for the reconcile (a stall, a
// Ready=True a stream takes away) and leaves the rest, and the conditions,
// as they are.
func TestApplyStandby(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cases := []struct {
			name   string
			conds  []metav1.Condition
			states []wgwatch.State
			after  time.Duration
			want   []string // nil: not written
		}{
			{"Ready, a stream refused past the grace", persistedReady(), []wgwatch.State{refused("secrets")}, time.Minute,
				[]string{"Ready=False/ConnectionFailed", "Reconciling=True/ConnectionFailed"}},
			{"Ready, a stream starting within the grace", persistedReady(), []wgwatch.State{starting("secrets")}, time.Second, nil},
			{"Ready, a stream denied", persistedReady(), []wgwatch.State{forbidden("secrets")}, time.Second,
				[]string{"Ready=False/Forbidden", "Stalled=True/Forbidden"}},
			{"never written, a stream syncing", nil, []wgwatch.State{syncing("secrets")}, time.Minute, nil},
			{"Reconciling on the caller's gate, streams established", persisted(t, []wgwatch.State{watching("secrets")}, waitingForDB),
				[]wgwatch.State{watching("secrets")}, time.Minute, nil},
			// The human has been told: rewording the stall without the
			// caller's gate would be a write at a restart that changed
			// nothing (the operator judge found it: 8 in 1,000).
			{"Stalled on a stream and the caller's gate, the stream denied again", persisted(t, []wgwatch.State{forbidden("secrets")}, invalidSpec),
				[]wgwatch.State{forbidden("secrets")}, time.Minute, nil},
			{"Stalled on the caller's gate, a stream denied: a new cause", persisted(t, []wgwatch.State{watching("secrets")}, invalidSpec),
				[]wgwatch.State{forbidden("secrets")}, time.Minute, []string{"Ready=False/Forbidden", "Stalled=True/Forbidden"}},
			// A gate's message that ends in "…" (watch cuts long error
			// texts so) names only its own gate, far under the limit:
			// before, the default limit read as 0 and every such message
			// counted as naming every stream, so the denial went untold.
			{"Stalled on the caller's gate, its message cut short, a stream denied: a new cause",
				persisted(t, []wgwatch.State{watching("secrets")}, wgreadiness.Stalled("Spec", "InvalidSpec", "spec.size must be positive: got -1 from the tem…")),
				[]wgwatch.State{forbidden("secrets")}, time.Minute, []string{"Ready=False/Forbidden", "Stalled=True/Forbidden"}},
		}
		for _, c := range cases {
			a := newAccumulator(t, wgreadiness.AccumulatorOptions{})
			a.Track(ownerA, "secrets")
			for _, s := range c.states {
				a.StateChanged(s)
			}
			time.Sleep(c.after)
			conds := slices.Clone(c.conds)
			wrote := a.ApplyStandby(ownerA, &conds, gen, time.Now())
			switch {
			case c.want == nil && (wrote || !slices.Equal(brief(conds), brief(c.conds))):
				t.Errorf("%s: ApplyStandby() = %v, %v; want false, the conditions as they were", c.name, wrote, brief(conds))
			case c.want != nil && !wrote:
				t.Errorf("%s: ApplyStandby() = false; want %v written", c.name, c.want)
			case c.want != nil:
				if diff := cmp.Diff(c.want, brief(conds)); diff != "" {
					t.Errorf("%s: conditions (-want +got):\n%s", c.name, diff)
				}
			}
		}
	})
}

// A stall or a Reconciling persisted by a process that named its streams
// otherwise (wgctrl names a stream of a cache restricted to namespaces by
// its namespace once the cache has made that namespace's informer, and
// before that by its kind alone) stands while the streams this process
// tracks are still starting: no evidence. Before, the new process's first
// Apply wrote the stall away (a Normal), and the stall came back with a
// second Warning; the operator judge found it (8 histories in 1,000).
// Evidence still ends it: a stream live, or a stall it does not name.
func TestHoldWhileTheNamesAreNotKnownYet(t *testing.T) {
	for _, c := range []struct {
		name  string
		conds func(*testing.T) []metav1.Condition
		state wgwatch.State // of "configmaps", the stream this process tracks
		held  bool
	}{
		{"Stalled on team-a/configmaps, configmaps starting", func(t *testing.T) []metav1.Condition {
			return persisted(t, []wgwatch.State{forbidden("team-a/configmaps")})
		}, starting("configmaps"), true},
		{"Stalled on team-a/configmaps, configmaps not reported yet", func(t *testing.T) []metav1.Condition {
			return persisted(t, []wgwatch.State{forbidden("team-a/configmaps")})
		}, wgwatch.State{}, true},
		{"Stalled on team-a/configmaps, configmaps live", func(t *testing.T) []metav1.Condition {
			return persisted(t, []wgwatch.State{forbidden("team-a/configmaps")})
		}, watching("configmaps"), false},
		{"Stalled on team-a/configmaps, configmaps denied: a stall it does not name", func(t *testing.T) []metav1.Condition {
			return persisted(t, []wgwatch.State{forbidden("team-a/configmaps")})
		}, forbidden("configmaps"), false},
		{"Reconciling on team-a/configmaps, configmaps starting", func(t *testing.T) []metav1.Condition {
			return persisted(t, []wgwatch.State{starting("team-a/configmaps")})
		}, starting("configmaps"), true},
		{"Reconciling on team-a/configmaps, configmaps live", func(t *testing.T) []metav1.Condition {
			return persisted(t, []wgwatch.State{starting("team-a/configmaps")})
		}, watching("configmaps"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			conds := c.conds(t)
			before := brief(conds)
			a := newAccumulator(t, wgreadiness.AccumulatorOptions{})
			a.Track(ownerA, "configmaps")
			if c.state.Stream != "" {
				a.StateChanged(c.state)
			}
			if changed := a.Apply(ownerA, &conds, gen, time.Now()); changed == c.held {
				t.Errorf("Apply() over %v changed=%v to %v, want held=%v", before, changed, brief(conds), c.held)
			}
		})
	}
}
