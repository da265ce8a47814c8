package e2e

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// cutProxy forwards TCP connections to the API server, and can cut every
// open connection (a dropped watch) or refuse new ones for a while (an API
// server that is away).
type cutProxy struct {
	ln     net.Listener
	target string

	// received counts the bytes sent back by the target.
	received atomic.Int64

	mu      sync.Mutex
	conns   map[net.Conn]bool
	refused bool
}

func newCutProxy(t testing.TB, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refused := p.refused
		if !refused {
			p.conns[c] = true
		}
		p.mu.Unlock()
		if refused {
			c.Close()
			continue
		}
		go p.forward(c)
	}
}

func (p *cutProxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[up] = true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(countingWriter{c, &p.received}, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// cut closes every open connection.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// refuse cuts every connection and closes new ones until allow.
func (p *cutProxy) refuse() {
	p.mu.Lock()
	p.refused = true
	p.mu.Unlock()
	p.cut()
}

func (p *cutProxy) allow() {
	p.mu.Lock()
	p.refused = false
	p.mu.Unlock()
}

type countingWriter struct {
	io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.Writer.Write(p)
	c.n.Add(int64(n))
	return n, err
}
