package wgctrl

import (
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
)

// A cache restricted to namespaces (cache.Options.DefaultNamespaces, or a
// ByObject's Namespaces) makes one informer per namespace for a kind, and
// controller-runtime's NewInformer hook is not told which namespace each
// serves. The Grader asks the informer's ListerWatcher: as the hook is
// called, it lists once with a context that the cache's HTTP client
// (wrapped by ManagerOptions' NewCache) answers itself, without sending
// the request, noting the request's path, which names the namespace. The
// answer is an empty 200, so client-go's request metrics count one
// successful request per informer made, never an error.

// probe is the context value of a namespace probe: the path of the
// request its list made.
type probe struct{ path string }

type probeKey struct{}

// probeTransport answers the requests of namespace probes, and sends every
// other one on.
type probeTransport struct{ next http.RoundTripper }

func (t probeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	p, ok := req.Context().Value(probeKey{}).(*probe)
	if !ok {
		return t.next.RoundTrip(req)
	}
	if req.Body != nil {
		req.Body.Close()
	}
	p.path = req.URL.Path
	return &http.Response{
		Status:     "200 OK",
		StatusCode: http.StatusOK,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     http.Header{"Content-Type": {"application/json"}},
		Body:       io.NopCloser(strings.NewReader("{}")),
		Request:    req,
	}, nil
}

// probed returns a copy of hc, the cache's HTTP client, that answers the
// Grader's namespace probes.
func (g *Grader) probed(hc *http.Client) *http.Client {
	c := *hc
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	c.Transport = probeTransport{next: next}
	g.mu.Lock()
	g.probing = true
	g.mu.Unlock()
	return &c
}

// probeTimeout bounds a namespace probe that the probed client does not
// answer (a NewCache of the user's own that does not use the HTTP client
// it is given): it then goes to the API server.
const probeTimeout = time.Second

// namespaceOf returns the namespace lw's lists are restricted to, or ""
// for every namespace, for a cluster-scoped kind, and when it cannot tell
// (a ListerWatcher that does not go through the probed HTTP client).
func (g *Grader) namespaceOf(lw toolscache.ListerWatcher) string {
	g.mu.Lock()
	probing := g.probing
	g.mu.Unlock()
	if !probing {
		return ""
	}
	p := &probe{}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), probeKey{}, p), probeTimeout)
	defer cancel()
	// What the list returns does not matter (the empty answer does not
	// decode as a list): only the path it asked for.
	_, _ = toolscache.ToListerWatcherWithContext(lw).ListWithContext(ctx, metav1.ListOptions{Limit: 1})
	return namespaceInPath(p.path)
}

// namespaceInPath returns the namespace of a collection's path,
// /api/v1/namespaces/NS/RESOURCE or /apis/GROUP/VERSION/namespaces/NS/RESOURCE,
// or "".
func namespaceInPath(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i := 0; i+2 < len(parts); i++ {
		if parts[i] == "namespaces" && (i == 2 && parts[0] == "api" || i == 3 && parts[0] == "apis") {
			return parts[i+1]
		}
	}
	return ""
}

// FollowNamespaces sets how to tell the namespaces in which an owner
// depends on the watched kinds, where the manager's cache restricts their
// informers to namespaces (cache.Options.DefaultNamespaces with several,
// or a ByObject's Namespaces): f returns them for an owner object, from
// its spec, say. A cluster-scoped TenantQuota whose spec names team-a
// follows team-a, and RBAC denied in team-b leaves it Ready. f is called
// with the owner as Reconcile read it ([Owner.Status]) and, while the
// controller's workers wait, as the standby writer sees it, so a restart
// pages only the owners that follow a denied namespace; it must not block,
// nor change the object. When f returns none, and without f, a namespaced
// owner follows its own namespace and a cluster-scoped one every namespace
// of the cache. A namespace the cache does not watch a kind in gives the
// owners that follow it a Stalled gate, [ReasonNamespaceNotWatched]; one
// the cache serves from an informer of every namespace (its
// DefaultNamespaces include cache.AllNamespaces) is followed through the
// kind's worst state across its informers. In a cache
// that is not restricted there is one informer per kind, and f changes
// nothing. Call it before the manager starts.
func (o *Owner) FollowNamespaces(f func(owner client.Object) []string) {
	o.mu.Lock()
	o.followFunc = f
	o.mu.Unlock()
}

// dependencies returns what owner depends on: the watched kinds in the
// namespaces FollowNamespaces' function says (its own namespace when it
// says none, every namespace for a cluster-scoped owner), and the streams
// Track gave it.
func (o *Owner) dependencies(owner metav1.Object) wgstatus.Dependencies {
	key := types.NamespacedName{Namespace: owner.GetNamespace(), Name: owner.GetName()}
	o.mu.Lock()
	f := o.followFunc
	o.mu.Unlock()
	var nss []string
	if co, ok := owner.(client.Object); ok && f != nil {
		nss = f(co)
	}
	if len(nss) == 0 && key.Namespace != "" {
		nss = []string{key.Namespace}
	}
	return wgstatus.Dependencies{Kinds: o.Streams(), Namespaces: nss}
}
