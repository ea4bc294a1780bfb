// Package watchtarget defines WatchTarget, the small custom resource both
// example controllers reconcile: it names the resources, in its own
// namespace, whose watches a controller follows, and carries the kstatus
// trio (Ready, Reconciling, Stalled) and status.observedGeneration.
//
//	apiVersion: examples.watchgrade.dev/v1alpha1
//	kind: WatchTarget
//	metadata: {name: app, namespace: shop}
//	spec:
//	  resources:
//	  - {version: v1, resource: configmaps}
//	  - {group: apps, version: v1, resource: deployments}
//
// The CustomResourceDefinition ships as crd.yaml next to this file and as
// [CRD]. The types are written by hand (no code generator) so that the
// example stays one directory a reader can take in at once.
package watchtarget

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// WatchTarget names resources whose watches a controller follows.
type WatchTarget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   Spec   `json:"spec"`
	Status Status `json:"status,omitempty"`
}

// Spec is what the user asks for.
type Spec struct {
	// Resources are followed in the WatchTarget's own namespace.
	Resources []ResourceRef `json:"resources"`
}

// ResourceRef names one namespaced resource.
type ResourceRef struct {
	Group    string `json:"group,omitempty"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
}

// GVR returns the reference as a GroupVersionResource.
func (r ResourceRef) GVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}
}

// Status is what the controller reports.
type Status struct {
	// ObservedGeneration is the generation the conditions describe; it is
	// written in the same update as the conditions (kubectl wait and
	// kstatus read both together).
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions holds Ready, Reconciling and Stalled.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WatchTargetList is a list of WatchTargets.
type WatchTargetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []WatchTarget `json:"items"`
}

// StreamName is the name of the stream that follows resource r in
// namespace, the key readiness gates and metrics use: the namespace, then
// the resource in kubectl's fully-qualified form ("shop/configmaps.v1",
// "shop/deployments.v1.apps"). The version is part of it, so that fixing a
// wrong version starts a new stream. Two WatchTargets in one namespace that
// name the same resource and version share its stream.
func StreamName(namespace string, r ResourceRef) string {
	name := r.Resource + "." + r.Version
	if r.Group != "" {
		name += "." + r.Group
	}
	return namespace + "/" + name
}

// DeepCopyInto copies t into out.
func (t *WatchTarget) DeepCopyInto(out *WatchTarget) {
	*out = *t
	out.TypeMeta = t.TypeMeta
	t.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Resources = append([]ResourceRef(nil), t.Spec.Resources...)
	if t.Status.Conditions != nil {
		out.Status.Conditions = make([]metav1.Condition, len(t.Status.Conditions))
		for i := range t.Status.Conditions {
			t.Status.Conditions[i].DeepCopyInto(&out.Status.Conditions[i])
		}
	}
}

// DeepCopy returns a deep copy of t.
func (t *WatchTarget) DeepCopy() *WatchTarget {
	if t == nil {
		return nil
	}
	out := new(WatchTarget)
	t.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (t *WatchTarget) DeepCopyObject() runtime.Object { return t.DeepCopy() }

// DeepCopyInto copies l into out.
func (l *WatchTargetList) DeepCopyInto(out *WatchTargetList) {
	*out = *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]WatchTarget, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a deep copy of l.
func (l *WatchTargetList) DeepCopy() *WatchTargetList {
	if l == nil {
		return nil
	}
	out := new(WatchTargetList)
	l.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *WatchTargetList) DeepCopyObject() runtime.Object { return l.DeepCopy() }
