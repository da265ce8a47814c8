package e2e

import (
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
)

// TestKubernetesFaultsLeaveHAProxyUntouched: the real API server refuses
// (403, a ServiceAccount without RBAC) or is unreachable: the answer is 503
// and HAProxy keeps serving the servers it had.
func TestKubernetesFaultsLeaveHAProxyUntouched(t *testing.T) {
	w := newWorld(t, "web", desired.PodMode, []desired.PortBackend{{Backend: "be"}})
	w.service("web", corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "http", Port: 80})
	listen(t, "p1", "10.244.0.1", 8080)
	listen(t, "p2", "10.244.0.2", 8080)
	w.slice("web-1", "web", map[string]int32{"http": 8080}, endpoint{ip: "10.244.0.1"}, endpoint{ip: "10.244.0.2"})
	w.mustReconcile()
	servers := map[string]server{"10-244-0-1": {"10.244.0.1", 8080, "ready"}, "10-244-0-2": {"10.244.0.2", 8080, "ready"}}
	w.expectServers("be", servers)
	good := w.src.src

	// Endpoints change meanwhile: a reconcile that could read would act.
	w.slice("web-1", "web", map[string]int32{"http": 8080}, endpoint{ip: "10.244.0.1"})

	forbidden := rest.CopyConfig(cluster.cfg)
	forbidden.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + w.ns + ":no-rbac"}
	down := &rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second}
	for name, cfg := range map[string]*rest.Config{"forbidden": forbidden, "unreachable": down} {
		step(t, name, func(t *testing.T) {
			client, err := kube.NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			w.src.set(&kube.Source{Client: client, Namespace: w.ns, Service: "web"})
			code, res := w.reconcile()
			if code != http.StatusServiceUnavailable || res.Status != "error" || res.Error == "" {
				t.Fatalf("%d %+v", code, res)
			}
			t.Logf("error: %s", res.Error)
			w.expectServers("be", servers)
			w.expectTraffic("be", "p1", "p2")
		})
	}
	step(t, "Kubernetes back: converges", func(t *testing.T) {
		w.src.set(good)
		w.mustReconcile()
		w.expectServers("be", map[string]server{"10-244-0-1": {"10.244.0.1", 8080, "ready"}})
		w.expectTraffic("be", "p1")
	})
}

// TestDataplaneFaultsOnRealHAProxy: Data Plane API faults in the middle of
// a change, with the test API replaying runtime changes on a real HAProxy.
// During each fault no server leaves HAProxy and the one the change does
// not touch stays in traffic; after recovery the traffic is exactly where
// the cluster says, still without a reload.
func TestDataplaneFaultsOnRealHAProxy(t *testing.T) {
	var api *dataplanetest.Server
	w := newWorld(t, "web", desired.PodMode, []desired.PortBackend{{Backend: "be"}}, dataplaneDriver(&api, time.Second))
	w.service("web", corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "http", Port: 80})
	for i, ip := range []string{"10.244.0.1", "10.244.0.2", "10.244.0.3", "10.244.0.4"} {
		listen(t, []string{"p1", "p2", "p3", "p4"}[i], ip, 8080)
	}
	ports := map[string]int32{"http": 8080}
	w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1"}, endpoint{ip: "10.244.0.2"}, endpoint{ip: "10.244.0.3"})
	w.mustReconcile()
	w.expectTraffic("be", "p1", "p2", "p3")

	faults := []struct {
		name  string
		fault dataplanetest.Fault
		// the change made during the fault, and the servers in traffic after recovery
		eps  []endpoint
		want []string
	}{
		{name: "503 on every write", fault: dataplanetest.Fault{Writes: true, Status: 503, RetryAfter: "1"},
			eps:  []endpoint{{ip: "10.244.0.1"}, {ip: "10.244.0.2", terminating: true}, {ip: "10.244.0.4"}},
			want: []string{"p1", "p4"}},
		{name: "connections dropped after the first write", fault: dataplanetest.Fault{Writes: true, Skip: 1, Drop: true},
			eps:  []endpoint{{ip: "10.244.0.1"}, {ip: "10.244.0.2"}, {ip: "10.244.0.3"}},
			want: []string{"p1", "p2", "p3"}},
	}
	for _, f := range faults {
		step(t, f.name, func(t *testing.T) {
			before := w.h.Servers(t, "be")
			w.slice("web-1", "web", ports, f.eps...)
			api.InjectFault(f.fault)
			code, res := w.reconcile()
			if code != http.StatusServiceUnavailable {
				t.Fatalf("during the fault: %d %+v", code, res)
			}
			after := w.h.Servers(t, "be")
			for name := range before {
				if _, ok := after[name]; !ok {
					t.Errorf("%s was removed from HAProxy during the fault", name)
				}
			}
			if s := after["10-244-0-1"]; !s.Up() || s.Maint() || s.Drain() {
				t.Errorf("10-244-0-1, untouched by the change, left traffic: %+v", s)
			}
			api.ClearFault()
			w.mustReconcile()
			w.expectTraffic("be", f.want...)
			if api.OpenTransactions() != 0 {
				t.Errorf("%d transactions left open", api.OpenTransactions())
			}
		})
	}
	if api.Reloads() != 0 || w.h.Reloads(t) != 0 {
		t.Errorf("reloads: Data Plane API %d, HAProxy %d", api.Reloads(), w.h.Reloads(t))
	}
}
