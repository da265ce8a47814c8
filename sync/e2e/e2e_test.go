package e2e

import (
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// step runs one step of a scenario; a failed step ends the scenario.
func step(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, f) {
		t.FailNow()
	}
}

// TestNodeMode follows one NodePort Service through the life of a cluster:
// initial sync, scale up, scale down with an endpoint moving node, a
// terminating endpoint, zero endpoints and a deleted Service.
func TestNodeMode(t *testing.T) {
	w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}})
	a, b, c := w.node("a", "127.0.1.1"), w.node("b", "127.0.1.2"), w.node("c", "127.0.1.3")
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort
	for name, ip := range map[string]string{a: "127.0.1.1", b: "127.0.1.2", c: "127.0.1.3"} {
		listen(t, name, ip, np)
	}
	http8080 := map[string]int32{"http": 8080}
	// Another Service with an endpoint on node c: it must never show up.
	w.service("other", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	w.slice("other-1", "other", http8080, endpoint{ip: "10.244.1.1", node: c})

	step(t, "initial sync", func(t *testing.T) {
		w.slice("web-1", "web", http8080, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: b})
		res := w.mustReconcile()
		if res.Status != "applied" || len(res.Targets[0].Add) != 2 {
			t.Fatalf("%+v", res)
		}
		w.expectServers("be", map[string]server{a: {"127.0.1.1", int(np), "ready"}, b: {"127.0.1.2", int(np), "ready"}})
		w.expectTraffic("be", a, b)
		if res := w.mustReconcile(); res.Status != "unchanged" {
			t.Errorf("second reconcile: %+v", res)
		}
	})
	step(t, "scale up", func(t *testing.T) {
		w.slice("web-1", "web", http8080, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: b}, endpoint{ip: "10.244.0.3", node: c})
		w.mustReconcile()
		w.expectServers("be", map[string]server{a: {"127.0.1.1", int(np), "ready"}, b: {"127.0.1.2", int(np), "ready"}, c: {"127.0.1.3", int(np), "ready"}})
		w.expectTraffic("be", a, b, c)
	})
	step(t, "endpoint moves from b to c, b is removed", func(t *testing.T) {
		w.slice("web-1", "web", http8080, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: c}, endpoint{ip: "10.244.0.3", node: c})
		res := w.mustReconcile()
		if len(res.Targets[0].Delete) != 1 || res.Targets[0].Delete[0] != b {
			t.Errorf("result %+v", res.Targets[0])
		}
		w.expectServers("be", map[string]server{a: {"127.0.1.1", int(np), "ready"}, c: {"127.0.1.3", int(np), "ready"}})
		w.expectTraffic("be", a, c)
	})
	step(t, "terminating endpoint drains its node", func(t *testing.T) {
		w.slice("web-1", "web", http8080, endpoint{ip: "10.244.0.1", node: a, terminating: true}, endpoint{ip: "10.244.0.2", node: c})
		w.mustReconcile()
		w.expectServers("be", map[string]server{a: {"127.0.1.1", int(np), "drain"}, c: {"127.0.1.3", int(np), "ready"}})
		w.expectTraffic("be", c)
	})
	step(t, "zero endpoints parks every server and deletes none", func(t *testing.T) {
		w.slice("web-1", "web", http8080)
		res := w.mustReconcile()
		if len(res.Targets[0].Delete) != 0 {
			t.Errorf("deleted %v", res.Targets[0].Delete)
		}
		w.expectServers("be", map[string]server{a: {"127.0.1.1", int(np), "maint"}, c: {"127.0.1.3", int(np), "maint"}})
		w.expectTraffic("be", "") // nothing answers
	})
	step(t, "endpoints come back", func(t *testing.T) {
		w.slice("web-1", "web", http8080, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: c})
		w.mustReconcile()
		w.expectTraffic("be", a, c)
	})
	step(t, "deleted Service: 503 and HAProxy untouched", func(t *testing.T) {
		if err := cluster.client.CoreV1().Services(w.ns).Delete(w.ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		code, res := w.reconcile()
		if code != http.StatusServiceUnavailable || res.Status != "error" {
			t.Fatalf("%d %+v", code, res)
		}
		w.expectServers("be", map[string]server{a: {"127.0.1.1", int(np), "ready"}, c: {"127.0.1.3", int(np), "ready"}})
		w.expectTraffic("be", a, c)
	})
	if n := w.h.Reloads(t); n != 0 {
		t.Errorf("HAProxy reloaded %d times", n)
	}
}

