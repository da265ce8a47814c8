package dataplane_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// TestAddWaitsForTheAPIsPendingRemoval is the history checker's finding on
// seed 7 (Data Plane driver, short; failures-explained and
// reloads-as-promised): a process deleted server "s" through the API (202,
// a reload reload_delay later) and was replaced (a crash, a new pod, the
// one-shot command) before that reload ran; the fresh process, whose
// Service wants "s" again (a rezone gave it its old role back), found "s"
// running though haproxy.cfg lacked it and took it for someone else's: its
// add was refused, and the API's own add fell back to a reload. Now the
// driver sees the API's reload in progress (GET /services/haproxy/reloads),
// waits for it and answers a conflict; the reconcile reads again and adds
// "s" at runtime, with no reload but the deletion's.
func TestAddWaitsForTheAPIsPendingRemoval(t *testing.T) {
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check"}})
	var api *dataplanetest.Server
	api = dataplanetest.New(t, dataplanetest.Options{RuntimeSocket: h.AdminSocket, ReloadDelay: 1500 * time.Millisecond, Reload: func() {
		if err := h.TrySetServers("be", api.ServerLines("be")); err == nil {
			_ = h.TryReload()
		}
	}})
	ports := haproxytest.FreePorts(t, "127.0.0.1", 2)
	haproxytest.Listen(t, "s", fmt.Sprintf("127.0.0.1:%d", ports[0]))
	haproxytest.Listen(t, "t", fmt.Sprintf("127.0.0.1:%d", ports[1]))
	check := model.Check{Inter: time.Second, FastInter: 100 * time.Millisecond, DownInter: 100 * time.Millisecond, Rise: 1, Fall: 1}
	server := func(name string, port int) model.Server {
		return model.Server{Name: name, Address: "127.0.0.1", Port: port, Weight: 1, State: model.Ready, Check: check}
	}
	rr := "roundrobin"
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "be", Mode: "tcp", AdvCheck: "tcp-check", Balance: &models.Balance{Algorithm: &rr}}})
	h.SetServers(t, "be", api.ServerLines("be"))
	h.Reload(t)
	client := func() *dataplane.Client {
		socket, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, check)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(api.URL)
		return dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: 5 * time.Second}, dataplane.WithRuntime(socket))
	}
	converge := func(c *dataplane.Client, w model.Backend) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			p, err := readPlanApply(c, w)
			if err == nil && !p.HasChanges() && !p.Pending() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("not converged within 10 s: %v, %+v", err, p)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	both := want(server("s", ports[0]), server("t", ports[1]))
	first := client()
	converge(first, both)
	before := api.Reloads()

	// The first process deletes s (parked, then deleted with its batch of
	// one: a reload the API runs 1.5 s later), and is gone.
	converge(first, want(server("t", ports[1])))
	if api.Reloads() != before+1 {
		t.Fatalf("the deletion asked %d reloads, want 1", api.Reloads()-before)
	}
	if _, ok := h.Servers(t, "be")["s"]; !ok {
		t.Fatal("s no longer runs before the API's reload: nothing to test")
	}
	// A fresh process wants s again.
	fresh := client()
	_, err := readPlanApply(fresh, both)
	var conflict *failure.ConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("adding s while the reload that removes it is pending: %v, want a conflict after waiting for that reload", err)
	}
	if _, ok := h.Servers(t, "be")["s"]; ok {
		t.Fatal("the conflict came before the API's reload removed s")
	}
	converge(fresh, both)
	if n := api.Reloads() - before; n != 1 {
		t.Errorf("%d reloads asked in all, want the deletion's alone (the API's add fell back to a reload?)", n)
	}
	if s, ok := h.Servers(t, "be")["s"]; !ok || s.Maint() {
		t.Errorf("s after the fresh process: %+v (there: %v), want it in service", s, ok)
	}
}

// readPlanApply reads be, plans w against it and applies the plan once, as
// the reconciler does.
func readPlanApply(c *dataplane.Client, w model.Backend) (plan.Plan, error) {
	ctx := context.Background()
	cur, err := c.Read(ctx, "be")
	if err != nil {
		return plan.Plan{}, err
	}
	p := plan.CalculateWith(cur, w, c.Policy())
	_, err = c.Apply(ctx, p)
	return p, err
}
