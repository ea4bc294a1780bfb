package metrics_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	wgmetrics "github.com/watchgrade/watchgrade/metrics"
)

// Defect 6 of issue 19: NewWatchMetrics and NewFirstReady panicked on a
// typed-nil registerer, (*prometheus.Registry)(nil), though their docs
// promise an error. A typed nil is ErrNilRegisterer; a nil hidden behind a
// wrapping registerer, which the constructors cannot see, is still an
// error, not a panic.
func TestTypedNilRegisterer(t *testing.T) {
	var nilRegistry *prometheus.Registry
	constructors := map[string]func(prometheus.Registerer) error{
		"NewWatchMetrics": func(reg prometheus.Registerer) error {
			_, err := wgmetrics.NewWatchMetrics(reg, wgmetrics.WatchOptions{})
			return err
		},
		"NewFirstReady": func(reg prometheus.Registerer) error {
			_, err := wgmetrics.NewFirstReady(reg, wgmetrics.FirstReadyOptions{})
			return err
		},
	}
	for name, construct := range constructors {
		for _, tt := range []struct {
			what    string
			reg     prometheus.Registerer
			wantErr error
		}{
			{"(*prometheus.Registry)(nil)", nilRegistry, wgmetrics.ErrNilRegisterer},
			{"a wrapped (*prometheus.Registry)(nil)", prometheus.WrapRegistererWith(prometheus.Labels{"a": "b"}, nilRegistry), nil},
		} {
			t.Run(name+"/"+tt.what, func(t *testing.T) {
				err := func() (err error) {
					defer func() {
						if r := recover(); r != nil {
							err = fmt.Errorf("panic: %v", r)
							t.Errorf("%s(%s) panicked: %v", name, tt.what, r)
						}
					}()
					return construct(tt.reg)
				}()
				if err == nil {
					t.Errorf("%s(%s) = nil error, want one", name, tt.what)
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Errorf("%s(%s) = %v, want one wrapping %v", name, tt.what, err, tt.wantErr)
				}
			})
		}
	}
}
