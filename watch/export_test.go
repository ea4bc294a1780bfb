package watch

// SetStreamRand makes s draw its jitter from r, so that a test can replay
// a stream's history exactly.
func SetStreamRand(s *Stream, r func() float64) {
	s.rand = r
	s.backoff.Rand = r
}
