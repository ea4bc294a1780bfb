package wgctrltest

import (
	"context"
	"net/url"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// operatorClient is the client the operator is given, as the manager's
// client is: the API server's objects, with the steps' faults. During an
// outage every write is refused, as the informers' calls are; reads are
// answered, as the manager's client answers them from its cache.
func (w *world) operatorClient() client.WithWatch {
	return interceptor.NewClient(w.server, interceptor.Funcs{
		Get: w.get,
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := w.refusedWrite("Post"); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := w.refusedWrite("Delete"); err != nil {
				return err
			}
			return c.Delete(ctx, obj, opts...)
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			if err := w.refusedWrite("Delete"); err != nil {
				return err
			}
			return c.DeleteAllOf(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := w.refusedWrite("Put"); err != nil {
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := w.refusedWrite("Patch"); err != nil {
				return err
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if err := w.refusedWrite("Patch"); err != nil {
				return err
			}
			return c.Apply(ctx, obj, opts...)
		},
		SubResourceGet: func(ctx context.Context, c client.Client, sub string, obj client.Object, subResource client.Object, opts ...client.SubResourceGetOption) error {
			if err := w.refusedWrite("Get"); err != nil {
				return err
			}
			return c.SubResource(sub).Get(ctx, obj, subResource, opts...)
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj client.Object, subResource client.Object, opts ...client.SubResourceCreateOption) error {
			if err := w.refusedWrite("Post"); err != nil {
				return err
			}
			return c.SubResource(sub).Create(ctx, obj, subResource, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if err := w.refusedWrite("Put"); err != nil {
				return err
			}
			return w.statusUpdate(ctx, c, sub, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := w.refusedWrite("Patch"); err != nil {
				return err
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
}

// apiReader is the operator's reader that bypasses the cache, as the
// manager's APIReader does: during an outage it is refused.
func (w *world) apiReader() client.Reader {
	return interceptor.NewClient(w.server, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := w.refused("Get"); err != nil {
				return err
			}
			return w.get(ctx, c, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := w.refused("Get"); err != nil {
				return err
			}
			return c.List(ctx, list, opts...)
		},
	})
}

// refusedWrite is refused's error, or, while RefuseWrites lasts, the
// 429 an API server that sheds writes answers.
func (w *world) refusedWrite(op string) error {
	if err := w.refused(op); err != nil {
		return err
	}
	if w.writesRefused.Load() {
		return apierrors.NewTooManyRequests("the API server is shedding writes (wgctrltest.RefuseWrites)", 1)
	}
	return nil
}

// refused is the error of a call to the API server during an outage, as
// client-go's REST client returns it (a *url.Error around a refused
// connection), or nil.
func (w *world) refused(op string) error {
	if !w.outage.Load() {
		return nil
	}
	return &url.Error{Op: op, URL: "https://kube-apiserver.wgctrltest:6443", Err: watchtest.ConnectionRefused()}
}
