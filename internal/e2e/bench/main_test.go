package bench

import (
	"flag"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
)

var serverLog = flag.String("bench.serverlog", "", "file for the servers' logs (etcd, kube-apiserver); default: discarded")

func TestMain(m *testing.M) {
	// The child process that runs the servers never returns from here.
	harness.ServeRemote()
	flag.Parse()
	// client-go's own warnings (a reflector's watch cut by the apiserver
	// restart, say) are what the benchmarks provoke.
	klog.SetLogger(logr.Discard())
	code := m.Run()
	stopCluster()
	printFigures(os.Stdout)
	os.Exit(code)
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
