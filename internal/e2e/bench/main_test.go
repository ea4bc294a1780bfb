package bench

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
)

var (
	serverLog = flag.String("bench.serverlog", "", "file for the servers' logs (etcd, kube-apiserver); default: discarded")
	summarize = flag.String("bench.summarize", "", "print the Go benchmark output in this file as bench: lines, and run nothing")
)

func TestMain(m *testing.M) {
	// The child process that runs the servers never returns from here.
	harness.ServeRemote()
	flag.Parse()
	if *summarize != "" {
		os.Exit(summarizeFile(*summarize, os.Stdout))
	}
	// client-go's own warnings (a reflector's watch cut by the apiserver
	// restart, say) are what the benchmarks provoke.
	klog.SetLogger(logr.Discard())
	load := loadAverage()
	busy0, steal0 := systemBusy()
	start := time.Now()
	code := m.Run()
	stopCluster()
	wall := time.Since(start)
	printFigures(os.Stdout)
	// What other processes of the machine used meanwhile: all CPU time
	// the kernel counted, less this process's and its children's (the
	// servers, stopped by now).
	// The CPU time the hypervisor gave other guests while this one wanted
	// it (steal) is the other noise a shared machine makes.
	others, steal := "?", "?"
	if busy1, steal1 := systemBusy(); busy0 >= 0 && busy1 >= 0 {
		ours := rusage(syscall.RUSAGE_SELF) + rusage(syscall.RUSAGE_CHILDREN)
		others = fmt.Sprintf("%.2f", max(busy1-busy0-ours, 0).Seconds()/wall.Seconds())
		steal = fmt.Sprintf("%.2f", (steal1-steal0).Seconds()/wall.Seconds())
	}
	fmt.Printf("bench: machine cpu=%q cores=%d go=%s load_before=%s load_after=%s others_cores=%s steal_cores=%s wall_s=%.0f\n",
		cpuName(), runtime.NumCPU(), runtime.Version(), load, loadAverage(), others, steal, wall.Seconds())
	os.Exit(code)
}

// systemBusy returns the CPU time the kernel has counted as busy and as
// stolen, over all cores (Linux's /proc/stat), or -1s.
func systemBusy() (busy, steal time.Duration) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1, -1
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return -1, -1
	}
	// user nice system idle iowait irq softirq steal, in USER_HZ (1/100 s)
	var ticks [8]int64
	for i := range ticks {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return -1, -1
		}
		ticks[i] = n
	}
	tick := func(n int64) time.Duration { return time.Duration(n) * time.Second / 100 }
	return tick(ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6]), tick(ticks[7])
}

// rusage returns the CPU time (user and system) of who, 0 if unknown.
func rusage(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAverage returns the one-minute load average (Linux), or "?": the
// machine is shared, and a busy one makes every figure noisier.
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(raw)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

func cpuName() string {
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// logSink returns where the servers' logs go.
func logSink() io.Writer {
	if *serverLog == "" {
		return io.Discard
	}
	f, err := os.OpenFile(*serverLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: server log: %v\n", err)
		return io.Discard
	}
	return f
}
