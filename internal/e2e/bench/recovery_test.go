package bench

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// Group 4 (server-*): what a recovery costs the control plane, streams
// beside informers.
//
// Each round starts a crowd of consumers of one namespace, through one
// typed clientset (protobuf, its default) that authenticates as a service
// account, as a controller in a pod does (API priority and fairness puts
// its requests in the "workload-low" priority level; the admin's would
// be exempt from every limit); waits until all are Streaming; then makes
// every one recover at once, and measures both sides:
//
//   - server-restart/N: N consumers of 100 ConfigMaps; a new apiserver,
//     started on the same etcd and ready, takes over (the proxy in front
//     switches to it and cuts every connection to the old one, as a
//     rolling update or a load balancer's failover does). Its watch cache
//     starts after every consumer's cursor (a writer elsewhere in the
//     cluster, ten writes a second, as leases and Events are, sees to it),
//     so every consumer's resume is answered 410 and it replays.
//   - server-expiry/N: N consumers of 100 ConfigMaps, the watch cache off
//     (--watch-cache=false: every LIST and watch-list is read from etcd);
//     etcd is compacted past every cursor, then every connection cut:
//     every resume is answered 410.
//   - server-replay/M: -bench.server.replay.consumers consumers of M
//     ConfigMaps, recovering from a restart as server-restart's do.
//
// The servers' figures are serverMeter's (see server_test.go), from the
// cut until every consumer is live again; the consumers' are the
// collector's (tracker_test.go): replayed_s until every one has replayed,
// streaming_s until every one is live again (after its replay, its watch
// delivered an event or a bookmark, or stayed open ShortSession: 1 s),
// median_streaming_s, peak_replays (the most replays in flight at once,
// as the consumers see them), replays, the session endings by outcome,
// and published (states published after the cut: none, if every one was
// live again within ReplayGrace, 10 s).
//
// The consumers: stream, a graded wgwatch.Stream with a no-op handler;
// informer, a SharedIndexInformer over wgwatch.Instrument (which changes
// nothing the informer sees; it is how its states are known) with one
// handler. Each runs once a round, in an order rotated every round.
var (
	serverRestartSizes = flag.String("bench.server.restart", "300,1000", "comma-separated consumer counts of BenchmarkServerRestart")
	serverExpirySizes  = flag.String("bench.server.expiry", "300", "comma-separated consumer counts of BenchmarkServerExpiry")
	serverReplaySizes  = flag.String("bench.server.replay", "10000,50000", "comma-separated collection sizes of BenchmarkServerReplay")
	serverReplayCrowd  = flag.Int("bench.server.replay.consumers", 10, "consumers of each collection in BenchmarkServerReplay")
	serverKindNames    = flag.String("bench.server.kinds", "stream,informer", "comma-separated consumers of the server-* groups (also: "+strings.Join(extraRecoveryKindNames(), ", ")+")")
	serverSpareSettle  = 3 * time.Second // after a spare apiserver is ready, before the idle measurement
	serverIdleWindow   = 2 * time.Second
	recoveryObjects    = 100
	recoveryNamespace  = "recovery"
)

type recoveryKind struct {
	name  string
	start func(b *testing.B, lw cache.ListerWatcher, i int, obs wgwatch.Observer) (stop func())
}

// streamKind is a graded stream with opts (Resource, Name and Observer
// are set for it).
func streamKind(name string, opts wgwatch.StreamOptions) recoveryKind {
	return recoveryKind{name, func(b *testing.B, lw cache.ListerWatcher, i int, obs wgwatch.Observer) func() {
		o := opts
		o.Resource, o.Name, o.Observer = configmaps, "recovery-"+strconv.Itoa(i), obs
		st, err := wgwatch.NewStream(lw, wgwatch.HandlerFuncs{}, o)
		if err != nil {
			b.Fatalf("NewStream: %v", err)
		}
		return runStream(b, st)
	}}
}

var recoveryKinds = []recoveryKind{
	streamKind("stream", wgwatch.StreamOptions{}),
	{"informer", func(b *testing.B, lw cache.ListerWatcher, i int, obs wgwatch.Observer) func() {
		ilw, err := wgwatch.Instrument(lw, wgwatch.InstrumentOptions{
			Resource: configmaps, Name: "recovery-" + strconv.Itoa(i), Observer: obs,
		})
		if err != nil {
			b.Fatalf("Instrument: %v", err)
		}
		return runIdleInformer(b, ilw, nil, false)
	}},
}

// extraRecoveryKinds are consumers that -bench.server.kinds may name
// besides the default ones.
var extraRecoveryKinds = []recoveryKind{
	// stream-eager replays as streams did before ReplaySpread and
	// ConsistentReplays: at once, at the latest resourceVersion.
	streamKind("stream-eager", wgwatch.StreamOptions{ReplaySpread: -1, ConsistentReplays: true}),
	streamKind("stream-listwatch", wgwatch.StreamOptions{DisableWatchList: true}),
}

func extraRecoveryKindNames() []string {
	var names []string
	for _, k := range extraRecoveryKinds {
		names = append(names, k.name)
	}
	return names
}

