package events_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	wgevents "github.com/watchgrade/watchgrade/events"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

const (
	T = metav1.ConditionTrue
	F = metav1.ConditionFalse
	U = metav1.ConditionUnknown
)

func c(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: typ + " " + reason}
}

func conds(cs ...metav1.Condition) []metav1.Condition { return cs }

func TestSeverityOf(t *testing.T) {
	tests := []struct {
		name  string
		conds []metav1.Condition
		want  wgevents.Severity
	}{
		{"stalled", conds(c("Ready", F, "Forbidden"), c("Stalled", T, "Forbidden")), wgevents.SeverityWarning},
		{"stalled, Ready missing", conds(c("Stalled", T, "Forbidden")), wgevents.SeverityWarning},
		{"reconciling, Ready False", conds(c("Ready", F, "InitialSync"), c("Reconciling", T, "InitialSync")), wgevents.SeverityNormal},
		{"reconciling, Ready Unknown", conds(c("Ready", U, "InitialSync"), c("Reconciling", T, "InitialSync")), wgevents.SeverityNormal},
		{"Stalled present but False", conds(c("Ready", F, "X"), c("Stalled", F, "X")), wgevents.SeverityNormal},
		{"Ready False without the trio", conds(c("Ready", F, "Broken")), wgevents.SeverityWarning},
		{"Ready Unknown without the trio", conds(c("Ready", U, "Unknown")), wgevents.SeverityWarning},
		{"Ready True", conds(c("Ready", T, "Established")), wgevents.SeverityNormal},
		{"no conditions", nil, wgevents.SeverityNormal},
		{"unrelated conditions", conds(c("Synced", F, "X")), wgevents.SeverityNormal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := wgevents.SeverityOf(tt.conds); got != tt.want {
				t.Errorf("SeverityOf(%v) = %v, want %v", tt.conds, got, tt.want)
			}
		})
	}
}

