package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
)

// The control plane's side of a recovery, measured on the servers.
//
// The server-* groups run etcd and the kube-apiserver in two child
// processes (harness.StartRemoteEtcd, then harness.StartRemote with
// Options.EtcdEndpoint), so that each one's CPU time is its own. The
// apiserver's child also holds the loopback TCP proxy that the clients
// connect through (it copies bytes, TLS untouched) and, during a restart,
// both apiservers. What a serverMeter reads, between its start and stop:
//
//   - api_cpu_s, etcd_cpu_s: CPU time (user and system, /proc/<pid>/stat)
//     of the apiserver's process and of etcd's, less what each used at
//     idle over as long a time (measured just before, with the consumers
//     idle on their watches): the recovery's own cost. The idle rates are
//     api_idle_cores and etcd_idle_cores.
//   - lists, watches: requests by verb on the watched resource, from
//     apiserver_request_total (a watch-list is a WATCH); watch_lists, from
//     apiserver_watch_list_duration_seconds_count; req_429, requests the
//     apiserver answered 429 (its watch cache initialising, or priority
//     and fairness rejecting).
//   - lists_etcd, lists_cache: LISTs served by etcd and by the watch cache
//     (apiserver_storage_list_total by storage); etcd_objects, the objects
//     read from etcd for LISTs (apiserver_storage_list_fetched_objects_total);
//     init_events, the objects a watch sent before its live events (a
//     watch-list's, apiserver_init_events_total).
//   - etcd_reads: read requests from the apiserver to etcd for the
//     resource (etcd_requests_total: get, list, listWithCount, listStream,
//     listOnlyKeys, getCurrentResourceVersion). A consistent read, a LIST or
//     a watch-list at resourceVersion "", costs one
//     (getCurrentResourceVersion) even when the watch cache serves it.
//   - peak_inflight: the most of the consumers' requests executing at
//     once in the apiserver, as API priority and fairness counts them
//     (apiserver_flowcontrol_current_executing_requests of the consumers'
//     priority level, workload-low): a WATCH until its initial events are
//     sent, any other request until it ends. peak_seats, the most seats
//     they held (a LIST of many objects takes more than one);
//     peak_inqueue, the most that waited in its queues; peak_held, the
//     most executing and waiting at the same instant (the consumers'
//     burst as the server sees it, whatever its limit lets run: the
//     limit of workload-low, which lends most of its seats to other
//     levels while it is idle, was about 56 here when a burst came);
//     peak_inflight_all, the most requests executing at once over every
//     priority level. The
//     child process samples these gauges every 2 ms, in process
//     (harness.Remote.StartPeaks): /metrics cannot show a peak that lasts
//     milliseconds, and reading it costs the apiserver about 70 ms.
//   - wire_MB: bytes the consumers' client read from its connections (TLS
//     and, for watch-lists, gzip included): what the apiserver sent them.
//     dials: the connections it dialed (each a TLS handshake the
//     apiserver serves): client-go's HTTP/2 transport dials one more
//     whenever a request finds every connection at the server's limit of
//     streams (100 by default).
//
// The figures are per recovery: one restart, one expiry.

// consumerLevel is the priority level of the consumers' requests (a
// service account's: harness.Remote.ControllerConfig).
const consumerLevel = "workload-low"

// serverCluster is cluster with etcd in a child process of its own.
func serverCluster[T any](b *testing.B, group string, opts harness.Options, setup func(*harness.Remote) T) (*harness.Remote, T) {
	b.Helper()
	if current.group != group {
		stopCluster()
		current.group = group
		keep := &keepAlive{B: b}
		current.etcd = harness.StartRemoteEtcd(keep, logSink())
		opts.EtcdEndpoint = current.etcd.Addr()
		current.remote = harness.StartRemote(keep, opts, logSink())
		current.data = setup(current.remote)
	}
	return current.remote, current.data.(T)
}

// clockTick is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// every Linux this runs on).
const clockTick = 10 * time.Millisecond

// procCPU returns the CPU time (user and system, every thread) of process
// pid.
func procCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatalf("CPU time of process %d: %v", pid, err)
	}
	// The command name, in parentheses, may hold spaces: the fields
	// after its closing parenthesis start at field 3 (state); utime and
	// stime are fields 14 and 15.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		b.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return time.Duration(utime+stime) * clockTick
}

