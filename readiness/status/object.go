package status

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// ConditionsAccessor is the fast path to an owner type's status.conditions:
// a type that implements it (and [ObservedGenerationAccessor]) is read and
// written without conversion through a JSON-shaped map.
type ConditionsAccessor interface {
	GetConditions() []metav1.Condition
	SetConditions([]metav1.Condition)
}

// ObservedGenerationAccessor is the fast path to status.observedGeneration.
type ObservedGenerationAccessor interface {
	GetObservedGeneration() int64
	SetObservedGeneration(int64)
}

// readObject returns obj's status.conditions and status.observedGeneration
// (0 when absent): through the accessors, the unstructured content, or a
// conversion of a typed object. A field of the wrong shape is an error,
// never a panic: it is input from the API server.
func readObject(obj runtime.Object) ([]metav1.Condition, int64, error) {
	c, okC := obj.(ConditionsAccessor)
	g, okG := obj.(ObservedGenerationAccessor)
	if okC && okG {
		return c.GetConditions(), g.GetObservedGeneration(), nil
	}
	if u, ok := obj.(runtime.Unstructured); ok {
		return readStatus(u.UnstructuredContent())
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, 0, err
	}
	return readStatus(m)
}

// writeObject sets obj's status.conditions and status.observedGeneration.
func writeObject(obj runtime.Object, conditions []metav1.Condition, generation int64) error {
	c, okC := obj.(ConditionsAccessor)
	g, okG := obj.(ObservedGenerationAccessor)
	if okC && okG {
		c.SetConditions(conditions)
		g.SetObservedGeneration(generation)
		return nil
	}
	if u, ok := obj.(runtime.Unstructured); ok {
		m := u.UnstructuredContent()
		if err := writeStatus(m, conditions, generation); err != nil {
			return err
		}
		u.SetUnstructuredContent(m)
		return nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	if err := writeStatus(m, conditions, generation); err != nil {
		return err
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(m, obj)
}

// readStatus returns status.conditions and status.observedGeneration (0
// when absent) of a JSON-shaped object.
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
