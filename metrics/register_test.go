package metrics_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wgmetrics "github.com/watchgrade/watchgrade/metrics"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// newBoth creates both sets of metrics with reg.
func newBoth(reg prometheus.Registerer, ns string) (prometheus.Collector, prometheus.Collector, error) {
	wm, err := wgmetrics.NewWatchMetrics(reg, wgmetrics.WatchOptions{Namespace: ns})
	if err != nil {
		return nil, nil, err
	}
	fr, err := wgmetrics.NewFirstReady(reg, wgmetrics.FirstReadyOptions{Namespace: ns})
	if err != nil {
		return wm, nil, err
	}
	return wm, fr, nil
}

func TestRegistration(t *testing.T) {
	tests := []struct {
		name string
		// second registers a second set after a first set in namespace
		// "myctl"; it returns the error of the second registration.
		second func(reg prometheus.Registerer) error
		// wantErr is a sentinel the error must wrap, if any.
		wantErr error
		// wantExisting is true when the error must carry the first set.
		wantExisting bool
		wantAnyErr   bool
		// wrapFirst registers the first set through a registerer that
		// adds a constant label.
		wrapFirst bool
	}{{
		name: "another namespace registers beside the first",
		second: func(reg prometheus.Registerer) error {
			_, _, err := newBoth(reg, "other")
			return err
		},
	}, {
		name: "watch metrics twice: AlreadyRegisteredError with the first set",
		second: func(reg prometheus.Registerer) error {
			_, err := wgmetrics.NewWatchMetrics(reg, wgmetrics.WatchOptions{Namespace: "myctl"})
			return err
		},
		wantExisting: true, wantAnyErr: true,
	}, {
		name: "first-Ready metrics twice: AlreadyRegisteredError with the first set",
		second: func(reg prometheus.Registerer) error {
			_, err := wgmetrics.NewFirstReady(reg, wgmetrics.FirstReadyOptions{Namespace: "myctl"})
			return err
		},
		wantExisting: true, wantAnyErr: true,
	}, {
		name: "a nil registerer",
		second: func(prometheus.Registerer) error {
			_, err := wgmetrics.NewWatchMetrics(nil, wgmetrics.WatchOptions{})
			return err
		},
		wantErr: wgmetrics.ErrNilRegisterer, wantAnyErr: true,
	}, {
		name: "a nil registerer for first-Ready metrics",
		second: func(prometheus.Registerer) error {
			_, err := wgmetrics.NewFirstReady(nil, wgmetrics.FirstReadyOptions{})
			return err
		},
		wantErr: wgmetrics.ErrNilRegisterer, wantAnyErr: true,
	}, {
		name: "an invalid namespace is an error, not a panic",
		second: func(reg prometheus.Registerer) error {
			_, err := wgmetrics.NewWatchMetrics(reg, wgmetrics.WatchOptions{Namespace: "my-ctl"})
			return err
		},
		wantErr: wgmetrics.ErrInvalidNamespace, wantAnyErr: true,
	}, {
		name: "an invalid namespace for first-Ready metrics",
		second: func(reg prometheus.Registerer) error {
			_, err := wgmetrics.NewFirstReady(reg, wgmetrics.FirstReadyOptions{Namespace: "9lives"})
			return err
		},
		wantErr: wgmetrics.ErrInvalidNamespace, wantAnyErr: true,
	}, {
		name: "a wrapping registerer adds constant labels",
		second: func(reg prometheus.Registerer) error {
			_, _, err := newBoth(prometheus.WrapRegistererWith(prometheus.Labels{"shard": "b"}, reg), "myctl")
			return err
		},
		wrapFirst: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			var first prometheus.Registerer = reg
			if tt.wrapFirst {
				first = prometheus.WrapRegistererWith(prometheus.Labels{"shard": "a"}, reg)
			}
			firstWatch, firstReady, err := newBoth(first, "myctl")
			if err != nil {
				t.Fatalf("first registration: %v", err)
			}
			err = tt.second(reg)
			if gotErr := err != nil; gotErr != tt.wantAnyErr {
				t.Fatalf("second registration error = %v, want error: %v", err, tt.wantAnyErr)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error = %v, want one wrapping %v", err, tt.wantErr)
			}
			are, isAre := errorsAsAlreadyRegistered(err)
			if isAre != tt.wantExisting {
				t.Errorf("errors.As(%v, AlreadyRegisteredError) = %v, want %v", err, isAre, tt.wantExisting)
			}
			if isAre && are.ExistingCollector != firstWatch && are.ExistingCollector != firstReady {
				t.Errorf("ExistingCollector = %T %p, want the first set", are.ExistingCollector, are.ExistingCollector)
			}
			// Whatever happened, the registry still gathers cleanly.
			if _, err := reg.Gather(); err != nil {
				t.Errorf("Gather() error = %v", err)
			}
		})
	}
}

// Every metric passes promlint, series and all.
func TestLint(t *testing.T) {
	wm, _ := newWatchMetrics(t)
	wm.StateChanged(wgwatch.State{Stream: "a", Resource: pods, Phase: wgwatch.PhaseReplaying})
	wm.StateChanged(wgwatch.State{Stream: "a", Resource: pods, Phase: wgwatch.PhaseStreaming})
	wm.SessionEnded(wgwatch.SessionEnd{Stream: "a", Resource: pods, Stage: wgwatch.StageOpen,
		Verdict: wgwatch.Verdict{Outcome: wgwatch.OutcomeError, Class: wgwatch.ClassTransient}})
	fr, _ := newFirstReady(t, wgmetrics.FirstReadyOptions{})
	fr.Observe(widgets, object(uidA, 0), nil)
	fr.Observe(widgets, object(uidA, 42e9), ready(metav1.ConditionTrue))

	for name, c := range map[string]prometheus.Collector{"WatchMetrics": wm, "FirstReady": fr} {
		t.Run(name, func(t *testing.T) {
			problems, err := testutil.CollectAndLint(c)
			if err != nil {
				t.Fatalf("CollectAndLint() error = %v", err)
			}
			if diff := cmp.Diff([]promlint.Problem(nil), problems); diff != "" {
				t.Errorf("CollectAndLint() problems (-want +got):\n%s", diff)
			}
		})
	}
}
