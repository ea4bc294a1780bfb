package judgekit_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/watchgrade/watchgrade/internal/judgekit"
	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

const s = time.Second

func sp(from, to time.Duration) judgekit.Span { return judgekit.Span{From: from, To: to} }

func TestSpanAlgebra(t *testing.T) {
	in := []judgekit.Span{sp(10*s, 20*s), sp(0, 5*s), sp(6*s, 8*s), sp(18*s, 25*s)}
	orig := slices.Clone(in)
	if got, want := judgekit.Union(in, 0), []judgekit.Span{sp(0, 5*s), sp(6*s, 8*s), sp(10*s, 25*s)}; !slices.Equal(got, want) {
		t.Errorf("Union(gap 0) = %v, want %v", got, want)
	}
	if got, want := judgekit.Union(in, s), []judgekit.Span{sp(0, 8*s), sp(10*s, 25*s)}; !slices.Equal(got, want) {
		t.Errorf("Union(gap 1s) = %v, want %v", got, want)
	}
	if !slices.Equal(in, orig) {
		t.Errorf("Union changed its input: %v", in)
	}
	live := judgekit.Union(in, 0)
	for _, c := range []struct{ t, want time.Duration }{{2 * s, -1}, {5 * s, 5 * s}, {9 * s, 8 * s}, {30 * s, 25 * s}} {
		if got := judgekit.GapStart(live, c.t); got != c.want {
			t.Errorf("GapStart(%v) = %v, want %v", c.t, got, c.want)
		}
	}
	if got, want := judgekit.Minus([]judgekit.Span{sp(0, 10*s)}, []judgekit.Span{sp(2*s, 3*s), sp(9*s, 12*s)}), []judgekit.Span{sp(0, 2*s), sp(3*s, 9*s)}; !slices.Equal(got, want) {
		t.Errorf("Minus = %v, want %v", got, want)
	}
	if !judgekit.Covered(live, 11*s, 24*s) || judgekit.Covered(live, 4*s, 7*s) {
		t.Error("Covered is wrong")
	}
	if !judgekit.Overlaps(live, 4*s, 7*s) || judgekit.Overlaps(live, 8500*time.Millisecond, 9*s) {
		t.Error("Overlaps is wrong")
	}
}

// A session is live once it has stayed open for ShortSession past its
// replay: an event before then does not make it live sooner.
func TestLiveSpans(t *testing.T) {
	start := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	reqs := []watchtest.Request{
		// A resume that delivered an event at once, open for 30 s.
		{Kind: watchtest.CallWatch, Options: metav1.ListOptions{ResourceVersion: "5"}, At: at(0), FirstEvent: at(100 * time.Millisecond), Closed: at(30 * s)},
		// A short one: closed before ShortSession, never live.
		{Kind: watchtest.CallWatch, Options: metav1.ListOptions{ResourceVersion: "9"}, At: at(40 * s), FirstEvent: at(40100 * time.Millisecond), Closed: at(40500 * time.Millisecond)},
		// A watch-list whose initial events ended 10 s in, still open.
		{Kind: watchtest.CallWatch, Options: metav1.ListOptions{SendInitialEvents: ptr.To(true)}, At: at(60 * s), InitialEventsEnd: at(70 * s)},
		// One that failed to open.
		{Kind: watchtest.CallWatch, At: at(200 * s), Err: watchtest.ServiceUnavailable()},
	}
	opened := time.Millisecond
	live := judgekit.ShortSession + time.Millisecond
	want := []judgekit.Span{sp(opened+live, 30*s), sp(70*s+live, 300*s)}
	if got := judgekit.LiveSpans(reqs, start, 300*s, opened, nil); !slices.Equal(got, want) {
		t.Errorf("LiveSpans = %v, want %v", got, want)
	}
	// In doubt, a resume is live only once confirmed: the first event
	// confirms the first; a check that says the server is behind the
	// cursor makes a silent watch never live.
	silent := watchtest.Request{Kind: watchtest.CallWatch, Options: metav1.ListOptions{ResourceVersion: "900"}, At: at(100 * s), Closed: at(150 * s)}
	check := watchtest.Request{Kind: watchtest.CallList, Options: metav1.ListOptions{Limit: 1, TimeoutSeconds: ptr.To(int64(10))}, At: at(102 * s), Answered: at(102 * s), ResourceVersion: "20"}
	got := judgekit.LiveSpans([]watchtest.Request{reqs[0], silent, check}, start, 300*s, opened, func(time.Time) bool { return true })
	if want := []judgekit.Span{sp(opened+live, 30*s)}; !slices.Equal(got, want) {
		t.Errorf("LiveSpans in doubt = %v, want %v", got, want)
	}
}

func TestDoubt(t *testing.T) {
	end := func(at time.Duration, healthy bool, next wgwatch.Next) judgekit.Ended {
		return judgekit.Ended{At: at, End: wgwatch.SessionEnd{Verdict: wgwatch.Verdict{Healthy: healthy, Next: next}}}
	}
	endings := []judgekit.Ended{end(10*s, false, wgwatch.NextResume), end(20*s, true, wgwatch.NextResume), end(30*s, false, wgwatch.NextStop)}
	for _, c := range []struct {
		fromCursor bool
		t          time.Duration
		want       bool
	}{{true, 5 * s, true}, {false, 5 * s, false}, {false, 15 * s, true}, {true, 25 * s, false}, {false, 35 * s, false}} {
		if got := judgekit.Doubt(c.fromCursor, endings, c.t); got != c.want {
			t.Errorf("Doubt(%v, %v) = %v, want %v", c.fromCursor, c.t, got, c.want)
		}
	}
}

// The same seed draws the same faults, and a fuzz input decides before
// the PRNG does.
func TestChooserAndFaults(t *testing.T) {
	draw := func(data []byte) []string {
		c := &judgekit.Chooser{Data: data, Rng: rand.New(rand.NewPCG(7, 0))}
		var out []string
		for range 50 {
			slots := []judgekit.Slot{judgekit.SlotErr, judgekit.SlotFlap, judgekit.SlotHandler, judgekit.SlotSlow}
			out = append(out, judgekit.DrawFault(c, slots[c.Intn(len(slots))]).Desc)
		}
		return out
	}
	if a, b := draw(nil), draw(nil); !slices.Equal(a, b) {
		t.Errorf("one seed drew %v, then %v", a, b)
	}
	if got := (&judgekit.Chooser{Data: []byte{0, 7}}).Intn(5); got != 2 {
		t.Errorf("Intn(5) from input 0x0007 = %d, want 2", got)
	}
	c := &judgekit.Chooser{Rng: rand.New(rand.NewPCG(1, 0))}
	for range 1000 {
		if d := c.LogDuration(time.Millisecond, time.Hour); d < time.Millisecond || d > time.Hour {
			t.Fatalf("LogDuration = %v, outside [1ms, 1h]", d)
		}
	}
	f := judgekit.Combine(map[judgekit.Slot]watchtest.Faults{
		judgekit.SlotRefuse: {Refuse: true},
		judgekit.SlotFlap:   {WatchLifetime: s},
		judgekit.SlotErr:    {Err: watchtest.Forbidden()},
	})
	if !f.Refuse || f.WatchLifetime != s || f.Err == nil {
		t.Errorf("Combine = %+v, want every fault", f)
	}
}
