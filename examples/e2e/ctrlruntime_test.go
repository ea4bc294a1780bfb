package e2e

import (
	"context"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/watchgrade/watchgrade/examples/ctrlruntime"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

func TestControllerRuntimeController(t *testing.T) {
	exercise(t, "ctrlruntime", func(t *testing.T, cfg *rest.Config, namespace string, observer wgwatch.Observer) prometheus.Gatherer {
		// A registry of its own, rather than controller-runtime's global
		// one, so that this test reads only its own manager's metrics.
		reg := prometheus.NewRegistry()
		cfg = rest.CopyConfig(cfg)
		cfg.Wrap(shortWatches)
		mgr, _, err := ctrlruntime.NewManager(cfg, ctrlruntime.Options{Namespace: namespace, Observer: observer, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
		return reg
	})
}

// shortWatches asks the server to end every watch after two seconds. An
// informer's reflector sends a timeout of its own (5 to 10 minutes), which
// the server honours over --min-request-timeout; this puts the routine
// closes of a real cluster's 30 to 60 minutes within the test. Two, not
// one: a session goes live once it has stayed open for ShortSession (1 s)
// and the informer has taken what it delivered, so watches of exactly one
// second would close before they go live, and be graded as flapping.
func shortWatches(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		q := req.URL.Query()
		if q.Get("watch") == "true" || q.Get("watch") == "1" {
			req = req.Clone(req.Context())
			q.Set("timeoutSeconds", "2")
			req.URL.RawQuery = q.Encode()
		}
		return next.RoundTrip(req)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
