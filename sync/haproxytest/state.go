package haproxytest

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// DumpState writes "show servers state" to StateFile, as the systemd
// drop-in of docs/haproxy.md does before each reload.
func (h *HAProxy) DumpState(t testing.TB) {
	t.Helper()
	reply, err := h.Command("show servers state")
	if err != nil {
		t.Fatal(err)
	}
	// Socket.Command trims the reply; the file ends with a newline, as
	// the drop-in's socat writes it.
	if err := os.WriteFile(h.StateFile, []byte(strings.TrimRight(reply, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// proxyV2Sig starts every PROXY protocol v2 header.
var proxyV2Sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

// ProxyListener is a backend that wants the PROXY protocol v2, as one
// behind "default-server send-proxy-v2" does: a connection that starts
// with the header is answered with the listener's name; any other (a
// server added without the keyword, or its check) is closed unanswered.
type ProxyListener struct {
	Name    string
	ln      net.Listener
	mu      sync.Mutex
	proxied int
	plain   int
}

// ListenProxyV2 starts a ProxyListener on addr until the test ends.
func ListenProxyV2(t testing.TB, name, addr string) *ProxyListener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	l := &ProxyListener{Name: name, ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go l.serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return l
}

func (l *ProxyListener) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	head := make([]byte, len(proxyV2Sig))
	_, err := io.ReadFull(c, head)
	ok := err == nil && bytes.Equal(head, proxyV2Sig)
	l.mu.Lock()
	if ok {
		l.proxied++
	} else {
		l.plain++
	}
	l.mu.Unlock()
	if ok {
		_, _ = fmt.Fprintln(c, l.Name)
	}
}

// Counts returns the connections that came with the header, and without.
func (l *ProxyListener) Counts() (proxied, plain int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.proxied, l.plain
}
