package wgctrl_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/watchgrade/watchgrade/examples/wgctrl"

	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// Two ConfigMap informers whose namespace the Grader cannot tell (they do
// not go through the cache's HTTP client) share one stream name. One's
// watch is denied: the Guestbook is Stalled, and stays Stalled, with its
// one Warning, while the other informer goes through an outage longer than
// the transient grace and recovers (its Streaming, passed on alone, would
// have made the Guestbook Ready while the other is still denied).
func TestInformersOfUnknownNamespacesShareOneVerdict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, &corev1.ConfigMap{})
		denied := watchtest.NewServer(watchtest.ServerOptions{})
		denied.SetFaults(watchtest.Faults{Err: watchtest.Forbidden()})
		other := watchtest.NewServer(watchtest.ServerOptions{})
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for _, srv := range []*watchtest.Server{denied, other} {
			inf := f.grade.NewInformer(srv, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
			wg.Go(func() { inf.RunWithContext(ctx) })
		}
		defer func() { cancel(); wg.Wait() }()
		if got := f.grade.Streams(); len(got) != 1 || got[0] != "ConfigMap.v1" {
			t.Fatalf("Streams() = %v, want one ConfigMap.v1", got)
		}

		time.Sleep(wgwatch.DefaultHumanGrace + time.Minute)
		synctest.Wait()
		f.reconcile(t)
		if s, r := condition(f.guestbook(t), wgreadiness.ConditionStalled); s != metav1.ConditionTrue {
			t.Fatalf("one namespace denied: Stalled = %s (%s), want True", s, r)
		}

		// The other namespace's informer: an outage it publishes, then
		// back.
		other.SetFaults(watchtest.Faults{Refuse: true})
		other.CloseWatches()
		time.Sleep(wgwatch.DefaultTransientGrace + 30*time.Second)
		other.SetFaults(watchtest.Faults{})
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		f.reconcile(t)
		if s, r := condition(f.guestbook(t), wgreadiness.ConditionStalled); s != metav1.ConditionTrue {
			t.Errorf("the other namespace recovered: Stalled = %s (%s), want True while one is denied", s, r)
		}
		if evs := f.events(); warnings(evs) != 1 {
			t.Errorf("Warnings = %d, want 1: %v", warnings(evs), evs)
		}

		denied.SetFaults(watchtest.Faults{})
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		f.reconcile(t)
		if s, r := condition(f.guestbook(t), wgreadiness.ConditionReady); s != metav1.ConditionTrue {
			t.Errorf("both namespaces served: Ready = %s (%s), want True", s, r)
		}
	})
}

