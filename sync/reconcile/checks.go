package reconcile

import "github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"

// tcpCheckedHealthPorts lists the servers checked on a kube-proxy health
// port (a check port this service set: healthCheckNodePort or
// HAPROXY_CHECK_KUBE_PROXY_PORT) whose last check was a bare TCP connect.
// kube-proxy accepts the connect whether or not the node can serve, so such
// a check passes a node that answers 503 to GET /healthz: the backend lacks
// "option httpchk GET /healthz" though HAPROXY_CHECK_HEALTH_NODE_PORT says
// it has it. HAProxy tells this only after a check ran, so a reconcile can
// say it, not prevent it.
func tcpCheckedHealthPorts(cur model.Backend) []string {
	var out []string
	for _, s := range cur.Servers {
		if s.Check.Port != 0 && s.Runtime != nil && s.Runtime.CheckL4 {
			out = append(out, s.Name)
		}
	}
	return out
}
