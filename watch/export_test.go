package watch

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
