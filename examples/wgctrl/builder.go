package wgctrl

import (
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Builder is controller-runtime's controller builder for the owner kind's
// controller, made by [Owner.ControllerManagedBy]: the kinds it is told to
// watch (Owns, Watches, WatchesMetadata) are the kinds the owners depend
// on, so they are said once, and Build adds the Owner's [Owner.Requeue]
// source, so it cannot be left out. Its methods are builder.Builder's, with
// the same arguments; each returns the Builder.
type Builder struct {
	o     *Owner
	b     *builder.Builder
	owner client.Object
	kinds []watched
}

// watched is a kind the controller is told to watch, and whether its
// informer is metadata-only (builder.OnlyMetadata).
type watched struct {
	obj          client.Object
	metadataOnly bool
}

// ControllerManagedBy returns a builder of the owner kind's controller, in
// place of ctrl.NewControllerManagedBy(mgr):
//
//	return r.Readiness.ControllerManagedBy(mgr).
//		For(&webappv1.Guestbook{}).
//		Owns(&corev1.ConfigMap{}).
//		Complete(r)
//
// A nil Owner's is ctrl.NewControllerManagedBy(mgr) itself, so that a
// reconciler built without one still sets up.
func (o *Owner) ControllerManagedBy(mgr manager.Manager) *Builder {
	return &Builder{o: o, b: builder.ControllerManagedBy(mgr)}
}

// For is builder.Builder's For: object must be of the Owner's kind.
func (b *Builder) For(object client.Object, opts ...builder.ForOption) *Builder {
	b.owner = object
	b.b.For(object, opts...)
	return b
}

// Owns is builder.Builder's Owns; the owners depend on object's kind.
func (b *Builder) Owns(object client.Object, opts ...builder.OwnsOption) *Builder {
	b.kinds = append(b.kinds, watched{object, slices.ContainsFunc(opts, func(o builder.OwnsOption) bool { return o == builder.OnlyMetadata })})
	b.b.Owns(object, opts...)
	return b
}

// Watches is builder.Builder's Watches; the owners depend on object's
// kind.
func (b *Builder) Watches(object client.Object, eventHandler handler.EventHandler, opts ...builder.WatchesOption) *Builder {
	b.kinds = append(b.kinds, watched{object, slices.ContainsFunc(opts, func(o builder.WatchesOption) bool { return o == builder.OnlyMetadata })})
	b.b.Watches(object, eventHandler, opts...)
	return b
}

// WatchesMetadata is builder.Builder's WatchesMetadata; the owners depend
// on object's kind, through the metadata-only informer it makes.
func (b *Builder) WatchesMetadata(object client.Object, eventHandler handler.EventHandler, opts ...builder.WatchesOption) *Builder {
	b.kinds = append(b.kinds, watched{object, true})
	b.b.WatchesMetadata(object, eventHandler, opts...)
	return b
}

// WatchesRawSource is builder.Builder's WatchesRawSource. The Builder
// cannot tell what a raw source watches: if the owners depend on it, pass
// its kind to [Grader.Owner], or [Owner.Track] it per owner.
func (b *Builder) WatchesRawSource(src source.Source) *Builder {
	b.b.WatchesRawSource(src)
	return b
}

// WithEventFilter is builder.Builder's WithEventFilter.
func (b *Builder) WithEventFilter(p predicate.Predicate) *Builder {
	b.b.WithEventFilter(p)
	return b
}

// WithOptions is builder.Builder's WithOptions.
func (b *Builder) WithOptions(options controller.Options) *Builder {
	b.b.WithOptions(options)
	return b
}

// WithLogConstructor is builder.Builder's WithLogConstructor.
func (b *Builder) WithLogConstructor(logConstructor func(*reconcile.Request) logr.Logger) *Builder {
	b.b.WithLogConstructor(logConstructor)
	return b
}

// Named is builder.Builder's Named.
func (b *Builder) Named(name string) *Builder {
	b.b.Named(name)
	return b
}

// Complete builds the controller, as Build does, and adds it to the
// manager.
func (b *Builder) Complete(r reconcile.Reconciler) error {
	_, err := b.Build(r)
	return err
}

// Build builds the controller and adds it to the manager, with the
// Owner's Requeue source, once the watched kinds are the owners'. It
// fails where builder.Builder's Build does, when For names a kind other
// than the Owner's, and after the manager has started.
func (b *Builder) Build(r reconcile.Reconciler) (controller.Controller, error) {
	if b.o != nil {
		if b.owner != nil {
			gvk, err := apiutil.GVKForObject(b.owner, b.o.g.schemeOf())
			if err != nil {
				return nil, fmt.Errorf("wgctrl: %w", err)
			}
			if gvk.GroupKind() != b.o.gvk.GroupKind() {
				return nil, fmt.Errorf("wgctrl: the controller is For %s, but its Owner writes the status of %s: make the Owner with Grader.Owner(mgr, the For object)", gvk.GroupKind(), b.o.gvk.GroupKind())
			}
		}
		kinds := make([]client.Object, len(b.kinds))
		for i, k := range b.kinds {
			kinds[i] = k.obj
			if _, ok := k.obj.(*metav1.PartialObjectMetadata); k.metadataOnly && !ok {
				gvk, err := apiutil.GVKForObject(k.obj, b.o.g.schemeOf())
				if err != nil {
					return nil, fmt.Errorf("wgctrl: %w", err)
				}
				m := &metav1.PartialObjectMetadata{}
				m.SetGroupVersionKind(gvk)
				kinds[i] = m
			}
		}
		if err := b.o.watch(kinds...); err != nil {
			return nil, err
		}
		b.b.WatchesRawSource(b.o.Requeue())
	}
	return b.b.Build(r)
}
