package dataplane_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
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

// TestReadAllIsReadOfEach: the bulk read of a Data Plane target (one
// request for every backend with its servers, two socket commands for
// their running state) gives each backend as Read does, on a real
// HAProxy: settled, and while servers the socket added wait for the
// API's reload (in haproxy.cfg, not running yet) and others run that
// haproxy.cfg does not hold yet. A backend Read refuses (balance source)
// and one with no server are left out, to be read alone; so is one the
// running HAProxy has not loaded.
func TestReadAllIsReadOfEach(t *testing.T) {
	ports := haproxytest.FreePorts(t, "127.0.0.1", 2)
	for i, p := range ports {
		haproxytest.Listen(t, fmt.Sprint("pod-", i), fmt.Sprintf("127.0.0.1:%d", p))
	}
	h := haproxytest.Start(t,
		haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin"}},
		haproxytest.Backend{Name: "be2", Lines: []string{"balance leastconn"}},
		haproxytest.Backend{Name: "empty", Lines: []string{"balance roundrobin"}},
		haproxytest.Backend{Name: "hashed", Lines: []string{"balance source", fmt.Sprintf("server h1 127.0.0.1:%d", ports[0])}})
	var api *dataplanetest.Server
	api = dataplanetest.New(t, dataplanetest.Options{RuntimeSocket: h.AdminSocket, ReloadDelay: 1500 * time.Millisecond, Reload: func() {
		for _, b := range []string{"be", "be2"} {
			if err := h.TrySetServers(b, api.ServerLines(b)); err != nil {
				t.Errorf("write haproxy.cfg: %v", err)
			}
		}
		if err := h.TryReload(); err != nil {
			t.Errorf("reload: %v", err)
		}
	}})
	rr, lc, src, on, one, three := "roundrobin", "leastconn", "source", "enabled", int64(1), int64(3)
	api.AddDefaults(models.Defaults{DefaultsBase: models.DefaultsBase{Name: "base", Mode: "tcp",
		Redispatch: &models.Redispatch{Enabled: &on, Interval: &one}, Retries: &three}})
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "be", Mode: "tcp", From: "base", Balance: &models.Balance{Algorithm: &rr}}})
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "be2", Mode: "tcp", From: "base", Balance: &models.Balance{Algorithm: &lc}}})
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "empty", Mode: "tcp", From: "base", Balance: &models.Balance{Algorithm: &rr}}})
	p0 := int64(ports[0])
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "hashed", Mode: "tcp", From: "base", Balance: &models.Balance{Algorithm: &src}}},
		models.Server{Name: "h1", Address: "127.0.0.1", Port: &p0})

	socket, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, pendingCheck)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: 5 * time.Second}, dataplane.WithRuntime(socket))
	ctx := context.Background()
	server := func(name string, port int, st model.State) model.Server {
		return model.Server{Name: name, Address: "127.0.0.1", Port: port, Weight: 1, State: st, Check: pendingCheck}
	}
	sync1 := func(backend string, servers ...model.Server) {
		t.Helper()
		cur, err := c.Read(ctx, backend)
		if err != nil {
			t.Fatal(err)
		}
		w := want(servers...)
		w.Name, w.Settings = backend, cur.Settings
		if _, err := c.Apply(ctx, plan.CalculateWith(cur, w, c.Policy())); err != nil {
			t.Fatalf("apply %s: %v", backend, err)
		}
	}
	// same compares one bulk read with Read of each backend, between two
	// bulk reads that agree (no check changed a server meanwhile).
	same := func(what string, wantIn ...string) {
		t.Helper()
		var last string
		for range 40 {
			a, err := c.ReadAll(ctx)
			if err != nil {
				t.Fatalf("%s: ReadAll: %v", what, err)
			}
			each := map[string]model.Backend{}
			for _, b := range []string{"be", "be2", "empty", "hashed"} {
				if be, err := c.Read(ctx, b); err == nil {
					each[b] = be
				}
			}
			b, err := c.ReadAll(ctx)
			if err != nil {
				t.Fatalf("%s: ReadAll: %v", what, err)
			}
			if !reflect.DeepEqual(normal(a), normal(b)) {
				continue // a check moved a server meanwhile
			}
			var names []string
			for name := range a {
				names = append(names, name)
			}
			slices.Sort(names)
			if !slices.Equal(names, wantIn) {
				t.Fatalf("%s: ReadAll has %v, want %v", what, names, wantIn)
			}
			last = ""
			for _, name := range names {
				if got, want := normal(a)[name], normal(each)[name]; !reflect.DeepEqual(got, want) {
					last += fmt.Sprintf("\n%s: ReadAll %+v\nRead %+v", name, got, want)
				}
			}
			if last == "" {
				return
			}
		}
		t.Fatalf("%s: ReadAll and Read differ:%s", what, last)
	}

	// Servers added through the socket, persisted by a transaction whose
	// reload comes 1.5 s later: the running HAProxy holds them, and
	// haproxy.cfg too.
	sync1("be", server("a", ports[0], model.Ready), server("b", ports[1], model.Ready))
	sync1("be2", server("c", ports[0], model.Ready))
	same("while the reload is pending", "be", "be2")
	time.Sleep(2 * time.Second)
	same("settled", "be", "be2")
	// One parked, one gone, one new.
	sync1("be", server("a", ports[0], model.Maint), server("d", ports[1], model.Ready))
	same("after a change", "be", "be2")
	time.Sleep(2 * time.Second)
	same("settled again", "be", "be2")
}

// normal is each backend with its servers by name, without the raw JSON
// a write starts from (the API's two reads render it alike, but its
// fields' order is the API's).
func normal(all map[string]model.Backend) map[string]model.Backend {
	out := map[string]model.Backend{}
	for name, b := range all {
		b.Servers = slices.Clone(b.Servers)
		slices.SortFunc(b.Servers, func(x, y model.Server) int { return strings.Compare(x.Name, y.Name) })
		for i := range b.Servers {
			b.Servers[i].Source = nil
		}
		out[name] = b
	}
	return out
}
