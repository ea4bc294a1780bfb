// Package harness runs a real kube-apiserver and etcd inside a Go test
// binary, on 127.0.0.1, with the fault tools the end-to-end tests need: a TCP
// proxy in front of the apiserver that can reset, refuse and switch
// connections, etcd compaction, a second apiserver on the same etcd, users
// without RBAC bindings, CRDs installed late, and an admin kubeconfig file
// for programs that take one.
//
// The servers change process-wide state (feature gates, logging): start them
// one after another, never from parallel tests.
package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/rest"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

// Options configures [Start].
type Options struct {
	// Flags are extra kube-apiserver flags, such as
	// "--min-request-timeout=1" or "--watch-cache=false". Defaults to none:
	// the kube-apiserver's own defaults, as on a real cluster (a watch
	// lasts 30 to 60 minutes unless its client sends timeoutSeconds). The
	// harness itself adds only flags that change no watch's behaviour: a
	// token file for the admin, --shutdown-send-retry-after (a quick
	// shutdown) and, with RBAC, --authorization-mode.
	Flags []string
	// RBAC turns on --authorization-mode=RBAC, so that impersonated users
	// without bindings get 403. Defaults to off (everything allowed).
	RBAC bool
	// QuietEtcd keeps etcd's own log (errors only, by default) off stderr:
	// a program such as the demo has no use for the errors etcd logs while
	// it shuts down.
	QuietEtcd bool
	// EtcdEndpoint is the client URL of an etcd to use (one started by
	// [StartRemoteEtcd], say, so that etcd runs in a process of its own).
	// Defaults to "": the Cluster starts an embedded etcd of its own.
	EtcdEndpoint string
}

// Cluster is one etcd, one (replaceable) kube-apiserver, and a proxy in
// front of the apiserver whose address never changes.
type Cluster struct {
	t         TB
	opts      Options
	etcd      *clientv3.Client
	prefix    string
	tokenFile string
	api       *kubeapiservertesting.TestServer
	Proxy     *Proxy
	// spare is the apiserver StartSpare started, until SwitchToSpare;
	// retired the one SwitchToSpare replaced, until RetireOld.
	spare, retired *kubeapiservertesting.TestServer
}

// adminToken authenticates as a member of system:masters on every apiserver
// of a Cluster (through --token-auth-file), so that clients keep working
// across an apiserver restart: each test apiserver has its own loopback
// token and serving certificate.
const adminToken = "watchgrade-e2e-admin"

var prefixes atomic.Int64

// Start starts etcd, a kube-apiserver and the proxy; all stop when t's
// cleanups run (at the end of a test, or at Program.Close).
func Start(t TB, opts Options) *Cluster {
	t.Helper()
	c := &Cluster{
		t:         t,
		opts:      opts,
		etcd:      etcdFor(t, opts),
		prefix:    fmt.Sprintf("/watchgrade-e2e-%d", prefixes.Add(1)),
		tokenFile: filepath.Join(t.TempDir(), "tokens.csv"),
	}
	if err := os.WriteFile(c.tokenFile, []byte(adminToken+`,e2e-admin,e2e-admin,"system:masters"`+"\n"+controllerTokenLine), 0o600); err != nil {
		t.Fatal(err)
	}
	c.api = c.startAPIServer()
	proxy, err := NewProxy(hostOf(c.api.ClientConfig))
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Cleanup(proxy.Close)
	c.Proxy = proxy
	return c
}

func (c *Cluster) startAPIServer() *kubeapiservertesting.TestServer {
	c.t.Helper()
	storage := storagebackend.NewDefaultConfig(c.prefix, nil)
	storage.Transport.ServerList = c.etcd.Endpoints()
	flags := append([]string{"--shutdown-send-retry-after=true", "--token-auth-file=" + c.tokenFile}, c.opts.Flags...)
	if c.opts.RBAC {
		flags = append(flags, "--authorization-mode=RBAC")
	}
	instance := kubeapiservertesting.NewDefaultTestServerOptions()
	instance.DisableInvariantChecks = true
	server, err := kubeapiservertesting.StartTestServer(c.t, instance, flags, storage)
	if err != nil {
		c.t.Fatalf("kube-apiserver: %v", err)
	}
	var once atomic.Bool
	stop := server.TearDownFn
	server.TearDownFn = func() {
		if once.CompareAndSwap(false, true) {
			stop()
		}
	}
	c.t.Cleanup(server.TearDownFn)
	return &server
}