// TestPodModeTwoPorts syncs a two-port Service in pod mode into two backends.
func TestPodModeTwoPorts(t *testing.T) {
	w := newWorld(t, "web", desired.PodMode, []desired.PortBackend{{Port: "http", Backend: "be_http"}, {Port: "443", Backend: "be_https"}})
	w.service("web", corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "http", Port: 80}, corev1.ServicePort{Name: "https", Port: 443})
	free := haproxytest.FreePorts(t, "10.244.0.1", 2)
	pHTTP, pHTTPS := int32(free[0]), int32(free[1])
	for _, ip := range []string{"10.244.0.1", "10.244.0.2"} {
		listen(t, ip+"/http", ip, pHTTP)
		listen(t, ip+"/https", ip, pHTTPS)
	}
	ports := map[string]int32{"http": pHTTP, "https": pHTTPS}

	step(t, "initial sync, pod names", func(t *testing.T) {
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", pod: "web-a"}, endpoint{ip: "10.244.0.2", pod: "web-b"})
		res := w.mustReconcile()
		if len(res.Targets) != 2 {
			t.Fatalf("%+v", res)
		}
		w.expectServers("be_http", map[string]server{"web-a": {"10.244.0.1", int(pHTTP), "ready"}, "web-b": {"10.244.0.2", int(pHTTP), "ready"}})
		w.expectServers("be_https", map[string]server{"web-a": {"10.244.0.1", int(pHTTPS), "ready"}, "web-b": {"10.244.0.2", int(pHTTPS), "ready"}})
		w.expectTraffic("be_http", "10.244.0.1/http", "10.244.0.2/http")
		w.expectTraffic("be_https", "10.244.0.1/https", "10.244.0.2/https")
	})
	step(t, "scale down", func(t *testing.T) {
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", pod: "web-a"})
		w.mustReconcile()
		w.expectServers("be_http", map[string]server{"web-a": {"10.244.0.1", int(pHTTP), "ready"}})
		w.expectServers("be_https", map[string]server{"web-a": {"10.244.0.1", int(pHTTPS), "ready"}})
		w.expectTraffic("be_http", "10.244.0.1/http")
		w.expectTraffic("be_https", "10.244.0.1/https")
	})
	step(t, "an endpoint without a pod is named after its IP", func(t *testing.T) {
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", pod: "web-a"}, endpoint{ip: "10.244.0.2"})
		w.mustReconcile()
		w.expectServers("be_http", map[string]server{"web-a": {"10.244.0.1", int(pHTTP), "ready"}, "10-244-0-2": {"10.244.0.2", int(pHTTP), "ready"}})
		w.expectTraffic("be_http", "10.244.0.1/http", "10.244.0.2/http")
	})
}

// TestDeadServerIsMarkedDown shows that servers the sync adds have running
// health checks: a backend that dies stops getting traffic.
func TestDeadServerIsMarkedDown(t *testing.T) {
	w := newWorld(t, "web", desired.PodMode, []desired.PortBackend{{Backend: "be"}})
	w.service("web", corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "http", Port: 80})
	port := int32(haproxytest.FreePort(t, "10.244.0.3"))
	dying := listen(t, "c", "10.244.0.3", port)
	listen(t, "d", "10.244.0.4", port)
	w.slice("web-1", "web", map[string]int32{"http": port}, endpoint{ip: "10.244.0.3", pod: "c"}, endpoint{ip: "10.244.0.4", pod: "d"})
	w.mustReconcile()
	w.expectTraffic("be", "c", "d")
	dying.Close()
	w.expectTraffic("be", "d") // within 5 s; the check (inter 200ms, fall 1) marks c DOWN
	if s := w.h.Servers(t, "be")["c"]; s.Up() {
		t.Errorf("server c still UP after its listener died: %+v", s)
	}
}
