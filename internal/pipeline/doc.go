// Package pipeline holds only tests: the pipeline judge, which drives the
// layers a user reads (streams and the caller's own gates, the readiness
// Accumulator and roll-up, status writes, Events through both recorder
// kinds, and the time-to-first-Ready metric) end to end over random
// histories in virtual time, and checks each history against its ground
// truth. See TestPipeline in judge_test.go for the invariants and
// `make pipeline` for the run that prints its summary line.
package pipeline
