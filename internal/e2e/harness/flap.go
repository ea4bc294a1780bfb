package harness

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"time"

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
	// PassThrough forwards every watch to the apiserver untouched (for a
	// FlapServer that spoils only watch-lists).
	PassThrough WatchFault = "PassThrough"
	// CutAfter forwards every watch to the apiserver and ends it cleanly
	// [FlapOptions.Cut] after it opens, as a proxy or load balancer with a
	// short stream timeout does. Events that arrive in time get through.
	CutAfter WatchFault = "CutAfter"
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
	// WatchListErrorEvent answers watch-list requests with a 200 and one
	// ERROR event carrying a 500, then closes them, as a server whose etcd
	// lacks watch-progress support does. Plain watches get Watch.
	WatchListErrorEvent bool
	// Cut is how long a CutAfter watch stays open.
	Cut time.Duration
}

// FlapServer is an HTTPS reverse proxy to the apiserver that spoils every
// watch as its options say, forever. Other requests (LISTs among them) pass
// through with the admin's credentials.
type FlapServer struct {
	srv     *httptest.Server
	healed  atomic.Bool
	watches atomic.Int64
	lists   atomic.Int64
	checks  atomic.Int64
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
			switch {
			case r.Method != http.MethodGet || q.Get("continue") != "":
			case q.Get("limit") == "1" && (q.Get("timeoutSeconds") != "" || q.Get("resourceVersionMatch") == "NotOlderThan"):
				f.checks.Add(1)
			default:
				f.lists.Add(1)
			}
			rp.ServeHTTP(w, r)
			return
		}
		if f.healed.Load() {
			f.watches.Add(1)
			rp.ServeHTTP(w, r)
			return
		}
		if opts.RefuseWatchList && q.Get("sendInitialEvents") == "true" {
			f.refused.Add(1)
			refuseWatchList(w)
			return
		}
		if opts.WatchListErrorEvent && q.Get("sendInitialEvents") == "true" {
			f.refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			fmt.Fprintln(w, `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Internal error occurred: the watch-list feature requires etcd's watch progress notifications","reason":"InternalError","code":500}}`)
			return
		}
		f.watches.Add(1)
		switch opts.Watch {
		case PassThrough:
			rp.ServeHTTP(w, r)
			return
		case CutAfter:
			forwardFor(w, r, transport, target, opts.Cut)
			return
		}
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

// forwardFor forwards r to the apiserver at target and streams its answer
// back for at most d, then ends the response cleanly (a chunked response's
// last chunk: the client sees the watch close, not a reset). A reverse
// proxy whose request times out aborts the connection instead.
func forwardFor(w http.ResponseWriter, r *http.Request, rt http.RoundTripper, target *url.URL, d time.Duration) {
	ctx, cancel := context.WithTimeout(r.Context(), d)
	defer cancel()
	out := r.Clone(ctx)
	out.URL.Scheme, out.URL.Host, out.Host, out.RequestURI = target.Scheme, target.Host, target.Host, ""
	res, err := rt.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	for k, v := range res.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(res.StatusCode)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := res.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

// Heal makes the FlapServer pass every request through from now on; the
// watches it already spoiled stay as they were.
func (f *FlapServer) Heal() { f.healed.Store(true) }

// Config returns a client config that reaches the apiserver through the
// FlapServer.
func (f *FlapServer) Config() *rest.Config {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	return &rest.Config{Host: f.srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}, QPS: 1000, Burst: 2000}
}

// Watches returns how many watches the FlapServer has answered (refused
// watch-lists not counted).
func (f *FlapServer) Watches() int64 { return f.watches.Load() }

// Checks returns how many checks of a stream's cursor (a LIST of one
// object with a timeoutSeconds, or one at the cursor) it has passed
// through; they are not counted as LISTs.
func (f *FlapServer) Checks() int64 { return f.checks.Load() }

// Lists returns how many LISTs (first pages) it has passed through,
// checks of a cursor not counted.
func (f *FlapServer) Lists() int64 { return f.lists.Load() }

// RefusedWatchLists returns how many watch-list requests it has refused.
func (f *FlapServer) RefusedWatchLists() int64 { return f.refused.Load() }
