package desired

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// HealthPath is what kube-proxy answers on its health ports: 200 while the
// Node is healthy (and, on a Service's healthCheckNodePort, has a ready
// endpoint of the Service), 503 otherwise.
const HealthPath = "/healthz"

// healthPort is the port a Node's server is checked on, in node mode, as a
// cloud load balancer checks it: the Service's healthCheckNodePort when its
// externalTrafficPolicy is Local (kube-proxy answers 200 only while the
// Node has a local ready endpoint, so a Node whose pods are gone leaves
// before the EndpointSlice says so), else kube-proxy's own health port
// when KubeProxyHealthPort is set (it answers 503 for a Node being deleted
// or drained); 0: the server's own port, a TCP connect.
//
// Only with HTTPHealthChecks: a TCP connect to kube-proxy's health port
// passes whenever kube-proxy runs, which is worse than the NodePort's.
func (c *computer) healthPort() int {
	if c.opts.Mode != NodeMode || !c.opts.HTTPHealthChecks {
		return 0
	}
	svc := c.in.Service
	if c.opts.HealthCheckNodePort && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal &&
		svc.Spec.HealthCheckNodePort > 0 && svc.Spec.HealthCheckNodePort <= 65535 {
		return int(svc.Spec.HealthCheckNodePort)
	}
	return c.opts.KubeProxyHealthPort
}

// nodeCheck is the check of a Node's server.
func (c *computer) nodeCheck() model.Check {
	ck := c.opts.Check
	ck.Port = c.healthPort()
	return ck
}

// settings are a backend's settings: checked through kube-proxy's health
// port, its check is HTTP (when this service manages the settings; else
// haproxy.cfg must say "option httpchk GET /healthz").
func (c *computer) settings() model.Settings {
	s := c.opts.Settings
	if s.Balance != "" && c.healthPort() != 0 {
		s.TCPCheck, s.HTTPCheck = false, HealthPath
	}
	return s
}
