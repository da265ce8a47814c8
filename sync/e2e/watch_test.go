package e2e

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
)

// TestWatchWithoutPost runs the real service as a plain install does: its
// defaults (watching), a Kubernetes API server, a real HAProxy through the
// runtime API, and nobody POSTing. Every change made through the API server
// reaches HAProxy, shown by traffic through its frontend; a cut watch
// connection and an API server away for a while lose no change.
func TestWatchWithoutPost(t *testing.T) {
	w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}})
	a, b, c := w.node("a", "127.0.4.1"), w.node("b", "127.0.4.2"), w.node("c", "127.0.4.3")
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort
	w.heartbeat(a) // a Ready condition, as a kubelet writes it
	for name, ip := range map[string]string{a: "127.0.4.1", b: "127.0.4.2", c: "127.0.4.3", "b-moved": "127.0.4.4"} {
		listen(t, name, ip, np)
	}
	ports := map[string]int32{"http": 8080}
	w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: b})

	proxy := newCutProxy(t, apiHostPort(t))
	s := startService(t,
		"KUBECONFIG="+kubeconfigVia(t, proxy.addr()), "INGRESS_NAMESPACE="+w.ns, "INGRESS_SERVICE_NAME=web",
		"HAPROXY_BACKEND_NAME=be", "HAPROXY_RUNTIME_URL="+w.h.RuntimeURL(),
		"HAPROXY_CHECK_INTER=200ms", "HAPROXY_CHECK_RISE=1", "HAPROXY_CHECK_FALL=1", "LOG_LEVEL=debug")

	step(t, "ready once watching and synced", func(t *testing.T) {
		s.wait(t, "/readyz", 10*time.Second)
		w.expectTraffic("be", a, b)
	})
	step(t, "scale up", func(t *testing.T) {
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: b}, endpoint{ip: "10.244.0.3", node: c})
		w.expectTraffic("be", a, b, c)
	})
	step(t, "a Node's address changes", func(t *testing.T) {
		w.nodeAddress(b, "127.0.4.4")
		w.expectTraffic("be", a, "b-moved", c)
	})
	step(t, "a kubelet heartbeat pokes nothing", func(t *testing.T) {
		before := s.metric(t, "haproxy_k8s_sync_watch_events_total", `kind="node"`, `poked="false"`)
		w.heartbeat(a)
		deadline := time.Now().Add(5 * time.Second)
		for s.metric(t, "haproxy_k8s_sync_watch_events_total", `kind="node"`, `poked="false"`) == before {
			if time.Now().After(deadline) {
				t.Fatal("the heartbeat was not seen, or it poked")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	step(t, "a cut watch connection loses no change", func(t *testing.T) {
		restarts := s.metric(t, "haproxy_k8s_sync_watch_restarts_total")
		proxy.cut()
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a, terminating: true}, endpoint{ip: "10.244.0.2", node: b}, endpoint{ip: "10.244.0.3", node: c})
		w.expectTraffic("be", "b-moved", c)
		if got := s.metric(t, "haproxy_k8s_sync_watch_restarts_total"); got < restarts+2 {
			t.Errorf("watch restarts %v -> %v, want every watch restarted", restarts, got)
		}
	})
	step(t, "an API server away for a while loses no change", func(t *testing.T) {
		proxy.refuse()
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: b})
		time.Sleep(time.Second)
		w.expectTraffic("be", "b-moved", c) // nothing could be read: HAProxy unchanged
		proxy.allow()
		w.expectTraffic("be", a, "b-moved")
	})
	if n := w.h.Reloads(t); n != 0 {
		t.Errorf("HAProxy reloaded %d times", n)
	}
	if testing.Verbose() {
		t.Logf("service logs:\n%s", s.logs.String())
	}
	if n := s.metric(t, "haproxy_k8s_sync_pokes_total", `source="watch"`); n < 5 {
		t.Errorf("%v watch pokes", n)
	}
}

// nodeAddress sets the InternalIP of the Node name.
func (w *world) nodeAddress(name, ip string) {
	w.t.Helper()
	n, err := cluster.client.CoreV1().Nodes().Get(w.ctx, name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
	if _, err := cluster.client.CoreV1().Nodes().UpdateStatus(w.ctx, n, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

// heartbeat updates the Node's Ready condition heartbeat as a kubelet does.
func (w *world) heartbeat(name string) {
	w.t.Helper()
	n, err := cluster.client.CoreV1().Nodes().Get(w.ctx, name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	// Times are stored to the second: move past the last heartbeat, so the
	// update is never a no-op that sends no event.
	now := metav1.Now()
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}
	found := false
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			ready.LastHeartbeatTime = metav1.NewTime(n.Status.Conditions[i].LastHeartbeatTime.Add(time.Second))
			ready.LastTransitionTime = n.Status.Conditions[i].LastTransitionTime
			n.Status.Conditions[i] = ready
			found = true
		}
	}
	if !found {
		n.Status.Conditions = append(n.Status.Conditions, ready)
	}
	if _, err := cluster.client.CoreV1().Nodes().UpdateStatus(w.ctx, n, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}
