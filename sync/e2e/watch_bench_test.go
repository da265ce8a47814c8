package e2e

import (
	"fmt"
	"net/http"
	"os"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
)

// idleFor is how long BenchmarkWatchNoPost leaves the service alone; `make
// bench` sets HKS_BENCH_IDLE=1m, the test run a few seconds.
func idleFor(b *testing.B) time.Duration {
	d := 3 * time.Second
	if v := os.Getenv("HKS_BENCH_IDLE"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			b.Fatalf("HKS_BENCH_IDLE: %v", err)
		}
	}
	return d
}

// BenchmarkWatchNoPost measures the plain install, where nobody POSTs: the
// real service with its defaults (watching, the shipped check timing), the Data Plane API test server
// mirroring its runtime changes onto a real HAProxy (with that HAProxy's
// admin socket, as README recommends), a real kube-apiserver. It reports:
//   - change-p50-ms, change-p90-ms: from the EndpointSlice write to HAProxy
//     showing the new state of the server, over 20 drain/ready flips;
//   - churn-reloads: Data Plane API reloads plus real HAProxy reloads over
//     those 20 flips and 10 endpoint moves between nodes (each adds or
//     parks a server); the target is 0;
//   - idle-writes: configuration versions written while the service sat
//     idle (HKS_BENCH_IDLE) after 10 writes that change nothing (slice
//     annotations, kubelet heartbeats); the target is 0.
func BenchmarkWatchNoPost(b *testing.B) {
	w := newWorld(b, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}})
	api := testAPI(b, w.h)
	nodes := []string{w.node("a", "127.0.5.1"), w.node("b", "127.0.5.2"), w.node("c", "127.0.5.3")}
	for _, n := range nodes {
		w.heartbeat(n)
	}
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort
	for i, n := range nodes {
		listen(b, n, fmt.Sprintf("127.0.5.%d", i+1), np)
	}
	ports := map[string]int32{"http": 8080}
	a, bn, c := nodes[0], nodes[1], nodes[2]
	w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: bn})

	proxy := newCutProxy(b, apiHostPort(b))
	s := startService(b,
		"KUBECONFIG="+kubeconfigVia(b, proxy.addr()), "INGRESS_NAMESPACE="+w.ns, "INGRESS_SERVICE_NAME=web",
		"HAPROXY_BACKEND_NAME=be", "HAPROXY_DATAPLANE_URL="+api.URL, "HAPROXY_RUNTIME_URL="+w.h.RuntimeURL()) // shipped check timing
	s.wait(b, "/readyz", 10*time.Second)
	w.expectTraffic("be", a, bn)
	b.ResetTimer()

	// until polls HAProxy's own state until ok says the change is there.
	until := func(what string, ok func(map[string]bool) bool) time.Duration {
		start := time.Now()
		for {
			drain := map[string]bool{}
			for name, srv := range w.h.Servers(b, "be") {
				// The Data Plane API drains with weight 0.
				drain[name] = srv.Drain() || srv.Maint() || srv.Weight == 0
			}
			if ok(drain) {
				return time.Since(start)
			}
			if time.Since(start) > 10*time.Second {
				b.Fatalf("%s: not in HAProxy after 10s: %v", what, drain)
			}
			time.Sleep(time.Millisecond)
		}
	}
	reloads := func() int { return api.Reloads() + w.h.Reloads(b) }

	var lat []time.Duration
	for i := range 20 {
		terminating := i%2 == 0
		start := time.Now()
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a, terminating: terminating}, endpoint{ip: "10.244.0.2", node: bn})
		until("flip", func(out map[string]bool) bool { return out[a] == terminating })
		lat = append(lat, time.Since(start))
	}
	for i := range 10 { // the second endpoint moves between b and c
		to, from := c, bn
		if i%2 == 1 {
			to, from = bn, c
		}
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: to})
		until("move", func(out map[string]bool) bool { o, ok := out[to]; return ok && !o && out[from] })
	}
	churnReloads := reloads()

	version := api.Version()
	before := w.h.Servers(b, "be")
	for i := range 5 {
		w.annotateSlice("web-1", fmt.Sprintf("note-%d", i))
		w.heartbeat(nodes[i%3])
	}
	time.Sleep(idleFor(b))
	idleWrites := api.Version() - version
	after := w.h.Servers(b, "be")
	for name, srv := range before {
		if after[name].Admin != srv.Admin || after[name].Address != srv.Address || after[name].Weight != srv.Weight {
			b.Errorf("server %s changed while idle: %+v -> %+v", name, srv, after[name])
		}
	}
	if churnReloads != 0 || idleWrites != 0 {
		b.Errorf("churn reloads %d, idle writes %d; want 0 and 0", churnReloads, idleWrites)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(ms(lat[len(lat)/2]), "change-p50-ms")
	b.ReportMetric(ms(lat[len(lat)*9/10]), "change-p90-ms")
	b.ReportMetric(float64(churnReloads), "churn-reloads")
	b.ReportMetric(float64(idleWrites), "idle-writes")
}

