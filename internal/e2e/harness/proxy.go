package harness

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy is a loopback TCP proxy in front of the apiserver. Its address stays
// the same while its backend changes, so clients keep their config across an
// apiserver restart. TLS passes through untouched.
type Proxy struct {
	addr    string
	backend atomic.Pointer[string]
	lnMu    sync.Mutex
	ln      net.Listener // nil while refusing

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	accepted atomic.Int64
}

// NewProxy listens on 127.0.0.1 and forwards to backend (host:port).
func NewProxy(backend string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	p.backend.Store(&backend)
	p.wg.Add(1)
	go p.serve(ln)
	return p, nil
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

// Accepted returns how many connections the proxy has accepted.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// SetBackend points new connections at backend (host:port).
func (p *Proxy) SetBackend(backend string) { p.backend.Store(&backend) }

// SetRefusing closes the proxy's port, so new connections are refused as a
// stopped server's would be (live ones stay until ResetAll), or opens it
// again on the same address.
func (p *Proxy) SetRefusing(refuse bool) error {
	p.lnMu.Lock()
	defer p.lnMu.Unlock()
	switch {
	case refuse && p.ln != nil:
		err := p.ln.Close()
		p.ln = nil
		return err
	case !refuse && p.ln == nil:
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			return err
		}
		p.ln = ln
		p.wg.Add(1)
		go p.serve(ln)
	}
	return nil
}

// ResetAll cuts every live connection with a TCP reset.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		reset(c)
	}
}

// Close stops the proxy and cuts every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.SetRefusing(true)
	p.ResetAll()
	p.wg.Wait()
}

func reset(c net.Conn) {
	if tcp, ok := c.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = c.Close()
}

func (p *Proxy) serve(ln net.Listener) {
	defer p.wg.Done()
	for {
		client, err := ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.pipe(client)
	}
}

func (p *Proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.closed {
			return false
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *Proxy) pipe(client net.Conn) {
	defer p.wg.Done()
	server, err := net.Dial("tcp", *p.backend.Load())
	if err != nil {
		reset(client)
		return
	}
	if !p.track(client, true) || !p.track(server, true) {
		reset(client)
		reset(server)
		return
	}
	defer p.track(client, false)
	defer p.track(server, false)
	done := make(chan struct{}, 2)
	copyAndClose := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if err != nil && !errors.Is(err, net.ErrClosed) {
			reset(dst)
		} else {
			_ = dst.Close()
		}
		done <- struct{}{}
	}
	go copyAndClose(server, client)
	go copyAndClose(client, server)
	<-done
	reset(client)
	reset(server)
	<-done
}
