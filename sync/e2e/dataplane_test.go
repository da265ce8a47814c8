package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"
	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// TestDataplaneChurnWithoutReload drives a real HAProxy through the Data
// Plane API driver: the test API applies runtime changes to the real HAProxy
// as dataplaneapi does, and counts reloads by its rules. Initial sync, scale
// up, an endpoint moving node, drain and back, a parked node coming back:
// zero reloads, every server in traffic checked, traffic where it should be.
func TestDataplaneChurnWithoutReload(t *testing.T) {
	var api *dataplanetest.Server
	w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}}, dataplaneDriver(&api, 5*time.Second))
	a, b, c := w.node("a", "127.0.2.1"), w.node("b", "127.0.2.2"), w.node("c", "127.0.2.3")
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort
	listeners := map[string]*haproxytest.Listener{}
	for name, ip := range map[string]string{a: "127.0.2.1", b: "127.0.2.2", c: "127.0.2.3"} {
		listeners[name] = listen(t, name, ip, np)
	}
	ports := map[string]int32{"http": 8080}
	noReload := func(t *testing.T) {
		t.Helper()
		if api.Reloads() != 0 || w.h.Reloads(t) != 0 {
			t.Fatalf("reloads: Data Plane API %d, HAProxy %d", api.Reloads(), w.h.Reloads(t))
		}
	}

	step(t, "initial sync adds servers without a reload", func(t *testing.T) {
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: b})
		w.mustReconcile()
		w.expectServers("be", map[string]server{a: {"127.0.2.1", int(np), "ready"}, b: {"127.0.2.2", int(np), "ready"}})
		w.expectTraffic("be", a, b)
		noReload(t)
		if got := len(api.Servers("be")); got != 2 {
			t.Errorf("haproxy.cfg (test API) has %d servers, want 2", got)
		}
	})
	step(t, "scale up", func(t *testing.T) {
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: b}, endpoint{ip: "10.244.0.3", node: c})
		w.mustReconcile()
		w.expectTraffic("be", a, b, c)
		noReload(t)
	})
	step(t, "endpoint moves from b to c: b parked out of traffic", func(t *testing.T) {
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: c}, endpoint{ip: "10.244.0.3", node: c})
		w.mustReconcile()
		w.expectServers("be", map[string]server{a: {"127.0.2.1", int(np), "ready"}, b: {"127.0.2.2", int(np), "maint"}, c: {"127.0.2.3", int(np), "ready"}})
		w.expectTraffic("be", a, c)
		noReload(t)
	})
	step(t, "drain and back", func(t *testing.T) {
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a, terminating: true}, endpoint{ip: "10.244.0.2", node: c})
		w.mustReconcile()
		w.expectTraffic("be", c)
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: c})
		w.mustReconcile()
		w.expectTraffic("be", a, c)
		noReload(t)
	})
	step(t, "a parked node comes back", func(t *testing.T) {
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: b}, endpoint{ip: "10.244.0.3", node: c})
		w.mustReconcile()
		w.expectServers("be", map[string]server{a: {"127.0.2.1", int(np), "ready"}, b: {"127.0.2.2", int(np), "ready"}, c: {"127.0.2.3", int(np), "ready"}})
		w.expectTraffic("be", a, b, c)
		noReload(t)
	})
	step(t, "a dead node added by the sync is marked DOWN by its check", func(t *testing.T) {
		listeners[c].Close()
		deadline := time.Now().Add(3*checkInter + time.Second)
		for w.h.Servers(t, "be")[c].Up() {
			if time.Now().After(deadline) {
				t.Fatalf("server %s still UP after its listener died", c)
			}
			time.Sleep(20 * time.Millisecond)
		}
		w.expectTraffic("be", a, b)
	})
}

// dataplaneDriver makes a world's driver the Data Plane API one: a test API
// that replays runtime changes on the world's HAProxy (stored in *api), and
// that HAProxy's admin socket to enable health checks; deletions batched by 10.
func dataplaneDriver(api **dataplanetest.Server, timeout time.Duration) driverFor {
	return dataplaneDriverWith(api, timeout, dataplanetest.Options{})
}

