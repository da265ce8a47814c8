package e2e

import (
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// hungSocket is an HAProxy admin socket that accepts connections and never
// answers: an HAProxy that hangs.
func hungSocket(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return "tcp://" + ln.Addr().String()
}

// TestAHungTargetDoesNotHoldBackEntry: the real service with two runtime
// targets, the second of which accepts and never answers, nobody POSTing.
// A new endpoint's server is added gated on the live HAProxy at once; once
// its check passes it enters service there, and clients reach it, while
// the whole reconcile still waits for the hung target (up to
// RECONCILE_TIMEOUT, a minute here): each target's entry goes on by itself.
func TestAHungTargetDoesNotHoldBackEntry(t *testing.T) {
	w := newWorld(t, "web", desired.PodMode, []desired.PortBackend{{Backend: "be"}})
	w.service("web", corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "http", Port: 80})
	port := int32(haproxytest.FreePort(t, "10.244.1.1"))
	listen(t, "web-a", "10.244.1.1", port)
	start := time.Now()
	w.slice("web-1", "web", map[string]int32{"http": port}, endpoint{ip: "10.244.1.1", pod: "web-a"})
	s := startService(t, "KUBECONFIG="+kubeconfigVia(t, apiHostPort(t)), "INGRESS_NAMESPACE="+w.ns, "INGRESS_SERVICE_NAME=web",
		"HAPROXY_BACKEND_NAME=be", "HAPROXY_RUNTIME_URL="+w.h.RuntimeURL()+","+hungSocket(t), "TARGET_ADDRESS=pod",
		"RECONCILE_TIMEOUT=60s")
	for {
		if srv, ok := w.h.Servers(t, "be")["web-a"]; ok && srv.Up() && !srv.Drain() && !srv.Maint() {
			break
		}
		if time.Since(start) > 30*time.Second { // half the hung target's reconcile
			t.Fatalf("web-a not in service on the live target while the other hangs; servers %+v\nlogs:\n%s", w.h.Servers(t, "be"), s.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.expectTraffic("be", "web-a")
}

// TestRefusedServersDoNotSpin: a backend that cannot take runtime servers
// (balance static-rr) refuses every add, for good. The follow-up must not
// poke a reconcile every 50 ms for the refused server it will never see;
// the retry after a failure comes instead, 1 s doubling.
func TestRefusedServersDoNotSpin(t *testing.T) {
	w := newWorldLines(t, []string{"balance static-rr", "option tcp-check"}, "web", desired.PodMode, []desired.PortBackend{{Backend: "be"}})
	w.service("web", corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "http", Port: 80})
	port := int32(haproxytest.FreePort(t, "10.244.1.1"))
	listen(t, "web-a", "10.244.1.1", port)
	w.slice("web-1", "web", map[string]int32{"http": port}, endpoint{ip: "10.244.1.1", pod: "web-a"})
	s := startService(t, "KUBECONFIG="+kubeconfigVia(t, apiHostPort(t)), "INGRESS_NAMESPACE="+w.ns, "INGRESS_SERVICE_NAME=web",
		"HAPROXY_BACKEND_NAME=be", "HAPROXY_RUNTIME_URL="+w.h.RuntimeURL(), "TARGET_ADDRESS=pod")
	for s.metric(t, "haproxy_k8s_sync_reconciles_total") < 1 {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(4 * time.Second)
	// 1 + retries after 1, 2 and 4 s: at most 4 or 5, where polling the
	// refused server made one every ~50 ms (about 80).
	if n := s.metric(t, "haproxy_k8s_sync_reconciles_total"); n > 6 {
		t.Errorf("%v reconciles in ~4 s for a refusal that cannot change; logs:\n%s", n, s.logs.String())
	}
	if _, ok := w.h.Servers(t, "be")["web-a"]; ok {
		t.Error("a static-rr backend took a runtime server")
	}
}
