package runtimeapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

const inter = 200 * time.Millisecond

var chk = model.Check{Inter: inter, Rise: 1, Fall: 1}

func want(servers ...model.Server) model.Backend {
	return model.Backend{Name: "be", Settings: model.Settings{Balance: "roundrobin", TCPCheck: true}, Servers: servers}
}

func srv(name, addr string, port int, st model.State) model.Server {
	return model.Server{Name: name, Address: addr, Port: port, Weight: 1, State: st, Check: chk}
}

func syncOnce(t *testing.T, c *runtimeapi.Client, w model.Backend) plan.Applied {
	t.Helper()
	cur, err := c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Apply(context.Background(), plan.Calculate(cur, w))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// eventually polls cond for up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRuntimeDriverAgainstHAProxy(t *testing.T) {
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check"}})
	c, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, chk)
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := haproxytest.FreePort(t, "127.0.0.1"), haproxytest.FreePort(t, "127.0.0.1")
	a := haproxytest.Listen(t, "a", fmt.Sprintf("127.0.0.1:%d", p1))
	haproxytest.Listen(t, "b", fmt.Sprintf("127.0.0.1:%d", p2))

	// Initial sync into an empty backend: both servers get traffic.
	syncOnce(t, c, want(srv("a", "127.0.0.1", p1, model.Ready), srv("b", "127.0.0.1", p2, model.Ready)))
	s := h.Servers(t, "be")
	if len(s) != 2 || !s["a"].CheckRunning() || s["a"].Maint() || s["b"].Port != p2 {
		t.Fatalf("servers %+v", s)
	}
	eventually(t, 3*time.Second, "both servers take traffic", func() bool {
		got := haproxytest.Spread(h.Frontends["be"], 10)
		return got["a"] > 0 && got["b"] > 0
	})

	// Idempotent: nothing to do the second time.
	if a := syncOnce(t, c, want(srv("a", "127.0.0.1", p1, model.Ready), srv("b", "127.0.0.1", p2, model.Ready))); a.Writes != 0 {
		t.Errorf("second sync sent %d commands", a.Writes)
	}

	// A dead backend is marked DOWN by its running check within 3 intervals.
	a.Close()
	eventually(t, 3*inter+500*time.Millisecond, "server a DOWN after its listener died", func() bool { return !h.Servers(t, "be")["a"].Up() })
	if got := haproxytest.Spread(h.Frontends["be"], 6); got["b"] != 6 {
		t.Errorf("traffic after a died: %v", got)
	}

	// Drain, then delete: b drains, a is removed.
	syncOnce(t, c, want(srv("b", "127.0.0.1", p2, model.Drain)))
	s = h.Servers(t, "be")
	if _, ok := s["a"]; ok || !s["b"].Drain() {
		t.Errorf("after drain+delete: %+v", s)
	}
	if h.Reloads(t) != 0 {
		t.Errorf("HAProxy reloaded %d times", h.Reloads(t))
	}
}

func TestRuntimeDriverOverTCP(t *testing.T) {
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check"}})
	c, err := runtimeapi.New("tcp://"+h.AdminTCP, model.Settings{Balance: "roundrobin", TCPCheck: true}, chk)
	if err != nil {
		t.Fatal(err)
	}
	port := haproxytest.FreePort(t, "127.0.0.1")
	haproxytest.Listen(t, "a", fmt.Sprintf("127.0.0.1:%d", port))
	syncOnce(t, c, want(srv("a", "127.0.0.1", port, model.Ready)))
	eventually(t, 3*time.Second, "server a takes traffic", func() bool {
		return haproxytest.Spread(h.Frontends["be"], 2)["a"] == 2
	})
	cur, err := c.Read(context.Background(), "be")
	if err != nil || len(cur.Servers) != 1 || cur.Servers[0].Port != port {
		t.Fatalf("read over tcp: %v %+v", err, cur)
	}
}

// TestDeleteWithOpenConnections: HAProxy refuses to delete a server that
// still has a connection; it stays in maintenance, out of traffic, and the
// next reconcile after the connection ends deletes it.
func TestDeleteWithOpenConnections(t *testing.T) {
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check"}})
	c, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, chk)
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := haproxytest.FreePort(t, "127.0.0.1"), haproxytest.FreePort(t, "127.0.0.1")
	holder := haproxytest.ListenHold(t, "a", fmt.Sprintf("127.0.0.1:%d", pa))
	haproxytest.Listen(t, "b", fmt.Sprintf("127.0.0.1:%d", pb))
	syncOnce(t, c, want(srv("a", "127.0.0.1", pa, model.Ready)))
	eventually(t, 3*time.Second, "a is UP", func() bool { return h.Servers(t, "be")["a"].Up() })

	// A long-lived client connection through HAProxy to a.
	conn, err := net.Dial("tcp", h.Frontends["be"])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 2)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "a\n" {
		t.Fatalf("connection through a: %q %v", buf, err)
	}

	w := want(srv("b", "127.0.0.1", pb, model.Ready))
	cur, _ := c.Read(context.Background(), "be")
	_, err = c.Apply(context.Background(), plan.Calculate(cur, w))
	if !errors.Is(err, runtimeapi.ErrServerBusy) {
		t.Fatalf("err = %v, want ErrServerBusy", err)
	}
	if s, ok := h.Servers(t, "be")["a"]; !ok || !s.Maint() {
		t.Fatalf("a should stay, in maintenance: %+v", h.Servers(t, "be"))
	}
	eventually(t, 3*time.Second, "new traffic only to b", func() bool { return haproxytest.Spread(h.Frontends["be"], 4)["b"] == 4 })

	conn.Close()
	holder.Close() // the server side ends too
	eventually(t, 3*time.Second, "a deleted once its connection ended", func() bool {
		cur, err := c.Read(context.Background(), "be")
		if err != nil {
			return false
		}
		_, err = c.Apply(context.Background(), plan.Calculate(cur, w))
		_, still := h.Servers(t, "be")["a"]
		return err == nil && !still
	})
}
