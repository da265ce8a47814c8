package history

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// TestHAProxySawAFailedConnection: a request to a server that refuses is
// logged by HAProxy with its server and termination state ("SC"), and
// haproxySaw finds that line by the time the client saw it fail; a normal
// one is not logged.
func TestHAProxySawAFailedConnection(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"server refuses " + closed}, FrontendLines: haproxytest.LogAbnormal})
	c, err := net.Dial("tcp", h.Frontends["be"])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("HAProxy did not close the connection: %v", err)
	}
	at := time.Now()
	var saw []string
	for range 50 { // HAProxy logs when the stream ends: a moment after the client saw it
		if saw = haproxySaw(h.Logs(), at); len(saw) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(saw) != 1 || !strings.Contains(saw[0], "be/refuses") || !strings.Contains(saw[0], " SC ") {
		t.Fatalf("haproxySaw = %q, want the one connection to be/refuses, ended SC; logs:\n%s", saw, h.Logs())
	}
	if got := haproxySaw(h.Logs(), at.Add(-2*time.Second)); len(got) != 0 {
		t.Fatalf("haproxySaw 2 s before = %q, want nothing", got)
	}
}
