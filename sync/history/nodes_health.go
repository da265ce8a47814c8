package history

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
)

// The Service's healthCheckNodePort (Setup.HealthPort): each Node's
// kube-proxy answers GET on it with 200 while Kubernetes holds a ready pod
// of the Service on that Node, else 503 — ready ones only: a Node left
// with terminating pods fails it, so that load balancers drain it while
// kube-proxy still sends it connections (KEP-1669). It knows only what
// Kubernetes says: a pod killed and not noticed yet passes it, which the
// judge bounds by the notice (evalOptions.HealthPort). Or, drawn with it
// (Setup.KubeProxy), kube-proxy's own health port
// (HAPROXY_CHECK_KUBE_PROXY_PORT), which knows less: 200 whatever the
// pods, 503 only for a Node the autoscaler marked for deletion; a Node's
// dead pods are noticed by Kubernetes alone, and bounded the same way.

// httpCheckLine is haproxy.cfg's check of kube-proxy's health ports.
const httpCheckLine = "httpchk GET " + desired.HealthPath

// openHealth makes Node k's kube-proxy answer the health check port.
func (np *nodeProxy) openHealth() error {
	if !np.w.setup.HealthPort {
		return nil
	}
	addr := net.JoinHostPort(nodeAddr(np.k), strconv.Itoa(np.w.hcPort))
	if err := np.hl.open(addr, func() {}, np.health); err != nil {
		return fmt.Errorf("node %s health port: %w", nodeName(np.k), err)
	}
	return nil
}

// health answers one check. What is not an HTTP request — the PROXY
// header a check-send-proxy check opens with — is answered 400, as
// kube-proxy's HTTP server does, and breaks HealthPortSpoken. A 200 is
// Node k's check passing (obsCheck).
func (np *nodeProxy) health(c net.Conn, at time.Time) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	from, _ := sourceOf(c)
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "GET" || !strings.HasPrefix(f[2], "HTTP/1.") {
		np.w.rec.add(obs{at: at, kind: obsViolation, target: from, inv: HealthPortSpoken,
			err: fmt.Sprintf("a check of %s's health check port is no HTTP request (%q): kube-proxy answers 400, the Node is DOWN for HAProxy", nodeName(np.k), cutLine(line))})
		_, _ = fmt.Fprint(c, "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request")
		return
	}
	for { // the headers, to the blank line
		h, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if strings.TrimSpace(h) == "" {
			break
		}
	}
	n := np.w.readyOn(np.k)
	body := fmt.Sprintf(`{"service":{"namespace":%q,"name":%q},"localEndpoints":%d,"serviceProxyHealthy":true}`, namespace, service, n)
	if np.w.setup.KubeProxy {
		// kube-proxy's own port: its health, and its Node's.
		n = 1
		if !np.w.kubeProxyHealthy(np.k) {
			n = 0
		}
		body = fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":%t}`, at.UTC().Format(time.RFC3339), at.UTC().Format(time.RFC3339), n > 0)
	}
	status := "200 OK"
	if n == 0 {
		status = "503 Service Unavailable"
	}
	if n > 0 {
		np.w.rec.add(obs{at: at, kind: obsCheck, pod: nodeBase + np.k, target: from})
	}
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", status, len(body), body)
}

// kubeProxyHealthy is what Node k's kube-proxy says on its own health
// port: healthy, unless the cluster autoscaler's taint marks the Node for
// deletion (kube-proxy 1.30 and later, KEP-3836), so that load balancers
// drain it before it goes. Karpenter's taint is not read there.
func (w *world) kubeProxyHealthy(k int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	f := w.nflags[k]
	return f == nil || f.taint != "autoscaler"
}

// readyOn is how many of Node k's pods Kubernetes holds ready.
func (w *world) readyOn(k int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for p, st := range w.k8s {
		if st == live && p != staticPod && nodeOf(p, w.setup.Nodes, w.setup.Zones) == k {
			n++
		}
	}
	return n
}

// sourceOf says which target's HAProxy a connection comes from (sources),
// and its address.
func sourceOf(c net.Conn) (from int, src string) {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		src = a.IP.String()
		for i, s := range sources {
			if src == s {
				from = i
			}
		}
	}
	return from, src
}

func cutLine(s string) string {
	if len(s) > 40 {
		return s[:40]
	}
	return s
}