// samples is one scrape of Prometheus text: each sample's value by its
// name and labels as the text has them.
type samples map[string]float64

// scrape reads the apiserver's /metrics. The two apiservers of a restart
// run in one process and share their metrics (client-go's legacy
// registry is the process's), so it does not matter which one answers.
func scrape(ctx context.Context, c *client) (samples, error) {
	raw, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	out := samples{}
	for _, line := range strings.Split(string(raw), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		// name{labels} value [timestamp]: label values are quoted and
		// may hold spaces, so the value is after the closing brace.
		rest := line
		if i := strings.LastIndexByte(line, '}'); i >= 0 {
			rest = line[i+1:]
		} else if i := strings.IndexByte(line, ' '); i >= 0 {
			rest = line[i:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		out[strings.TrimSpace(line[:len(line)-len(rest)])] = v
	}
	return out, nil
}

// sum adds up the samples named name whose labels include every one of
// labels (`key="value"`).
func (s samples) sum(name string, labels ...string) float64 {
	var total float64
	for k, v := range s {
		n, l, _ := strings.Cut(k, "{")
		if n != name {
			continue
		}
		ok := true
		for _, want := range labels {
			if !hasLabel(l, want) {
				ok = false
				break
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

// hasLabel reports whether the label set l (`a="x",b="y"}`) holds want
// (`a="x"`).
func hasLabel(l, want string) bool {
	for i := 0; ; {
		j := strings.Index(l[i:], want)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(want)
		if (j == 0 || l[j-1] == ',') && end < len(l) && (l[end] == ',' || l[end] == '}') {
			return true
		}
		i = j + 1
	}
}

// etcdReadOps are the operations of etcd_requests_total that read.
var etcdReadOps = []string{"get", "list", "listWithCount", "listStream", "listOnlyKeys", "getCurrentResourceVersion"}

// serverFigures is what a serverMeter measured.
type serverFigures struct {
	apiCPU, etcdCPU          time.Duration
	apiIdle, etcdIdle        float64 // cores
	lists, watches           float64
	watchLists, req429       float64
	listsEtcd, listsCache    float64
	etcdObjects, initEvents  float64
	etcdReads                float64
	peakInflight, peakQueued float64
	peakSeats, peakAll       float64
	peakDemand               float64
	wire, dials              int64
	window                   time.Duration
}

// kv returns the figures as record's key-value pairs.
func (f serverFigures) kv() []any {
	return []any{
		"api_cpu_s", f.apiCPU, "etcd_cpu_s", f.etcdCPU,
		"lists", f.lists, "watches", f.watches, "watch_lists", f.watchLists, "req_429", f.req429,
		"lists_etcd", f.listsEtcd, "lists_cache", f.listsCache, "etcd_objects", f.etcdObjects,
		"init_events", f.initEvents, "etcd_reads", f.etcdReads,
		"peak_inflight", f.peakInflight, "peak_seats", f.peakSeats, "peak_inqueue", f.peakQueued, "peak_held", f.peakDemand, "peak_inflight_all", f.peakAll,
		"wire_MB", float64(f.wire) / 1e6, "dials", f.dials,
		"api_idle_cores", f.apiIdle, "etcd_idle_cores", f.etcdIdle, "window_s", f.window,
	}
}

// serverMeter measures the servers' side of one recovery.
type serverMeter struct {
	b           *testing.B
	r           *harness.Remote
	api, etcd   int // pids
	scraper     *client
	consumers   *client
	resource    string
	apiIdle     float64
	etcdIdle    float64
	start       time.Time
	api0, etcd0 time.Duration
	wire0       int64
	dials0      int64
	m0          samples
}

// idleServers measures the servers' CPU rates over d, with the child's
// peak sampler running as it does while a serverMeter runs.
func idleServers(b *testing.B, r *harness.Remote, d time.Duration) (api, etcd float64) {
	b.Helper()
	if err := r.StartPeaks(); err != nil {
		b.Fatalf("sample: %v", err)
	}
	a0, e0, t0 := procCPU(b, r.Pid()), procCPU(b, current.etcd.Pid()), time.Now()
	time.Sleep(d)
	a1, e1, el := procCPU(b, r.Pid()), procCPU(b, current.etcd.Pid()), time.Since(t0)
	if _, err := r.StopPeaks(); err != nil {
		b.Fatalf("sample: %v", err)
	}
	return (a1 - a0).Seconds() / el.Seconds(), (e1 - e0).Seconds() / el.Seconds()
}

// startServerMeter starts measuring: scraper reads /metrics (it should
// be a client of its own, not the consumers'), consumers is the client
// whose bytes are counted, resource the watched resource; apiIdle and
// etcdIdle are the servers' idle CPU rates, from idleServers.
func startServerMeter(b *testing.B, r *harness.Remote, scraper, consumers *client, resource string, apiIdle, etcdIdle float64) *serverMeter {
	b.Helper()
	m := &serverMeter{b: b, r: r, api: r.Pid(), etcd: current.etcd.Pid(), scraper: scraper, consumers: consumers,
		resource: resource, apiIdle: apiIdle, etcdIdle: etcdIdle}
	m0, err := scrape(context.Background(), scraper)
	if err != nil {
		b.Fatalf("scrape /metrics: %v", err)
	}
	m.m0 = m0
	if err := r.StartPeaks(); err != nil {
		b.Fatalf("sample: %v", err)
	}
	m.start = time.Now()
	m.api0, m.etcd0 = procCPU(b, m.api), procCPU(b, m.etcd)
	m.wire0, m.dials0 = consumers.read.Load(), consumers.dials.Load()
	return m
}

// stop ends the measurement.
func (m *serverMeter) stop() serverFigures {
	b := m.b
	b.Helper()
	api1, etcd1 := procCPU(b, m.api), procCPU(b, m.etcd)
	window := time.Since(m.start)
	wire, dials := m.consumers.read.Load()-m.wire0, m.consumers.dials.Load()-m.dials0
	peaks, err := m.r.StopPeaks()
	if err != nil {
		b.Fatalf("sample: %v", err)
	}
	var m1 samples
	for attempt := 0; attempt < 5; attempt++ {
		if m1, err = scrape(context.Background(), m.scraper); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		b.Fatalf("scrape /metrics: %v", err)
	}
	res := `resource="` + m.resource + `"`
	delta := func(name string, labels ...string) float64 {
		return m1.sum(name, labels...) - m.m0.sum(name, labels...)
	}
	f := serverFigures{
		apiCPU:       api1 - m.api0 - time.Duration(m.apiIdle*float64(window)),
		etcdCPU:      etcd1 - m.etcd0 - time.Duration(m.etcdIdle*float64(window)),
		apiIdle:      m.apiIdle,
		etcdIdle:     m.etcdIdle,
		lists:        delta("apiserver_request_total", res, `verb="LIST"`),
		watches:      delta("apiserver_request_total", res, `verb="WATCH"`),
		watchLists:   delta("apiserver_watch_list_duration_seconds_count", res),
		req429:       delta("apiserver_request_total", res, `code="429"`),
		listsEtcd:    delta("apiserver_storage_list_total", res, `storage="etcd"`),
		listsCache:   delta("apiserver_storage_list_total", res, `storage="watchcache"`),
		etcdObjects:  delta("apiserver_storage_list_fetched_objects_total", res, `storage="etcd"`),
		initEvents:   delta("apiserver_init_events_total", res),
		peakInflight: peaks[`apiserver_flowcontrol_current_executing_requests{priority_level="`+consumerLevel+`"}`],
		peakSeats:    peaks[`apiserver_flowcontrol_current_executing_seats{priority_level="`+consumerLevel+`"}`],
		peakQueued:   peaks[`apiserver_flowcontrol_current_inqueue_requests{priority_level="`+consumerLevel+`"}`],
		peakAll:      peaks["apiserver_flowcontrol_current_executing_requests"],
		peakDemand:   peaks[harness.PeakDemand+`{priority_level="`+consumerLevel+`"}`],
		wire:         wire,
		dials:        dials,
		window:       window,
	}
	for _, op := range etcdReadOps {
		f.etcdReads += delta("etcd_requests_total", res, `operation="`+op+`"`)
	}
	return f
}