func serverKinds(b *testing.B) []recoveryKind {
	b.Helper()
	var out []recoveryKind
	for _, name := range strings.Split(*serverKindNames, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, k := range append(append([]recoveryKind(nil), recoveryKinds...), extraRecoveryKinds...) {
			if k.name == name {
				out, found = append(out, k), true
			}
		}
		if !found {
			b.Fatalf("-bench.server.kinds: no consumer %q", name)
		}
	}
	return out
}

func counts(b *testing.B, flagName, list string) []int {
	b.Helper()
	var out []int
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			b.Fatalf("-%s: bad count %q", flagName, f)
		}
		out = append(out, n)
	}
	return out
}

// recovery is one scenario: consumers of ns, and what makes them
// recover.
type recovery struct {
	group     string // "server-restart/300"
	ns        string
	consumers int
	// before runs once the consumers are Streaming, before the servers'
	// idle rates are measured; trigger makes every consumer recover;
	// after runs once that is measured, or the round failed. Before and
	// after may be nil.
	before, trigger, after func(b *testing.B, r *harness.Remote)
	// mustReplay: a consumer has recovered once it is live after a
	// replay, not before (see collector.wentLive).
	mustReplay bool
}

// restartTrigger is a restart as server-restart makes it: a spare
// apiserver started (and given serverSpareSettle to finish its own
// start) before, switched to by trigger, the old one shut down after.
//
// The old apiserver sends each watch a bookmark about once a minute; one
// that comes after the spare has started carries a resourceVersion the
// spare's watch cache holds, and the consumer that gets it resumes
// without a 410. So before the spare starts every connection is cut: the
// consumers resume on the old apiserver, each watch's first bookmark is
// a minute away, and the switch comes well before.
func restartTrigger(rec *recovery) {
	rec.before = func(b *testing.B, r *harness.Remote) {
		if err := r.ResetConnections(); err != nil {
			b.Fatalf("reset: %v", err)
		}
		time.Sleep(2 * time.Second)
		addr, err := r.StartSpare()
		if err != nil {
			b.Fatalf("start a spare apiserver: %v", err)
		}
		waitWatchCache(b, addr, rec.ns)
		time.Sleep(serverSpareSettle)
	}
	rec.trigger = func(b *testing.B, r *harness.Remote) {
		if err := r.SwitchToSpare(); err != nil {
			b.Fatalf("switch to the spare apiserver: %v", err)
		}
	}
	rec.after = func(b *testing.B, r *harness.Remote) {
		if err := r.RetireOld(); err != nil {
			b.Fatalf("retire the old apiserver: %v", err)
		}
	}
}

func BenchmarkServerRestart(b *testing.B) {
	defer timeGroup("server-restart")()
	sizes := counts(b, "bench.server.restart", *serverRestartSizes)
	r, _ := serverCluster(b, "server-restart", harness.Options{}, func(r *harness.Remote) struct{} {
		c := newClient(b, r.Config(), contentProtobuf)
		defer c.Close()
		createObjects(b, c, recoveryNamespace, recoveryObjects)
		return struct{}{}
	})
	var recs []*recovery
	for _, n := range sizes {
		rec := &recovery{group: fmt.Sprintf("server-restart/%d", n), ns: recoveryNamespace, consumers: n}
		restartTrigger(rec)
		recs = append(recs, rec)
	}
	runRecoveries(b, r, recs)
}

func BenchmarkServerExpiry(b *testing.B) {
	defer timeGroup("server-expiry")()
	sizes := counts(b, "bench.server.expiry", *serverExpirySizes)
	r, _ := serverCluster(b, "server-expiry", harness.Options{Flags: []string{"--watch-cache=false"}}, func(r *harness.Remote) struct{} {
		c := newClient(b, r.Config(), contentProtobuf)
		defer c.Close()
		createObjects(b, c, recoveryNamespace, recoveryObjects)
		return struct{}{}
	})
	var recs []*recovery
	for _, n := range sizes {
		recs = append(recs, &recovery{group: fmt.Sprintf("server-expiry/%d", n), ns: recoveryNamespace, consumers: n, mustReplay: true,
			trigger: func(b *testing.B, r *harness.Remote) {
				if _, err := r.Compact(); err != nil {
					b.Fatalf("compact: %v", err)
				}
				if err := r.ResetConnections(); err != nil {
					b.Fatalf("reset: %v", err)
				}
			}})
	}
	runRecoveries(b, r, recs)
}

func BenchmarkServerReplay(b *testing.B) {
	defer timeGroup("server-replay")()
	sizes := counts(b, "bench.server.replay", *serverReplaySizes)
	r, data := replayCluster(b)
	for _, n := range sizes {
		data.ensure(b, r, n)
	}
	var recs []*recovery
	for _, n := range sizes {
		rec := &recovery{group: fmt.Sprintf("server-replay/%d", n), ns: replayNS(n), consumers: *serverReplayCrowd}
		restartTrigger(rec)
		recs = append(recs, rec)
	}
	runRecoveries(b, r, recs)
}

