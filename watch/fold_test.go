package watch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// fold steps a health value through a history, at a time it moves by hand.
type fold struct {
	h  health
	at time.Time
}

var foldStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newFold(informer bool) *fold {
	return &fold{h: newHealth("s", schema.GroupResource{Resource: "configmaps"}, Policy{}.withDefaults(), informer), at: foldStart}
}

// do steps f at the fold's time and returns the published states, their
// messages, identities dropped.
func (f *fold) do(x fact) (Verdict, []State) {
	x.at = f.at
	v, out := f.h.step(x)
	for i := range out {
		out[i] = State{Phase: out[i].Phase, Reason: out[i].Reason, NeedsHuman: out[i].NeedsHuman}
	}
	return v, out
}

func (f *fold) after(d time.Duration) *fold { f.at = f.at.Add(d); return f }

// pending lists what is armed, each as due from the fold's time.
func (f *fold) pending() []Escalation {
	var out []Escalation
	for _, e := range f.h.pending {
		out = append(out, Escalation{After: f.h.base.Add(e.After).Sub(f.at), State: State{Phase: e.State.Phase, Reason: e.State.Reason, NeedsHuman: e.State.NeedsHuman}})
	}
	return out
}

func ended(e Ending) fact { return fact{kind: factEnd, ending: e} }

