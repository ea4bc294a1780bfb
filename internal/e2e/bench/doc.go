// Package bench measures watchgrade against what its users would run
// instead, on the real decode path: a kube-apiserver and etcd started from
// Go modules (harness.Remote, in a child process), and clients in the
// benchmark's own process. It holds Go benchmarks only; `make bench` runs
// them, with the figures of each group printed as "bench:" lines at the
// end (see the repository README's Performance section for the table and
// what each ratio means).
//
//   - BenchmarkDecode: CPU time, allocations and events per second of five
//     consumers reading the same span of events back from the watch cache,
//     JSON and protobuf.
//   - BenchmarkReplay: a replay of a large collection (10,000, 50,000 and
//     100,000 objects) by watch-list, by LIST+WATCH and by informers: time
//     to the snapshot, allocations, and the heap held once it is done.
//   - BenchmarkManyStreams: goroutines, heap and connections of 1,000 idle
//     graded streams against 1,000 informers; and
//     BenchmarkManyStreamsOneConnection, with an apiserver that allows
//     2,000 streams on one HTTP/2 connection.
//   - BenchmarkRestart: an apiserver restart under 300 streams against 300
//     informers: time until every one is live again, peak concurrent
//     replays, and what was published.
//
// Each group runs -bench.rounds rounds (5): every consumer once a round,
// in an order rotated every round. The other flags: -bench.decode.events,
// -bench.replay.sizes, -bench.heapprofile DIR (a heap profile once each
// replay is done, and of each crowd of idle streams), -bench.serverlog
// FILE (the servers' logs).
//
// The servers run in a child process so that this process's CPU time
// (getrusage), heap and goroutines are the clients' alone: in one process
// the apiserver, which costs many times what a client does, would be
// measured with them.
package bench
