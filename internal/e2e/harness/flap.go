package harness

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"

	"k8s.io/client-go/rest"
)

// FlapServer is an HTTPS reverse proxy to the apiserver that answers every
// watch with an empty 200 and closes it at once, forever, as some proxies
// and uncached resources do to a stale cursor. Other requests pass through
// with the admin's credentials.
type FlapServer struct {
	srv     *httptest.Server
	watches atomic.Int64
}

// NewFlapServer starts a FlapServer in front of c's apiserver; it stops
// when t ends.
func NewFlapServer(t TB, c *Cluster) *FlapServer {
	t.Helper()
	transport, err := rest.TransportFor(c.DirectConfig())
	if err != nil {
		t.Fatalf("transport: %v", err)
	}
	target, err := url.Parse(c.DirectConfig().Host)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = transport
	f := &FlapServer{}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query().Get("watch"); q == "true" || q == "1" {
			f.watches.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// Config returns a client config that reaches the apiserver through the
// FlapServer.
func (f *FlapServer) Config() *rest.Config {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	return &rest.Config{Host: f.srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}, QPS: 1000, Burst: 2000}
}

// Watches returns how many watches the FlapServer has answered.
func (f *FlapServer) Watches() int64 { return f.watches.Load() }
