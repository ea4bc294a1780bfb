package harness

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/client-go/rest"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

// What a benchmark of the control plane's own cost needs: etcd in a
// process of its own (so that the apiserver's CPU time and etcd's are
// told apart), a client identity that the apiserver's priority and
// fairness treats as a controller's, and an apiserver restart in three
// steps, so that the new apiserver's own start and the old one's shutdown
// fall outside what is measured.

// controllerToken authenticates as a service account (the group
// system:serviceaccounts), as a controller in a pod does: API priority
// and fairness classifies its requests by the "service-accounts" flow
// schema, into the "workload-low" priority level, where the admin's
// (system:masters) are exempt from every limit. Without RBAC everything
// is allowed to it; with RBAC it has no bindings.
const controllerToken = "watchgrade-e2e-controller"

const controllerTokenLine = controllerToken + `,system:serviceaccount:default:watchgrade,watchgrade-e2e-controller-uid,"system:serviceaccounts,system:serviceaccounts:default,system:authenticated"` + "\n"

// ControllerConfig returns a client config, through the proxy, for the
// service account system:serviceaccount:default:watchgrade, whose
// requests API priority and fairness queues and limits as it does a
// controller's (flow schema "service-accounts", priority level
// "workload-low"). Each call returns a new copy.
func (c *Cluster) ControllerConfig() *rest.Config {
	cfg := c.Config()
	cfg.BearerToken = controllerToken
	return cfg
}

// etcdFor returns a client of the etcd at opts.EtcdEndpoint, or of a new
// embedded one.
func etcdFor(tb TB, opts Options) *clientv3.Client {
	tb.Helper()
	if opts.EtcdEndpoint == "" {
		return startEtcd(tb, opts.QuietEtcd)
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{opts.EtcdEndpoint},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		tb.Fatalf("etcd client: %v", err)
	}
	tb.Cleanup(func() { _ = client.Close() })
	return client
}

// StartSpare starts a second apiserver on the same etcd and returns its
// address (host:port); the proxy still sends every connection to the
// current one. It fails if a spare is running already. Its watch cache starts at etcd's current revision, after
// every cursor the current one's clients hold (once anything is written
// in between).
func (c *Cluster) StartSpare() (string, error) {
	c.t.Helper()
	if c.spare != nil {
		return "", errors.New("harness: StartSpare: a spare apiserver is running already")
	}
	c.spare = c.startAPIServer()
	return hostOf(c.spare.ClientConfig), nil
}

// SwitchToSpare points the proxy at the spare apiserver and cuts every
// connection: the clients' next requests reach the spare. The old
// apiserver keeps running, idle, until RetireOld. It fails without a
// spare, or while the apiserver it last switched from still runs.
func (c *Cluster) SwitchToSpare() error {
	c.t.Helper()
	if c.spare == nil {
		return errors.New("harness: SwitchToSpare: no spare apiserver")
	}
	if c.retired != nil {
		return errors.New("harness: SwitchToSpare: the apiserver switched from last time is still running")
	}
	c.retired, c.api, c.spare = c.api, c.spare, nil
	c.Proxy.SetBackend(hostOf(c.api.ClientConfig))
	c.Proxy.ResetAll()
	return nil
}

// RetireOld shuts down the apiserver SwitchToSpare switched from, if any,
// and a spare that was started and not switched to.
func (c *Cluster) RetireOld() {
	c.t.Helper()
	for _, s := range []**kubeapiservertesting.TestServer{&c.retired, &c.spare} {
		if *s != nil {
			(*s).TearDownFn()
			*s = nil
		}
	}
}

// remoteModeEtcd is the value of remoteEnv that makes a child run etcd
// alone.
const remoteModeEtcd = "etcd"

// StartRemoteEtcd starts a child process running an embedded etcd alone
// and returns once it serves; [Remote.Addr] is its client endpoint, to
// pass as [Options.EtcdEndpoint]. Its log goes to log. It stops when tb's
// cleanups run, or at Close. Of a Remote's other methods only Pid, Addr
// and Close apply.
func StartRemoteEtcd(tb TB, log io.Writer) *Remote {
	tb.Helper()
	return startRemote(tb, remoteModeEtcd, Options{}, log)
}

// serveRemoteEtcd runs etcd until the parent closes the child's input,
// then exits.
func serveRemoteEtcd(reply *os.File) {
	ok := NewProgram("watchgrade-remote-etcd", os.Stderr).Run(func(tb TB) {
		client := startEtcd(tb, false)
		fmt.Fprintf(reply, "ready %s\n", client.Endpoints()[0])
		_, _ = io.Copy(io.Discard, os.Stdin)
	})
	if !ok {
		os.Exit(1)
	}
	os.Exit(0)
}

// Addr returns the child's address: its proxy's host:port (the
// apiserver's, through it), or for [StartRemoteEtcd] etcd's client
// endpoint.
func (r *Remote) Addr() string { return r.addr }

// Pid returns the child's process id: its CPU time is in
// /proc/<pid>/stat.
func (r *Remote) Pid() int { return r.cmd.Process.Pid }

// ControllerConfig returns a client config as [Cluster.ControllerConfig]
// does: a service account's, through the proxy. Each call returns a new
// copy.
func (r *Remote) ControllerConfig() *rest.Config {
	cfg := r.Config()
	cfg.BearerToken = controllerToken
	return cfg
}

// StartSpare starts a spare apiserver as [Cluster.StartSpare] does and
// returns its address.
func (r *Remote) StartSpare() (string, error) { return r.command("spare") }

// SwitchToSpare switches the proxy to the spare apiserver as
// [Cluster.SwitchToSpare] does.
func (r *Remote) SwitchToSpare() error {
	_, err := r.command("switch")
	return err
}

// RetireOld shuts down the apiserver switched from, as [Cluster.RetireOld]
// does.
func (r *Remote) RetireOld() error {
	_, err := r.command("retire")
	return err
}

// ResetConnections cuts every connection through the proxy
// ([Proxy.ResetAll]): every watch ends, and reopens.
func (r *Remote) ResetConnections() error {
	_, err := r.command("reset")
	return err
}

// ConfigFor returns an admin config for the apiserver at addr (host:port),
// bypassing the proxy: for the spare apiserver before the switch, say.
func ConfigFor(addr string) *rest.Config {
	return &rest.Config{
		Host:            "https://" + addr,
		BearerToken:     adminToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             1000,
		Burst:           2000,
	}
}
