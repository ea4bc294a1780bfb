// Command watchtarget-ctrlruntime runs the controller-runtime WatchTarget
// controller (package ctrlruntime) against the cluster in the kubeconfig and
// serves its metrics, controller-runtime's and watchgrade's, on the
// manager's /metrics endpoint.
//
//	kubectl apply -f examples/watchtarget/crd.yaml
//	go run ./cmd/watchtarget-ctrlruntime --kubeconfig ~/.kube/config
//
// The --kubeconfig flag is controller-runtime's own (registered by its
// client/config package, read by ctrl.GetConfig): empty means $KUBECONFIG,
// then the in-cluster config, then ~/.kube/config. The zap flags
// (--zap-log-level, --zap-devel, ...) set up logging.
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/watchgrade/watchgrade/examples/ctrlruntime"
)

func main() {
	namespace := flag.String("namespace", "", "only reconcile WatchTargets, and follow resources, in this namespace")
	metricsAddr := flag.String("metrics-bind-address", ":8080", `address /metrics is served on; "0" disables it`)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()

	logger := zap.New(zap.UseFlagOptions(&zapOpts))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger) // client-go's own logs (reflectors, events) too

	if err := run(*namespace, *metricsAddr); err != nil {
		fmt.Fprintln(os.Stderr, "watchtarget-ctrlruntime:", err)
		os.Exit(1)
	}
}

func run(namespace, metricsAddr string) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	scheme, err := ctrlruntime.NewScheme() // client-go's types and WatchTarget
	if err != nil {
		return err
	}

	// The instrumentation must be in the manager's options before the
	// manager exists: the cache builds every informer through its hook.
	in, err := ctrlruntime.NewInstrumentation(ctrlruntime.Options{Namespace: namespace})
	if err != nil {
		return err
	}
	opts := ctrl.Options{
		Scheme: scheme,
		// watchgrade's metrics are on controller-runtime's registry, which
		// this server serves.
		Metrics: metricsserver.Options{BindAddress: metricsAddr},
	}
	in.Configure(&opts)

	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	if _, err := ctrlruntime.SetupWithManager(mgr, in); err != nil {
		return err
	}
	ctrl.Log.Info("reconciling WatchTargets", "namespace", namespace, "metrics", metricsAddr)
	return mgr.Start(ctrl.SetupSignalHandler())
}
