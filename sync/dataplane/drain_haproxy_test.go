package dataplane_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// TestExpiredSessionsAreShutOnHAProxy: the Data Plane driver with a real
// HAProxy's socket (the test API replays its runtime writes there; its
// reloads are not run), deletions batched as shipped (10). A server with a
// live client connection, removed, is parked and waits; once parked past
// the drain timeout (1 s), it is deleted from haproxy.cfg and HAProxy
// closes the client's connection: the socket shut it before the
// transaction. Before, the server stayed parked and the connection open.
func TestExpiredSessionsAreShutOnHAProxy(t *testing.T) {
	const timeout = time.Second
	fast := model.Check{Inter: 100 * time.Millisecond, Rise: 1, Fall: 1}
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check"}})
	api := dataplanetest.New(t, dataplanetest.Options{RuntimeSocket: h.AdminSocket})
	rr, on, one, three := "roundrobin", "enabled", int64(1), int64(3)
	api.AddDefaults(models.Defaults{DefaultsBase: models.DefaultsBase{Name: "base", Mode: "tcp",
		Redispatch: &models.Redispatch{Enabled: &on, Interval: &one}, Retries: &three}})
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "be", Mode: "tcp", From: "base", AdvCheck: "tcp-check", Balance: &models.Balance{Algorithm: &rr}}})
	socket, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, fast)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: 5 * time.Second}, dataplane.WithDeleteBatch(10), dataplane.WithRuntime(socket))

	ports := haproxytest.FreePorts(t, "127.0.0.1", 2)
	haproxytest.ListenHold(t, "a", fmt.Sprintf("127.0.0.1:%d", ports[0]))
	haproxytest.Listen(t, "b", fmt.Sprintf("127.0.0.1:%d", ports[1]))
	server := func(name string, port int) model.Server {
		return model.Server{Name: name, Address: "127.0.0.1", Port: port, Weight: 1, State: model.Ready, Check: fast}
	}
	// until syncs until done says so, or fails after d.
	until := func(w model.Backend, d time.Duration, what string, done func(plan.Plan) bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for {
			p, _, err := syncDraining(t, c, w, timeout)
			if err != nil {
				t.Fatal(err)
			}
			if done(p) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("not within %s: %s; last plan %v, draining %v", d, what, p.Changes, p.Draining)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	until(want(server("a", ports[0])), 5*time.Second, "a in service", func(p plan.Plan) bool { return !p.HasChanges() && !p.Pending() })

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

	w := want(server("b", ports[1]))
	until(w, 5*time.Second, "a parked and draining", func(p plan.Plan) bool { return slices.Contains(p.Draining, "a") })
	if _, err := conn.Write([]byte("x")); err != nil {
		t.Fatalf("the connection through a was cut before its drain timeout: %v", err)
	}
	killed := false
	until(w, 3*timeout+2*time.Second, "a deleted past its drain timeout", func(p plan.Plan) bool {
		for _, ch := range p.Changes {
			killed = killed || ch.Name == "a" && ch.Action == plan.Delete && ch.Kill
		}
		return !slices.ContainsFunc(api.Servers("be"), func(s models.Server) bool { return s.Name == "a" })
	})
	if !killed {
		t.Error("a deleted without its sessions shut (plan.Change.Kill)")
	}
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := conn.Read(buf); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the client's connection through a is still open after a was deleted: read %d bytes, %v", n, err)
	}
}