// dataplaneDriverWith is dataplaneDriver with its test API under o (its
// RuntimeSocket is h's).
func dataplaneDriverWith(api **dataplanetest.Server, timeout time.Duration, o dataplanetest.Options) driverFor {
	return func(t testing.TB, h *haproxytest.HAProxy, opts desired.Options) reconcile.Driver {
		*api = testAPIWith(t, h, o)
		socket, err := runtimeapi.New(h.RuntimeURL(), opts.Settings, opts.Check)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse((*api).URL)
		return dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: timeout},
			dataplane.WithDeleteBatch(10), dataplane.WithRuntime(socket))
	}
}

// testAPI is a Data Plane API test server for h with the backend "be" (tcp,
// roundrobin, tcp-check) from the defaults section "base" that holds the
// recommended lines, as h's haproxy.cfg has them (haproxytest.RecommendedLines),
// replaying runtime changes on h as dataplaneapi does.
func testAPI(t testing.TB, h *haproxytest.HAProxy) *dataplanetest.Server {
	return testAPIWith(t, h, dataplanetest.Options{})
}

func testAPIWith(t testing.TB, h *haproxytest.HAProxy, o dataplanetest.Options) *dataplanetest.Server {
	o.RuntimeSocket = h.AdminSocket
	api := dataplanetest.New(t, o)
	rr, on, one, three := "roundrobin", "enabled", int64(1), int64(3)
	api.AddDefaults(models.Defaults{DefaultsBase: models.DefaultsBase{Name: "base", Mode: "tcp",
		Redispatch: &models.Redispatch{Enabled: &on, Interval: &one}, Retries: &three}})
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "be", Mode: "tcp", From: "base", AdvCheck: "tcp-check", Balance: &models.Balance{Algorithm: &rr}}})
	return api
}

// TestDataplaneBurstThroughTheSocket: 30 new nodes at once (more than
// dataplane.MaxRuntimeAdds) through the Data Plane API driver with the
// runtime socket. They are added through the socket alone, gated, and
// nothing is written while they wait for their checks (on the real API a
// transaction costs ~7 ms a server, and the next reconcile waited for it);
// then the socket puts the checked ones in service and one transaction
// writes them. That commit fails once: the retry finds them in service and
// not written, and writes them without sending them to the socket again.
// Every live node earns its traffic in the running HAProxy; a node that
// died while being added never takes a connection and is not written
// (what a reload loads never holds it in service).
func TestDataplaneBurstThroughTheSocket(t *testing.T) {
	const n = dataplane.MaxRuntimeAdds + 10
	var api *dataplanetest.Server
	w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}}, dataplaneDriver(&api, 5*time.Second))
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort
	var live []string
	var eps []endpoint
	for i := range n {
		ip := fmt.Sprintf("127.0.6.%d", i+1)
		name := w.node(fmt.Sprintf("n%02d", i), ip)
		if i != 7 { // node 7 died while being added: nothing answers there
			listen(t, name, ip, np)
			live = append(live, name)
		}
		eps = append(eps, endpoint{ip: fmt.Sprintf("10.244.6.%d", i+1), node: name})
	}
	w.slice("web-1", "web", map[string]int32{"http": 8080}, eps...)
	api.InjectFault(dataplanetest.Fault{PathPrefix: "/v3/services/haproxy/transactions/", Writes: true, Status: http.StatusInternalServerError, Times: 1})

	code, first := w.reconcile()
	if code != http.StatusOK || len(first.Targets[0].Waiting) != n || len(api.Servers("be")) != 0 {
		t.Fatalf("first reconcile: %d, waiting %v, haproxy.cfg %d servers; want all waiting, nothing written", code, first.Targets[0].Waiting, len(api.Servers("be")))
	}
	res := w.mustReconcile()
	if api.FaultsHit() != 1 {
		t.Fatalf("the commit was not failed once (%d)", api.FaultsHit())
	}
	if len(res.Targets) != 1 || len(res.Targets[0].Waiting) != 1 {
		t.Fatalf("waiting: %+v, want the dead node only", res.Targets)
	}
	w.expectTraffic("be", live...)
	// Nothing was added twice: HAProxy would have refused each server as
	// existing already, and runs each once.
	if got := w.h.Servers(t, "be"); len(got) != n {
		t.Fatalf("HAProxy runs %d servers, want %d", len(got), n)
	}
	if api.Reloads() != 1 || w.h.Reloads(t) != 0 {
		t.Errorf("reloads: Data Plane API %d asked (want one), HAProxy %d", api.Reloads(), w.h.Reloads(t))
	}
	if in, all := persistedInService(api, "be"); in != n-1 || all != n-1 {
		t.Errorf("haproxy.cfg has %d servers, %d in service; want %d, in service: all but the dead node", all, in, n-1)
	}
}

