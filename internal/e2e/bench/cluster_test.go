package bench

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
)

// One cluster runs at a time, in a child process, for one group of
// benchmarks: the group's benchmark starts it and writes the group's data
// (once, should the benchmark run again with -count); the next group's
// stops it. TestMain stops the last one.
var current struct {
	group    string
	remote   *harness.Remote
	etcd     *harness.Remote // the server-* groups' etcd, in a child of its own
	cleanups []func()
	data     any // what the group's setup wrote
}

// cluster returns the group's cluster, starting it with opts (and stopping
// any other group's) on first use; setup runs once, right after the start,
// and its result is returned on every call.
func cluster[T any](b *testing.B, group string, opts harness.Options, setup func(*harness.Remote) T) (*harness.Remote, T) {
	b.Helper()
	if current.group != group {
		stopCluster()
		current.group = group
		current.remote = harness.StartRemote(&keepAlive{B: b}, opts, logSink())
		current.data = setup(current.remote)
	}
	return current.remote, current.data.(T)
}

func stopCluster() {
	for i := len(current.cleanups) - 1; i >= 0; i-- {
		current.cleanups[i]()
	}
	current.group, current.remote, current.etcd, current.cleanups, current.data = "", nil, nil, nil, nil
}

// keepAlive is the group's first *testing.B, but with cleanups kept for
// stopCluster rather than run when that benchmark ends (a failed start
// included: the child is stopped either way).
type keepAlive struct{ *testing.B }

func (*keepAlive) Cleanup(f func()) { current.cleanups = append(current.cleanups, f) }

// client is a clientset with a connection pool of its own whose dials,
// connections open, and bytes read are counted; Close closes its idle
// connections.
type client struct {
	kubernetes.Interface
	http  *http.Client
	dials *atomic.Int64
	open  *atomic.Int64
	read  *atomic.Int64
}

// countedConn is a connection that counts the bytes read from it, and
// counts itself out of open when it closes.
type countedConn struct {
	net.Conn
	open *atomic.Int64
	read *atomic.Int64
	once sync.Once
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

// Content types of the typed clientsets.
const (
	contentJSON     = "application/json"
	contentProtobuf = "application/vnd.kubernetes.protobuf"
)

func newClient(b *testing.B, cfg *rest.Config, contentType string) *client {
	b.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 10000, 20000
	// Set either way: client-go 0.37's typed clients ask for protobuf when
	// the config names no content type.
	cfg.ContentType, cfg.AcceptContentTypes = contentType, contentType
	if contentType == contentProtobuf {
		cfg.AcceptContentTypes = contentProtobuf + "," + contentJSON
	}
	var dials, open, read atomic.Int64
	var d net.Dialer
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		open.Add(1)
		return &countedConn{Conn: conn, open: &open, read: &read}, nil
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		b.Fatalf("HTTP client: %v", err)
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		b.Fatalf("clientset: %v", err)
	}
	return &client{Interface: cs, http: hc, dials: &dials, open: &open, read: &read}
}

func (c *client) Close() { c.http.CloseIdleConnections() }
