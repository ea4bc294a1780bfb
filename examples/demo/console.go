package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// endingsMode says how the console shows routine session endings: clean
// closes and teardowns that publish nothing.
type endingsMode int

const (
	// endingsFolded prints, per stream, one line every foldEvery saying how
	// many there were (the default).
	endingsFolded endingsMode = iota
	// endingsEach prints one line per ending (--verbose).
	endingsEach
	// endingsHidden prints none (--routine=false).
	endingsHidden
)

// foldEvery is how often folded routine endings are printed.
const foldEvery = 10 * time.Second

// printer prints the run as it happens, one line each, with the time since
// the demo started. Every state change, target change, Event, step and
// ending that is not routine gets its own line; routine endings are shown
// as the mode says. It is an Observer of every stream, safe for concurrent
// use.
type printer struct {
	out   io.Writer
	start time.Time
	mode  endingsMode

	mu sync.Mutex
	// muted drops every line: the summary has been printed.
	muted bool
	// folded counts routine endings not printed yet, by stream; order
	// holds those streams in the order they first had one.
	folded map[string]*routineCount
	order  []string
}

type routineCount struct{ closes, teardowns int }

func newPrinter(out io.Writer, start time.Time, mode endingsMode) *printer {
	return &printer{out: out, start: start, mode: mode, folded: map[string]*routineCount{}}
}

func (p *printer) line(kind, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lineLocked(kind, format, args...)
}

func (p *printer) lineLocked(kind, format string, args ...any) {
	if p.muted {
		return
	}
	fmt.Fprintf(p.out, "%6.1fs  %-6s  %s\n", time.Since(p.start).Seconds(), kind, fmt.Sprintf(format, args...))
}

func (p *printer) step(format string, args ...any) { p.line("==>", format, args...) }

// StateChanged prints a stream's new state, after the stream's folded
// endings so that its lines stay in order.
func (p *printer) StateChanged(s wgwatch.State) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushLocked(s.Stream)
	p.lineLocked("state", "%s", describeState(s))
}

// SessionEnded prints a session ending and its grade, or folds it.
func (p *printer) SessionEnded(e wgwatch.SessionEnd) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if routine(e.Verdict) {
		switch p.mode {
		case endingsHidden:
			return
		case endingsFolded:
			c := p.folded[e.Stream]
			if c == nil {
				c = &routineCount{}
				p.folded[e.Stream] = c
				p.order = append(p.order, e.Stream)
			}
			if e.Verdict.Outcome == wgwatch.OutcomeTeardown {
				c.teardowns++
			} else {
				c.closes++
			}
			return
		}
	}
	p.flushLocked(e.Stream)
	p.lineLocked("ended", "%-26s %s", e.Stream, describeEnding(e))
}

// routine reports whether an ending is a clean close or a teardown that
// publishes nothing.
func routine(v wgwatch.Verdict) bool {
	return !v.Publish && (v.Outcome == wgwatch.OutcomeClosed || v.Outcome == wgwatch.OutcomeTeardown)
}

// mute prints every stream's folded endings, then nothing more: what the
// teardown after the summary reports is not part of the story.
func (p *printer) mute() {
	p.flush()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.muted = true
}

// flush prints every stream's folded endings.
func (p *printer) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.order) > 0 {
		p.flushLocked(p.order[0])
	}
}

// flushLocked prints stream's folded endings, if any.
func (p *printer) flushLocked(stream string) {
	c := p.folded[stream]
	if c == nil {
		return
	}
	delete(p.folded, stream)
	for i, name := range p.order {
		if name == stream {
			p.order = append(p.order[:i], p.order[i+1:]...)
			break
		}
	}
	var parts []string
	if c.closes > 0 {
		parts = append(parts, plural(c.closes, "routine close", "routine closes"))
	}
	if c.teardowns > 0 {
		parts = append(parts, plural(c.teardowns, "teardown", "teardowns"))
	}
	p.lineLocked("ended", "%-26s %s, nothing published", stream, strings.Join(parts, " and "))
}

// foldLoop prints the folded endings every foldEvery until ctx ends.
func (p *printer) foldLoop(ctx context.Context) {
	tick := time.NewTicker(foldEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			p.flush()
		}
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// describeState is a state's line: stream, phase/reason, whether it needs
// a human, and the message.
func describeState(s wgwatch.State) string {
	human := ""
	if s.NeedsHuman {
		human = "  [needs a human]"
	}
	return fmt.Sprintf("%-26s %s/%s%s  %s", s.Stream, s.Phase, s.Reason, human, s.Message)
}

// describeEnding says how a session ended and what its grade made of it.
func describeEnding(e wgwatch.SessionEnd) string {
	v := e.Verdict
	grade := "routine, nothing published"
	switch {
	case v.Outcome == wgwatch.OutcomeTeardown:
		grade = "teardown"
	case v.Publish:
		grade = "publishes " + string(v.State.Phase) + "/" + string(v.State.Reason)
	case v.Outcome == wgwatch.OutcomeExpired && len(v.Escalations) > 0:
		grade = fmt.Sprintf("published only if not live again within %v", v.Escalations[0].After.Round(time.Second))
	case !v.Healthy && len(v.Escalations) > 0:
		esc := v.Escalations[0]
		grade = fmt.Sprintf("not published yet: %s/%s if not live again within %v", esc.State.Phase, esc.State.Reason, esc.After.Round(time.Second))
	case v.Outcome == wgwatch.OutcomeError && !v.Healthy:
		grade = "not published yet: the next session decides"
	}
	cause := ""
	if e.Err != nil {
		cause = fmt.Sprintf(" (%s)", v.Class)
	}
	return fmt.Sprintf("%-8s%s after %.1fs, %d events -> %s, %s", v.Outcome, cause, e.Duration.Seconds(), e.Events, strings.ToLower(string(v.Next)), grade)
}
