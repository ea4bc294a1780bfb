package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/html"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchgrade/watchgrade/examples/internal/sandbox"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// TestTimelineDrawsTheRecord draws a small record of every kind of mark to
// both formats, reads each file back and compares what it shows with the
// record.
func TestTimelineDrawsTheRecord(t *testing.T) {
	r := sampleRecord()
	dir := t.TempDir()
	for _, name := range []string{"timeline.html", "timeline.svg"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			if err := writeTimeline(path, r, "Summary after 1m0s\ndemo: <closed>=3 & more"); err != nil {
				t.Fatal(err)
			}
			root := readTimeline(t, path)
			checkTimeline(t, root, r)
			if strings.HasSuffix(name, ".html") {
				pre := root.find(func(n *node) bool { return n.name == "pre" && n.hasClass("summary") })
				if len(pre) != 1 || !strings.Contains(pre[0].allText(), "demo: <closed>=3 & more") {
					t.Errorf("the page does not show the summary text as given")
				}
				if items := root.find(func(n *node) bool { return n.name == "li" }); len(items) != len(r.Scenes) {
					t.Errorf("the page lists %d scenes, want %d", len(items), len(r.Scenes))
				}
				checkRendered(t, path)
			}
		})
	}
}

func TestTimelineFormat(t *testing.T) {
	tests := []struct {
		path    string
		want    string
		wantErr bool
	}{
		{path: "run.html", want: "html"},
		{path: "out/Run.HTM", want: "html"},
		{path: "run.svg", want: "svg"},
		{path: "run.png", wantErr: true},
		{path: "run", wantErr: true},
	}
	for _, tt := range tests {
		got, err := timelineFormat(tt.path)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("timelineFormat(%q) = %q, %v; want %q, error %t", tt.path, got, err, tt.want, tt.wantErr)
		}
	}
}

// sampleRecord is a short run with two streams (one torn down and started
// again), a denial, a Stalled target, a Warning and a restart window.
func sampleRecord() *record {
	s := func(sec float64) time.Duration { return time.Duration(sec * float64(time.Second)) }
	cm, tg := "shop/configmaps.v1", "watchtargets"
	state := func(stream string, phase wgwatch.Phase, reason wgwatch.Reason, human bool) wgwatch.State {
		return wgwatch.State{Stream: stream, Phase: phase, Reason: reason, NeedsHuman: human, Message: "a <message> & more"}
	}
	end := func(stream string, o wgwatch.Outcome) wgwatch.SessionEnd {
		return wgwatch.SessionEnd{Stream: stream, Verdict: wgwatch.Verdict{Outcome: o, Next: wgwatch.NextResume}, Duration: 2 * time.Second, Events: 3}
	}
	target := func(conds ...metav1.Condition) sandbox.Target {
		return sandbox.Target{Name: "app", Generation: 1, ObservedGeneration: 1, Conditions: conds}
	}
	cond := func(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason}
	}
	return &record{
		Mode: "embedded",
		End:  s(60),
		Scenes: []scene{
			{At: s(1), Label: "target created", Detail: "creating <app>"},
			{At: s(6), Label: "controller restart", Detail: "restarting"},
			{At: s(12), Label: "apiserver restart", Detail: "restarting the apiserver"},
			{At: s(18), Label: "Role removed", Detail: "removing"},
			{At: s(40), Label: "Role restored", Detail: "restoring"},
		},
		States: []stateMark{
			{s(0.5), state(tg, wgwatch.PhaseStarting, wgwatch.ReasonStarting, false)},
			{s(0.6), state(tg, wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false)},
			{s(1.1), state(cm, wgwatch.PhaseStarting, wgwatch.ReasonStarting, false)},
			{s(1.2), state(cm, wgwatch.PhaseReplaying, wgwatch.ReasonInitialSync, false)},
			{s(1.3), state(cm, wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false)},
			{s(6.2), state(tg, wgwatch.PhaseStarting, wgwatch.ReasonStarting, false)},
			{s(6.3), state(tg, wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false)},
			{s(6.4), state(cm, wgwatch.PhaseStarting, wgwatch.ReasonStarting, false)},
			{s(6.5), state(cm, wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false)},
			{s(35), state(cm, wgwatch.PhaseBlocked, wgwatch.ReasonForbidden, true)},
			{s(45), state(cm, wgwatch.PhaseStreaming, wgwatch.ReasonWatching, false)},
		},
		Endings: []endingMark{
			{s(3), end(cm, wgwatch.OutcomeClosed)},
			{s(5), end(cm, wgwatch.OutcomeClosed)},
			{s(6.1), end(cm, wgwatch.OutcomeTeardown)},
			{s(6.1), end(tg, wgwatch.OutcomeTeardown)},
			{s(12.5), end(tg, wgwatch.OutcomeExpired)},
			{s(19), end(cm, wgwatch.OutcomeError)},
			{s(50), end(cm, wgwatch.OutcomeClosed)},
		},
		Target: "app",
		Statuses: []statusMark{
			{s(1), target()},
			{s(1.4), target(cond("Ready", "True", "Established"))},
			{s(6.4), target(cond("Ready", "False", "Starting"), cond("Reconciling", "True", "Starting"))},
			{s(6.6), target(cond("Ready", "True", "Established"))},
			{s(35), target(cond("Ready", "False", "Forbidden"), cond("Stalled", "True", "Forbidden"))},
			{s(45), target(cond("Ready", "True", "Established"))},
		},
		Writes: []time.Duration{s(1.4), s(6.4), s(6.6), s(35), s(45)},
		Events: []eventMark{
			{s(1.4), sandbox.Event{Type: "Normal", Reason: "Established", Message: "all gates are established"}},
			{s(6.4), sandbox.Event{Type: "Normal", Reason: "Starting", Message: "the stream has not <opened>"}},
			{s(35), sandbox.Event{Type: "Warning", Reason: "Forbidden", Message: `secrets is "forbidden"`}},
			{s(45), sandbox.Event{Type: "Normal", Reason: "Established", Message: "all gates are established"}},
		},
		Restart: restartWindow{From: s(6), To: s(12), Writes: 2, Events: 1, Dips: 1},
	}
}