// runRecoveries runs every scenario once a round, each consumer kind in
// turn, in an order rotated every round.
func runRecoveries(b *testing.B, r *harness.Remote, recs []*recovery) {
	kinds := serverKinds(b)
	for _, rec := range recs {
		for _, k := range kinds[1:] {
			for _, key := range []string{"api_cpu_s", "etcd_cpu_s", "etcd_reads", "lists_etcd", "peak_inflight", "peak_held", "streaming_s", "wire_MB"} {
				defineRatio(rec.group+"/ratio", kinds[0].name+"/"+k.name+"_"+key, key, rec.group+"/"+kinds[0].name, rec.group+"/"+k.name)
			}
		}
	}
	for round := 1; round <= *benchRounds; round++ {
		for _, rec := range recs {
			for _, k := range rotate(kinds, round) {
				b.Run(roundName(strings.TrimPrefix(rec.group, "server-")+"/"+k.name, round), func(b *testing.B) {
					benchRecovery(b, r, rec, k)
				})
			}
		}
	}
}

// ticker writes a ConfigMap in namespace default ten times a second until
// the returned function is called; writes that fail (the apiserver is
// restarting) are retried at the next tick.
func ticker(b *testing.B, c *client) (stop func()) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cms := c.CoreV1().ConfigMaps("default")
	cm := configMap("default", "recovery-tick", 0)
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatalf("ticker: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			_, _ = cms.Update(ctx, configMap("default", "recovery-tick", n), metav1.UpdateOptions{})
		}
	}()
	return func() { cancel(); <-done }
}

func benchRecovery(b *testing.B, r *harness.Remote, rec *recovery, k recoveryKind) {
	for range b.N {
		b.StopTimer()
		// Whatever fails, the cluster is left as the next round needs it:
		// every consumer and writer stopped, the old apiserver retired.
		var undo []func()
		b.Cleanup(func() {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		})
		admin := newClient(b, r.Config(), contentProtobuf)
		c := newClient(b, r.ControllerConfig(), contentProtobuf)
		undo = append(undo, admin.Close, c.Close)
		col := newCollector(rec.consumers, rec.mustReplay)
		stops := make([]func(), rec.consumers)
		for i := range stops {
			lw := &tracker{inner: typedLW(c, rec.ns), id: i, col: col}
			stops[i] = k.start(b, lw, i, col.observer(i))
		}
		undo = append(undo, func() { stopAll(stops) })
		waitGroup(b, &col.streaming, fmt.Sprintf("%d %ss Streaming", rec.consumers, k.name))
		// A cluster is written to all the time (leases, Events, status):
		// the writer puts writes between the consumers' cursors and what
		// makes them recover (a new watch cache's start, a compaction).
		undo = append(undo, ticker(b, admin))
		if rec.after != nil {
			undo = append(undo, func() { rec.after(b, r) })
		}
		if rec.before != nil {
			rec.before(b, r)
		}
		apiIdle, etcdIdle := idleServers(b, r, serverIdleWindow)
		meter := startServerMeter(b, r, admin, c, "configmaps", apiIdle, etcdIdle)
		b.StartTimer()
		col.arm()
		rec.trigger(b, r)
		select {
		case <-col.allLive:
		case <-time.After(waitTimeout):
			_, _ = r.StopPeaks()
			b.Fatalf("%s: %s", k.name, col.progress())
		}
		b.StopTimer()
		res := col.result()
		srv := meter.stop()
		b.ReportMetric(res.streaming.Seconds(), "s-to-streaming")
		b.ReportMetric(srv.apiCPU.Seconds(), "api-cpu-s")
		b.ReportMetric(srv.peakInflight, "peak-inflight")
		if res.replays < rec.consumers {
			b.Logf("%s: %d replays for %d consumers: some resumed without one", k.name, res.replays, rec.consumers)
		}
		if n := len(res.published); n > 0 {
			b.Logf("%s published %d states after the cut, the first: %v", k.name, n, res.published[:min(n, 10)])
		}
		kv := []any{"replayed_s", res.replayed, "streaming_s", res.streaming, "median_streaming_s", res.medianStreaming,
			"peak_replays", res.peak, "replays", res.replays, "cursor_checks", res.checks, "consumer_lists", res.lists, "published", len(res.published),
			"expired", res.endings[wgwatch.OutcomeExpired], "closed", res.endings[wgwatch.OutcomeClosed], "error", res.endings[wgwatch.OutcomeError]}
		record(rec.group+"/"+k.name, append(kv, srv.kv()...)...)
		b.StartTimer()
	}
}

// waitWatchCache waits until the apiserver at addr serves ConfigMaps from
// its watch cache: until then it answers 429 ("storage is
// (re)initializing"), and a large collection takes seconds to load. A
// LIST at resourceVersion 0 with a label selector is served by the watch
// cache alone (without one, a LIST with a limit goes to etcd while the
// cache is not ready).
func waitWatchCache(b *testing.B, addr, ns string) {
	b.Helper()
	c := newClient(b, harness.ConfigFor(addr), contentProtobuf)
	defer c.Close()
	deadline := time.Now().Add(waitTimeout)
	for {
		_, err := c.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{ResourceVersion: "0", LabelSelector: "watchgrade-bench=none"})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the spare apiserver's watch cache: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
