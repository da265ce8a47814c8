package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// kubeProxyHealth answers GET /healthz on addr as kube-proxy does: 200
// while healthy is true, 503 otherwise.
func kubeProxyHealth(t *testing.T, addr string) *atomic.Bool {
	t.Helper()
	var healthy atomic.Bool
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"localEndpoints":0}`)
			return
		}
		fmt.Fprint(w, `{"localEndpoints":1}`)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return &healthy
}

// checkPorts returns each server's check port as HAProxy shows it (0: the
// server's own).
func checkPorts(t *testing.T, w *world, backend string) map[string]int {
	t.Helper()
	out, err := w.h.Command("show servers state " + backend)
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 21 && f[1] == backend {
			ports[f[3]], _ = strconv.Atoi(f[21])
		}
	}
	return ports
}

// TestHealthCheckNodePort: a Service with externalTrafficPolicy Local has
// its Nodes checked as a cloud load balancer checks them, on its
// healthCheckNodePort with GET /healthz (HAProxy 2.6 / 3.0, a backend with
// "option httpchk GET /healthz" and HAPROXY_CHECK_HEALTH_NODE_PORT=on, the
// runtime API). Both Nodes' NodePorts
// answer, but a Node whose kube-proxy says it has no local endpoint takes
// no traffic, and enters once it has one; one that loses it leaves at its
// next check, before any reconcile. With externalTrafficPolicy Cluster and
// HAPROXY_CHECK_KUBE_PROXY_PORT, the checks move to kube-proxy's own port,
// which answers 503 for a Node being deleted.
func TestHealthCheckNodePort(t *testing.T) {
	w := newWorldLines(t, []string{"balance roundrobin", "option httpchk GET /healthz"}, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}})
	// HAPROXY_CHECK_HEALTH_NODE_PORT=on: haproxy.cfg has the HTTP check.
	w.rec.Options.HTTPHealthChecks, w.rec.Options.HealthCheckNodePort = true, true
	svc, err := cluster.client.CoreV1().Services(w.ns).Create(w.ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}, Selector: map[string]string{"app": "web"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	np, hcnp := svc.Spec.Ports[0].NodePort, svc.Spec.HealthCheckNodePort
	if hcnp == 0 {
		t.Fatal("the API server allocated no healthCheckNodePort")
	}
	ipA, ipB := "127.0.14.1", "127.0.14.2"
	a, b := w.node("a", ipA), w.node("b", ipB)
	listen(t, a, ipA, np)
	listen(t, b, ipB, np)
	healthA := kubeProxyHealth(t, fmt.Sprintf("%s:%d", ipA, hcnp))
	healthB := kubeProxyHealth(t, fmt.Sprintf("%s:%d", ipB, hcnp))
	healthA.Store(true)
	w.slice("web-1", "web", map[string]int32{"http": 8080}, endpoint{ip: "10.244.14.1", node: a}, endpoint{ip: "10.244.14.2", node: b})

	step(t, "kube-proxy on b has no local endpoint: b waits", func(t *testing.T) {
		res := w.mustReconcile()
		if ports := checkPorts(t, w, "be"); ports[a] != int(hcnp) || ports[b] != int(hcnp) {
			t.Fatalf("check ports %v, want %d (the healthCheckNodePort)", ports, hcnp)
		}
		if got := res.Targets[0].Waiting; len(got) != 1 || got[0] != b {
			t.Errorf("waiting %v, want [%s]", got, b)
		}
		w.expectTraffic("be", a)
	})
	step(t, "b gets its local endpoint: it enters", func(t *testing.T) {
		healthB.Store(true)
		res := w.mustReconcile()
		w.expectTraffic("be", a, b)
		if got := res.Targets[0].HealthPortTCP; len(got) != 0 {
			t.Errorf("HTTP-checked servers listed as TCP-checked: %v", got)
		}
	})
	step(t, "a loses its local endpoint: it leaves at its next check, no reconcile", func(t *testing.T) {
		healthA.Store(false)
		w.expectTraffic("be", b)
		healthA.Store(true)
		w.expectTraffic("be", a, b)
	})
	step(t, "externalTrafficPolicy Cluster with kube-proxy's port: a Node being deleted leaves", func(t *testing.T) {
		kp := haproxytest.FreePort(t, ipA)
		kpA := kubeProxyHealth(t, fmt.Sprintf("%s:%d", ipA, kp))
		kpB := kubeProxyHealth(t, fmt.Sprintf("%s:%d", ipB, kp))
		kpA.Store(true) // b's kube-proxy: 503, its Node is being deleted
		cur, err := cluster.client.CoreV1().Services(w.ns).Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		cur.Spec.HealthCheckNodePort = 0
		if _, err := cluster.client.CoreV1().Services(w.ns).Update(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		w.rec.Options.KubeProxyHealthPort = kp
		w.mustReconcile()
		if ports := checkPorts(t, w, "be"); ports[a] != kp || ports[b] != kp {
			t.Fatalf("check ports %v, want %d (kube-proxy's)", ports, kp)
		}
		w.expectTraffic("be", a)
		kpB.Store(true)
		w.expectTraffic("be", a, b)
	})
}

// TestHealthPortCheckedByTCPIsReported: HAPROXY_CHECK_HEALTH_NODE_PORT=on
// but haproxy.cfg's backend has no option httpchk. HAProxy then checks the
// healthCheckNodePort with a TCP connect, which kube-proxy accepts even
// while it answers 503, so a Node without a local endpoint takes traffic.
// The service cannot write the check through the runtime API; it must say
// so: once a check has run (L4OK), the reconcile lists the servers.
func TestHealthPortCheckedByTCPIsReported(t *testing.T) {
	w := newWorldLines(t, []string{"balance roundrobin"}, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}})
	w.rec.Options.HTTPHealthChecks, w.rec.Options.HealthCheckNodePort = true, true // "on", wrongly
	svc, err := cluster.client.CoreV1().Services(w.ns).Create(w.ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}, Selector: map[string]string{"app": "web"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	np, hcnp := svc.Spec.Ports[0].NodePort, svc.Spec.HealthCheckNodePort
	ipA, ipB := "127.0.15.1", "127.0.15.2"
	a, b := w.node("a", ipA), w.node("b", ipB)
	listen(t, a, ipA, np)
	listen(t, b, ipB, np)
	kubeProxyHealth(t, fmt.Sprintf("%s:%d", ipA, hcnp)).Store(true)
	kubeProxyHealth(t, fmt.Sprintf("%s:%d", ipB, hcnp)) // 503: no local endpoint
	w.slice("web-1", "web", map[string]int32{"http": 8080}, endpoint{ip: "10.244.15.1", node: a}, endpoint{ip: "10.244.15.2", node: b})

	res := w.mustReconcile()
	if got := res.Targets[0].HealthPortTCP; len(got) != 0 {
		t.Errorf("listed before any check ran: %v", got)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(res.Targets[0].HealthPortTCP) < 2 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		res = w.mustReconcile()
	}
	if got := res.Targets[0].HealthPortTCP; len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("healthPortTCP %v, want [%s %s]", got, a, b)
	}
	// What the report is about: b's kube-proxy says 503, yet b serves.
	w.expectTraffic("be", a, b)
}
