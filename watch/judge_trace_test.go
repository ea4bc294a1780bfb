package watch_test

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// A schedule's trace is what its consumer observed, one fact a line, each
// stamped with its virtual time since the bubble began: the row of the
// package doc's table "What is published when" that each fact the stream
// or informer observed matched ("fold ended | otherwise"), every State
// published, every session ending, and every request the simulated server
// saw: a failed schedule's trace names the row whose state broke the
// invariant. A seed must replay exactly: TestJudgeReplay plays seeds twice and
// compares their traces' hashes, and a failed schedule prints its trace
// (the facts a regression row is made of) and its hash.

// traceOf returns the trace of a play: the fold's rows, p's states and
// endings and the server's requests reqs, in the order of their times (at
// one instant, rows, then states, then endings, then requests; rows in
// the order of their text, the rest in the order they came).
func traceOf(p *probe, reqs []watchtest.Request, start time.Time, rows []stamped[string]) []string {
	type fact struct {
		at   time.Duration
		line string
	}
	var facts []fact
	for _, r := range rows {
		facts = append(facts, fact{r.at, "fold " + r.v})
	}
	// The fold's rows of one instant in the order of their text: an
	// escalation that falls due at the instant a replay begins (the
	// stream's wait ends where the escalation is due) is folded by two
	// timers, in the order the scheduler runs them, and the states they
	// publish are the same either way (states keep their order, below).
	slices.SortStableFunc(facts, func(a, b fact) int { return cmp.Or(cmp.Compare(a.at, b.at), strings.Compare(a.line, b.line)) })
	c := p.counts()
	for _, s := range c.states {
		facts = append(facts, fact{s.at, fmt.Sprintf("state %s/%s human=%v %q", s.v.Phase, s.v.Reason, s.v.NeedsHuman, s.v.Message)})
	}
	for _, e := range c.endings {
		v := e.v.Verdict
		facts = append(facts, fact{e.at, fmt.Sprintf("end %s %s/%s next=%s wait=%s events=%d", e.v.Stage, v.Outcome, v.Class, v.Next, v.Wait, e.v.Events)})
	}
	for _, r := range reqs {
		o := r.Options
		timeout := int64(-1)
		if o.TimeoutSeconds != nil {
			timeout = *o.TimeoutSeconds
		}
		sie := "-"
		if o.SendInitialEvents != nil {
			sie = fmt.Sprint(*o.SendInitialEvents)
		}
		facts = append(facts, fact{r.At.Sub(start), fmt.Sprintf("request %s rv=%q match=%q sie=%s bookmarks=%v limit=%d cont=%q timeout=%d labels=%q fields=%q",
			r.Kind, o.ResourceVersion, o.ResourceVersionMatch, sie, o.AllowWatchBookmarks, o.Limit, o.Continue, timeout, o.LabelSelector, o.FieldSelector)})
	}
	slices.SortStableFunc(facts, func(a, b fact) int { return int(a.at - b.at) })
	out := make([]string, len(facts))
	for i, f := range facts {
		out[i] = fmt.Sprintf("%v %s", f.at, f.line)
	}
	return out
}

// traceHash is the FNV-1a hash of a trace.
func traceHash(trace []string) uint64 {
	h := fnv.New64a()
	for _, l := range trace {
		h.Write([]byte(l))
		h.Write([]byte{'\n'})
	}
	return h.Sum64()
}

// traceDiff describes where traces a and b first differ, with the lines
// before it for context.
func traceDiff(a, b []string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	line := func(t []string, i int) string {
		if i < len(t) {
			return t[i]
		}
		return "(end of trace)"
	}
	var out strings.Builder
	fmt.Fprintf(&out, "traces first differ at fact %d of %d and %d:", i, len(a), len(b))
	for j := max(i-3, 0); j < i; j++ {
		fmt.Fprintf(&out, "\n     both: %s", a[j])
	}
	for j := i; j < i+3 && (j < len(a) || j < len(b)); j++ {
		fmt.Fprintf(&out, "\n    first: %s\n   second: %s", line(a, j), line(b, j))
	}
	return out.String()
}

// TestJudgeReplay plays each of -judge.replays seeds from -judge.seed on
// twice, as TestJudge plays it, and compares the two traces: a seed that
// does not replay exactly cannot be studied with -judge.seed. It prints
// one summary line, and the first lines where two plays of a seed differ.
func TestJudgeReplay(t *testing.T) {
	n := *judgeReplays
	identical := 0
	for i := range n {
		seed := *judgeSeed + uint64(i)
		var traces [2][]string
		for k := range traces {
			// A schedule's steps keep state of their own: each play has
			// its own, generated anew.
			sc := generate(seed, &chooser{Rng: rand.New(rand.NewPCG(seed, 0))})
			t.Run(fmt.Sprintf("seed=%d/play=%d", seed, k+1), func(t *testing.T) {
				traces[k] = play(t, sc).trace
			})
		}
		a, b := traceHash(traces[0]), traceHash(traces[1])
		if a == b {
			identical++
			continue
		}
		t.Errorf("seed %d does not replay: trace %016x, then %016x; %s", seed, a, b, traceDiff(traces[0], traces[1]))
	}
	fmt.Printf("judge: replay seeds=%d identical=%d\n", n, identical)
}

// runSeededInformer is runInformer with the instrumented ListerWatcher's
// jitter drawn from r, so that a schedule replays exactly.
func runSeededInformer(t *testing.T, lw cache.ListerWatcher, p *probe, r func() float64, obs wgwatch.Observer, onError cache.WatchErrorHandlerWithContext,
	onRow func(time.Time, string)) (stop func(), store cache.Store, state func() wgwatch.State) {
	t.Helper()
	ilw, err := wgwatch.Instrument(lw, wgwatch.InstrumentOptions{Resource: configmaps, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	if r != nil {
		wgwatch.SetInstrumentRand(ilw, r)
	}
	if onRow != nil {
		wgwatch.SetInstrumentFoldTrace(ilw, onRow)
	}
	inf := cache.NewSharedIndexInformer(ilw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	if onError != nil {
		if err := inf.SetWatchErrorHandlerWithContext(onError); err != nil {
			t.Fatal(err)
		}
	}
	name := func(obj any) string {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return ""
		}
		return m.GetName()
	}
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.Observe(name(obj), versionOf(obj.(runtime.Object))) },
		UpdateFunc: func(_, obj any) { p.Observe(name(obj), versionOf(obj.(runtime.Object))) },
		DeleteFunc: func(obj any) { p.Observe(name(obj), "") },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(done) }()
	return func() { cancel(); <-done }, inf.GetStore(), ilw.State
}