// Config returns an admin client config that reaches the apiserver through
// the proxy and keeps working across apiserver restarts (a static token; the
// serving certificate, new with every apiserver, is not verified). Each call
// returns a new copy.
func (c *Cluster) Config() *rest.Config {
	return &rest.Config{
		Host:            "https://" + c.Proxy.Addr(),
		BearerToken:     adminToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             1000,
		Burst:           2000,
	}
}

// DirectConfig returns an admin client config that bypasses the proxy.
func (c *Cluster) DirectConfig() *rest.Config {
	cfg := rest.CopyConfig(c.api.ClientConfig)
	cfg.QPS, cfg.Burst = 1000, 2000
	return cfg
}

// As returns a config, through the proxy, that impersonates user with no
// groups beyond system:authenticated: with RBAC on and no bindings it is
// denied everything.
func (c *Cluster) As(user string) *rest.Config {
	cfg := c.Config()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	return cfg
}

// RestartAPIServer starts a second apiserver on the same etcd, points the
// proxy at it (cutting every connection to the first), and shuts the first
// down. The new apiserver's watch cache starts empty.
func (c *Cluster) RestartAPIServer() {
	c.t.Helper()
	old := c.api
	c.api = c.startAPIServer()
	c.Proxy.SetBackend(hostOf(c.api.ClientConfig))
	c.Proxy.ResetAll()
	old.TearDownFn()
}

// StopAPIServer shuts the apiserver down: the proxy refuses connections
// until StartAPIServer.
func (c *Cluster) StopAPIServer() {
	c.t.Helper()
	if err := c.Proxy.SetRefusing(true); err != nil {
		c.t.Fatalf("proxy: %v", err)
	}
	c.Proxy.ResetAll()
	c.api.TearDownFn()
}

// StartAPIServer starts a new apiserver on the same etcd after
// StopAPIServer and lets the proxy accept connections to it.
func (c *Cluster) StartAPIServer() {
	c.t.Helper()
	c.api = c.startAPIServer()
	c.Proxy.SetBackend(hostOf(c.api.ClientConfig))
	if err := c.Proxy.SetRefusing(false); err != nil {
		c.t.Fatalf("proxy: %v", err)
	}
}

// Compact compacts etcd at its current revision and returns the revision.
// A watch from an older resourceVersion then gets 410 Expired (at once with
// --watch-cache=false; with the cache, once the cache no longer serves it).
func (c *Cluster) Compact(ctx context.Context) (int64, error) {
	resp, err := c.etcd.Get(ctx, "compact-probe")
	if err != nil {
		return 0, err
	}
	rev := resp.Header.Revision
	if _, err := c.etcd.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return 0, err
	}
	return rev, nil
}

// InstallCRD creates crd and waits until it is Established.
func (c *Cluster) InstallCRD(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	client, err := apiextensionsclient.NewForConfig(c.DirectConfig())
	if err != nil {
		return err
	}
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

func hostOf(cfg *rest.Config) string {
	h := strings.TrimPrefix(cfg.Host, "https://")
	return strings.TrimSuffix(h, "/")
}

// compactRevKey is the etcd key through which apiservers agree on
// compactions (k8s.io/apiserver storage/etcd3/compact.go).
const compactRevKey = "compact_rev_key"

// CompactAsAPIServer compacts etcd at its current revision as the
// apiservers' own compactor does (every 5 minutes by default): it records
// the revision under compact_rev_key first, which every apiserver watches,
// so that their watch caches learn of the compaction (the cacher polls for
// it every 15 s) and stop serving exact lists and continue tokens below it
// from their snapshots. [Cluster.Compact] bypasses that key: the caches
// then never learn of it.
func (c *Cluster) CompactAsAPIServer(ctx context.Context) (int64, error) {
	resp, err := c.etcd.Get(ctx, compactRevKey)
	if err != nil {
		return 0, err
	}
	rev := resp.Header.Revision
	var version int64
	if len(resp.Kvs) > 0 {
		version = resp.Kvs[0].Version
	}
	txn, err := c.etcd.Txn(ctx).If(clientv3.Compare(clientv3.Version(compactRevKey), "=", version)).
		Then(clientv3.OpPut(compactRevKey, strconv.FormatInt(rev, 10))).Commit()
	if err != nil {
		return 0, err
	}
	if !txn.Succeeded {
		return 0, fmt.Errorf("compact_rev_key changed under us")
	}
	if _, err := c.etcd.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return 0, err
	}
	return rev, nil
}
