package day

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
)

// network is the day's pod network, in memory: each address serves an
// HTTP handler (a controller's /metrics) while it is up, and refuses
// connections while it is down, as the port of a crashed container does.
// Connections are net.Pipe pairs, so that everything blocks on channels
// inside the testing/synctest bubble and the bubble's clock can run.
type network struct {
	mu    sync.Mutex
	hosts map[string]http.Handler
	conns map[string][]net.Conn // server ends, to cut on a crash
	wg    sync.WaitGroup
}

func newNetwork() *network {
	return &network{hosts: map[string]http.Handler{}, conns: map[string][]net.Conn{}}
}

// serve makes addr answer with h; nil takes it down and cuts its open
// connections.
func (n *network) serve(addr string, h http.Handler) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if h == nil {
		delete(n.hosts, addr)
		for _, c := range n.conns[addr] {
			c.Close()
		}
		delete(n.conns, addr)
		return
	}
	n.hosts[addr] = h
}

// dial is the scrape client's DialContext.
func (n *network) dial(_ context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, ok := n.hosts[addr]
	if !ok {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("%s: %w", addr, syscall.ECONNREFUSED)}
	}
	client, server := net.Pipe()
	n.conns[addr] = append(n.conns[addr], server)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer server.Close()
		r := bufio.NewReader(server)
		for {
			req, err := http.ReadRequest(r)
			if err != nil {
				return
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			resp := rec.Result()
			resp.Request = req
			resp.ContentLength = int64(rec.Body.Len())
			resp.TransferEncoding = nil
			if err := resp.Write(server); err != nil {
				return
			}
		}
	}()
	return client, nil
}

// close cuts every connection and waits for their goroutines.
func (n *network) close() {
	n.mu.Lock()
	for addr, cs := range n.conns {
		for _, c := range cs {
			c.Close()
		}
		delete(n.conns, addr)
	}
	n.hosts = map[string]http.Handler{}
	n.mu.Unlock()
	n.wg.Wait()
}