func TestTransition(t *testing.T) {
	var (
		readyTrue   = conds(c("Ready", T, "Established"))
		progressing = conds(c("Ready", F, "InitialSync"), c("Reconciling", T, "InitialSync"))
		neverYet    = conds(c("Ready", U, "InitialSync"), c("Reconciling", T, "InitialSync"))
		stalled     = conds(c("Ready", F, "Forbidden"), c("Stalled", T, "Forbidden"))
		// A caller's gate that escalates keeping its reason.
		waiting      = conds(c("Ready", F, "WaitingForPath"), c("Reconciling", T, "WaitingForPath"))
		gaveUp       = conds(c("Ready", F, "WaitingForPath"), c("Stalled", T, "WaitingForPath"))
		stalledFalse = conds(c("Ready", F, "WaitingForPath"), c("Stalled", F, "WaitingForPath"))
	)
	event := func(sev wgevents.Severity, reason string) *wgevents.Event {
		return &wgevents.Event{Type: sev, Reason: reason, Message: "Ready " + reason}
	}
	tests := []struct {
		name          string
		before, after []metav1.Condition
		want          *wgevents.Event
	}{
		{"Ready appears, never established", nil, neverYet, event(wgevents.SeverityNormal, "InitialSync")},
		{"Ready appears True", nil, readyTrue, event(wgevents.SeverityNormal, "Established")},
		{"Ready appears stalled", nil, stalled, event(wgevents.SeverityWarning, "Forbidden")},
		{"first Ready", neverYet, readyTrue, event(wgevents.SeverityNormal, "Established")},
		{"stalls before first Ready", neverYet, stalled, event(wgevents.SeverityWarning, "Forbidden")},
		{"Ready to progressing", readyTrue, progressing, event(wgevents.SeverityNormal, "InitialSync")},
		{"Ready to stalled", readyTrue, stalled, event(wgevents.SeverityWarning, "Forbidden")},
		{"progressing to stalled: same status, new reason", progressing, stalled, event(wgevents.SeverityWarning, "Forbidden")},
		{"stalled to progressing", stalled, progressing, event(wgevents.SeverityNormal, "InitialSync")},
		{"recovery from stalled", stalled, readyTrue, event(wgevents.SeverityNormal, "Established")},
		{"recovery from progressing", progressing, readyTrue, event(wgevents.SeverityNormal, "Established")},
		{"Ready False without the trio", readyTrue, conds(c("Ready", F, "Broken")), event(wgevents.SeverityWarning, "Broken")},
		{"escalation keeping the reason: Stalled alone moves", waiting, gaveUp,
			&wgevents.Event{Type: wgevents.SeverityWarning, Reason: "WaitingForPath", Message: "Stalled WaitingForPath"}},
		{"de-escalation keeping the reason", gaveUp, waiting, event(wgevents.SeverityNormal, "WaitingForPath")},
		{"Stalled written False counts as not True", gaveUp, stalledFalse, event(wgevents.SeverityNormal, "WaitingForPath")},
		{"nothing changed", stalled, stalled, nil},
		// One Warning per escalation to Stalled: a stalled owner whose
		// reason moves (one stalled gate heals and another's reason
		// surfaces; a cause becomes the progress deadline) is not paged
		// again.
		{"stalled, its reason moves", stalled, conds(c("Ready", F, "ProgressDeadlineExceeded"), c("Stalled", T, "ProgressDeadlineExceeded")), nil},
		{"stalled, Ready's reason moves alone", gaveUp, conds(c("Ready", F, "Forbidden"), c("Stalled", T, "WaitingForPath")), nil},
		{"nothing changed, Ready True", readyTrue, readyTrue, nil},
		{"message only", readyTrue, conds(metav1.Condition{Type: "Ready", Status: T, Reason: "Established", Message: "other"}), nil},
		{"Ready removed", readyTrue, nil, nil},
		{"no Ready at all", nil, conds(c("Synced", T, "Ok")), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, ok := wgevents.Transition(tt.before, tt.after)
			var got *wgevents.Event
			if ok {
				got = &e
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Transition() mismatch (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("empty message", func(t *testing.T) {
		e, _ := wgevents.Transition(nil, conds(metav1.Condition{Type: "Ready", Status: U, Reason: "X"}))
		if e.Message != "Ready is now Unknown" {
			t.Errorf("Transition() message = %q, want %q", e.Message, "Ready is now Unknown")
		}
	})
}

func mustRecorder(r *wgevents.Recorder, err error) *wgevents.Recorder {
	if err != nil {
		panic(err)
	}
	return r
}

// fakeCoreV1 and fakeEventsV1 record what client-go's record.FakeRecorder
// and events.FakeRecorder would (clientgo_test.go runs the real ones).
type fakeCoreV1 struct {
	mu     sync.Mutex
	events []string
}

func (f *fakeCoreV1) Event(_ runtime.Object, eventtype, reason, message string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, eventtype+" "+reason+" "+message)
}

type fakeEventsV1 struct {
	mu     sync.Mutex
	events []string
}

func (f *fakeEventsV1) Eventf(_, _ runtime.Object, eventtype, reason, action, note string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, eventtype+" "+reason+" "+action+" "+fmt.Sprintf(note, args...))
}

// controller simulates a controller's status writes: the readiness
// roll-up, then the recorder, after each write.
type controller struct {
	conds []metav1.Condition
	now   time.Time
	rec   *wgevents.Recorder
}

func (c *controller) reconcile(restart bool, own []wgreadiness.Gate, states ...wgwatch.State) {
	gates := slices.Clone(own)
	for _, s := range states {
		g := wgreadiness.StreamGate(s)
		g.Starting = restart && (s.Phase == wgwatch.PhaseStarting || s.Reason == wgwatch.ReasonInitialSync)
		gates = append(gates, g)
	}
	before := append([]metav1.Condition(nil), c.conds...)
	c.now = c.now.Add(time.Minute)
	if wgreadiness.Apply(&c.conds, gates, 1, c.now, wgreadiness.Options{}) {
		// The status write succeeded.
		c.rec.Record(nil, before, c.conds)
	}
}

func state(name string, phase wgwatch.Phase, reason wgwatch.Reason, needsHuman bool) wgwatch.State {
	return wgwatch.State{Stream: name, Phase: phase, Reason: reason, NeedsHuman: needsHuman, Message: string(reason)}
}

// TestLifecycle runs an owner through its life with both recorders: a
// routine reconnect and a controller restart record no Warning; only a
// stream that needs a human does.
func TestLifecycle(t *testing.T) {
	var (
		podsStarting  = state("pods", wgwatch.PhaseStarting, wgwatch.ReasonStarting, false)
		podsReplaying = state("pods", wgwatch.PhaseReplaying, wgwatch.ReasonInitialSync, false)
		podsStreaming = state("pods", wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false)
		podsExpired   = state("pods", wgwatch.PhaseReplaying, wgwatch.ReasonExpiredResourceVersion, false)
		nodesOK       = state("nodes", wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false)
		nodesStarting = state("nodes", wgwatch.PhaseStarting, wgwatch.ReasonStarting, false)
		nodesReplay   = state("nodes", wgwatch.PhaseReplaying, wgwatch.ReasonInitialSync, false)
		nodesDenied   = state("nodes", wgwatch.PhaseBlocked, wgwatch.ReasonForbidden, true)
		nodesRetrying = state("nodes", wgwatch.PhaseBlocked, wgwatch.ReasonServerError, false)
	)
	waiting := wgreadiness.Progressing("Path", "WaitingForPath", "the path is not accepted yet")
	gaveUp := wgreadiness.Stalled("Path", "WaitingForPath", "the path was not accepted in time")
	steps := []struct {
		name   string
		states []wgwatch.State
		gates  []wgreadiness.Gate // the caller's own
		// restart: a new process, its streams within their start grace
		// (the Accumulator marks their gates Starting).
		restart bool
		want    []string // events, as "Type Reason"
	}{
		{name: "start", states: []wgwatch.State{podsStarting, nodesStarting}, restart: true, want: []string{"Normal Starting"}},
		{name: "replay", states: []wgwatch.State{podsReplaying, nodesReplay}, restart: true, want: []string{"Normal InitialSync"}},
		{name: "first Ready", states: []wgwatch.State{podsStreaming, nodesOK}, want: []string{"Normal Established"}},
		{name: "routine reconnect: the stream publishes nothing", states: []wgwatch.State{podsStreaming, nodesOK}},
		{name: "cursor expired, replay past its grace", states: []wgwatch.State{podsExpired, nodesOK}, want: []string{"Normal ExpiredResourceVersion"}},
		{name: "caught up", states: []wgwatch.State{podsStreaming, nodesOK}, want: []string{"Normal Established"}},
		{name: "transient failure", states: []wgwatch.State{podsStreaming, nodesRetrying}, want: []string{"Normal ServerError"}},
		{name: "needs a human", states: []wgwatch.State{podsStreaming, nodesDenied}, want: []string{"Warning Forbidden"}},
		{name: "still needs a human", states: []wgwatch.State{podsStreaming, nodesDenied}},
		{name: "fixed", states: []wgwatch.State{podsStreaming, nodesOK}, want: []string{"Normal Established"}},
		{name: "controller restart: every stream starts over, Ready stands", states: []wgwatch.State{podsStarting, nodesStarting}, restart: true},
		{name: "one stream replays, the other starts", states: []wgwatch.State{podsReplaying, nodesStarting}, restart: true},
		{name: "every stream replays", states: []wgwatch.State{podsReplaying, nodesReplay}, restart: true},
		{name: "established again: nothing to say", states: []wgwatch.State{podsStreaming, nodesOK}},
		{name: "a gate of the caller's own waits", states: []wgwatch.State{podsStreaming, nodesOK}, gates: []wgreadiness.Gate{waiting}, want: []string{"Normal WaitingForPath"}},
		{name: "it escalates keeping its reason: one Warning", states: []wgwatch.State{podsStreaming, nodesOK}, gates: []wgreadiness.Gate{gaveUp}, want: []string{"Warning WaitingForPath"}},
		{name: "still stalled", states: []wgwatch.State{podsStreaming, nodesOK}, gates: []wgreadiness.Gate{gaveUp}},
		{name: "the path is accepted", states: []wgwatch.State{podsStreaming, nodesOK}, want: []string{"Normal Established"}},
	}
	recorders := []struct {
		name string
		make func() (*wgevents.Recorder, func() []string)
	}{
		{"core/v1", func() (*wgevents.Recorder, func() []string) {
			f := &fakeCoreV1{}
			return mustRecorder(wgevents.NewRecorder(f)), func() []string { e := f.events; f.events = nil; return e }
		}},
		{"events.k8s.io/v1", func() (*wgevents.Recorder, func() []string) {
			f := &fakeEventsV1{}
			return mustRecorder(wgevents.NewEventsRecorder(f, wgevents.EventsOptions{})), func() []string { e := f.events; f.events = nil; return e }
		}},
	}
	for _, r := range recorders {
		t.Run(r.name, func(t *testing.T) {
			rec, take := r.make()
			c := &controller{rec: rec, now: time.Unix(1e9, 0)}
			for _, s := range steps {
				c.reconcile(s.restart, s.gates, s.states...)
				var got []string
				for _, e := range take() {
					f := strings.Fields(e)
					got = append(got, f[0]+" "+f[1])
				}
				if diff := cmp.Diff(s.want, got); diff != "" {
					t.Errorf("%s: events mismatch (-want +got):\n%s", s.name, diff)
				}
			}
		})
	}
}

func TestEventsRecorderNote(t *testing.T) {
	long := strings.Repeat("é", 600) // 1200 bytes
	tests := []struct {
		name     string
		opts     wgevents.EventsOptions
		message  string
		wantNote string
		wantAct  string
	}{
		{"short", wgevents.EventsOptions{}, "50% done", "50% done", "Reconcile"},
		{"custom action", wgevents.EventsOptions{Action: "Sync"}, "m", "m", "Sync"},
		{"cut on a rune boundary", wgevents.EventsOptions{}, long, strings.Repeat("é", 510) + "…", "Reconcile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeEventsV1{}
			after := conds(metav1.Condition{Type: "Ready", Status: T, Reason: "Established", Message: tt.message})
			mustRecorder(wgevents.NewEventsRecorder(f, tt.opts)).Record(nil, nil, after)
			want := []string{"Normal Established " + tt.wantAct + " " + tt.wantNote}
			if diff := cmp.Diff(want, f.events); diff != "" {
				t.Errorf("Record() events mismatch (-want +got):\n%s", diff)
			}
			note := strings.TrimPrefix(f.events[0], "Normal Established "+tt.wantAct+" ")
			if len(note) > wgevents.MaxNoteBytes || !utf8.ValidString(note) {
				t.Errorf("note is %d bytes, valid UTF-8 %v; want at most %d and valid", len(note), utf8.ValidString(note), wgevents.MaxNoteBytes)
			}
		})
	}
}

func TestCoreV1RecorderKeepsMessage(t *testing.T) {
	f := &fakeCoreV1{}
	msg := strings.Repeat("x", 2000) + " 100%"
	after := conds(metav1.Condition{Type: "Ready", Status: F, Reason: "Broken", Message: msg})
	e, ok := mustRecorder(wgevents.NewRecorder(f)).Record(nil, nil, after)
	want := wgevents.Event{Type: wgevents.SeverityWarning, Reason: "Broken", Message: msg}
	if diff := cmp.Diff(want, e); !ok || diff != "" {
		t.Errorf("Record() = %v, %v; want %v, true (-want +got):\n%s", e, ok, want, diff)
	}
	if diff := cmp.Diff([]string{"Warning Broken " + msg}, f.events); diff != "" {
		t.Errorf("events mismatch (-want +got):\n%s", diff)
	}
}

// TestRoutineReconnectRecordsNothing: a healthy session that the server
// closes is graded as publishing nothing, so the accumulator's verdict,
// the conditions and the Events stay as they were.
func TestRoutineReconnectRecordsNothing(t *testing.T) {
	v := wgwatch.Grade(wgwatch.Ending{
		Stage: wgwatch.StageStream, Cause: wgwatch.CauseClosed,
		Duration: 45 * time.Minute, Events: 12, Live: true,
	}, wgwatch.Policy{})
	if v.Publish {
		t.Fatalf("Grade(routine close).Publish = true, want false")
	}
	acc, err := wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := ownerKey()
	acc.Track(key, "pods")
	acc.StateChanged(state("pods", wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false))
	var conds []metav1.Condition
	acc.Apply(key, &conds, 1, time.Unix(1e9, 0))

	acc.SessionEnded(wgwatch.SessionEnd{Stream: "pods", Verdict: v, Duration: 45 * time.Minute})
	before := append([]metav1.Condition(nil), conds...)
	if acc.Apply(key, &conds, 1, time.Unix(1e9+3600, 0)) {
		t.Errorf("Apply() after a routine reconnect = true, want false")
	}
	f := &fakeCoreV1{}
	if e, ok := mustRecorder(wgevents.NewRecorder(f)).Record(nil, before, conds); ok {
		t.Errorf("Record() after a routine reconnect = %v, want nothing", e)
	}
}

// The API server rejects Event reasons and actions over 128 bytes, and
// events.k8s.io notes over 1024: client-go only logs the rejection, and a
// Warning would be lost. A condition's reason may be up to 1024 bytes.
func TestRecorderKeepsToTheLimits(t *testing.T) {
	long := "Reason" + strings.Repeat("X", 1000)
	after := conds(c("Ready", F, long), c("Stalled", T, long))
	core, events := &fakeCoreV1{}, &fakeEventsV1{}
	mustRecorder(wgevents.NewRecorder(core)).Record(nil, nil, after)
	mustRecorder(wgevents.NewEventsRecorder(events, wgevents.EventsOptions{})).Record(nil, nil, after)
	for name, got := range map[string][]string{"core/v1": core.events, "events.k8s.io/v1": events.events} {
		if len(got) != 1 {
			t.Fatalf("%s: %d Events, want 1", name, len(got))
		}
		reason := strings.Fields(got[0])[1]
		if len(reason) != wgevents.MaxReasonBytes || !strings.HasPrefix(long, reason) {
			t.Errorf("%s: reason of %d bytes, want the first %d of Ready's", name, len(reason), wgevents.MaxReasonBytes)
		}
	}
}

func TestNewRecorderRefusesBadInput(t *testing.T) {
	var nilCore *fakeCoreV1
	if _, err := wgevents.NewRecorder(nil); !errors.Is(err, wgevents.ErrNilRecorder) {
		t.Errorf("NewRecorder(nil) = %v, want ErrNilRecorder", err)
	}
	if _, err := wgevents.NewRecorder(nilCore); !errors.Is(err, wgevents.ErrNilRecorder) {
		t.Errorf("NewRecorder(typed nil) = %v, want ErrNilRecorder", err)
	}
	if _, err := wgevents.NewEventsRecorder(nil, wgevents.EventsOptions{}); !errors.Is(err, wgevents.ErrNilRecorder) {
		t.Errorf("NewEventsRecorder(nil) = %v, want ErrNilRecorder", err)
	}
	long := wgevents.EventsOptions{Action: strings.Repeat("a", wgevents.MaxActionBytes+1)}
	if _, err := wgevents.NewEventsRecorder(&fakeEventsV1{}, long); !errors.Is(err, wgevents.ErrInvalidAction) {
		t.Errorf("NewEventsRecorder(action of %d bytes) = %v, want ErrInvalidAction", len(long.Action), err)
	}
}

// Record returns the Event as it was recorded: with the reason cut to
// MaxReasonBytes, and for events.k8s.io the note cut to MaxNoteBytes. It
// used to return Ready's uncut reason while recording the cut one.
func TestRecordReturnsWhatItRecorded(t *testing.T) {
	long := "Reason" + strings.Repeat("X", 1000)
	msg := strings.Repeat("é", 1000) // 2000 bytes
	after := conds(c("Ready", F, long), c("Stalled", T, long))
	after[0].Message, after[1].Message = msg, msg
	core, events := &fakeCoreV1{}, &fakeEventsV1{}
	for _, tt := range []struct {
		name     string
		rec      *wgevents.Recorder
		recorded func() string
		action   string
		wantNote int
	}{
		{"core/v1", mustRecorder(wgevents.NewRecorder(core)), func() string { return core.events[0] }, "", len(msg)},
		{"events.k8s.io/v1", mustRecorder(wgevents.NewEventsRecorder(events, wgevents.EventsOptions{})), func() string { return events.events[0] },
			wgevents.DefaultAction + " ", wgevents.MaxNoteBytes},
	} {
		e, ok := tt.rec.Record(nil, nil, after)
		if !ok {
			t.Fatalf("%s: Record() recorded nothing", tt.name)
		}
		want := string(e.Type) + " " + e.Reason + " " + tt.action + e.Message
		if got := tt.recorded(); got != want {
			t.Errorf("%s: Record() returned %.60q…, recorded %.60q…", tt.name, want, got)
		}
		if len(e.Reason) != wgevents.MaxReasonBytes {
			t.Errorf("%s: Record() returned a reason of %d bytes, want %d", tt.name, len(e.Reason), wgevents.MaxReasonBytes)
		}
		if len(e.Message) > tt.wantNote {
			t.Errorf("%s: Record() returned a message of %d bytes, want at most %d", tt.name, len(e.Message), tt.wantNote)
		}
	}
}
