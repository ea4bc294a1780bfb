package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"strings"
	"time"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// The timeline is one SVG drawing of a run's record, alone in a .svg file
// or inline in an .html page that adds a reading guide, the scenes and the
// summary. Either opens from disk: no script, no stylesheet, font or image
// to fetch. Every mark carries data-* attributes with what it stands for
// (times in seconds since the demo started, three decimals), so that a
// test can read the picture back and compare it with the record, and a
// <title> that a browser shows on hover.

// timelineFormat returns "html" or "svg" from path's extension.
func timelineFormat(path string) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".html", ".htm":
		return "html", nil
	case ".svg":
		return "svg", nil
	}
	return "", fmt.Errorf("--timeline %s: want a file name ending in .html or .svg", path)
}

// writeTimeline draws r to path; an HTML page also shows summaryText.
func writeTimeline(path string, r *record, summaryText string) error {
	format, err := timelineFormat(path)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if format == "svg" {
		b.WriteString(xml.Header)
		drawTimeline(&b, r)
	} else {
		writePage(&b, r, summaryText)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// Colours, chosen to read on white and apart from each other.
var (
	phaseColour = map[wgwatch.Phase]string{
		wgwatch.PhaseStarting:  "#d0d7de",
		wgwatch.PhaseReplaying: "#80b6f0",
		wgwatch.PhaseStreaming: "#8fd19e",
		wgwatch.PhaseBlocked:   "#f2c14e",
	}
	humanColour   = "#e5534b" // Blocked needing a human, Stalled, Warnings
	outcomeColour = map[wgwatch.Outcome]string{
		wgwatch.OutcomeClosed:   "#6e7781",
		wgwatch.OutcomeExpired:  "#0969da",
		wgwatch.OutcomeError:    "#d4760b",
		wgwatch.OutcomeTeardown: "#000000",
	}
	conditionColour = map[string]string{
		"Ready/True":        "#8fd19e",
		"Ready/False":       "#f2c14e",
		"Ready/Unknown":     "#d0d7de",
		"Reconciling/True":  "#80b6f0",
		"Stalled/True":      humanColour,
		"Reconciling/False": "#eaeef2",
		"Stalled/False":     "#eaeef2",
	}
	eventColour = map[string]string{"Normal": "#57606a", "Warning": humanColour}
)

// Geometry, in SVG user units (pixels at 100%).
const (
	svgWidth   = 1280.0
	labelWidth = 300.0
	rightPad   = 24.0
	plotWidth  = svgWidth - labelWidth - rightPad
	streamLane = 26.0
	conditionH = 14.0
	laneGap    = 6.0
	sceneRow   = 14.0
	sceneRows  = 4
	charWidth  = 6.2 // of 11px sans-serif, roughly: for placing labels
)

var conditionTypes = []string{wgreadiness.ConditionReady, wgreadiness.ConditionReconciling, wgreadiness.ConditionStalled}

// canvas writes SVG elements; times become x coordinates.
type canvas struct {
	b   *bytes.Buffer
	end time.Duration
}

func (c canvas) x(at time.Duration) float64 {
	if c.end <= 0 {
		return labelWidth
	}
	f := float64(at) / float64(c.end)
	return labelWidth + min(max(f, 0), 1)*plotWidth
}

func (c canvas) f(format string, args ...any) { fmt.Fprintf(c.b, format, args...) }

// esc escapes text and attribute values for both HTML and XML.
func esc(s string) string { return html.EscapeString(s) }

// secs formats a time for data-* attributes and titles.
func secs(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// oneLine collapses runs of spaces (the console pads its columns).
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// drawTimeline writes the <svg> element.
func drawTimeline(b *bytes.Buffer, r *record) {
	c := canvas{b: b, end: r.End}
	streams := r.streams()

	// Scene labels go on up to sceneRows rows above the lanes, each on the
	// first row where it does not run into the previous label.
	type placed struct {
		s   scene
		row int
	}
	var scenes []placed
	rowEnd := make([]float64, sceneRows)
	rows := 1
	for _, s := range r.Scenes {
		x := c.x(s.At)
		row := 0
		for i := range rowEnd {
			if rowEnd[i] <= x {
				row = i
				break
			}
			if rowEnd[i] < rowEnd[row] {
				row = i
			}
		}
		rowEnd[row] = x + 4 + charWidth*float64(len(s.Label)) + 8
		rows = max(rows, row+1)
		scenes = append(scenes, placed{s, row})
	}
	headerTop := 44.0
	lanesTop := headerTop + float64(rows)*sceneRow + 4
	if r.Restart.To > 0 {
		lanesTop += 16
	}
	targetTop := lanesTop + float64(len(streams))*(streamLane+laneGap)
	eventsTop := targetTop + 4*conditionH + 16 + laneGap
	axisY := eventsTop + 34 + laneGap
	legendTop := axisY + 40
	height := legendTop + 4*18 + 8

	c.f(`<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="Helvetica, Arial, sans-serif" font-size="11" data-mode="%s" data-end="%s">`+"\n",
		svgWidth, height, svgWidth, height, esc(r.Mode), secs(r.End))
	c.f(`<title>watchgrade demo (%s mode): %v of watch streams, the WatchTarget and its Events</title>`+"\n", esc(r.Mode), r.End.Round(time.Second))
	c.f(`<rect x="0" y="0" width="%.0f" height="%.0f" fill="#ffffff"/>`+"\n", svgWidth, height)
	c.f(`<text x="12" y="22" font-size="15" font-weight="bold">watchgrade demo, %s mode: %d streams, %d session endings, %d status writes, %d Events over %v</text>`+"\n",
		esc(r.Mode), len(streams), len(r.Endings), len(r.Writes), len(r.Events), r.End.Round(time.Second))

	// Lane backgrounds first, so that the restart window shows over them.
	for i := range streams {
		y := lanesTop + float64(i)*(streamLane+laneGap)
		c.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f6f8fa"/>`+"\n", labelWidth, y, plotWidth, streamLane)
	}
	c.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f6f8fa"/>`+"\n", labelWidth, targetTop, plotWidth, 4*conditionH+10)
	c.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f6f8fa"/>`+"\n", labelWidth, eventsTop, plotWidth, 34.0)

	if w := r.Restart; w.To > 0 {
		x0, x1 := c.x(w.From), c.x(w.To)
		c.f(`<g class="restart" data-from="%s" data-to="%s" data-writes="%d" data-events="%d" data-dips="%d">`+"\n", secs(w.From), secs(w.To), w.Writes, w.Events, w.Dips)
		c.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#fff1a8" fill-opacity="0.55"/>`+"\n", x0, lanesTop-2, max(x1-x0, 1), axisY-lanesTop+2)
		c.f(`<text x="%.1f" y="%.1f" font-weight="bold">controller restart published: %s, %s, %s</text>`+"\n", x0+3, lanesTop-6,
			plural(w.Writes, "status write", "status writes"), plural(w.Events, "Event", "Events"), plural(w.Dips, "Ready dip", "Ready dips"))
		c.f("</g>\n")
	}

	for i, name := range streams {
		drawStream(c, r, name, lanesTop+float64(i)*(streamLane+laneGap))
	}
	drawTarget(c, r, targetTop)
	drawEvents(c, r, eventsTop)
	drawAxis(c, axisY)

	for _, p := range scenes {
		x := c.x(p.s.At)
		y := headerTop + float64(p.row)*sceneRow
		c.f(`<g class="scene" data-label="%s" data-at="%s">`, esc(p.s.Label), secs(p.s.At))
		c.f(`<title>%ss: %s</title>`, secs(p.s.At), esc(p.s.Detail))
		c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#57606a" stroke-width="1" stroke-dasharray="4 3"/>`, x, y+2, x, axisY)
		c.f(`<text x="%.1f" y="%.1f" font-weight="bold">%s</text>`, x+4, y, esc(p.s.Label))
		c.f("</g>\n")
	}
	drawLegend(c, legendTop)
	c.f("</svg>\n")
}

// phaseBand is one stretch of a stream's state.
type phaseBand struct {
	from, to time.Duration
	state    wgwatch.State
}

// phaseBands returns a stream's states as bands: each from its state change
// to the next, or to a teardown (the stream stopped), or to the end.
func phaseBands(r *record, stream string) []phaseBand {
	var bands []phaseBand
	var cur *phaseBand
	closeAt := func(at time.Duration) {
		if cur != nil {
			cur.to = at
			bands = append(bands, *cur)
			cur = nil
		}
	}
	i, j := 0, 0
	for i < len(r.States) || j < len(r.Endings) {
		if j == len(r.Endings) || (i < len(r.States) && r.States[i].At <= r.Endings[j].At) {
			if s := r.States[i]; s.State.Stream == stream {
				closeAt(s.At)
				cur = &phaseBand{from: s.At, state: s.State}
			}
			i++
			continue
		}
		if e := r.Endings[j]; e.End.Stream == stream && e.End.Verdict.Outcome == wgwatch.OutcomeTeardown {
			closeAt(e.At)
		}
		j++
	}
	closeAt(r.End)
	return bands
}

func drawStream(c canvas, r *record, name string, y float64) {
	c.f(`<g class="lane stream" data-stream="%s">`+"\n", esc(name))
	c.f(`<text class="label" x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", labelWidth-8, y+streamLane/2+4, esc(name))
	for _, band := range phaseBands(r, name) {
		fill := phaseColour[band.state.Phase]
		if band.state.NeedsHuman {
			fill = humanColour
		}
		x0, x1 := c.x(band.from), c.x(band.to)
		c.f(`<rect class="band" data-phase="%s" data-reason="%s" data-needs-human="%t" data-from="%s" data-to="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s">`,
			esc(string(band.state.Phase)), esc(string(band.state.Reason)), band.state.NeedsHuman, secs(band.from), secs(band.to),
			x0, y+6, max(x1-x0, 0.5), streamLane-12, fill)
		c.f(`<title>%ss-%ss %s</title></rect>`+"\n", secs(band.from), secs(band.to), esc(oneLine(describeState(band.state))))
	}
	for _, e := range r.Endings {
		if e.End.Stream != name {
			continue
		}
		x := c.x(e.At)
		o := e.End.Verdict.Outcome
		c.f(`<line class="tick" data-outcome="%s" data-at="%s" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5">`,
			esc(string(o)), secs(e.At), x, y+2, x, y+streamLane-2, outcomeColour[o])
		c.f(`<title>%ss %s</title></line>`+"\n", secs(e.At), esc(oneLine(describeEnding(e.End))))
	}
	c.f("</g>\n")
}

// conditionRun is a stretch of statuses with one condition's status and
// reason unchanged.
type conditionRun struct {
	from, to       time.Duration
	status, reason string
}

// conditionRuns returns typ's runs over the target's statuses; a stretch
// where the condition is absent is no run.
func conditionRuns(r *record, typ string) []conditionRun {
	var runs []conditionRun
	for i, s := range r.Statuses {
		to := r.End
		if i+1 < len(r.Statuses) {
			to = r.Statuses[i+1].At
		}
		status, reason := string(s.Target.Status(typ)), s.Target.Reason(typ)
		if n := len(runs); n > 0 && runs[n-1].to == s.At && runs[n-1].status == status && runs[n-1].reason == reason {
			runs[n-1].to = to
			continue
		}
		if status != "" {
			runs = append(runs, conditionRun{from: s.At, to: to, status: status, reason: reason})
		}
	}
	return runs
}

func drawTarget(c canvas, r *record, y float64) {
	c.f(`<g class="lane target" data-target="%s">`+"\n", esc(r.Target))
	c.f(`<text class="label" x="12" y="%.1f" font-weight="bold">WatchTarget %s</text>`+"\n", y+conditionH-3, esc(r.Target))
	for i, typ := range conditionTypes {
		top := y + float64(i)*conditionH
		c.f(`<text class="label" x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", labelWidth-8, top+conditionH-3, typ)
		for _, run := range conditionRuns(r, typ) {
			x0, x1 := c.x(run.from), c.x(run.to)
			c.f(`<rect class="band" data-condition="%s" data-status="%s" data-reason="%s" data-from="%s" data-to="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s">`,
				typ, esc(run.status), esc(run.reason), secs(run.from), secs(run.to), x0, top+2, max(x1-x0, 0.5), conditionH-3, conditionColour[typ+"/"+run.status])
			c.f(`<title>%ss-%ss %s=%s (%s)</title></rect>`+"\n", secs(run.from), secs(run.to), typ, esc(run.status), esc(run.reason))
		}
	}
	// A dip of Ready lasts milliseconds: too short to see as a band, so
	// each gets a mark above the Ready row.
	for i := 1; i < len(r.Statuses); i++ {
		prev, cur := r.Statuses[i-1], r.Statuses[i]
		if !isReady(prev.Target) || isReady(cur.Target) {
			continue
		}
		to := r.End
		for _, next := range r.Statuses[i+1:] {
			if isReady(next.Target) {
				to = next.At
				break
			}
		}
		x := c.x(cur.At)
		c.f(`<path class="dip" data-at="%s" d="M%.1f %.1f L%.1f %.1f L%.1f %.1f Z" fill="%s"><title>%ss Ready dipped (%s) for %v</title></path>`+"\n",
			secs(cur.At), x-4, y-4, x+4, y-4, x, y+2, humanColour, secs(cur.At), esc(cur.Target.Reason(wgreadiness.ConditionReady)), (to - cur.At).Round(time.Millisecond))
	}
	top := y + 3*conditionH
	c.f(`<text class="label" x="%.1f" y="%.1f" text-anchor="end">status writes</text>`+"\n", labelWidth-8, top+conditionH-3)
	for _, at := range r.Writes {
		x := c.x(at)
		c.f(`<line class="write" data-at="%s" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#24292f" stroke-width="1.5"><title>%ss a status write</title></line>`+"\n",
			secs(at), x, top+2, x, top+conditionH+4, secs(at))
	}
	c.f("</g>\n")
}

func drawEvents(c canvas, r *record, y float64) {
	c.f(`<g class="lane events">` + "\n")
	c.f(`<text class="label" x="%.1f" y="%.1f" text-anchor="end">Events about the target</text>`+"\n", labelWidth-8, y+21)
	// Flags too close to tell apart (a restart records two at once) hang
	// at two heights.
	lastX, level := -100.0, 0
	for _, e := range r.Events {
		x := c.x(e.At)
		colour := eventColour[e.Event.Type]
		if colour == "" {
			colour = eventColour["Normal"]
		}
		warning := e.Event.Type == "Warning"
		size, width := 7.0, 1.0
		if warning {
			size, width = 12.0, 2.0
		}
		if x-lastX < 12 && !warning {
			level = 1 - level
		} else {
			level = 0
		}
		lastX = x
		top := y + 3 + float64(level)*13
		c.f(`<g class="flag" data-type="%s" data-reason="%s" data-at="%s">`, esc(e.Event.Type), esc(e.Event.Reason), secs(e.At))
		c.f(`<title>%ss %s %s: %s</title>`, secs(e.At), esc(e.Event.Type), esc(e.Event.Reason), esc(e.Event.Message))
		c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.0f"/>`, x, y+32, x, top, colour, width)
		c.f(`<path d="M%.1f %.1f L%.1f %.1f L%.1f %.1f Z" fill="%s"/>`, x, top, x+size*1.4, top+size/2, x, top+size, colour)
		if warning {
			c.f(`<text x="%.1f" y="%.1f" fill="%s" font-weight="bold">Warning %s</text>`, x+size*1.4+3, y+3+size/2+4, colour, esc(e.Event.Reason))
		}
		c.f("</g>\n")
	}
	c.f("</g>\n")
}

func drawAxis(c canvas, y float64) {
	step := time.Second
	for _, s := range []time.Duration{1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600} {
		step = s * time.Second
		if c.end/step <= 16 {
			break
		}
	}
	c.f(`<g class="axis">` + "\n")
	c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#57606a"/>`+"\n", labelWidth, y, labelWidth+plotWidth, y)
	for t := time.Duration(0); t <= c.end; t += step {
		x := c.x(t)
		c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#57606a"/><text x="%.1f" y="%.1f" text-anchor="middle">%v</text>`+"\n", x, y, x, y+5, x, y+17, t)
	}
	c.f(`<text x="%.1f" y="%.1f" text-anchor="end">time since the demo started</text>`+"\n", labelWidth-20, y+17)
	c.f("</g>\n")
}

func drawLegend(c canvas, y float64) {
	type item struct{ shape, colour, text string }
	rows := []struct {
		title string
		items []item
	}{
		{"stream phase", []item{
			{"rect", phaseColour[wgwatch.PhaseStarting], "Starting"}, {"rect", phaseColour[wgwatch.PhaseReplaying], "Replaying"},
			{"rect", phaseColour[wgwatch.PhaseStreaming], "Streaming"}, {"rect", phaseColour[wgwatch.PhaseBlocked], "Blocked (may heal)"},
			{"rect", humanColour, "Blocked, needs a human"}}},
		{"session ending", []item{
			{"tick", outcomeColour[wgwatch.OutcomeClosed], "closed"}, {"tick", outcomeColour[wgwatch.OutcomeExpired], "expired"},
			{"tick", outcomeColour[wgwatch.OutcomeError], "error"}, {"tick", outcomeColour[wgwatch.OutcomeTeardown], "teardown"}}},
		{"WatchTarget", []item{
			{"rect", conditionColour["Ready/True"], "Ready=True"}, {"rect", conditionColour["Ready/False"], "Ready=False"},
			{"rect", conditionColour["Ready/Unknown"], "Ready=Unknown"}, {"rect", conditionColour["Reconciling/True"], "Reconciling=True"},
			{"rect", conditionColour["Stalled/True"], "Stalled=True"}, {"triangle", humanColour, "Ready dipped"},
			{"tick", "#24292f", "status write"}}},
		{"Event", []item{{"flag", eventColour["Normal"], "Normal"}, {"flag", eventColour["Warning"], "Warning: a human must act"}}},
	}
	c.f(`<g class="legend">` + "\n")
	for i, row := range rows {
		ry := y + float64(i)*18
		c.f(`<text x="%.1f" y="%.1f" text-anchor="end" font-weight="bold">%s</text>`, labelWidth-8, ry+10, row.title)
		x := labelWidth
		for _, it := range row.items {
			switch it.shape {
			case "tick":
				c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`, x+5, ry, x+5, ry+12, it.colour)
			case "triangle":
				c.f(`<path d="M%.1f %.1f L%.1f %.1f L%.1f %.1f Z" fill="%s"/>`, x+1, ry+2, x+11, ry+2, x+6, ry+10, it.colour)
			case "flag":
				c.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/><path d="M%.1f %.1f L%.1f %.1f L%.1f %.1f Z" fill="%s"/>`,
					x+2, ry, x+2, ry+12, it.colour, x+2, ry, x+12, ry+4, x+2, ry+8, it.colour)
			default:
				c.f(`<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/>`, x, ry, it.colour)
			}
			c.f(`<text x="%.1f" y="%.1f">%s</text>`, x+16, ry+10, esc(it.text))
			x += 16 + charWidth*float64(len(it.text)) + 18
		}
		c.f("\n")
	}
	c.f("</g>\n")
}

// writePage writes the HTML page: a reading guide, the drawing, the scenes
// and the summary.
func writePage(b *bytes.Buffer, r *record, summaryText string) {
	fmt.Fprintf(b, `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>watchgrade demo: timeline of a %v run (%s)</title>
<style>
body { font-family: Helvetica, Arial, sans-serif; margin: 24px; color: #1f2328; }
svg { max-width: 100%%; height: auto; }
pre { background: #f6f8fa; padding: 12px; overflow-x: auto; font-size: 12px; }
</style>
</head>
<body>
<h1>watchgrade demo: what a %v run showed (%s mode)</h1>
<p>One lane per watch stream: its phase as a band, and every session ending
as a tick coloured by outcome. Hundreds of routine closes (grey) and an
expiry (blue) change nothing: the bands stay green. Below them the
WatchTarget's Ready, Reconciling and Stalled as the API server stored them,
with a mark for each status write, and the Events about it: a Warning (red)
only when a human must act. Dashed lines are the story's scenes; the yellow
window is the controller restart and what it published. Hover over any mark
for its details.</p>
`, r.End.Round(time.Second), esc(r.Mode), r.End.Round(time.Second), esc(r.Mode))
	drawTimeline(b, r)
	b.WriteString("<h2>Scenes</h2>\n<ol class=\"scenes\">\n")
	for _, s := range r.Scenes {
		fmt.Fprintf(b, "<li><b>%.1fs %s</b>: %s</li>\n", s.At.Seconds(), esc(s.Label), esc(s.Detail))
	}
	b.WriteString("</ol>\n<h2>Summary</h2>\n<pre class=\"summary\">")
	b.WriteString(esc(strings.TrimSpace(summaryText)))
	b.WriteString("</pre>\n</body>\n</html>\n")
}