// A cache restricted to two namespaces, shop (the Guestbook's) and team-b,
// whose ConfigMaps RBAC denies: the Guestbook follows its own namespace,
// is Ready with one Normal and no Warning, and stays so; once its spec
// says team-b (FollowNamespaces) it is Stalled with one Warning; back to
// none, it follows its own namespace again: Ready.
// The informers are made after the Guestbook is first tracked, as the
// standby writer tracks the owners it finds before the controller's
// sources make theirs.
func TestOwnerFollowsItsNamespace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, &corev1.ConfigMap{})
		f.owner.FollowNamespaces(func(obj client.Object) []string {
			if ns := obj.(*Guestbook).Spec.Namespace; ns != "" {
				return []string{ns}
			}
			return nil
		})
		f.reconcile(t)
		denied := watchtest.NewServer(watchtest.ServerOptions{})
		denied.SetFaults(watchtest.Faults{Err: watchtest.Forbidden()})
		served := watchtest.NewServer(watchtest.ServerOptions{})
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for ns, srv := range map[string]*watchtest.Server{"team-b": denied, gbKey.Namespace: served} {
			inf := f.grade.NewInformerInNamespace(ns, srv, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
			wg.Go(func() { inf.RunWithContext(ctx) })
		}
		defer func() { cancel(); wg.Wait() }()

		time.Sleep(wgwatch.DefaultHumanGrace + time.Minute)
		synctest.Wait()
		f.reconcile(t)
		if s, r := condition(f.guestbook(t), wgreadiness.ConditionReady); s != metav1.ConditionTrue {
			t.Errorf("its namespace served, another denied: Ready = %s (%s), want True", s, r)
		}
		if evs := f.events(); len(evs) != 1 || warnings(evs) != 0 {
			t.Errorf("Events = %v, want one Normal", evs)
		}

		f.setSpecNamespace(t, "team-b")
		synctest.Wait()
		f.reconcile(t)
		if s, r := condition(f.guestbook(t), wgreadiness.ConditionStalled); s != metav1.ConditionTrue {
			t.Errorf("following team-b: Stalled = %s (%s), want True", s, r)
		}
		if evs := f.events(); warnings(evs) != 1 {
			t.Errorf("following team-b: Events = %v, want one Warning", evs)
		}

		f.setSpecNamespace(t, "")
		synctest.Wait()
		f.reconcile(t)
		if s, r := condition(f.guestbook(t), wgreadiness.ConditionReady); s != metav1.ConditionTrue {
			t.Errorf("back to its own namespace: Ready = %s (%s), want True", s, r)
		}
		if got := f.grade.Streams(); len(got) != 1 || got[0] != "ConfigMap.v1" {
			t.Errorf("Streams() = %v, want one ConfigMap.v1: the metrics and the probe know the kind", got)
		}
	})
}

// setSpecNamespace sets the Guestbook's spec.namespace, a new generation.
func (f *fixture) setSpecNamespace(t *testing.T, ns string) {
	t.Helper()
	gb := f.guestbook(t)
	gb.Spec.Namespace = ns
	gb.Generation++
	if err := f.client.Update(t.Context(), gb); err != nil {
		t.Fatal(err)
	}
}

