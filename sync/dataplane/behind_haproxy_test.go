package dataplane_test

import (
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

// TestRunningBehindHAProxyCfgIsMended: haproxy.cfg has a ready and in
// traffic, and the running HAProxy has it at weight 0 (a move whose gate
// was cut left it so: the history checker's seed 490652228 on 3.4.0, a
// pod that took no request for as long as the history ran). Wanted ready,
// a is put back in traffic; wanted draining, haproxy.cfg drains it too, or
// the next reload would put it back. Before, the read reported
// haproxy.cfg's state and weight, the plan found nothing to do, and a
// stayed at weight 0.
func TestRunningBehindHAProxyCfgIsMended(t *testing.T) {
	fast := model.Check{Inter: 100 * time.Millisecond, Rise: 1, Fall: 1}
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check"}})
	api := dataplanetest.New(t, dataplanetest.Options{RuntimeSocket: h.AdminSocket})
	rr := "roundrobin"
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "be", Mode: "tcp", AdvCheck: "tcp-check", Balance: &models.Balance{Algorithm: &rr}}})
	socket, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, fast)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: 5 * time.Second}, dataplane.WithRuntime(socket))
	ports := haproxytest.FreePorts(t, "127.0.0.1", 2)
	haproxytest.Listen(t, "a", fmt.Sprintf("127.0.0.1:%d", ports[0]))
	haproxytest.Listen(t, "b", fmt.Sprintf("127.0.0.1:%d", ports[1]))
	server := func(name string, port int, st model.State) model.Server {
		return model.Server{Name: name, Address: "127.0.0.1", Port: port, Weight: 1, State: st, Check: fast}
	}
	converge := func(w model.Backend) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			p, _, err := syncDraining(t, c, w, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if !p.HasChanges() && !p.Pending() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("not converged: %v", p.Changes)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	ready := want(server("a", ports[0], model.Ready), server("b", ports[1], model.Ready))
	converge(ready)

	if _, err := h.Command("set server be/a weight 0"); err != nil {
		t.Fatal(err)
	}
	converge(ready)
	if got := haproxytest.Spread(h.Frontends["be"], 6); got["a"] == 0 {
		t.Fatalf("a wanted ready and left at weight 0: %v", got)
	}

	if _, err := h.Command("set server be/a weight 0"); err != nil {
		t.Fatal(err)
	}
	converge(want(server("a", ports[0], model.Drain), server("b", ports[1], model.Ready)))
	var line string
	for _, l := range api.ServerLines("be") {
		if strings.HasPrefix(l, "server a ") {
			line = l
		}
	}
	if !strings.Contains(line, "weight 0") {
		t.Fatalf("a drained at runtime, haproxy.cfg still has it in traffic: %q", line)
	}
	cur, err := c.Read(t.Context(), "be")
	if err != nil {
		t.Fatal(err)
	}
	if p := plan.CalculateWith(cur, want(server("a", ports[0], model.Drain), server("b", ports[1], model.Ready)), c.Policy()); p.HasChanges() {
		t.Fatalf("a drained both ways, still planned: %v", p.Changes)
	}
}
