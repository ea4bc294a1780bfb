package scenarios

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	wgwatch "github.com/watchgrade/watchgrade/watch"
)

const ns = "default"

var (
	configmapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	secretsGVR    = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	widgetsGVR    = schema.GroupVersionResource{Group: "e2e.watchgrade.dev", Version: "v1", Resource: "widgets"}
)

// widgetCRD defines Widget, a namespaced custom resource with a status
// subresource and any fields.
func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.e2e.watchgrade.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "e2e.watchgrade.dev",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve,
				}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
			}},
		},
	}
}

func kindOf(gvr schema.GroupVersionResource) string {
	switch gvr.Resource {
	case "configmaps":
		return "ConfigMap"
	case "secrets":
		return "Secret"
	default:
		return "Widget"
	}
}

func object(gvr schema.GroupVersionResource, name string, n int) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(),
		"kind":       kindOf(gvr),
		"metadata":   map[string]any{"name": name, "namespace": ns},
	}}
	switch gvr.Resource {
	case "widgets":
		u.Object["spec"] = map[string]any{"n": int64(n)}
	case "secrets":
		u.Object["stringData"] = map[string]any{"n": fmt.Sprint(n)}
	default:
		u.Object["data"] = map[string]any{"n": fmt.Sprint(n)}
	}
	return u
}

// writer creates, updates and deletes objects of one resource and logs each
// write with the resourceVersion the server returned.
type writer struct {
	client dynamic.Interface
	gvr    schema.GroupVersionResource
	prefix string

	mu  sync.Mutex
	log []write
	n   int
}

// lastRVOf returns the resourceVersion of the writer's last write of name.
func (w *writer) lastRVOf(name string) string {
	for i := len(w.log) - 1; i >= 0; i-- {
		if w.log[i].Name == name && w.log[i].RV != "" {
			return w.log[i].RV
		}
	}
	return ""
}

// step makes one round of writes: create a new object, update the one
// before it, delete the one three before.
func (w *writer) step(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.client.Resource(w.gvr).Namespace(ns)
	name := func(i int) string { return fmt.Sprintf("%s-%d", w.prefix, i) }
	i := w.n
	w.n++
	created, err := r.Create(ctx, object(w.gvr, name(i), 0), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create %s: %w", name(i), err)
	}
	w.log = append(w.log, write{apiwatch.Added, name(i), created.GetResourceVersion()})
	if i >= 1 {
		// Custom resources allow no unconditional update: send the
		// resourceVersion the last write returned.
		obj := object(w.gvr, name(i-1), i)
		obj.SetResourceVersion(w.lastRVOf(name(i - 1)))
		updated, err := r.Update(ctx, obj, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("update %s: %w", name(i-1), err)
		}
		w.log = append(w.log, write{apiwatch.Modified, name(i - 1), updated.GetResourceVersion()})
	}
	if i >= 3 {
		if err := r.Delete(ctx, name(i-3), metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("delete %s: %w", name(i-3), err)
		}
		w.log = append(w.log, write{apiwatch.Deleted, name(i - 3), ""})
	}
	return nil
}

func (w *writer) writes() []write {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]write(nil), w.log...)
}

// lastRV returns the resourceVersion of the writer's last create or update.
func (w *writer) lastRV() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.log) - 1; i >= 0; i-- {
		if w.log[i].RV != "" {
			return w.log[i].RV
		}
	}
	return ""
}

// live returns the names the writer has created and not deleted.
func (w *writer) live() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]bool{}
	for _, l := range w.log {
		switch l.Type {
		case apiwatch.Added:
			out[l.Name] = true
		case apiwatch.Deleted:
			delete(out, l.Name)
		}
	}
	return out
}

// runWriters runs writers round-robin every interval until d has passed.
func runWriters(t *testing.T, ctx context.Context, d, interval time.Duration, ws ...*writer) {
	t.Helper()
	end := time.Now().Add(d)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for time.Now().Before(end) {
		for _, w := range ws {
			if err := w.step(ctx); err != nil {
				t.Fatalf("writer %s: %v", w.gvr.Resource, err)
			}
		}
		<-tick.C
	}
}

// startStream runs a stream of gvr in the default namespace until the test
// ends or the returned stop is called; stop waits for Run to return.
func startStream(t *testing.T, client dynamic.Interface, gvr schema.GroupVersionResource, p *probe, opts wgwatch.StreamOptions) (*wgwatch.Stream, func()) {
	t.Helper()
	opts.Resource = gvr.GroupResource()
	// The probe hears last, so when a test sees a state there, every other
	// observer (an accumulator, metrics) has it already.
	opts.Observer = wgwatch.Observers(opts.Observer, p)
	s, err := wgwatch.NewStream(listWatchFor(client, gvr, ns), p, opts)
	if err != nil {
		t.Fatalf("NewStream: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return s, stop
}