// persistedInService counts the servers of backend in haproxy.cfg (the test
// API's) and those written in service: what a reload would load.
func persistedInService(api *dataplanetest.Server, backend string) (in, all int) {
	for _, s := range api.Servers(backend) {
		all++
		if s.Maintenance != "enabled" && s.Weight != nil && *s.Weight > 0 {
			in++
		}
	}
	return in, all
}

// TestDataplaneReloadWhileBurstWaits: a burst (more than
// dataplane.MaxRuntimeAdds new nodes) through the Data Plane API driver, one
// node dead, and HAProxy reloaded with what the API wrote to haproxy.cfg —
// once while every server still waits for its first check, once after the
// checked ones were written. HAProxy loads every server written in service
// UP until its first check fails: once, the burst was written in service,
// and after the reload the dead node was in service until then and was
// never gated again. Now nothing is written before a check passed: the
// first reload drops the burst, the next reconcile adds it again, gated;
// after the second reload the checked servers serve at once, and the dead
// node is not in haproxy.cfg at all.
func TestDataplaneReloadWhileBurstWaits(t *testing.T) {
	const n = dataplane.MaxRuntimeAdds + 5
	var api *dataplanetest.Server
	w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}}, dataplaneDriver(&api, 5*time.Second))
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort
	var live []string
	var dead string
	var eps []endpoint
	for i := range n {
		ip := fmt.Sprintf("127.0.8.%d", i+1)
		name := w.node(fmt.Sprintf("n%02d", i), ip)
		if i == 3 {
			dead = name
		} else {
			listen(t, name, ip, np)
			live = append(live, name)
		}
		eps = append(eps, endpoint{ip: fmt.Sprintf("10.244.8.%d", i+1), node: name})
	}
	w.slice("web-1", "web", map[string]int32{"http": 8080}, eps...)

	deadOut := func(when string) {
		t.Helper()
		// Through the first checks after the reload, sampled often: a
		// server loaded UP is marked DOWN after fall failed checks.
		for end := time.Now().Add(10 * shipped.FastInter); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			srv, ok := w.h.Servers(t, "be")[dead]
			if ok && srv.Up() && !srv.Drain() && !srv.Maint() && srv.Weight > 0 {
				t.Fatalf("%s: %s in service without a passed check: %+v", when, dead, srv)
			}
		}
	}
	reload := func() {
		t.Helper()
		w.h.SetServers(t, "be", api.ServerLines("be"))
		w.h.Reload(t)
	}

	if code, res := w.reconcile(); code != 200 || len(res.Targets[0].Waiting) != n {
		t.Fatalf("first reconcile: %d, waiting %v; want all %d waiting", code, res.Targets[0].Waiting, n)
	}
	reload()
	deadOut("reloaded while every server waited")

	res := w.mustReconcile() // the reloaded servers are gated again and pass
	if fmt.Sprint(res.Targets[0].Waiting) != "["+dead+"]" {
		t.Fatalf("waiting %v, want the dead node only", res.Targets[0].Waiting)
	}
	w.expectTraffic("be", live...)
	reload()
	deadOut("reloaded after the checked servers were persisted")
	w.expectTraffic("be", live...) // no reconcile: haproxy.cfg held them in service
}

