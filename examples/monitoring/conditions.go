package monitoring

import (
	"errors"
	"fmt"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Lister is what a [ConditionCollector] reads at scrape time: an informer's
// store (client-go cache.Store and cache.Indexer have this method).
type Lister interface {
	List() []any
}

// ConditionCollectorOptions configures [NewConditionCollector].
type ConditionCollectorOptions struct {
	// Name prefixes both metric names: Name_info and
	// Name_status_condition. Required; the rules in this directory use
	// "watchtarget".
	Name string
	// Objects lists the objects to report, read at every scrape. Required.
	// Items may be *unstructured.Unstructured or typed objects (pointers to
	// structs); an item that converts to neither is skipped.
	Objects Lister
}

// ErrInvalidOptions is wrapped by [NewConditionCollector] when a required
// option is missing.
var ErrInvalidOptions = errors.New("monitoring: invalid options")

// ConditionCollector publishes one series per object and per condition
// for objects that carry conditions in status.conditions (the kstatus
// trio Ready, Reconciling and Stalled among them), read from an informer's
// store at scrape time, so an object that is gone leaves no series behind:
//
//	metric                    labels                          value
//	------------------------  ------------------------------  --------------------------------------
//	Name_info                 namespace, name                 1 for every object
//	Name_status_condition     namespace, name, type, status   1 for the status the condition has,
//	                                                          0 for the other two of True, False, Unknown
//
// This is the per-object series that the object alerts need and that the
// watchgrade metrics package leaves out on purpose (object names are
// unbounded labels): run it in the controller, next to the watch metrics,
// or in a process of its own. Its shape is kube-state-metrics'
// custom-resource-state StateSet for conditions, so rules written for one
// work for the other once the metric names match.
//
// A ConditionCollector owns no goroutine and is safe for concurrent use if
// its Lister is.
type ConditionCollector struct {
	objects   Lister
	info      *prometheus.Desc
	condition *prometheus.Desc
}

// NewConditionCollector returns a collector; register it with
// prometheus.Registerer.Register. A missing Name or Objects returns an
// error wrapping [ErrInvalidOptions].
func NewConditionCollector(opts ConditionCollectorOptions) (*ConditionCollector, error) {
	if opts.Name == "" || opts.Objects == nil {
		return nil, fmt.Errorf("%w: Name and Objects are required", ErrInvalidOptions)
	}
	return &ConditionCollector{
		objects: opts.Objects,
		info: prometheus.NewDesc(opts.Name+"_info",
			"One series per object, value 1.", []string{"namespace", "name"}, nil),
		condition: prometheus.NewDesc(opts.Name+"_status_condition",
			"The status of each condition in status.conditions: 1 for the status it has, 0 for the others.",
			[]string{"namespace", "name", "type", "status"}, nil),
	}, nil
}

// Describe implements [prometheus.Collector].
func (c *ConditionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.info
	ch <- c.condition
}

// conditionStatuses are the values a condition's status can have, and so
// the values of the status label.
var conditionStatuses = [...]string{"True", "False", "Unknown"}

// Collect implements [prometheus.Collector]: it lists the objects and
// reports each one's conditions as they are now.
func (c *ConditionCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ namespace, name string }
	seen := map[key]bool{}
	for _, item := range c.objects.List() {
		u := asUnstructured(item)
		if u == nil {
			continue
		}
		k := key{u.GetNamespace(), u.GetName()}
		if seen[k] {
			continue // a store holds one object per key; be safe anyway
		}
		seen[k] = true
		ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, k.namespace, k.name)
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		types := map[string]string{}
		for _, raw := range conds {
			m, ok := raw.(map[string]any)
			if !ok {
				continue
			}
			typ, _ := m["type"].(string)
			status, _ := m["status"].(string)
			if typ == "" {
				continue
			}
			if _, dup := types[typ]; !dup {
				types[typ] = status
			}
		}
		names := make([]string, 0, len(types))
		for typ := range types {
			names = append(names, typ)
		}
		sort.Strings(names)
		for _, typ := range names {
			for _, s := range conditionStatuses {
				v := 0.0
				if types[typ] == s {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(c.condition, prometheus.GaugeValue, v, k.namespace, k.name, typ, s)
			}
		}
	}
}

// asUnstructured returns item as unstructured content, or nil.
func asUnstructured(item any) *unstructured.Unstructured {
	if u, ok := item.(*unstructured.Unstructured); ok {
		return u
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(item)
	if err != nil {
		return nil
	}
	return &unstructured.Unstructured{Object: content}
}
