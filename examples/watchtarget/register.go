package watchtarget

import (
	_ "embed"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// Group, version, kind and resource of WatchTarget.
var (
	GroupVersion = schema.GroupVersion{Group: "examples.watchgrade.dev", Version: "v1alpha1"}
	Kind         = GroupVersion.WithKind("WatchTarget")
	Resource     = GroupVersion.WithResource("watchtargets")
)

// AddToScheme registers WatchTarget and WatchTargetList with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &WatchTarget{}, &WatchTargetList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

//go:embed crd.yaml
var crdYAML []byte

// CRDYAML returns crd.yaml, the CustomResourceDefinition for WatchTarget.
func CRDYAML() []byte { return append([]byte(nil), crdYAML...) }

// CRD returns the CustomResourceDefinition for WatchTarget, parsed from
// crd.yaml.
func CRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(crdYAML, crd); err != nil {
		return nil, fmt.Errorf("watchtarget: crd.yaml: %w", err)
	}
	return crd, nil
}

// FromUnstructured converts an object read with a dynamic client.
func FromUnstructured(u *unstructured.Unstructured) (*WatchTarget, error) {
	t := &WatchTarget{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, t); err != nil {
		return nil, fmt.Errorf("watchtarget: %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return t, nil
}

// ToUnstructured converts t for a dynamic client.
func ToUnstructured(t *WatchTarget) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(t)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(Kind)
	return u, nil
}
