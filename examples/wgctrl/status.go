package wgctrl

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// toUnstructured returns obj as the JSON-compatible map a status write is
// made of, so that any kind whose status has conditions (and
// observedGeneration) can be written without methods of its own.
func toUnstructured(obj runtime.Object) (map[string]any, error) {
	if u, ok := obj.(runtime.Unstructured); ok {
		return runtime.DeepCopyJSON(u.UnstructuredContent()), nil
	}
	return runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
}

// readStatus returns status.conditions and status.observedGeneration (0
// when absent). What the API server sent is input: a field of the wrong
// shape is an error, never a panic.
func readStatus(u map[string]any) ([]metav1.Condition, int64, error) {
	raw, _, err := unstructured.NestedFieldNoCopy(u, "status", "conditions")
	if err != nil {
		return nil, 0, fmt.Errorf("status.conditions: %w", err)
	}
	var conditions []metav1.Condition
	if raw != nil {
		list, ok := raw.([]any)
		if !ok {
			return nil, 0, fmt.Errorf("status.conditions is a %T, not a list", raw)
		}
		for i, item := range list {
			m, ok := item.(map[string]any)
			if !ok {
				return nil, 0, fmt.Errorf("status.conditions[%d] is a %T, not an object", i, item)
			}
			var c metav1.Condition
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c); err != nil {
				return nil, 0, fmt.Errorf("status.conditions[%d]: %w", i, err)
			}
			conditions = append(conditions, c)
		}
	}
	observed, _, err := unstructured.NestedFieldNoCopy(u, "status", "observedGeneration")
	if err != nil {
		return nil, 0, fmt.Errorf("status.observedGeneration: %w", err)
	}
	switch g := observed.(type) {
	case nil:
		return conditions, 0, nil
	case int64:
		return conditions, g, nil
	case float64: // decoded from JSON without a schema
		return conditions, int64(g), nil
	default:
		return nil, 0, fmt.Errorf("status.observedGeneration is a %T, not an integer", observed)
	}
}

// writeStatus sets status.conditions and status.observedGeneration in u.
func writeStatus(u map[string]any, conditions []metav1.Condition, generation int64) error {
	list := make([]any, 0, len(conditions))
	for i := range conditions {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&conditions[i])
		if err != nil {
			return err
		}
		list = append(list, m)
	}
	if err := unstructured.SetNestedSlice(u, list, "status", "conditions"); err != nil {
		return err
	}
	return unstructured.SetNestedField(u, generation, "status", "observedGeneration")
}
