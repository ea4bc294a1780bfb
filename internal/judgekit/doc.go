// Package judgekit is what the two judges share: the watch judge
// (watch/judge_test.go) and the pipeline judge (internal/pipeline). It
// holds the generators' chooser, the algebra of stretches of virtual time,
// the ground truth of when a stream was live, and the pool of faults both
// draw from, so that both judges hold the library to one definition of
// each.
//
// Only tests import it: no runtime package may reach it (see
// internal/depgraph), and it may import what runtime packages must not
// (client-go, watchtest).
package judgekit
