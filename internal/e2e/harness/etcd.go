package harness

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startEtcd starts an embedded etcd on two free loopback ports and returns
// a client; both stop when tb's cleanups run. Unlike the apiserver's own
// test helper it needs no *testing.T, so a main program can use it. A port
// taken between the pick and the bind (another process starting an etcd
// at the same moment: make test runs several test processes side by side)
// is retried with new ports, up to etcdAttempts in all.
func startEtcd(tb TB, quiet bool) *clientv3.Client {
	tb.Helper()
	var e *embed.Etcd
	var err error
	for range etcdAttempts {
		if e, err = tryStartEtcd(tb, quiet); err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatalf("etcd: %v", err)
	}
	tb.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		tb.Fatalf("etcd took longer than 60 s to start")
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{e.Clients[0].Addr().String()},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		tb.Fatalf("etcd client: %v", err)
	}
	tb.Cleanup(func() { _ = client.Close() })
	return client
}

const etcdAttempts = 5

func tryStartEtcd(tb TB, quiet bool) (*embed.Etcd, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	cfg := embed.NewConfig()
	cfg.UnsafeNoFsync = true
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	if quiet {
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	}
	cfg.Dir = tb.TempDir()
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	return embed.StartEtcd(cfg)
}

// freePorts returns n ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
