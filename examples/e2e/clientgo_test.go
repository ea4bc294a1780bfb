package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/watchgrade/watchgrade/examples/clientgo"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

func TestClientGoController(t *testing.T) {
	exercise(t, "clientgo", func(t *testing.T, cfg *rest.Config, namespace string, observer wgwatch.Observer) prometheus.Gatherer {
		reg := prometheus.NewRegistry()
		ctl, err := clientgo.New(clientgo.Options{Config: cfg, Namespace: namespace, Registerer: reg, Observer: observer,
			// A repair shows within 5-10 s instead of 30-60 s.
			MaxBackoff: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- ctl.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
		return reg
	})
}
