package watch

import "time"

// SetStreamRand makes s draw its jitter from r, so that a test can replay
// a stream's history exactly.
func SetStreamRand(s *Stream, r func() float64) {
	s.rand = r
	s.backoff.Rand = r
}

// SetInstrumentRand makes i draw its jitter from r, so that a test can
// replay an informer's history exactly.
func SetInstrumentRand(i *InstrumentedListerWatcher, r func() float64) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.rand = r
	i.backoff.Rand = r
}

// SetFoldTrace tells f the row of the doc's table "What is published
// when" that each fact of s matched, as it steps.
func SetFoldTrace(s *Stream, f func(at time.Time, row string)) { s.pub.setOnRow(f) }

// SetInstrumentFoldTrace is SetFoldTrace for an informer.
func SetInstrumentFoldTrace(i *InstrumentedListerWatcher, f func(at time.Time, row string)) {
	i.pub.setOnRow(f)
}

func (p *publisher) setOnRow(f func(time.Time, string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onRow = f
}

// AnsweredHandler is the watch error handler StreamInformer.Informer sets.
var AnsweredHandler = answeredHandler
