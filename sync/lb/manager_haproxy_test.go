package lb_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/lb"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

const (
	vip      = "127.0.0.61"
	upstream = "127.0.0.62"
	// taken is an operator's own frontend named as a class Service's
	// would be (haproxytest names a backend's frontend fe_<backend>).
	taken = "k8s_default_taken_80"
)

// world is a real HAProxy with an operator's frontends (be_http's and
// taken's), and the test Data Plane API over it, which writes what it
// holds of class sections into haproxy.cfg and reloads HAProxy as the real
// API does.
type world struct {
	h   *haproxytest.HAProxy
	api *dataplanetest.Server
	m   *lb.Manager
	// reloaded counts the reloads the API ran, once HAProxy answers after each.
	reloaded atomic.Int32
}

func newWorld(t *testing.T) *world {
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be_http", Lines: []string{"balance roundrobin"}},
		haproxytest.Backend{Name: taken, Lines: []string{"balance roundrobin"}})
	w := &world{h: h}
	// The sections haproxytest writes itself are not the API's to write.
	ours := func(name string) bool {
		return dataplanetest.ClassSection(name) && name != "fe_"+taken && name != taken
	}
	w.api = dataplanetest.New(t, dataplanetest.Options{RuntimeSocket: h.AdminSocket, ReloadDelay: 50 * time.Millisecond, Reload: func() {
		defer w.reloaded.Add(1)
		if err := h.TrySetSections(w.api.Sections(ours)); err != nil {
			t.Errorf("write haproxy.cfg: %v", err)
			return
		}
		if err := h.TryReload(); err != nil {
			t.Errorf("reload: %v", err)
		}
	}})
	rr := "roundrobin"
	for _, name := range []string{"be_http", taken} {
		w.api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: name, Mode: "tcp", Balance: &models.Balance{Algorithm: &rr}}})
		host, port, _ := net.SplitHostPort(h.Frontends[name])
		p, _ := strconv.ParseInt(port, 10, 64)
		w.api.AddFrontend(models.Frontend{FrontendBase: models.FrontendBase{Name: "fe_" + name, DefaultBackend: name}},
			models.Bind{Name: "b", Address: host, Port: &p})
	}
	socket, err := runtimeapi.New(h.RuntimeURL(), model.Settings{}, model.Check{})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(w.api.URL)
	client := dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: 5 * time.Second}, dataplane.WithRuntime(socket))
	w.m = &lb.Manager{Targets: []lb.Target{client}, VIPs: []string{vip}}
	t.Cleanup(func() {
		if t.Failed() {
			cfg, _ := w.h.Config()
			t.Logf("haproxy.cfg:\n%s\nlogs:\n%s", cfg, w.h.Logs())
		}
	})
	return w
}

