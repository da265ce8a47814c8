package dataplane_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
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

// defaultServerWorld is a real HAProxy whose backend says "default-server
// send-proxy-v2" in haproxy.cfg, the test API told so (the backend's
// default_server), a backend listening for PROXY v2, and the Data Plane
// driver with the HAProxy's socket. The API's reloads are counted and
// never run (no Options.Reload): what the running HAProxy does is what the
// socket did, as while the real API's reload_delay runs.
type defaultServerWorld struct {
	h      *haproxytest.HAProxy
	api    *dataplanetest.Server
	c      *dataplane.Client
	l      *haproxytest.ProxyListener
	server model.Server
}

func newDefaultServerWorld(t *testing.T, servers ...models.Server) *defaultServerWorld {
	t.Helper()
	fast := model.Check{Inter: 100 * time.Millisecond, Rise: 1, Fall: 1}
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check", "default-server send-proxy-v2"}})
	api := dataplanetest.New(t, dataplanetest.Options{RuntimeSocket: h.AdminSocket})
	rr := "roundrobin"
	api.AddDefaults(models.Defaults{DefaultsBase: models.DefaultsBase{Name: "base", Mode: "tcp"}})
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "be", Mode: "tcp", From: "base", AdvCheck: "tcp-check",
		Balance: &models.Balance{Algorithm: &rr}, DefaultServer: &models.DefaultServer{ServerParams: models.ServerParams{SendProxyV2: "enabled"}}}}, servers...)
	socket, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, fast)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: 5 * time.Second}, dataplane.WithRuntime(socket))
	port := haproxytest.FreePort(t, "127.0.0.1")
	w := &defaultServerWorld{h: h, api: api, c: c,
		l:      haproxytest.ListenProxyV2(t, "a", fmt.Sprintf("127.0.0.1:%d", port)),
		server: model.Server{Name: "a", Address: "127.0.0.1", Port: port, Weight: 1, State: model.Ready, Check: fast}}
	return w
}

// converge reconciles until the plan has nothing left to do.
func (w *defaultServerWorld) converge(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		cur, err := w.c.Read(ctx, "be")
		if err != nil {
			t.Fatal(err)
		}
		p := plan.CalculateWith(cur, want(w.server), w.c.Policy())
		if !p.HasChanges() && !p.Pending() {
			return
		}
		if _, err := w.c.Apply(ctx, p); err != nil {
			t.Fatalf("apply %+v: %v", p.Changes, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("not converged within 10 s: last plan %+v, waiting %v", p.Changes, p.Waiting)
		}
	}
}

// expectProxied sends connections through the frontend: each must reach a,
// which answers only those that start with a PROXY v2 header.
func (w *defaultServerWorld) expectProxied(t *testing.T) {
	t.Helper()
	if s := w.h.Servers(t, "be")["a"]; !s.Up() || s.Maint() || s.Drain() {
		t.Fatalf("a is not in service: %+v", s)
	}
	for i := range 5 {
		got, err := haproxytest.Ask(w.h.Frontends["be"])
		if err != nil || strings.TrimSpace(got) != "a" {
			proxied, plain := w.l.Counts()
			t.Fatalf("connection %d through the frontend: %q, %v; the backend saw %d connections with a PROXY v2 header, %d without: "+
				"the server runs without haproxy.cfg's default-server send-proxy-v2", i, got, err, proxied, plain)
		}
	}
}

// TestDefaultServerIsCarriedOnSocketAdds: the backend's default-server
// says send-proxy-v2, so the API answers the add with a reload (which has
// not run yet: reload_delay), and the driver adds the server through the
// socket, gated, then puts it in service there. Its add carries
// send-proxy-v2: every client connection reaches the backend with a PROXY
// v2 header. Before, "add server" had only the server's own keywords and
// every connection failed until some later reload.
func TestDefaultServerIsCarriedOnSocketAdds(t *testing.T) {
	w := newDefaultServerWorld(t)
	w.converge(t)
	if w.api.Reloads() == 0 {
		t.Fatal("the API did not reload for the add: the default-server is not seen")
	}
	w.expectProxied(t)
}

// TestDefaultServerIsCarriedOnRenew: haproxy.cfg holds a parked (in
// maintenance) with nothing but what this service writes, and its
// default-server send-proxy-v2; HAProxy loaded it so. Its endpoint is
// ready again: the driver renews it (deletes it and adds it again through
// the socket, gated, so that its first check comes at once), then puts it
// in service. The re-add carries send-proxy-v2. Before, the renewed server
// lost it, and every connection it took failed until some later reload.
func TestDefaultServerIsCarriedOnRenew(t *testing.T) {
	port, weight, inter, one := int64(0), int64(1), int64(100), int64(1)
	parked := models.Server{Name: "a", Address: "127.0.0.1", Port: &port, ServerParams: models.ServerParams{
		Weight: &weight, Check: "enabled", Inter: &inter, Rise: &one, Fall: &one, Maintenance: "enabled"}}
	// The listener's port is known once the world is: add a afterwards,
	// then load haproxy.cfg as the API holds it.
	w := newDefaultServerWorld(t)
	port = int64(w.server.Port)
	w.api.AddBackend(w.api.Backend("be"), parked)
	w.h.SetServers(t, "be", w.api.ServerLines("be"))
	w.h.Reload(t)
	if s, ok := w.h.Servers(t, "be")["a"]; !ok || !s.Maint() {
		t.Fatalf("a as loaded: %+v, want it parked", s)
	}
	w.converge(t)
	if w.api.Reloads() != 0 {
		t.Errorf("%d reloads asked for, want none (a is renewed and put in service at runtime)", w.api.Reloads())
	}
	w.expectProxied(t)
}
