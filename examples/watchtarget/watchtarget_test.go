package watchtarget

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestCRDMatchesTheTypes(t *testing.T) {
	crd, err := CRD()
	if err != nil {
		t.Fatal(err)
	}
	if crd.Spec.Group != GroupVersion.Group || crd.Spec.Names.Kind != Kind.Kind || crd.Spec.Names.Plural != Resource.Resource {
		t.Errorf("CRD names %s/%s/%s, want %s/%s/%s", crd.Spec.Group, crd.Spec.Names.Kind, crd.Spec.Names.Plural, GroupVersion.Group, Kind.Kind, Resource.Resource)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != GroupVersion.Version {
		t.Fatalf("CRD versions %v, want exactly %s", crd.Spec.Versions, GroupVersion.Version)
	}
	v := crd.Spec.Versions[0]
	if v.Subresources == nil || v.Subresources.Status == nil {
		t.Error("the CRD has no status subresource: status updates would change the spec's generation")
	}
	props := v.Schema.OpenAPIV3Schema.Properties
	item := props["spec"].Properties["resources"].Items.Schema.Properties
	for _, field := range []string{"group", "version", "resource"} {
		if _, ok := item[field]; !ok {
			t.Errorf("spec.resources[] lacks %q in the schema", field)
		}
	}
	for _, field := range []string{"observedGeneration", "conditions"} {
		if _, ok := props["status"].Properties[field]; !ok {
			t.Errorf("status lacks %q in the schema", field)
		}
	}
}

func TestUnstructuredRoundTrip(t *testing.T) {
	in := &WatchTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "shop", Generation: 3},
		Spec:       Spec{Resources: []ResourceRef{{Version: "v1", Resource: "configmaps"}, {Group: "apps", Version: "v1", Resource: "deployments"}}},
		Status: Status{ObservedGeneration: 3, Conditions: []metav1.Condition{{
			Type: "Ready", Status: metav1.ConditionTrue, Reason: "Established", Message: "m", ObservedGeneration: 3,
			LastTransitionTime: metav1.Unix(1700000000, 0),
		}}},
	}
	u, err := ToUnstructured(in)
	if err != nil {
		t.Fatal(err)
	}
	if u.GroupVersionKind() != Kind {
		t.Errorf("GVK %v, want %v", u.GroupVersionKind(), Kind)
	}
	out, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	out.TypeMeta = in.TypeMeta
	if diff := cmp.Diff(in, out); diff != "" {
		t.Errorf("round trip (-in +out):\n%s", diff)
	}
	if _, err := FromUnstructured(&unstructuredBad); err == nil {
		t.Error("FromUnstructured accepted spec.resources of the wrong type")
	}
}

func TestDeepCopyIsDeep(t *testing.T) {
	in := &WatchTarget{Spec: Spec{Resources: []ResourceRef{{Version: "v1", Resource: "configmaps"}}},
		Status: Status{Conditions: []metav1.Condition{{Type: "Ready"}}}}
	out := in.DeepCopyObject().(*WatchTarget)
	out.Spec.Resources[0].Resource = "secrets"
	out.Status.Conditions[0].Type = "Stalled"
	if in.Spec.Resources[0].Resource != "configmaps" || in.Status.Conditions[0].Type != "Ready" {
		t.Error("DeepCopy shares slices with the original")
	}
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if !s.Recognizes(Kind) {
		t.Errorf("scheme does not recognize %v", Kind)
	}
}

func TestStreamName(t *testing.T) {
	if got := StreamName("shop", ResourceRef{Group: "apps", Version: "v1", Resource: "deployments"}); got != "shop/deployments.v1.apps" {
		t.Errorf("StreamName = %q", got)
	}
	if got := StreamName("shop", ResourceRef{Version: "v1", Resource: "configmaps"}); got != "shop/configmaps.v1" {
		t.Errorf("StreamName = %q", got)
	}
}

var unstructuredBad = func() (u unstructured.Unstructured) {
	u.Object = map[string]any{"apiVersion": GroupVersion.String(), "kind": Kind.Kind, "spec": map[string]any{"resources": "configmaps"}}
	return u
}()