// TestPublishedWhen is the package doc's table "What is published when",
// row by row, for a stream and an informer; the rows here and the doc's
// are the same set.
func TestPublishedWhen(t *testing.T) {
	const s, m = time.Second, time.Minute
	blocked := func(r Reason, human bool) State { return State{Phase: PhaseBlocked, Reason: r, NeedsHuman: human} }
	starting := State{Phase: PhaseStarting, Reason: ReasonStarting}
	streaming := State{Phase: PhaseStreaming, Reason: ReasonWatching}
	initial := State{Phase: PhaseReplaying, Reason: ReasonInitialSync}
	pde := blocked(ReasonProgressDeadlineExceeded, true)
	start, live := fact{kind: factStart}, fact{kind: factLive}
	closedLive := ended(Ending{Stage: StageStream, Cause: CauseClosed, Live: true})
	refused := ended(Ending{Stage: StageOpen, Cause: CauseError, Err: watchtest.ConnectionRefused()})
	// Rows a stream and an informer play alike.
	started := func(f *fold) []State { _, out := f.do(start); return out }
	goneLive := func(f *fold) []State { f.do(start); _, out := f.do(live); return out }
	liveAgain := func(f *fold) []State {
		f.do(start)
		f.do(live)
		f.after(45 * m).do(closedLive)
		_, out := f.do(live)
		return out
	}

	type outcome struct {
		states  []State
		pending []Escalation
	}
	tests := []struct {
		fact, soFar string
		// stream and informer play the row on a fold and return what the
		// row's fact published and what is armed after it; nil where the
		// row does not apply.
		stream, informer func(*fold) []State
		wantStream       outcome
		wantInformer     outcome
	}{
		{fact: "start", soFar: "resuming from a cursor",
			stream: func(f *fold) []State {
				_, out := f.do(fact{kind: factStart, resuming: true})
				return out
			},
			wantStream: outcome{[]State{starting}, []Escalation{{30 * s, blocked(ReasonNoLiveSession, false)}, {5 * m, pde}}}},
		{fact: "start", soFar: "replaying",
			stream:       started,
			informer:     started,
			wantStream:   outcome{[]State{starting}, []Escalation{{5 * m, pde}}},
			wantInformer: outcome{nil, []Escalation{{5 * m, pde}}}},
		{fact: "replay began", soFar: "Starting, never had a cursor",
			stream: func(f *fold) []State {
				f.do(start)
				_, out := f.after(s).do(fact{kind: factReplay, initial: true})
				return out
			},
			informer: func(f *fold) []State {
				f.do(start)
				_, out := f.do(fact{kind: factReplay, initial: true})
				return out
			},
			wantStream:   outcome{[]State{initial}, []Escalation{{5*m - s, pde}}},
			wantInformer: outcome{[]State{initial}, []Escalation{{5 * m, pde}}}},
		{fact: "replay began", soFar: "otherwise",
			stream: func(f *fold) []State {
				// Started from a cursor that expired: not a first sync.
				f.do(fact{kind: factStart, resuming: true})
				_, out := f.do(fact{kind: factReplay})
				return out
			},
			informer: func(f *fold) []State {
				// A relist after the first sync: every List is one.
				f.do(start)
				f.do(fact{kind: factReplay, initial: true})
				f.do(live)
				_, out := f.do(fact{kind: factReplay, initial: true})
				return out
			},
			wantStream:   outcome{nil, []Escalation{{30 * s, blocked(ReasonNoLiveSession, false)}, {5 * m, pde}}},
			wantInformer: outcome{}},
		{fact: "live", soFar: "not Streaming",
			stream:       goneLive,
			informer:     goneLive,
			wantStream:   outcome{[]State{streaming}, nil},
			wantInformer: outcome{[]State{streaming}, nil}},
		{fact: "live", soFar: "Streaming", stream: liveAgain, informer: liveAgain},
		{fact: "ended", soFar: "teardown",
			stream: func(f *fold) []State {
				f.do(start)
				_, out := f.after(2 * s).do(ended(Ending{OwnerDone: true, Stage: StageOpen, Cause: CauseError, Err: watchtest.Forbidden()}))
				return out
			},
			informer: func(f *fold) []State {
				f.do(start)
				_, out := f.after(2 * s).do(ended(Ending{OwnerDone: true, Stage: StageStream, Cause: CauseClosed}))
				return out
			},
		},
		{fact: "ended", soFar: "a stall published since live",
			stream: func(f *fold) []State {
				f.do(start)
				f.do(live)
				began := f.at
				f.after(31 * s).do(fact{kind: factStuck, since: began})
				// Live until the call began: not live, and in trouble for
				// 31 s at this ending, so it is Blocked (the steadiness
				// keeps HandlerStalled, Blocked already).
				v, out := f.after(s).do(closedLive)
				if v.Healthy || v.ShortClose != true {
					t.Errorf("a session ended after a stall is graded %+v, want not live and short", v)
				}
				return out
			},
			wantStream: outcome{nil, []Escalation{{5*m - 32*s, pde}}}},
		{fact: "ended", soFar: "otherwise",
			stream: func(f *fold) []State {
				f.do(fact{kind: factStart, resuming: true})
				_, out := f.after(31 * s).do(refused)
				return out
			},
			informer: func(f *fold) []State {
				f.do(start)
				_, out := f.after(31 * s).do(refused)
				return out
			},
			wantStream:   outcome{[]State{blocked(ReasonConnectionFailed, false)}, []Escalation{{5*m - 31*s, pde}}},
			wantInformer: outcome{[]State{blocked(ReasonConnectionFailed, false)}, []Escalation{{5*m - 31*s, pde}}}},
		{fact: "tick", soFar: "an escalation is due",
			stream: func(f *fold) []State {
				f.do(fact{kind: factStart, resuming: true})
				_, before := f.after(30*s - 1).do(fact{kind: factTick})
				if len(before) > 0 {
					t.Errorf("a tick before the escalation is due published %v", before)
				}
				_, out := f.after(1).do(fact{kind: factTick})
				return out
			},
			informer: func(f *fold) []State {
				f.do(start)
				_, out := f.after(5 * m).do(fact{kind: factTick})
				return out
			},
			wantStream:   outcome{[]State{blocked(ReasonNoLiveSession, false)}, []Escalation{{5*m - 30*s, pde}}},
			wantInformer: outcome{[]State{pde}, nil}},
		{fact: "behind", soFar: "live, ProgressDeadline long",
			stream: func(f *fold) []State {
				f.do(start)
				f.do(live)
				began := f.at
				f.after(31 * s).do(fact{kind: factStuck, since: began, hung: true})
				// Behind again, from a later call, before the session went
				// live again: the same stall, counted from its start.
				again := f.after(4 * m).at
				_, out := f.after(29 * s).do(fact{kind: factStuck, since: again, hung: true})
				return out
			},
			wantStream: outcome{[]State{pde}, nil}},
		{fact: "behind", soFar: "live, TransientGrace long",
			stream: func(f *fold) []State {
				f.do(start)
				f.do(live)
				began := f.at
				_, early := f.after(30*s - 1).do(fact{kind: factStuck, since: began})
				if len(early) > 0 {
					t.Errorf("a call stuck for less than TransientGrace published %v", early)
				}
				_, out := f.after(1).do(fact{kind: factStuck, since: began})
				return out
			},
			wantStream: outcome{[]State{blocked(ReasonHandlerStalled, false)}, nil}},
		{fact: "behind", soFar: "otherwise",
			stream: func(f *fold) []State {
				// Not live yet: the escalations cover it.
				f.do(start)
				_, out := f.after(40 * s).do(fact{kind: factStuck, since: foldStart})
				return out
			},
			wantStream: outcome{nil, []Escalation{{5*m - 40*s, pde}}}},
	}
	var keys []string
	for _, tt := range tests {
		keys = append(keys, tt.fact+" | "+tt.soFar)
		for _, c := range []struct {
			who  string
			play func(*fold) []State
			want outcome
		}{{"stream", tt.stream, tt.wantStream}, {"informer", tt.informer, tt.wantInformer}} {
			if c.play == nil {
				continue
			}
			t.Run(c.who+": "+tt.fact+", "+tt.soFar, func(t *testing.T) {
				f := newFold(c.who == "informer")
				got := outcome{c.play(f), f.pending()}
				if diff := cmp.Diff(c.want, got, cmp.AllowUnexported(outcome{})); diff != "" {
					t.Errorf("published, armed (-want +got):\n%s", diff)
				}
				// The row the fold says it matched, as a trace records it.
				if want := tt.fact + " | " + tt.soFar; f.h.row != want {
					t.Errorf("the fold matched row %q, want %q", f.h.row, want)
				}
			})
		}
	}
	if diff := cmp.Diff(docTable(t, "fact", 2), keys); diff != "" {
		t.Errorf("the doc's table and this test's rows differ (-doc +test):\n%s", diff)
	}
}