func TestNamespaceInPath(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/api/v1/namespaces/team-a/configmaps", "team-a"},
		{"/apis/apps/v1/namespaces/team-b/deployments", "team-b"},
		{"/apis/webapp.example.com/v1/namespaces/shop/guestbooks", "shop"},
		{"/api/v1/configmaps", ""},
		{"/api/v1/namespaces", ""},
		{"/api/v1/namespaces/team-a", ""},
		{"/apis/apps/v1/deployments", ""},
		{"/prefix/api/v1/namespaces/x/configmaps", ""},
		{"", ""},
	} {
		if got := wgctrl.NamespaceInPath(tc.path); got != tc.want {
			t.Errorf("namespaceInPath(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

// controller-runtime's cache, restricted to two namespaces, made through
// ManagerOptions' NewCache: the Grader tells the namespace of each
// ConfigMap informer (typed, metadata-only and unstructured: the three
// clients controller-runtime lists with), and the cluster-scoped
// Namespaces' informer has none, with no request sent to the API server.
func TestGraderTellsTheNamespaceOfEachInformer(t *testing.T) {
	grade, err := wgctrl.New(wgctrl.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("ConfigMap"), meta.RESTScopeNamespace)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Namespace"), meta.RESTScopeRoot)
	var sent []string
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = append(sent, r.URL.Path)
		return nil, errors.New("no API server here")
	})}
	o := grade.ManagerOptions(manager.Options{Scheme: clientgoscheme.Scheme, Cache: cache.Options{
		DefaultNamespaces: map[string]cache.Config{"team-a": {}, "team-b": {}},
	}})
	c, err := o.NewCache(&rest.Config{Host: "http://127.0.0.1:1"}, cache.Options{
		HTTPClient: hc, Scheme: clientgoscheme.Scheme, Mapper: mapper,
		DefaultNamespaces: o.Cache.DefaultNamespaces, NewInformer: o.Cache.NewInformer,
	})
	if err != nil {
		t.Fatal(err)
	}
	metadataOnly := &metav1.PartialObjectMetadata{}
	metadataOnly.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	unstructuredCM := &unstructured.Unstructured{}
	unstructuredCM.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	for _, obj := range []client.Object{&corev1.ConfigMap{}, metadataOnly, unstructuredCM, &corev1.Namespace{}} {
		if _, err := c.GetInformer(t.Context(), obj, cache.BlockUntilSynced(false)); err != nil {
			t.Fatalf("GetInformer(%T): %v", obj, err)
		}
	}
	got := grade.Namespaces("ConfigMap.v1")
	if want := []string{"team-a", "team-a", "team-a", "team-b", "team-b", "team-b"}; !slices.Equal(got, want) {
		t.Errorf("namespaces of the ConfigMap informers = %v, want %v", got, want)
	}
	if got := grade.Namespaces("Namespace.v1"); !slices.Equal(got, []string{""}) {
		t.Errorf("namespaces of the Namespace informer = %q, want one of every namespace", got)
	}
	if len(sent) != 0 {
		t.Errorf("requests sent = %v, want none", sent)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The standby writer, which runs while the controller's workers wait (a
// namespace's ConfigMaps denied at startup never sync), asks the same
// FollowNamespaces function as Status: a restart pages an owner only if it
// follows the denied namespace. A Guestbook in a namespace the cache does
// not watch ConfigMaps in (asked for the kind's informers, it makes none
// there) is Stalled for it, NamespaceNotWatched: its data there is watched
// by nobody, and it is not team-b's denial.
func TestStandbyWriterFollowsTheOwnersNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name        string
		follows     string // the Guestbook's spec.namespace
		wantStalled string // its reason; "" for not Stalled
	}{
		{name: "follows the served namespace", follows: "team-a"},
		{name: "follows the denied namespace", follows: "team-b", wantStalled: "Forbidden"},
		{name: "its own namespace is not watched", wantStalled: wgctrl.ReasonNamespaceNotWatched},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, &corev1.ConfigMap{})
				f.setSpecNamespace(t, tc.follows)
				fi := &fakeInformers{gb: f.guestbook(t), served: true}
				cfg := wgctrl.OwnerConfig{Client: f.client, Recorder: f.recorder, Informers: fi, RESTMapper: servedMapper{fi}}
				owner, err := f.grade.NewOwner(cfg, &Guestbook{}, &corev1.ConfigMap{})
				if err != nil {
					t.Fatal(err)
				}
				owner.FollowNamespaces(func(obj client.Object) []string {
					if ns := obj.(*Guestbook).Spec.Namespace; ns != "" {
						return []string{ns}
					}
					return nil
				})
				denied := watchtest.NewServer(watchtest.ServerOptions{})
				denied.SetFaults(watchtest.Faults{Err: watchtest.Forbidden()})
				served := watchtest.NewServer(watchtest.ServerOptions{})
				ctx, cancel := context.WithCancel(t.Context())
				var wg sync.WaitGroup
				wg.Go(func() {
					if err := owner.Start(ctx); err != nil {
						t.Errorf("Start: %v", err)
					}
				})
				for ns, srv := range map[string]*watchtest.Server{"team-a": served, "team-b": denied} {
					inf := f.grade.NewInformerInNamespace(ns, srv, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
					wg.Go(func() { inf.RunWithContext(ctx) })
				}
				defer func() { cancel(); wg.Wait() }()

				time.Sleep(wgwatch.DefaultHumanGrace + time.Minute)
				synctest.Wait()
				s, r := condition(f.guestbook(t), wgreadiness.ConditionStalled)
				if got := map[bool]string{true: r}[s == metav1.ConditionTrue]; got != tc.wantStalled {
					t.Errorf("Stalled = %q (%s), want stalled for %q", s, r, tc.wantStalled)
				}
				want := 0
				if tc.wantStalled != "" {
					want = 1
				}
				if evs := f.events(); len(evs) != want || warnings(evs) != want {
					t.Errorf("Events = %q, want %d Warning(s) and nothing else", evs, want)
				}
			})
		})
	}
}