// TestDataplaneAddsThatReload: the API answers every server add with a
// reload that runs later (a default-server line in the defaults section, as
// most haproxy.cfg have; dataplaneapi before 3.3.5 on HAProxy 3.2+ does the
// same), one node answers and one is dead. Before, the follow-up found both
// servers in haproxy.cfg and not in the running HAProxy, took them for
// servers whose checks cannot be seen and wrote them in service, and the
// reload loaded the dead one UP with no check ever run. Now the reload is
// reported, both are added gated through the socket at once, the live one
// enters service without waiting for the reload, and a reload while the
// dead one waits (haproxy.cfg as the API wrote it) never puts it in
// service: it is gated again.
func TestDataplaneAddsThatReload(t *testing.T) {
	var api *dataplanetest.Server
	w := newWorldLines(t, []string{"balance roundrobin", "option tcp-check", "default-server maxconn 1000"}, "web", desired.NodeMode,
		[]desired.PortBackend{{Backend: "be"}}, dataplaneDriverWith(&api, 5*time.Second, dataplanetest.Options{DefaultsDefaultServer: true}))
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort
	ipA, ipDead := "127.0.9.61", "127.0.9.62"
	a, dead := w.node("a", ipA), w.node("dead", ipDead)
	listen(t, a, ipA, np)
	w.slice("web-1", "web", map[string]int32{"http": 8080}, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: dead})

	deadOut := func(when string) {
		t.Helper()
		if srv, ok := w.h.Servers(t, "be")[dead]; ok && srv.Up() && !srv.Drain() && !srv.Maint() && srv.Weight > 0 {
			t.Fatalf("%s: %s in service without a passed check: %+v", when, dead, srv)
		}
	}
	code, res := w.reconcile()
	if code != 200 || res.Targets[0].UnexpectedReloads == 0 || len(res.Targets[0].Waiting) != 2 {
		t.Fatalf("first reconcile: %d %+v; want the reload reported, both waiting", code, res.Targets[0])
	}
	// Reconcile, as the follow-up would, until only the dead node waits:
	// the live one enters service in the running HAProxy, no reload run.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, res = w.reconcile()
		deadOut("before the reload")
		if fmt.Sprint(res.Targets[0].Waiting) == "["+dead+"]" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting %v, want [%s] alone", res.Targets[0].Waiting, dead)
		}
	}
	w.expectTraffic("be", a)

	// The API's reload runs now, with haproxy.cfg as it wrote it.
	w.h.SetServers(t, "be", api.ServerLines("be"))
	w.h.Reload(t)
	for end := time.Now().Add(10 * shipped.FastInter); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		deadOut("after the reload")
	}
	w.expectTraffic("be", a)
	_, res = w.reconcile()
	if fmt.Sprint(res.Targets[0].Waiting) != "["+dead+"]" || len(res.Targets[0].Loading) != 0 {
		t.Fatalf("after the reload: waiting %v, loading %v; want the dead node gated again", res.Targets[0].Waiting, res.Targets[0].Loading)
	}
	if srv := w.h.Servers(t, "be")[dead]; !srv.Drain() || !srv.CheckRunning() {
		t.Errorf("%s after the reload: %+v, want it gated (drain, check running)", dead, srv)
	}
}

// TestDataplaneReturningServerIsRenewed: through the Data Plane API driver,
// a node whose endpoint was not ready (its server parked) is ready again.
// Leaving maintenance keeps a server's check on its steady inter (1.5 s
// shipped, no CLI command wakes it), so its server is deleted and added
// again through the socket, with its id and the keywords haproxy.cfg
// holds, gated: a fresh server whose first check comes at once (its
// session total starts from 0). It enters service once that check passed,
// and haproxy.cfg is left as the API wrote it.
func TestDataplaneReturningServerIsRenewed(t *testing.T) {
	var api *dataplanetest.Server
	w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}}, dataplaneDriver(&api, 5*time.Second))
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort
	a, b := w.node("a", "127.0.9.71"), w.node("b", "127.0.9.72")
	listen(t, a, "127.0.9.71", np)
	listen(t, b, "127.0.9.72", np)
	ports := map[string]int32{"http": 8080}
	w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: b})
	w.mustReconcile()
	w.expectTraffic("be", a, b)
	id := w.h.Servers(t, "be")[b].ID

	w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: b, notReady: true})
	w.mustReconcile()
	if !w.h.Servers(t, "be")[b].Maint() {
		t.Fatalf("%s not parked: %+v", b, w.h.Servers(t, "be")[b])
	}
	w.expectTraffic("be", a)

	w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: b})
	if _, res := w.reconcile(); fmt.Sprint(res.Targets[0].Waiting) != "["+b+"]" {
		t.Fatalf("waiting %v, want %s gated", res.Targets[0].Waiting, b)
	}
	got := w.h.Servers(t, "be")[b]
	stat, err := w.h.Command("show stat be 4 -1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != id || !got.Drain() || got.Up() || haproxytest.StatField(stat, b, "stot") != "0" {
		t.Errorf("%s back: %+v, session total %s; want id %d, drained, not UP, added again (0)", b, got, haproxytest.StatField(stat, b, "stot"), id)
	}
	w.mustReconcile()
	w.expectTraffic("be", a, b)
	for _, s := range api.Servers("be") {
		if s.Name == b && s.Maintenance == "enabled" {
			t.Errorf("haproxy.cfg still parks %s", b)
		}
	}
}

