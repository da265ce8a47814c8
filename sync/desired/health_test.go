package desired

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// TestHealthPort: in node mode a Service with externalTrafficPolicy Local
// has its Nodes checked on its healthCheckNodePort, else on kube-proxy's
// health port when asked; a backend whose settings are managed then runs
// an HTTP check of /healthz.
func TestHealthPort(t *testing.T) {
	local := func(hcnp int32) *corev1.Service {
		s := service(svcPort("http", 80, 30080))
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = hcnp
		return s
	}
	managed := model.Settings{Balance: "roundrobin", TCPCheck: true}
	for _, tt := range []struct {
		name      string
		svc       *corev1.Service
		mode      Mode
		kubeProxy int
		http      bool
		settings  model.Settings
		port      int
		want      model.Settings
	}{
		{"Local: the healthCheckNodePort, HTTP", local(32001), NodeMode, 0, true, managed, 32001, model.Settings{Balance: "roundrobin", HTTPCheck: "/healthz"}},
		{"Local wins over kube-proxy's port", local(32001), NodeMode, 10256, true, managed, 32001, model.Settings{Balance: "roundrobin", HTTPCheck: "/healthz"}},
		{"Cluster: kube-proxy's port when asked", service(svcPort("http", 80, 30080)), NodeMode, 10256, true, managed, 10256, model.Settings{Balance: "roundrobin", HTTPCheck: "/healthz"}},
		{"Cluster, not asked: the NodePort, TCP", service(svcPort("http", 80, 30080)), NodeMode, 0, true, managed, 0, managed},
		{"Local without a healthCheckNodePort (NodePort type): TCP", local(0), NodeMode, 0, true, managed, 0, managed},
		{"haproxy.cfg's HTTP check: settings left as configured", local(32001), NodeMode, 0, true, model.Settings{}, 32001, model.Settings{}},
		{"no HTTP check: the NodePort, whatever the Service", local(32001), NodeMode, 10256, false, managed, 0, managed},
		{"pod mode: pods are checked on their own port", local(32001), PodMode, 0, true, managed, 0, managed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Service: tt.svc, Nodes: []corev1.Node{node("node-a", "127.0.1.1")}, Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, map[string]int32{"http": 8080}, ep{addr: "10.0.0.1", node: "node-a", pod: "p"}),
			}}
			got, _, err := Compute(in, Options{Mode: tt.mode, Backends: []PortBackend{{Backend: "be"}}, Addresses: testAddresses,
				Settings: tt.settings, Check: check, KubeProxyHealthPort: tt.kubeProxy, HTTPHealthChecks: tt.http, HealthCheckNodePort: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(got[0].Servers) != 1 || got[0].Servers[0].Check.Port != tt.port || got[0].Settings != tt.want {
				t.Errorf("servers %+v settings %+v; want check port %d, settings %+v", got[0].Servers, got[0].Settings, tt.port, tt.want)
			}
		})
	}
}
