// Package bench measures watchgrade against what its users would run
// instead, on the real decode path: a kube-apiserver and etcd started from
// Go modules (harness.Remote, in child processes), and clients in the
// benchmark's own process. It holds Go benchmarks only; `make bench` runs
// them, with the figures of each group printed as "bench:" lines at the
// end. README.md, beside this file, holds the tables and what each figure
// and ratio means.
//
//   - BenchmarkDecode: CPU time, allocations and events per second of five
//     consumers reading the same span of events back from the watch cache,
//     JSON and protobuf.
//   - BenchmarkServerRestart, BenchmarkServerExpiry, BenchmarkServerReplay
//     (the server-* groups): what a recovery costs the control plane,
//     measured on the servers (CPU of the apiserver's process and of
//     etcd's, requests by verb, LISTs served by etcd and by the watch
//     cache, etcd reads, peak concurrency, bytes sent) and on the
//     consumers (time until every one is live again, replays in flight,
//     cursor checks and other LISTs they sent, what was published): an
//     apiserver restart under 300 and 1,000
//     consumers; a compaction past every cursor with the watch cache off;
//     a restart under consumers of 10,000 and 50,000 objects. Streams
//     beside informers.
//   - BenchmarkReplay: a replay of a large collection (10,000, 50,000 and
//     100,000 objects) by watch-list, by LIST+WATCH and by informers: time
//     to the snapshot, allocations, and the heap held once it is done.
//   - BenchmarkManyStreams: goroutines, heap and connections of 1,000 idle
//     graded streams against 1,000 informers; and
//     BenchmarkManyStreamsOneConnection, with an apiserver that allows
//     2,000 streams on one HTTP/2 connection.
//
// Each group runs -bench.rounds rounds (5): every consumer once a round,
// in an order rotated every round. The other flags: -bench.decode.events,
// -bench.replay.sizes, -bench.server.restart, -bench.server.expiry,
// -bench.server.replay, -bench.server.replay.consumers,
// -bench.server.kinds (stream-eager, a stream as it replayed before
// StreamOptions.ReplaySpread and ConsistentReplays, and stream-listwatch
// may be added), -bench.heapprofile DIR (a heap profile once each replay
// is done, and of each crowd of idle streams), -bench.serverlog FILE (the
// servers' logs).
//
// The servers run in child processes so that this process's CPU time
// (getrusage), heap and goroutines are the clients' alone: in one process
// the apiserver, which costs many times what a client does, would be
// measured with them. The server-* groups (and BenchmarkReplay, which
// shares its cluster with BenchmarkServerReplay) run etcd in a child of
// its own, so that the apiserver's CPU time and etcd's are told apart.
package bench
