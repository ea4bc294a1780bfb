// Command watchtarget-ctrlruntime runs the controller-runtime WatchTarget
// controller (package ctrlruntime) against the cluster in the kubeconfig,
// serves its metrics, controller-runtime's and watchgrade's, on the
// manager's /metrics endpoint, and its readiness probe on /readyz.
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
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/watchgrade/watchgrade/examples/ctrlruntime"
)

func main() {
	namespace := flag.String("namespace", "", "only reconcile WatchTargets, and follow resources, in this namespace")
	metricsAddr := flag.String("metrics-bind-address", ":8080", `address /metrics is served on; "0" disables it`)
	probeAddr := flag.String("health-probe-bind-address", ":8081", `address /readyz and /healthz are served on; "0" disables them`)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()

	logger := zap.New(zap.UseFlagOptions(&zapOpts))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger) // client-go's own logs (reflectors, events) too

	if err := run(*namespace, *metricsAddr, *probeAddr); err != nil {
		fmt.Fprintln(os.Stderr, "watchtarget-ctrlruntime:", err)
		os.Exit(1)
	}
}

func run(namespace, metricsAddr, probeAddr string) error {
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
	mgr, err := ctrl.NewManager(cfg, in.ManagerOptions(ctrl.Options{
		Scheme: scheme,
		// watchgrade's metrics are on controller-runtime's registry, which
		// this server serves.
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
	}))
	if err != nil {
		return err
	}
	if _, err := ctrlruntime.SetupWithManager(mgr, in); err != nil {
		return err
	}
	// Liveness: the process answers. Readiness: every informer of the
	// cache has synced once (then ready for good; see the package
	// documentation of ctrlruntime for what a denied resource does to it).
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("watches", in.Grader().ReadyzCheck); err != nil {
		return err
	}
	ctrl.Log.Info("reconciling WatchTargets", "namespace", namespace, "metrics", metricsAddr, "probes", probeAddr)
	return mgr.Start(ctrl.SetupSignalHandler())
}