// TestPublishedStateIsKept is the package doc's table of the states a row
// gives that are kept back.
func TestPublishedStateIsKept(t *testing.T) {
	blocked := func(r Reason, human bool) State { return State{Phase: PhaseBlocked, Reason: r, NeedsHuman: human} }
	tests := []struct {
		row       string
		cur, next State
		// asks is how many times in a row next is asked for; kept is
		// whether each is kept.
		kept []bool
	}{
		{"the same phase, reason and NeedsHuman", State{Phase: PhaseBlocked, Reason: ReasonServerError, Message: "a"},
			State{Phase: PhaseBlocked, Reason: ReasonServerError, Message: "b"}, []bool{true, true, true, true}},
		{"Replaying", blocked(ReasonConnectionFailed, false), State{Phase: PhaseReplaying, Reason: ReasonExpiredResourceVersion}, []bool{true, true, true}},
		{"Blocked, needs a human (ProgressDeadlineExceeded)", blocked(ReasonForbidden, true), blocked(ReasonProgressDeadlineExceeded, true), []bool{true, true}},
		{"Blocked, not needing a human, asked for fewer than three", blocked(ReasonConnectionFailed, false), blocked(ReasonFlapping, false), []bool{true, true, false}},
		{"Blocked, not needing a human", blocked(ReasonForbidden, true), blocked(ReasonConnectionFailed, false), []bool{true, true, true, true}},
	}
	var rows []string
	for _, tt := range tests {
		rows = append(rows, tt.row)
		var k steadiness
		for i, want := range tt.kept {
			if got := k.keep(tt.cur, tt.next); got != want {
				t.Errorf("%s: ask %d kept = %v, want %v", tt.row, i+1, got, want)
			}
		}
	}
	// What no row keeps is published.
	var k steadiness
	for _, c := range [][2]State{
		{blocked(ReasonForbidden, true), {Phase: PhaseStreaming, Reason: ReasonWatching}},
		{blocked(ReasonConnectionFailed, false), blocked(ReasonForbidden, true)},
		{{Phase: PhaseReplaying, Reason: ReasonExpiredResourceVersion}, blocked(ReasonConnectionFailed, false)},
	} {
		if k.keep(c[0], c[1]) {
			t.Errorf("%s/%s kept back %s/%s", c[0].Phase, c[0].Reason, c[1].Phase, c[1].Reason)
		}
	}
	if diff := cmp.Diff(docTable(t, "the state a row gives", 1), rows); diff != "" {
		t.Errorf("the doc's table and this test's rows differ (-doc +test):\n%s", diff)
	}
}

