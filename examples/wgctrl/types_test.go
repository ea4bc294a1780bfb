package wgctrl_test

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// Guestbook is the owner kind of the tests and examples, shaped as
// kubebuilder scaffolds it, with status.observedGeneration added.
type Guestbook struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GuestbookSpec   `json:"spec,omitempty"`
	Status            GuestbookStatus `json:"status,omitempty"`
}

// GuestbookSpec's Namespace, when set, is the namespace whose ConfigMaps
// the Guestbook depends on (TestOwnerFollowsItsNamespace).
type GuestbookSpec struct {
	Namespace string `json:"namespace,omitempty"`
}

type GuestbookStatus struct {
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
}

type GuestbookList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Guestbook `json:"items"`
}

var guestbookGV = schema.GroupVersion{Group: "webapp.example.com", Version: "v1"}

func (g *Guestbook) DeepCopyObject() runtime.Object {
	c := *g
	g.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.Status.Conditions = make([]metav1.Condition, len(g.Status.Conditions))
	for i := range g.Status.Conditions {
		g.Status.Conditions[i].DeepCopyInto(&c.Status.Conditions[i])
	}
	return &c
}

func (l *GuestbookList) DeepCopyObject() runtime.Object {
	c := *l
	c.Items = make([]Guestbook, len(l.Items))
	for i := range l.Items {
		c.Items[i] = *l.Items[i].DeepCopyObject().(*Guestbook)
	}
	return &c
}

// newScheme returns client-go's types and Guestbook.
func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	s.AddKnownTypes(guestbookGV, &Guestbook{}, &GuestbookList{})
	metav1.AddToGroupVersion(s, guestbookGV)
	return s
}
