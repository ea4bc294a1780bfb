package ctrlruntime

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/watchgrade/watchgrade/examples/watchtarget"
)

// NewScheme returns a scheme with client-go's built-in types and
// WatchTarget: what the controller's manager needs.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("ctrlruntime: %w", err)
	}
	if err := watchtarget.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("ctrlruntime: %w", err)
	}
	return s, nil
}

// NewManager makes a manager for cfg with the WatchTarget controller set up,
// for tests and for embedding: the whole wiring, with nothing listening.
// The manager serves no metrics (the watchgrade metrics are still registered
// with Options.Registerer, controller-runtime's registry by default, where a
// test can read them) and no health probes, and runs without leader
// election. Controller-name validation is skipped, so that a test may build
// several managers, one after the other, in one process.
//
// Call Start on the manager to run the controller; the Reconciler gives
// access to the accumulator and the Grader ([Reconciler.Instrumentation]).
func NewManager(cfg *rest.Config, opts Options) (manager.Manager, *Reconciler, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, nil, err
	}
	in, err := NewInstrumentation(opts)
	if err != nil {
		return nil, nil, err
	}
	mgr, err := manager.New(cfg, in.ManagerOptions(manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
		Controller:             config.Controller{SkipNameValidation: new(true)},
	}))
	if err != nil {
		return nil, nil, fmt.Errorf("ctrlruntime: %w", err)
	}
	r, err := SetupWithManager(mgr, in)
	if err != nil {
		return nil, nil, err
	}
	return mgr, r, nil
}