// TestTimerTicksTheFold checks the driver's half of the tick row: the
// escalation is published on the clock, and not once the context of an
// informer's last call is done; under a fake clock too, whose timers run
// their callbacks holding its lock.
func TestTimerTicksTheFold(t *testing.T) {
	for _, done := range []bool{false, true} {
		for _, fake := range []bool{false, true} {
			synctest.Test(t, func(t *testing.T) {
				var c clock.WithTicker = clock.RealClock{}
				fc := clocktesting.NewFakeClock(foldStart)
				if fake {
					c = fc
				}
				var mu sync.Mutex
				var got []Reason
				p := newPublisher(c, ObserverFuncs{StateChangedFunc: func(s State) {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, s.Reason)
				}}, newHealth("s", schema.GroupResource{Resource: "configmaps"}, Policy{}.withDefaults(), false))
				ch := make(chan struct{})
				if done {
					close(ch)
				}
				p.record(fact{kind: factStart, resuming: true}, ch)
				if fake {
					fc.Step(30 * time.Second)
					synctest.Wait()
					fc.Step(5 * time.Minute)
				} else {
					time.Sleep(5*time.Minute + time.Second)
				}
				synctest.Wait()
				p.stop()
				want := []Reason{ReasonStarting, ReasonNoLiveSession, ReasonProgressDeadlineExceeded}
				if done {
					want = want[:1]
				}
				mu.Lock()
				defer mu.Unlock()
				if !slices.Equal(got, want) {
					t.Errorf("done=%v fake=%v: published %v, want %v", done, fake, got, want)
				}
			})
		}
	}
}

// TestOneWayToTheObserver checks that the package tells an Observer of a
// state or an ending in one place, the publisher's step, and that only it
// steps the fold: every State a Stream or an instrumented informer
// publishes is the fold's, and Streams passes on only states its
// informers published.
func TestOneWayToTheObserver(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string][]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			where := fn.Name.Name
			if fn.Recv != nil {
				where = types(fn.Recv.List[0].Type) + "." + where
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
					switch sel.Sel.Name {
					case "StateChanged", "SessionEnded", "step":
						calls[sel.Sel.Name] = append(calls[sel.Sel.Name], where)
					}
				}
				return true
			})
		}
	}
	want := map[string][]string{
		// The publisher's step; the fan-out passes on what it is told,
		// and Streams the worst of what its informers published.
		"StateChanged": {"Streams.passOn", "Streams.passOn", "fanOut.StateChanged", "publisher.stepLocked"},
		"SessionEnded": {"fanOut.SessionEnded", "publisher.stepLocked"},
		"step":         {"publisher.stepLocked"},
	}
	for k := range want {
		slices.Sort(want[k])
		slices.Sort(calls[k])
	}
	if diff := cmp.Diff(want, calls); diff != "" {
		t.Errorf("calls to the observer and the fold (-want +got):\n%s", diff)
	}
}

func types(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return types(e.X)
	case *ast.Ident:
		return e.Name
	}
	return "?"
}

// docTable returns the rows of the package doc's table whose header
// begins with header: the first n columns of each row's first line,
// joined by " | ".
func docTable(t *testing.T, header string, n int) []string {
	t.Helper()
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	cols := regexp.MustCompile(`\s{2,}`)
	var rows []string
	in := false
	for line := range strings.Lines(string(src)) {
		line = strings.TrimRight(strings.TrimPrefix(line, "//"), "\n")
		switch {
		case !in && strings.HasPrefix(line, "\t"+header+" "):
			in = true
		case !in:
		case strings.TrimSpace(line) == "":
			return rows
		case strings.HasPrefix(line, "\t-"), strings.HasPrefix(line, "\t "):
			// The rule under the header; a row's next line.
		default:
			c := cols.Split(strings.TrimPrefix(line, "\t"), -1)
			rows = append(rows, strings.Join(c[:n], " | "))
		}
	}
	t.Fatalf("no table %q in doc.go", header)
	return nil
}

// A live session that ends while its consumer is behind publishes
// nothing: the stream is still Streaming, and the stall the consumer is in
// since before the ending is published as if the session were live. A
// consumer that fell behind after the ending is the escalations' to
// cover.
func TestBehindAcrossALiveEnding(t *testing.T) {
	const s = time.Second
	closedLive := ended(Ending{Stage: StageStream, Cause: CauseClosed, Live: true})
	f := newFold(false)
	f.do(fact{kind: factStart})
	f.do(fact{kind: factLive})
	behind := f.after(10 * s).at
	f.after(10 * s).do(closedLive)
	if _, out := f.after(5 * s).do(fact{kind: factStuck, since: f.at}); len(out) > 0 {
		t.Errorf("behind since the ending, not live: published %v, want nothing", out)
	}
	_, out := f.after(15 * s).do(fact{kind: factStuck, since: behind})
	if want := []State{{Phase: PhaseBlocked, Reason: ReasonHandlerStalled}}; !cmp.Equal(want, out) {
		t.Errorf("behind for 30 s since before a live ending: published %v, want %v", out, want)
	}
}
