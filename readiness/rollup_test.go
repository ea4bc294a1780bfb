package readiness_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	"github.com/watchgrade/watchgrade/readiness/readinesstest"
)

const gen = 7

func cond(typ string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, ObservedGeneration: gen, Reason: reason, Message: message}
}

func ready(status metav1.ConditionStatus) []metav1.Condition {
	return []metav1.Condition{{
		Type: wgreadiness.ConditionReady, Status: status, Reason: "Before",
		LastTransitionTime: metav1.NewTime(time.Unix(1e8, 0)),
	}}
}

var (
	stalledGate     = wgreadiness.Stalled("SourceCluster", "Unreachable", "the cluster refuses our credentials")
	progressingGate = wgreadiness.Progressing("apps/deployments", "InitialSync", "replaying the collection")
	establishedGate = wgreadiness.Established("core/configmaps", "Watching", "live")
)

// TestRollup holds the rows of Rollup's doc table.
func TestRollup(t *testing.T) {
	const (
		T = metav1.ConditionTrue
		F = metav1.ConditionFalse
		U = metav1.ConditionUnknown
	)
	const (
		stalledMsg     = "SourceCluster: the cluster refuses our credentials"
		progressingMsg = "apps/deployments: replaying the collection"
	)
	tests := []struct {
		name     string
		gates    []wgreadiness.Gate
		existing []metav1.Condition
		opts     wgreadiness.Options
		want     []metav1.Condition
	}{
		{
			name:  "stalled, Ready absent",
			gates: []wgreadiness.Gate{establishedGate, progressingGate, stalledGate},
			want: []metav1.Condition{
				cond("Ready", F, "Unreachable", stalledMsg),
				cond("Stalled", T, "Unreachable", stalledMsg),
			},
		},
		{
			name:     "stalled, Ready True",
			gates:    []wgreadiness.Gate{stalledGate},
			existing: ready(T),
			want: []metav1.Condition{
				cond("Ready", F, "Unreachable", stalledMsg),
				cond("Stalled", T, "Unreachable", stalledMsg),
			},
		},
		{
			name:  "progressing, Ready absent",
			gates: []wgreadiness.Gate{establishedGate, progressingGate},
			want: []metav1.Condition{
				cond("Ready", U, "InitialSync", progressingMsg),
				cond("Reconciling", T, "InitialSync", progressingMsg),
			},
		},
		{
			name:     "progressing, Ready Unknown",
			gates:    []wgreadiness.Gate{progressingGate},
			existing: ready(U),
			want: []metav1.Condition{
				cond("Ready", U, "InitialSync", progressingMsg),
				cond("Reconciling", T, "InitialSync", progressingMsg),
			},
		},
		{
			name:     "progressing, Ready True",
			gates:    []wgreadiness.Gate{progressingGate},
			existing: ready(T),
			want: []metav1.Condition{
				cond("Ready", F, "InitialSync", progressingMsg),
				cond("Reconciling", T, "InitialSync", progressingMsg),
			},
		},
		{
			name:     "progressing, Ready False (stalled before, after a restart)",
			gates:    []wgreadiness.Gate{progressingGate},
			existing: ready(F),
			want: []metav1.Condition{
				cond("Ready", F, "InitialSync", progressingMsg),
				cond("Reconciling", T, "InitialSync", progressingMsg),
			},
		},
		{
			name:     "established",
			gates:    []wgreadiness.Gate{establishedGate},
			existing: ready(F),
			want:     []metav1.Condition{cond("Ready", T, "Established", "all gates are established")},
		},
		{
			name: "no gates, default: progressing",
			want: []metav1.Condition{
				cond("Ready", U, "NoGates", "no gates have been declared for the object yet"),
				cond("Reconciling", T, "NoGates", "no gates have been declared for the object yet"),
			},
		},
		{
			name:     "no gates, progressing, Ready True",
			existing: ready(T),
			want: []metav1.Condition{
				cond("Ready", F, "NoGates", "no gates have been declared for the object yet"),
				cond("Reconciling", T, "NoGates", "no gates have been declared for the object yet"),
			},
		},
		{
			name: "no gates, EmptyEstablished",
			opts: wgreadiness.Options{Empty: wgreadiness.EmptyEstablished},
			want: []metav1.Condition{cond("Ready", T, "NoGates", "the object depends on no gates")},
		},
		{
			name:  "unknown level counts as progressing",
			gates: []wgreadiness.Gate{{Name: "x", Level: "Bogus", Reason: "Odd", Message: "odd"}},
			want: []metav1.Condition{
				cond("Ready", U, "Odd", "x: odd"),
				cond("Reconciling", T, "Odd", "x: odd"),
			},
		},
		{
			name:  "StreamsCondition: a stream progressing, a caller's gate stalled",
			gates: []wgreadiness.Gate{stalledGate, wgreadiness.StreamGate(streamState("apps/deployments", "Replaying", "InitialSync", false))},
			opts:  wgreadiness.Options{StreamsCondition: "StreamsRunning"},
			want: []metav1.Condition{
				cond("Ready", F, "Unreachable", stalledMsg),
				cond("Stalled", T, "Unreachable", stalledMsg),
				cond("StreamsRunning", F, "InitialSync", "apps/deployments: Replaying InitialSync"),
			},
		},
		{
			name:  "StreamsCondition: streams established",
			gates: []wgreadiness.Gate{wgreadiness.StreamGate(streamState("core/pods", "Streaming", "Watching", false))},
			opts:  wgreadiness.Options{StreamsCondition: "StreamsRunning"},
			want: []metav1.Condition{
				cond("Ready", T, "Established", "all gates are established"),
				cond("StreamsRunning", T, "Established", "all watch streams are established"),
			},
		},
		{
			name:  "StreamsCondition: no streams",
			gates: []wgreadiness.Gate{establishedGate},
			opts:  wgreadiness.Options{StreamsCondition: "StreamsRunning"},
			want: []metav1.Condition{
				cond("Ready", T, "Established", "all gates are established"),
				cond("StreamsRunning", T, "NoStreams", "the object depends on no watch streams"),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := wgreadiness.Rollup(tt.gates, tt.existing, gen, tt.opts)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Rollup() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRollupTieOrder: among gates at the worst level, the first by name
// gives the reason, and the message lists them by name.
func TestRollupTieOrder(t *testing.T) {
	tests := []struct {
		name        string
		gates       []wgreadiness.Gate
		wantReason  string
		wantMessage string
	}{
		{
			name: "by name",
			gates: []wgreadiness.Gate{
				wgreadiness.Stalled("b", "Forbidden", "no RBAC"),
				wgreadiness.Stalled("a", "ResourceNotFound", "no CRD"),
				wgreadiness.Progressing("0", "Starting", "starting"),
			},
			wantReason:  "ResourceNotFound",
			wantMessage: "a: no CRD; b: no RBAC",
		},
		{
			name: "same name: by reason, then message",
			gates: []wgreadiness.Gate{
				wgreadiness.Progressing("a", "Zeta", "m2"),
				wgreadiness.Progressing("a", "Alpha", "m3"),
				wgreadiness.Progressing("a", "Alpha", "m1"),
			},
			wantReason:  "Alpha",
			wantMessage: "a: m1; a: m3; a: m2",
		},
		{
			name: "a stream only starting after every other gate",
			gates: []wgreadiness.Gate{
				{Name: "a", Level: wgreadiness.LevelProgressing, Reason: "InitialSync", Message: "replaying", Stream: true, Starting: true},
				{Name: "b", Level: wgreadiness.LevelProgressing, Reason: "Flapping", Message: "flapping", Stream: true},
			},
			wantReason:  "Flapping",
			wantMessage: "b: flapping; a: replaying",
		},
		{
			name: "more than MaxListed",
			gates: []wgreadiness.Gate{
				wgreadiness.Progressing("e", "R", "m"), wgreadiness.Progressing("d", "R", "m"),
				wgreadiness.Progressing("c", "R", "m"), wgreadiness.Progressing("b", "R", "m"),
				wgreadiness.Progressing("a", "R", "m"),
			},
			wantReason:  "R",
			wantMessage: "a: m; b: m; c: m … and 2 more",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := wgreadiness.Rollup(tt.gates, nil, gen, wgreadiness.Options{})[0]
			if got.Reason != tt.wantReason || got.Message != tt.wantMessage {
				t.Errorf("Rollup() Ready = (%q, %q), want (%q, %q)", got.Reason, got.Message, tt.wantReason, tt.wantMessage)
			}
		})
	}
}

// TestRollupInvariants runs random gate sets through Rollup and Apply and
// checks every rule, determinism under reordering, and the bounds.
func TestRollupInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	levels := append(wgreadiness.Levels(), "")
	reasons := []string{"Forbidden", "InitialSync", "", "9bad reason!", "Ok_1", "trailing:"}
	messages := []string{"", "short", strings.Repeat("é", 3000), "two\nlines", strings.Repeat("x", 40000)}
	existings := [][]metav1.Condition{nil, ready(metav1.ConditionTrue), ready(metav1.ConditionFalse), ready(metav1.ConditionUnknown),
		persistedReady(), persistedWithStreams()} // the last two can be held
	opts := []wgreadiness.Options{
		{},
		{Empty: wgreadiness.EmptyEstablished, StreamsCondition: "StreamsRunning"},
		{MaxListed: 100, MessageLimit: 1 << 20},
		{MaxListed: 1, MessageLimit: 40}, // under MinMessageLimit: held at it
	}
	for i := range 2000 {
		gates := make([]wgreadiness.Gate, rng.IntN(8))
		for j := range gates {
			gates[j] = wgreadiness.Gate{
				Name:     string(rune('a' + rng.IntN(5))),
				Level:    levels[rng.IntN(len(levels))],
				Reason:   reasons[rng.IntN(len(reasons))],
				Message:  messages[rng.IntN(len(messages))],
				Stream:   rng.IntN(2) == 0,
				Starting: rng.IntN(3) == 0,
			}
		}
		existing := existings[rng.IntN(len(existings))]
		o := opts[rng.IntN(len(opts))]

		got := wgreadiness.Rollup(gates, existing, gen, o)
		shuffled := slices.Clone(gates)
		rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		if again := wgreadiness.Rollup(shuffled, existing, gen, o); !cmp.Equal(got, again) {
			t.Fatalf("case %d: Rollup is not deterministic under reordering:\n%s", i, cmp.Diff(got, again))
		}
		limit := o.MessageLimit
		if limit <= 0 {
			limit = wgreadiness.DefaultMessageLimit
		}
		limit = min(max(limit, wgreadiness.MinMessageLimit), wgreadiness.MaxMessageBytes)
		for _, c := range got {
			if len(c.Message) > limit {
				t.Fatalf("case %d: %s message %q is %d bytes, want at most %d", i, c.Type, c.Message, len(c.Message), limit)
			}
		}

		conds := slices.Clone(existing)
		wgreadiness.Apply(&conds, gates, gen, time.Unix(1e9, 0), o)
		if err := readinesstest.Check(readinesstest.Status{Generation: gen, ObservedGeneration: ptr.To[int64](gen), Conditions: conds}); err != nil {
			t.Fatalf("case %d: gates %v, existing %v: Check() = %v", i, levelsOf(gates), existing, err)
		}
		// Stalled wins, held or not.
		if slices.ContainsFunc(gates, func(g wgreadiness.Gate) bool { return g.Level == wgreadiness.LevelStalled }) &&
			!slices.ContainsFunc(got, func(c metav1.Condition) bool {
				return c.Type == wgreadiness.ConditionStalled && c.Status == metav1.ConditionTrue
			}) {
			t.Fatalf("case %d: gates %v, existing %v: no Stalled=True in %v", i, levelsOf(gates), existing, got)
		}
		// Once established, never Unknown again.
		if wgreadiness.EverEstablished(existing) && slices.ContainsFunc(got, func(c metav1.Condition) bool {
			return c.Type == wgreadiness.ConditionReady && c.Status == metav1.ConditionUnknown
		}) {
			t.Fatalf("case %d: Ready went back to Unknown after %v", i, existing)
		}
	}
}

// levelsOf describes gates briefly, for failure messages.
func levelsOf(gates []wgreadiness.Gate) []string {
	var out []string
	for _, g := range gates {
		out = append(out, g.Name+"="+string(g.Level)+"/"+g.Reason)
	}
	return out
}

func TestMessageBounds(t *testing.T) {
	many := func(n int, msg string) []wgreadiness.Gate {
		var gates []wgreadiness.Gate
		for i := range n {
			gates = append(gates, wgreadiness.Progressing(string(rune('a'+i%26))+strings.Repeat("z", i/26), "R", msg))
		}
		return gates
	}
	tests := []struct {
		name  string
		gates []wgreadiness.Gate
		opts  wgreadiness.Options
		want  string
	}{
		{
			name:  "fits",
			gates: many(2, "m"),
			want:  "a: m; b: m",
		},
		{
			name:  "listed count",
			gates: many(4, "m"),
			opts:  wgreadiness.Options{MaxListed: 2},
			want:  "a: m; b: m … and 2 more",
		},
		{
			name:  "bytes stop the list",
			gates: many(3, strings.Repeat("m", 25)),
			opts:  wgreadiness.Options{MessageLimit: 64},
			want:  "a: " + strings.Repeat("m", 25) + " … and 2 more",
		},
		{
			name:  "the first gate is truncated on a rune boundary",
			gates: many(1, strings.Repeat("é", 40)),
			opts:  wgreadiness.Options{MessageLimit: 64},
			want:  "a: " + strings.Repeat("é", 29) + "…",
		},
		{
			name:  "a limit under MinMessageLimit is held at it",
			gates: many(1, strings.Repeat("é", 40)),
			opts:  wgreadiness.Options{MessageLimit: 12},
			want:  "a: " + strings.Repeat("é", 29) + "…",
		},
		{
			name:  "line breaks become spaces",
			gates: many(1, " one\ntwo\t"),
			want:  "a: one two",
		},
		{
			name:  "empty message falls back to the reason",
			gates: []wgreadiness.Gate{wgreadiness.Progressing("a", "Waiting", "")},
			want:  "a: Waiting",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := wgreadiness.Rollup(tt.gates, nil, gen, tt.opts)[0].Message
			if got != tt.want {
				t.Errorf("Rollup() message = %q, want %q", got, tt.want)
			}
		})
	}

	t.Run("never above 32768 bytes", func(t *testing.T) {
		got := wgreadiness.Rollup(many(1000, strings.Repeat("x", 100)), nil, gen,
			wgreadiness.Options{MaxListed: 1 << 20, MessageLimit: 1 << 30})[0].Message
		if len(got) > wgreadiness.MaxMessageBytes || !strings.HasSuffix(got, " more") {
			t.Errorf("Rollup() message is %d bytes ending %q, want at most %d ending in \"… and N more\"",
				len(got), got[len(got)-20:], wgreadiness.MaxMessageBytes)
		}
	})
}

func TestReasonRepair(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		want   string
	}{
		{name: "valid", reason: "Forbidden", want: "Forbidden"},
		{name: "valid with punctuation", reason: "A_b,c:D1", want: "A_b,c:D1"},
		{name: "spaces and dots dropped", reason: "no such host.", want: "nosuchhost"},
		{name: "leading digits dropped", reason: "404NotFound", want: "NotFound"},
		{name: "trailing colon trimmed", reason: "Reason:", want: "Reason"},
		{name: "nothing left", reason: "1234", want: "Stalled"},
		{name: "empty", reason: "", want: "Stalled"},
		{name: "too long", reason: strings.Repeat("A", 2000), want: strings.Repeat("A", wgreadiness.MaxReasonBytes)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := wgreadiness.Rollup([]wgreadiness.Gate{wgreadiness.Stalled("g", tt.reason, "m")}, nil, gen, wgreadiness.Options{})[0].Reason
			if got != tt.want {
				t.Errorf("Rollup() reason = %q, want %q", got, tt.want)
			}
			if !wgreadiness.ValidReason(got) {
				t.Errorf("ValidReason(%q) = false, want true", got)
			}
		})
	}
}

func TestValidReason(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		want   bool
	}{
		{"CamelCase", "InitialSync", true},
		{"one letter", "A", true},
		{"underscore end", "A_", true},
		{"colon end", "A:", false},
		{"comma end", "A,", false},
		{"digit start", "1A", false},
		{"space", "A B", false},
		{"empty", "", false},
		{"max length", strings.Repeat("a", 1024), true},
		{"too long", strings.Repeat("a", 1025), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := wgreadiness.ValidReason(tt.reason); got != tt.want {
				t.Errorf("ValidReason(%q) = %v, want %v", tt.reason, got, tt.want)
			}
		})
	}
}
