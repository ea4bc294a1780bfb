package harness

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"

	"k8s.io/client-go/rest"
)

// WatchFault is what a [FlapServer] does to the watches it answers.
type WatchFault string

const (
	// CloseAtOnce answers every watch with an empty 200 and closes it, as
	// some proxies and uncached resources do to a stale cursor.
	CloseAtOnce WatchFault = "CloseAtOnce"
	// ExpireAtOnce answers every watch with a 200 and one ERROR event
	// carrying a 410 Expired Status, then closes it, as a server behind a
	// stale cache would to every cursor.
	ExpireAtOnce WatchFault = "ExpireAtOnce"
)

// FlapOptions configures a [FlapServer]. The zero value closes every watch
// at once and passes everything else through.
type FlapOptions struct {
	// Watch is what happens to watches that are not refused. Defaults to
	// CloseAtOnce.
	Watch WatchFault
	// RefuseWatchList answers watch-list requests (sendInitialEvents) with
	// the 422 a server with the WatchList feature off gives.
	RefuseWatchList bool
}

// FlapServer is an HTTPS reverse proxy to the apiserver that spoils every
// watch as its options say, forever. Other requests (LISTs among them) pass
// through with the admin's credentials.
type FlapServer struct {
	srv     *httptest.Server
	watches atomic.Int64
	lists   atomic.Int64
	refused atomic.Int64
}

// NewFlapServer starts a FlapServer that closes every watch at once in
// front of c's apiserver; it stops when t ends.
func NewFlapServer(t TB, c *Cluster) *FlapServer {
	t.Helper()
	return NewFaultServer(t, c, FlapOptions{})
}

// NewFaultServer starts a FlapServer with opts in front of c's apiserver;
// it stops when t ends.
func NewFaultServer(t TB, c *Cluster, opts FlapOptions) *FlapServer {
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
		q := r.URL.Query()
		if watch := q.Get("watch"); watch != "true" && watch != "1" {
			if r.Method == http.MethodGet && q.Get("continue") == "" {
				f.lists.Add(1)
			}
			rp.ServeHTTP(w, r)
			return
		}
		if opts.RefuseWatchList && q.Get("sendInitialEvents") == "true" {
			f.refused.Add(1)
			refuseWatchList(w)
			return
		}
		f.watches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if opts.Watch == ExpireAtOnce {
			fmt.Fprintln(w, `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired","code":410}}`)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// refuseWatchList writes the 422 of a server with the WatchList feature off.
func refuseWatchList(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnprocessableEntity)
	fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled","reason":"Invalid","details":{"group":"meta.k8s.io","kind":"ListOptions","causes":[{"reason":"FieldValueForbidden","message":"Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled","field":"sendInitialEvents"}]},"code":422}`)
}

// Config returns a client config that reaches the apiserver through the
// FlapServer.
func (f *FlapServer) Config() *rest.Config {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	return &rest.Config{Host: f.srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}, QPS: 1000, Burst: 2000}
}

// Watches returns how many watches the FlapServer has answered (refused
// watch-lists not counted).
func (f *FlapServer) Watches() int64 { return f.watches.Load() }

// Lists returns how many LISTs (first pages) it has passed through.
func (f *FlapServer) Lists() int64 { return f.lists.Load() }

// RefusedWatchLists returns how many watch-list requests it has refused.
func (f *FlapServer) RefusedWatchLists() int64 { return f.refused.Load() }
