// Command watchtarget-clientgo runs the plain client-go WatchTarget
// controller (package clientgo) against the cluster in the kubeconfig and
// serves its metrics on /metrics.
//
//	kubectl apply -f examples/watchtarget/crd.yaml
//	go run ./cmd/watchtarget-clientgo --kubeconfig ~/.kube/config
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/watchgrade/watchgrade/examples/clientgo"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig; empty means in-cluster or $KUBECONFIG")
	namespace := flag.String("namespace", "", "only reconcile WatchTargets in this namespace")
	metricsAddr := flag.String("metrics-bind-address", ":8080", "address /metrics is served on")
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(*kubeconfig, *namespace, *metricsAddr); err != nil {
		fmt.Fprintln(os.Stderr, "watchtarget-clientgo:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace, metricsAddr string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ctl, err := clientgo.New(clientgo.Options{Config: cfg, Namespace: namespace, Registerer: reg})
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Addr: metricsAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "metrics server")
			stop()
		}
	}()
	defer func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()

	klog.InfoS("reconciling WatchTargets", "namespace", namespace, "metrics", metricsAddr)
	return ctl.Run(klog.NewContext(ctx, klog.Background()))
}
