package metrics

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// DefaultNamespace is the metric name prefix used when an options struct
// leaves Namespace empty.
const DefaultNamespace = "watchgrade"

// Label names. Every metric of this package carries LabelResource; the
// other label sets are closed and listed in the package documentation.
const (
	// LabelResource is the watched collection or the object's kind, as
	// [schema.GroupResource.String] spells it: "deployments.apps", or
	// "pods" for the core group.
	LabelResource = "resource"
	// LabelOutcome is a session ending's [watch.Outcome].
	LabelOutcome = "outcome"
	// LabelPhase is a stream's [watch.Phase].
	LabelPhase = "phase"
	// LabelClass is the [watch.Class] of the error that failed an open.
	LabelClass = "class"
	// LabelReason is a [RejectReason].
	LabelReason = "reason"
)

// ErrNilRegisterer is returned, wrapped, by the constructors when they are
// given a nil prometheus.Registerer, or an interface holding a nil pointer
// such as (*prometheus.Registry)(nil).
var ErrNilRegisterer = errors.New("nil prometheus.Registerer")

// ErrInvalidNamespace is returned, wrapped, by the constructors when the
// Namespace option is not a classic Prometheus name: a letter or '_',
// then letters, digits and '_'.
var ErrInvalidNamespace = errors.New("invalid metric namespace")

// validNamespace reports whether ns can prefix a classic Prometheus metric
// name, which every scraper and query language accepts unquoted.
func validNamespace(ns string) bool {
	for i, c := range ns {
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return ns != ""
}

// register registers c with reg as one unit: either every metric of c is
// registered or none is. The error wraps what reg returned, so that
// errors.As finds a [prometheus.AlreadyRegisteredError] and its
// ExistingCollector. It never panics: a registerer that panics (a nil
// registry behind a wrapping registerer, which cannot be seen from here)
// is an error.
func register(reg prometheus.Registerer, ns string, c prometheus.Collector, what string) (err error) {
	if isNilRegisterer(reg) {
		return fmt.Errorf("metrics: register %s: %w", what, ErrNilRegisterer)
	}
	if !validNamespace(ns) {
		return fmt.Errorf("metrics: register %s: %w %q", what, ErrInvalidNamespace, ns)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("metrics: register %s: the registerer panicked: %v", what, r)
		}
	}()
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("metrics: register %s: %w", what, err)
	}
	return nil
}

// isNilRegisterer reports whether reg is nil or holds a nil pointer (or
// other nil reference).
func isNilRegisterer(reg prometheus.Registerer) bool {
	if reg == nil {
		return true
	}
	v := reflect.ValueOf(reg)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice, reflect.Interface:
		return v.IsNil()
	}
	return false
}

func namespaceOr(ns string) string {
	if ns == "" {
		return DefaultNamespace
	}
	return ns
}

// resourceLabel is the value of LabelResource for gr.
func resourceLabel(gr schema.GroupResource) string {
	return gr.String()
}