// TestWaitingServerLoadedParkedIsGatedAgain: the real service (watching,
// its follow-up polling the socket, nobody POSTing), the Data Plane API
// driver with a default-server line (every add answered with a reload) and
// a node that answers nothing yet. The API's reload runs while its server
// waits, and loads it parked, where no check runs. Before, the follow-up
// waited for that check to pass and nothing gated the server again until a
// Kubernetes change or the resync (160 s and more, by hand); now a waiting
// server with no running check is due: it is gated again at once, and once
// its node answers it enters service, with no POST and no Kubernetes write.
func TestWaitingServerLoadedParkedIsGatedAgain(t *testing.T) {
	w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}})
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort
	ipA, ipLate := "127.0.9.81", "127.0.9.82"
	a, late := w.node("a", ipA), w.node("late", ipLate)
	listen(t, a, ipA, np)
	w.slice("web-1", "web", map[string]int32{"http": 8080}, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: late})
	api := testAPIWith(t, w.h, dataplanetest.Options{DefaultsDefaultServer: true})
	s := startService(t, "KUBECONFIG="+kubeconfigVia(t, apiHostPort(t)), "INGRESS_NAMESPACE="+w.ns, "INGRESS_SERVICE_NAME=web",
		"HAPROXY_BACKEND_NAME=be", "HAPROXY_RUNTIME_URL="+w.h.RuntimeURL(), "HAPROXY_DATAPLANE_URL="+api.URL)
	s.wait(t, "/readyz", 10*time.Second)
	w.expectTraffic("be", a)
	if srv := w.h.Servers(t, "be")[late]; !srv.Drain() || !srv.CheckRunning() {
		t.Fatalf("%s before the reload: %+v, want it gated", late, srv)
	}

	// The API's reload: haproxy.cfg as it wrote it, the late node parked.
	w.h.SetServers(t, "be", api.ServerLines("be"))
	w.h.Reload(t)
	deadline := time.Now().Add(10 * time.Second)
	for srv := w.h.Servers(t, "be")[late]; !srv.CheckRunning(); srv = w.h.Servers(t, "be")[late] {
		if time.Now().After(deadline) {
			t.Fatalf("%s after the reload: %+v, not gated again after 10 s", late, srv)
		}
		time.Sleep(20 * time.Millisecond)
	}
	listen(t, late, ipLate, np)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if srv := w.h.Servers(t, "be")[late]; srv.Up() && !srv.Drain() && !srv.Maint() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never in service once it answered: %+v", late, w.h.Servers(t, "be")[late])
		}
	}
	w.expectTraffic("be", a, late)
}

// TestDataplaneNotReadyServerIsCheckedWhileItWaits: through the Data Plane
// API driver, a new endpoint that is not ready yet (a pod starting) gets its
// server in maintenance with its check running, as the runtime API driver's
// adds have: once the endpoint is ready its check has passed, and the
// reconcile that reads it puts it in service, without waiting for a check.
// Before, its check started only when it was ready (one more check, ~0.4 s,
// with the backend one server short in a maxUnavailable 0 rollout).
func TestDataplaneNotReadyServerIsCheckedWhileItWaits(t *testing.T) {
	var api *dataplanetest.Server
	w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}}, dataplaneDriver(&api, 5*time.Second))
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort
	a, b := w.node("a", "127.0.9.91"), w.node("b", "127.0.9.92")
	listen(t, a, "127.0.9.91", np)
	listen(t, b, "127.0.9.92", np)
	ports := map[string]int32{"http": 8080}
	w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: b, notReady: true})
	w.mustReconcile()
	sock, err := runtimeapi.New(w.h.RuntimeURL(), model.Settings{}, model.Check{})
	if err != nil {
		t.Fatal(err)
	}
	passed := func() bool {
		rs, err := sock.ReadRuntime(context.Background(), "be")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range rs {
			if s.Name == b {
				return s.Runtime.CheckRunning && s.Runtime.CheckPassed
			}
		}
		return false
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		srv := w.h.Servers(t, "be")[b]
		if !srv.Maint() {
			t.Fatalf("%s: %+v, want it in maintenance while not ready", b, srv)
		}
		if passed() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s in maintenance: %+v, its check never passed", b, srv)
		}
	}
	w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: b})
	if _, res := w.reconcile(); len(res.Targets[0].Waiting) != 0 || fmt.Sprint(res.Targets[0].Update) != "["+b+"]" {
		t.Fatalf("ready: %+v, want %s in service at once", res.Targets[0], b)
	}
	w.expectTraffic("be", a, b)
}