// node is an element of a parsed timeline, from either parser.
type node struct {
	name     string
	attrs    map[string]string
	children []*node
	text     string
}

func (n *node) hasClass(class string) bool {
	return slices.Contains(strings.Fields(n.attrs["class"]), class)
}

// find returns every element under n (n included) that match accepts, in
// document order.
func (n *node) find(match func(*node) bool) []*node {
	var out []*node
	if match(n) {
		out = append(out, n)
	}
	for _, c := range n.children {
		out = append(out, c.find(match)...)
	}
	return out
}

func (n *node) allText() string {
	s := n.text
	for _, c := range n.children {
		s += c.allText()
	}
	return s
}

// readTimeline parses a timeline file: HTML with golang.org/x/net/html, SVG
// with encoding/xml (which also proves it well-formed XML).
func readTimeline(t *testing.T, path string) *node {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(path, ".svg") {
		root, err := parseXML(data)
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", path, err)
		}
		return root
	}
	doc, err := html.Parse(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return fromHTML(doc)
}

func fromHTML(h *html.Node) *node {
	n := &node{name: h.Data, attrs: map[string]string{}}
	if h.Type == html.DocumentNode {
		n.name = "#document"
	}
	for _, a := range h.Attr {
		n.attrs[a.Key] = a.Val
	}
	for c := h.FirstChild; c != nil; c = c.NextSibling {
		switch c.Type {
		case html.ElementNode:
			n.children = append(n.children, fromHTML(c))
		case html.TextNode:
			n.text += c.Data
		}
	}
	return n
}

func parseXML(data []byte) (*node, error) {
	dec := xml.NewDecoder(bytes.NewReader(data))
	root := &node{name: "#document", attrs: map[string]string{}}
	stack := []*node{root}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		top := stack[len(stack)-1]
		switch tok := tok.(type) {
		case xml.StartElement:
			n := &node{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				key := a.Name.Local
				if a.Name.Space != "" && a.Name.Space != "xmlns" {
					key = a.Name.Space + ":" + key
				}
				n.attrs[key] = a.Value
			}
			top.children = append(top.children, n)
			stack = append(stack, n)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			top.text += string(tok)
		}
	}
	return root, nil
}