// BenchmarkWatchScaleUp200 measures a 200-node scale-up with nobody POSTing:
// the real service watching a real kube-apiserver, and a real HAProxy driven
// through its runtime API alone (runtime) or through the Data Plane API test
// server with the runtime socket beside it (dataplane), on the shipped check
// timing (rise 2: each server passes two checks first). 200 Nodes exist; one
// EndpointSlice write puts an endpoint on each. It reports the time from that
// write until HAProxy has 200 servers UP with passing checks and in service
// (scale-up-ms), then proves it with traffic reaching every node, and the
// reloads (reloads: those the Data Plane API runs, whose reload the test
// server does not replay, plus the real HAProxy's; reloads-asked: the
// commits that asked for one).
//
// With the Data Plane API, the burst goes in through the socket alone;
// once the servers passed their checks the socket puts them in service and
// one transaction writes them to haproxy.cfg in service (one reload). The
// benchmark checks that haproxy.cfg holds the 200 servers in service, so
// that the reload loads what converged.
func BenchmarkWatchScaleUp200(b *testing.B) {
	for _, driver := range []string{"runtime", "dataplane"} {
		b.Run(driver, func(b *testing.B) { scaleUp(b, 200, driver == "dataplane") })
	}
}

func scaleUp(b *testing.B, n int, dataplane bool) {
	w, names, eps := nodesWorld(b, n, 20)
	ports := map[string]int32{"http": 8080}
	w.slice("web-1", "web", ports, eps[0])
	proxy := newCutProxy(b, apiHostPort(b))
	env := []string{
		"KUBECONFIG=" + kubeconfigVia(b, proxy.addr()), "INGRESS_NAMESPACE=" + w.ns, "INGRESS_SERVICE_NAME=web",
		"HAPROXY_BACKEND_NAME=be", "HAPROXY_RUNTIME_URL=" + w.h.RuntimeURL(), // shipped check timing
	}
	var api *dataplanetest.Server
	if dataplane {
		api = testAPI(b, w.h)
		env = append(env, "HAPROXY_DATAPLANE_URL="+api.URL)
	}
	s := startService(b, env...)
	s.wait(b, "/readyz", 10*time.Second)
	w.expectTraffic("be", names[0])
	b.ResetTimer()

	start := time.Now()
	w.slice("web-1", "web", ports, eps...)
	for {
		up := 0
		for _, srv := range w.h.Servers(b, "be") {
			if srv.Up() && !srv.Maint() && !srv.Drain() && srv.Weight > 0 {
				up++
			}
		}
		if up == n {
			break
		}
		if time.Since(start) > 30*time.Second {
			b.Fatalf("%d of %d servers UP after 30s", up, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	b.StopTimer()
	w.expectTraffic("be", names...)
	if api != nil {
		// The transaction that writes them follows the socket's entry.
		in, _ := persistedInService(api, "be")
		for end := time.Now().Add(10 * time.Second); in != n && time.Now().Before(end); in, _ = persistedInService(api, "be") {
			time.Sleep(10 * time.Millisecond)
		}
		if in != n {
			b.Errorf("haproxy.cfg holds %d servers in service 10 s on, want %d", in, n)
		}
	}
	reloads, asked := w.h.Reloads(b), 0
	if api != nil {
		reloads += api.ReloadsRun()
		asked = api.Reloads()
	}
	if reloads > 1 {
		b.Errorf("%d reloads, want at most 1", reloads)
	}
	b.ReportMetric(ms(took), "scale-up-ms")
	b.ReportMetric(float64(reloads), "reloads")
	b.ReportMetric(float64(asked), "reloads-asked")
}

// BenchmarkWatchDrain200 measures a node pool drained: 200 nodes in
// service, then one EndpointSlice write leaves endpoints on 3 of them (as
// BenchmarkWatchScaleUp200, both drivers, the service watching). It
// reports the time from that write until the last of the 197 leaving
// servers is out of traffic in HAProxy (out-ms: drain, maintenance or
// gone), the answer time of a POST /reconcile sent right after the write
// (post-ms: it shares the reconcile the watch started, or the next), and
// the reloads. With the Data Plane API the leaving servers go out through
// the socket and one transaction persists them (it took a versioned PUT
// each, ~8 s for 197 on the real API).
func BenchmarkWatchDrain200(b *testing.B) {
	for _, driver := range []string{"runtime", "dataplane"} {
		b.Run(driver, func(b *testing.B) { drain(b, 200, 3, driver == "dataplane") })
	}
}

func drain(b *testing.B, n, keep int, dataplane bool) {
	w, names, eps := nodesWorld(b, n, 30)
	ports := map[string]int32{"http": 8080}
	w.slice("web-1", "web", ports, eps...)
	env := []string{
		"KUBECONFIG=" + kubeconfigVia(b, apiHostPort(b)), "INGRESS_NAMESPACE=" + w.ns, "INGRESS_SERVICE_NAME=web",
		"HAPROXY_BACKEND_NAME=be", "HAPROXY_RUNTIME_URL=" + w.h.RuntimeURL(), // shipped settings
	}
	var api *dataplanetest.Server
	if dataplane {
		api = testAPI(b, w.h)
		env = append(env, "HAPROXY_DATAPLANE_URL="+api.URL)
	}
	s := startService(b, env...)
	s.wait(b, "/readyz", 10*time.Second)
	inService := func() map[string]bool {
		out := map[string]bool{}
		for name, srv := range w.h.Servers(b, "be") {
			if srv.Up() && !srv.Maint() && !srv.Drain() && srv.Weight > 0 {
				out[name] = true
			}
		}
		return out
	}
	for deadline := time.Now().Add(30 * time.Second); len(inService()) < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("set-up: %d of %d servers in service after 30s", len(inService()), n)
		}
	}
	reloadsBefore, askedBefore := w.h.Reloads(b), 0
	if api != nil {
		reloadsBefore += api.ReloadsRun()
		askedBefore = api.Reloads()
	}
	b.ResetTimer()

	start := time.Now()
	w.slice("web-1", "web", ports, eps[:keep]...)
	posted := make(chan time.Duration, 1)
	go func() {
		resp, err := http.Post(s.base+"/reconcile", "", nil)
		if err == nil {
			resp.Body.Close()
		}
		posted <- time.Since(start)
	}()
	var out time.Duration
	for {
		in := inService()
		if len(in) <= keep {
			out = time.Since(start)
			break
		}
		if time.Since(start) > 30*time.Second {
			b.Fatalf("%d servers still in service after 30s, want %d", len(in), keep)
		}
		time.Sleep(2 * time.Millisecond)
	}
	post := <-posted
	b.StopTimer()
	w.expectTraffic("be", names[:keep]...)
	reloads, asked := w.h.Reloads(b)-reloadsBefore, 0
	if api != nil {
		reloads += api.ReloadsRun()
		asked = api.Reloads() - askedBefore
	}
	b.ReportMetric(ms(out), "out-ms")
	b.ReportMetric(ms(post), "post-ms")
	b.ReportMetric(float64(reloads), "reloads")
	b.ReportMetric(float64(asked), "reloads-asked")
}

// nodesWorld is a world with the NodePort Service "web" (backend "be") and
// n Nodes answering on their NodePort at 127.0.<third+i/200>.<i%200+1>,
// with an endpoint each (not written yet).
func nodesWorld(b *testing.B, n, third int) (*world, []string, []endpoint) {
	w := newWorld(b, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}})
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort
	var names []string
	var eps []endpoint
	for i := range n {
		ip := fmt.Sprintf("127.0.%d.%d", third+i/200, i%200+1)
		name := w.node(fmt.Sprintf("n%03d", i), ip)
		listen(b, name, ip, np)
		names = append(names, name)
		eps = append(eps, endpoint{ip: fmt.Sprintf("10.%d.%d.%d", 225+third, i/200, i%200+1), node: name})
	}
	return w, names, eps
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// annotateSlice writes an annotation on the slice: a write that changes
// nothing a server depends on.
func (w *world) annotateSlice(name, note string) {
	w.t.Helper()
	c := cluster.client.DiscoveryV1().EndpointSlices(w.ns)
	sl, err := c.Get(w.ctx, name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	if sl.Annotations == nil {
		sl.Annotations = map[string]string{}
	}
	sl.Annotations["example.com/note"] = note
	if _, err := c.Update(w.ctx, sl, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}
