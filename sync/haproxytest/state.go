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

// SaveState does what the systemd drop-in of docs/haproxy.md does before a
// reload: "show servers state" read from the admin socket as socat reads it
// (the whole reply, its last empty line included) into StateFile.new, kept
// (renamed to StateFile) only when its first line is the format version
// "1"; otherwise StateFile is removed, so that the reload loads nothing
// stale. The error is the socket's or the file's.
func (h *HAProxy) SaveState() error {
	reply, err := rawCommand(h.AdminSocket, "show servers state")
	tmp := h.StateFile + ".new"
	if err == nil {
		err = os.WriteFile(tmp, reply, 0o600)
	}
	if err == nil && bytes.HasPrefix(reply, []byte("1\n")) {
		return os.Rename(tmp, h.StateFile)
	}
	_ = os.Remove(tmp)
	if rmErr := os.Remove(h.StateFile); rmErr != nil && !os.IsNotExist(rmErr) && err == nil {
		err = rmErr
	}
	if err == nil {
		err = fmt.Errorf("show servers state: the dump does not start with the format version: %.60q", reply)
	}
	return err
}

// rawCommand sends cmd on the unix socket at path and returns every byte
// of the reply, untrimmed (socat's "stdio unix-connect:").
func rawCommand(path, cmd string) ([]byte, error) {
	c, err := net.DialTimeout("unix", path, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, cmd+"\n"); err != nil {
		return nil, err
	}
	return io.ReadAll(c)
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

// Close stops listening: HAProxy's checks to it now fail.
func (l *ProxyListener) Close() { _ = l.ln.Close() }

// Counts returns the connections that came with the header, and without.
func (l *ProxyListener) Counts() (proxied, plain int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.proxied, l.plain
}