// checkTimeline compares a parsed timeline with the record it was drawn
// from: it opens from disk alone, and it shows every stream with its
// phases and session endings, the target's conditions and writes, every
// Event, every scene and the restart window.
func checkTimeline(t *testing.T, root *node, r *record) {
	t.Helper()
	// Self-contained: nothing to run, nothing to fetch.
	for _, n := range root.find(func(*node) bool { return true }) {
		switch n.name {
		case "script", "link", "img", "image", "iframe", "object", "embed", "foreignObject", "use", "audio", "video":
			t.Errorf("the timeline has a <%s> element", n.name)
		}
		for key, val := range n.attrs {
			if key == "src" || key == "href" || strings.HasSuffix(key, ":href") || strings.HasPrefix(key, "on") {
				t.Errorf("<%s> has attribute %s=%q", n.name, key, val)
			}
		}
		if n.name == "style" && (strings.Contains(n.text, "url(") || strings.Contains(n.text, "@import")) {
			t.Errorf("a stylesheet fetches something: %q", n.text)
		}
	}
	if svgs := root.find(func(n *node) bool { return n.name == "svg" }); len(svgs) != 1 {
		t.Fatalf("the timeline has %d <svg> elements, want 1", len(svgs))
	}

	lanes := root.find(func(n *node) bool { return n.name == "g" && n.hasClass("lane") && n.hasClass("stream") })
	var names []string
	for _, l := range lanes {
		names = append(names, l.attrs["data-stream"])
	}
	if diff := cmp.Diff(r.streams(), names); diff != "" {
		t.Errorf("stream lanes (-record +timeline):\n%s", diff)
	}
	for _, l := range lanes {
		name := l.attrs["data-stream"]
		var wantTicks, wantBands []string
		for _, e := range r.Endings {
			if e.End.Stream == name {
				wantTicks = append(wantTicks, string(e.End.Verdict.Outcome)+"@"+secs(e.At))
			}
		}
		for _, s := range r.States {
			if s.State.Stream == name {
				wantBands = append(wantBands, fmt.Sprintf("%s/%s human=%t from %s", s.State.Phase, s.State.Reason, s.State.NeedsHuman, secs(s.At)))
			}
		}
		var gotTicks, gotBands []string
		for _, n := range l.find(func(n *node) bool { return n.hasClass("tick") }) {
			gotTicks = append(gotTicks, n.attrs["data-outcome"]+"@"+n.attrs["data-at"])
		}
		for _, n := range l.find(func(n *node) bool { return n.hasClass("band") }) {
			gotBands = append(gotBands, fmt.Sprintf("%s/%s human=%s from %s", n.attrs["data-phase"], n.attrs["data-reason"], n.attrs["data-needs-human"], n.attrs["data-from"]))
		}
		if diff := cmp.Diff(wantTicks, gotTicks); diff != "" {
			t.Errorf("%s: session endings (-record +timeline):\n%s", name, diff)
		}
		if diff := cmp.Diff(wantBands, gotBands); diff != "" {
			t.Errorf("%s: phase bands (-record +timeline):\n%s", name, diff)
		}
	}

	targets := root.find(func(n *node) bool { return n.name == "g" && n.hasClass("lane") && n.hasClass("target") })
	if len(targets) != 1 || targets[0].attrs["data-target"] != r.Target {
		t.Fatalf("want one target lane for %q, got %d", r.Target, len(targets))
	}
	lane := targets[0]
	// At each status the record holds, each condition's band says what
	// the status says (no band: the condition is absent). A status that
	// another replaced within the same millisecond cannot be seen.
	for i, st := range r.Statuses {
		at := seconds(t, secs(st.At))
		if i+1 < len(r.Statuses) && seconds(t, secs(r.Statuses[i+1].At)) <= at {
			continue
		}
		for _, typ := range conditionTypes {
			want := string(st.Target.Status(typ))
			if want != "" {
				want += "/" + st.Target.Reason(typ)
			}
			var got []string
			for _, b := range lane.find(func(n *node) bool { return n.hasClass("band") && n.attrs["data-condition"] == typ }) {
				from, to := seconds(t, b.attrs["data-from"]), seconds(t, b.attrs["data-to"])
				if from <= at && (at < to || at == seconds(t, secs(r.End))) {
					got = append(got, b.attrs["data-status"]+"/"+b.attrs["data-reason"])
				}
			}
			if (want == "" && len(got) > 0) || (want != "" && !slices.Equal(got, []string{want})) {
				t.Errorf("at %ss the timeline shows %s as %q, the record says %q", secs(st.At), typ, got, want)
			}
		}
	}
	var wantWrites, gotWrites []string
	for _, at := range r.Writes {
		wantWrites = append(wantWrites, secs(at))
	}
	for _, n := range lane.find(func(n *node) bool { return n.hasClass("write") }) {
		gotWrites = append(gotWrites, n.attrs["data-at"])
	}
	if diff := cmp.Diff(wantWrites, gotWrites); diff != "" {
		t.Errorf("status writes (-record +timeline):\n%s", diff)
	}

	if got, want := len(lane.find(func(n *node) bool { return n.hasClass("dip") })), r.published(0, r.End+1).Dips; got != want {
		t.Errorf("the timeline marks %d Ready dips, the record has %d", got, want)
	}

	var wantFlags, gotFlags []string
	for _, e := range r.Events {
		wantFlags = append(wantFlags, e.Event.Type+"/"+e.Event.Reason+"@"+secs(e.At))
	}
	for _, n := range root.find(func(n *node) bool { return n.hasClass("flag") }) {
		gotFlags = append(gotFlags, n.attrs["data-type"]+"/"+n.attrs["data-reason"]+"@"+n.attrs["data-at"])
	}
	if diff := cmp.Diff(wantFlags, gotFlags); diff != "" {
		t.Errorf("Event flags (-record +timeline):\n%s", diff)
	}

	var wantScenes, gotScenes []string
	for _, s := range r.Scenes {
		wantScenes = append(wantScenes, s.Label+"@"+secs(s.At))
	}
	for _, n := range root.find(func(n *node) bool { return n.name == "g" && n.hasClass("scene") }) {
		gotScenes = append(gotScenes, n.attrs["data-label"]+"@"+n.attrs["data-at"])
	}
	if diff := cmp.Diff(wantScenes, gotScenes); diff != "" {
		t.Errorf("scene marks (-record +timeline):\n%s", diff)
	}

	restarts := root.find(func(n *node) bool { return n.name == "g" && n.hasClass("restart") })
	switch {
	case r.Restart.To == 0 && len(restarts) > 0:
		t.Errorf("the timeline shows a restart window the record does not have")
	case r.Restart.To > 0 && len(restarts) != 1:
		t.Errorf("the timeline shows %d restart windows, want 1", len(restarts))
	case r.Restart.To > 0:
		w := restarts[0].attrs
		got := fmt.Sprintf("writes=%s events=%s dips=%s from %s to %s", w["data-writes"], w["data-events"], w["data-dips"], w["data-from"], w["data-to"])
		want := fmt.Sprintf("writes=%d events=%d dips=%d from %s to %s", r.Restart.Writes, r.Restart.Events, r.Restart.Dips, secs(r.Restart.From), secs(r.Restart.To))
		if got != want {
			t.Errorf("restart window: timeline %q, record %q", got, want)
		}
	}
}

// seconds parses a time from a data-* attribute.
func seconds(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("time %q in the timeline: %v", s, err)
	}
	return f
}

// checkRendered renders an HTML timeline with a headless Chromium, if the
// machine has one, and checks that the picture is not blank. Most machines
// (CI among them) have none: then it says so and checks nothing.
func checkRendered(t *testing.T, path string) {
	t.Helper()
	browser := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome-headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		t.Log("no headless Chromium on this machine: the page is not rendered")
		return
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(t.TempDir(), "shot.png")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--window-size=1320,900", "--screenshot="+shot, "file://"+abs)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", browser, err, out)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	colours := map[[3]uint32]bool{}
	inked, total := 0, 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			total++
			if r < 0xf000 || g < 0xf000 || bl < 0xf000 {
				inked++
			}
			colours[[3]uint32{r >> 12, g >> 12, bl >> 12}] = true
		}
	}
	if inked*50 < total || len(colours) < 8 {
		t.Errorf("the rendered page looks blank: %d of %d sampled pixels inked, %d colours", inked, total, len(colours))
	}
}