// settle waits until HAProxy went through every reload the API asked for.
func (w *world) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for int(w.reloaded.Load()) < w.api.ReloadsRun() {
		if time.Now().After(deadline) {
			t.Fatalf("HAProxy reloaded %d times, the API ran %d reloads", w.reloaded.Load(), w.api.ReloadsRun())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// call sends one request to the test API and fails the test on a non-2xx.
func (w *world) call(t *testing.T, method, path string, body any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, w.api.URL+"/v3/services/haproxy"+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode > 299 {
		t.Fatalf("%s %s: %d", method, path, resp.StatusCode)
	}
}

// answer connects to addr and returns the first line the server behind it
// sends ("" when nothing answers).
func answer(addr string) string {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

func classService(name string, port int32) services.Selected {
	return services.Selected{Namespace: "default", Name: name, Class: true, Ports: []services.Port{{Port: port}}}
}

// TestManagerOnHAProxy: a class Service gets its frontend and backend in one
// transaction, and traffic to the VIP reaches a server of it; a second pass
// writes nothing; an operator's frontend of the same name is left alone and
// reported; once the Service is gone its backend drains and then goes with
// its frontend, leaving haproxy.cfg as it was.
func TestManagerOnHAProxy(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	port := int32(haproxytest.FreePort(t, vip))
	fe, be := services.ClassNames("", "default", "web", port)
	before, err := w.h.Config()
	if err != nil {
		t.Fatal(err)
	}
	want := []services.Selected{classService("web", port), classService("taken", 80)}

	rep, err := w.m.Sync(ctx, want, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Ready["default/web"] || len(rep.Created) != 1 || rep.Created[0] != fe {
		t.Fatalf("first pass: %+v, want %s created and default/web ready", rep, fe)
	}
	if rep.Ready["default/taken"] || !strings.Contains(rep.Failed["default/taken"], "without this instance's mark") {
		t.Errorf("the operator's fe_%s: ready %v, failed %q; want not ready, failed saying it is not ours", taken, rep.Ready["default/taken"], rep.Failed["default/taken"])
	}
	if w.api.Reloads() != 1 {
		t.Errorf("the API asked %d reloads for one Service created, want 1 (one transaction)", w.api.Reloads())
	}
	if fmt.Sprint(rep.Loading) != "[default/web]" {
		t.Errorf("first pass: loading %v, want default/web (its reload has not run)", rep.Loading)
	}
	if f, binds, ok := w.api.Frontend("fe_" + taken); !ok || f.Description != "" || len(binds) != 1 || binds[0].Name != "b" {
		t.Errorf("the operator's frontend changed: %+v %+v", f, binds)
	}
	w.settle(t)

	// A server behind the new backend, loaded by a reload (as the
	// reconcile's transaction would): traffic through VIP:port reaches it.
	srvPort := haproxytest.FreePort(t, upstream)
	haproxytest.Listen(t, "pod-1", net.JoinHostPort(upstream, strconv.Itoa(srvPort)))
	w.call(t, http.MethodPost, "/configuration/backends/"+be+"/servers?force_reload=true&version="+strconv.FormatInt(w.api.Version(), 10),
		map[string]any{"name": "s1", "address": upstream, "port": srvPort, "check": "enabled", "inter": 200, "rise": 1, "fall": 1})
	w.settle(t)
	addr := net.JoinHostPort(vip, strconv.Itoa(int(port)))
	deadline := time.Now().Add(5 * time.Second)
	for answer(addr) != "pod-1" {
		if time.Now().After(deadline) {
			t.Fatalf("%s does not reach the Service's server through HAProxy (answer %q)", addr, answer(addr))
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Nothing changed: nothing written, no reload.
	writes, reloads := w.api.Writes(), w.api.Reloads()
	rep, err = w.m.Sync(ctx, want, nil)
	if err != nil || !rep.Ready["default/web"] || len(rep.Created) != 0 || len(rep.Loading) != 0 {
		t.Fatalf("second pass: %+v %v; want web ready, run by HAProxy", rep, err)
	}
	if w.api.Writes() != writes || w.api.Reloads() != reloads {
		t.Errorf("second pass wrote %d times, asked %d reloads; want none", w.api.Writes()-writes, w.api.Reloads()-reloads)
	}

	// The Service is gone: its backend drains first, nothing is removed
	// while a server is in service.
	want = want[1:]
	rep, err = w.m.Sync(ctx, want, nil)
	if err != nil || fmt.Sprint(rep.Draining) != "["+be+"]" || len(rep.Removed) != 0 {
		t.Fatalf("Service gone: %+v %v; want %s draining, nothing removed", rep, err, be)
	}
	if w.api.Writes() != writes {
		t.Errorf("draining wrote %d times, want none", w.api.Writes()-writes)
	}
	// Parked (what the reconcile does for zero endpoints), no session:
	// drained, removed with its frontend in one transaction.
	w.call(t, http.MethodPut, "/configuration/backends/"+be+"/servers/s1?version="+strconv.FormatInt(w.api.Version(), 10),
		map[string]any{"name": "s1", "address": upstream, "port": srvPort, "check": "enabled", "inter": 200, "rise": 1, "fall": 1, "maintenance": "enabled"})
	reloads = w.api.Reloads()
	rep, err = w.m.Sync(ctx, want, nil)
	if err != nil || fmt.Sprint(rep.Removed) != "["+fe+"]" || len(rep.Draining) != 0 {
		t.Fatalf("drained: %+v %v; want %s removed", rep, err, fe)
	}
	if w.api.Reloads() != reloads+1 {
		t.Errorf("removal asked %d reloads, want 1", w.api.Reloads()-reloads)
	}
	w.settle(t)
	after, err := w.h.Config()
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("haproxy.cfg after removal differs from before the Service:\n--- before\n%s\n--- after\n%s", before, after)
	}
	if got := answer(addr); got != "" {
		t.Errorf("%s still answers %q after its frontend was removed", addr, got)
	}
	if _, _, ok := w.api.Frontend("fe_" + taken); !ok || w.api.Backend("be_http").Name != "be_http" {
		t.Error("an operator's section was removed")
	}
}
