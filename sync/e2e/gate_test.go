package e2e

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// TestServersEarnTraffic runs the real service (watching, nobody POSTing)
// with each driver against a real HAProxy, and judges by traffic through its
// frontend, on the shipped check timing: a server whose node answers nothing
// never takes a connection; once the node answers, the server is put in
// service (by the follow-up: nothing in Kubernetes changed); a removed server
// with a live connection keeps it, takes no new one, and is deleted only once
// it ends; nothing reloads. The version matrix runs it on HAProxy 2.6 and 3.0.
// How soon a server enters service is BenchmarkEntryOnDefaults' to measure.
func TestServersEarnTraffic(t *testing.T) {
	for i, driver := range []string{"runtime", "dataplane"} {
		t.Run(driver, func(t *testing.T) {
			w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}})
			ipA, ipDead := fmt.Sprintf("127.0.9.%d", 10*i+1), fmt.Sprintf("127.0.9.%d", 10*i+2)
			a, dead := w.node("a", ipA), w.node("dead", ipDead)
			svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
			np := svc.Spec.Ports[0].NodePort
			listen(t, a, ipA, np)
			ports := map[string]int32{"http": 8080}
			w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a})

			// The shipped check timing: no HAPROXY_CHECK_* variable.
			env := []string{"KUBECONFIG=" + kubeconfigVia(t, apiHostPort(t)), "INGRESS_NAMESPACE=" + w.ns, "INGRESS_SERVICE_NAME=web",
				"HAPROXY_BACKEND_NAME=be", "HAPROXY_RUNTIME_URL=" + w.h.RuntimeURL()}
			reloads := func() int { return w.h.Reloads(t) }
			if driver == "dataplane" {
				api := testAPI(t, w.h)
				env = append(env, "HAPROXY_DATAPLANE_URL="+api.URL)
				reloads = func() int { return w.h.Reloads(t) + api.Reloads() }
			}
			s := startService(t, env...)
			s.wait(t, "/readyz", 10*time.Second)
			w.expectTraffic("be", a)

			step(t, "a server whose node answers nothing never takes traffic", func(t *testing.T) {
				w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: dead})
				seen := false
				for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
					srv, ok := w.h.Servers(t, "be")[dead]
					seen = seen || ok
					if ok && srv.Up() && !srv.Drain() && !srv.Maint() && srv.Weight > 0 {
						t.Fatalf("%s in service with its node answering nothing: %+v", dead, srv)
					}
					if got := haproxytest.Spread(w.h.Frontends["be"], 4); got[a] != 4 {
						t.Fatalf("client connections failed or went astray: %v", got)
					}
				}
				if !seen {
					t.Fatal("the new server was never added")
				}
			})
			var revived *haproxytest.Listener
			step(t, "once its node answers it is in service", func(t *testing.T) {
				revived = listen(t, dead, ipDead, np)
				start := time.Now()
				for haproxytest.Spread(w.h.Frontends["be"], 4)[dead] == 0 {
					if time.Since(start) > 10*time.Second {
						t.Fatal("never in service")
					}
					time.Sleep(20 * time.Millisecond)
				}
				t.Logf("in service %v after its node answered", time.Since(start).Round(time.Millisecond))
			})
			step(t, "a removed server with a live connection keeps it until it ends", func(t *testing.T) {
				revived.Close()
				holder := haproxytest.ListenHold(t, dead, fmt.Sprintf("%s:%d", ipDead, np))
				conn := connectTo(t, w.h.Frontends["be"], dead)
				w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", node: a})
				for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
					srv, ok := w.h.Servers(t, "be")[dead]
					if !ok {
						t.Fatal("deleted while a connection through it was open")
					}
					if !srv.Maint() && srv.Weight != 0 && !srv.Drain() && haproxytest.Spread(w.h.Frontends["be"], 2)[dead] > 0 {
						t.Fatalf("new traffic to a removed server: %+v", srv)
					}
				}
				if got := haproxytest.Spread(w.h.Frontends["be"], 4); got[a] != 4 {
					t.Errorf("new traffic: %v, want only %s", got, a)
				}
				if _, err := conn.Write([]byte("still here\n")); err != nil {
					t.Fatalf("the live connection was cut: %v", err)
				}
				conn.Close()
				holder.Close()
				if driver == "dataplane" {
					return // deleted with the next batch (HAPROXY_DELETE_BATCH), by a reload
				}
				for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
					if _, ok := w.h.Servers(t, "be")[dead]; !ok {
						break
					}
					if time.Now().After(end) {
						t.Fatal("not deleted after its connection ended")
					}
				}
			})
			if n := reloads(); n != 0 {
				t.Errorf("%d reloads", n)
			}
		})
	}
}

// connectTo opens connections through frontend until one is served by the
// server named want, and returns it open.
func connectTo(t testing.TB, frontend, want string) net.Conn {
	t.Helper()
	for range 50 {
		c, err := net.DialTimeout("tcp", frontend, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		if strings.TrimSpace(line) == want {
			_ = c.SetReadDeadline(time.Time{})
			return c
		}
		c.Close()
	}
	t.Fatalf("no connection through %s reached %s", frontend, want)
	return nil
}

// TestReloadWhileServersWait reloads HAProxy while a server waits for its
// first passed check (its node answers nothing), on the shipped check
// timing: the reload must not put it in service (HAProxy loads every
// configured server UP). The runtime driver writes nothing to haproxy.cfg,
// so the reload forgets the server and the next reconcile adds it gated
// again; clients never reach it, before or after.
func TestReloadWhileServersWait(t *testing.T) {
	w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}})
	ipA, ipDead := "127.0.9.41", "127.0.9.42"
	a, dead := w.node("a", ipA), w.node("dead", ipDead)
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort
	listen(t, a, ipA, np)
	w.slice("web-1", "web", map[string]int32{"http": 8080}, endpoint{ip: "10.244.0.1", node: a}, endpoint{ip: "10.244.0.2", node: dead})

	notInService := func(when string, traffic bool) {
		t.Helper()
		srv, ok := w.h.Servers(t, "be")[dead]
		if ok && srv.Up() && !srv.Drain() && !srv.Maint() && srv.Weight > 0 {
			t.Fatalf("%s: %s in service without a passed check: %+v", when, dead, srv)
		}
		if got := haproxytest.Spread(w.h.Frontends["be"], 4); traffic && got[a] != 4 {
			t.Fatalf("%s: client connections %v, want all on %s", when, got, a)
		}
	}
	for round := range 2 {
		// Reconcile (as the follow-up would) until only the dead node waits.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			_, res := w.reconcile()
			if fmt.Sprint(res.Targets[0].Waiting) == "["+dead+"]" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: waiting %v, want [%s] alone", round, res.Targets[0].Waiting, dead)
			}
		}
		notInService(fmt.Sprintf("round %d, before the reload", round), true)
		w.h.Reload(t)
		// The reload forgot both runtime servers: no traffic to judge by,
		// but the dead one must not come back UP from HAProxy's state file
		// or configuration during its first checks.
		for range 10 {
			notInService(fmt.Sprintf("round %d, after the reload", round), false)
			time.Sleep(shipped.FastInter)
		}
	}
}
