package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// benchEndpoints is how many endpoints BenchmarkServiceAtScale's large pod
// mode case has: `make bench` sets HKS_BENCH_ENDPOINTS=10000; the test run
// keeps it small.
func benchEndpoints(b *testing.B) int {
	n := 300
	if v := os.Getenv("HKS_BENCH_ENDPOINTS"); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil {
			b.Fatalf("HKS_BENCH_ENDPOINTS: %v", err)
		}
	}
	return n
}

// scaleCase is one shape of cluster BenchmarkServiceAtScale runs the service
// against.
type scaleCase struct {
	name      string
	mode      desired.Mode
	nodes     int // node mode: Nodes in the cluster
	endpoints int // ready endpoints, one per hosting Node in node mode
}

// BenchmarkServiceAtScale runs the real service (serve, watching, runtime API
// driver) against a real kube-apiserver and a real HAProxy 2.6, in clusters
// of several sizes, with nobody else writing. For each it reports:
//   - sync-ms: from the process start to every server in service, each
//     after its own passed check (an empty backend filled);
//   - noop-p50-ms: a POST /reconcile that changes nothing, round trip;
//   - change-p50-ms: an EndpointSlice write (one endpoint starts or stops
//     terminating) to HAProxy showing the server's new state, through the
//     watch, over 10 flips;
//   - KB-read/reconcile: bytes the service received from the API server
//     during the no-op POSTs (TLS, compressed as sent), per reconcile it ran
//     meanwhile (reconciles/POST: its own follow-ups count too);
//   - peak-RSS-MB: the process's peak resident memory (VmHWM), start,
//     initial lists and sync included; anon-RSS-MB: its heap and stacks at
//     the end (RssAnon), without the pages of the binary it maps.
//
// Checks run on the shipped timing (config.ShippedCheck: inter 1.5s,
// fastinter 100ms, downinter 200ms, rise 2), what users get.
//
// The large node case lists benchNodes realistic Nodes (5,000 in `make
// bench`) with a Service of 100 endpoints on 100 of them; the large pod case
// has benchEndpoints endpoints (10,000 in `make bench`) in slices of 100.
func BenchmarkServiceAtScale(b *testing.B) {
	for _, sc := range []scaleCase{
		{name: "node-10", mode: desired.NodeMode, nodes: 10, endpoints: 10},
		{name: fmt.Sprintf("node-%d", benchNodes(b)), mode: desired.NodeMode, nodes: benchNodes(b), endpoints: 100},
		{name: "pod-10", mode: desired.PodMode, endpoints: 10},
		{name: "pod-1000", mode: desired.PodMode, endpoints: 1000},
		{name: fmt.Sprintf("pod-%d", benchEndpoints(b)), mode: desired.PodMode, endpoints: benchEndpoints(b)},
	} {
		b.Run(sc.name, func(b *testing.B) { serviceAtScale(b, sc) })
	}
}

func serviceAtScale(b *testing.B, sc scaleCase) {
	w := newWorld(b, "web", sc.mode, nil)
	// A backend that may hold more than roundrobin's 4,095 servers.
	w.h = haproxytest.Start(b, haproxytest.Backend{Name: "be", Lines: []string{"balance leastconn", "option tcp-check"}})
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort

	// addrs are the servers' addresses, in the order of eps.
	var eps []endpoint
	var addrs []string
	podPort := int32(haproxytest.FreePort(b, "0.0.0.0"))
	if sc.mode == desired.NodeMode {
		names := manyNodes(b, w.ns, sc.nodes, func(i int, n *corev1.Node) {
			real := desiredtest.RealisticNode(n.Name, fmt.Sprintf("127.3.%d.%d", i/250, i%250+1))
			real.Labels["e2e-scale"] = w.ns
			real.ResourceVersion = ""
			*n = *real
		})
		step := max(sc.nodes/sc.endpoints, 1)
		for i := 0; i < sc.nodes && len(eps) < sc.endpoints; i += step {
			ip := fmt.Sprintf("127.3.%d.%d", i/250, i%250+1)
			listen(b, names[i], ip, np)
			eps = append(eps, endpoint{ip: fmt.Sprintf("10.245.%d.%d", len(eps)/250, len(eps)%250+1), node: names[i]})
			addrs = append(addrs, ip)
		}
	} else {
		// Every pod address is this namespace's own (a local route), and one
		// listener on the pod port answers them all.
		haproxytest.Listen(b, "pods", fmt.Sprintf("0.0.0.0:%d", podPort))
		for i := range sc.endpoints {
			ip := fmt.Sprintf("10.245.%d.%d", 128+i/250, i%250+1)
			eps = append(eps, endpoint{ip: ip, pod: fmt.Sprintf("web-%05d", i)})
			addrs = append(addrs, ip)
		}
	}
	ports := map[string]int32{"http": podPort}
	const perSlice = 100
	for i := 0; i < len(eps); i += perSlice {
		w.slice(fmt.Sprintf("web-%03d", i/perSlice), "web", ports, eps[i:min(i+perSlice, len(eps))]...)
	}

	proxy := newCutProxy(b, apiHostPort(b))
	serviceBinary(b) // built before the clock starts
	start := time.Now()
	s := startService(b,
		"KUBECONFIG="+kubeconfigVia(b, proxy.addr()), "INGRESS_NAMESPACE="+w.ns, "INGRESS_SERVICE_NAME=web",
		"TARGET_ADDRESS="+string(sc.mode), "HAPROXY_BACKEND_NAME=be", "HAPROXY_RUNTIME_URL="+w.h.RuntimeURL(),
		"MAX_SERVERS=20000") // the shipped check timing

	inService := func(srv haproxytest.Server) bool { return srv.Up() && !srv.Maint() && !srv.Drain() }
	// Reading and parsing "show servers state" costs time in proportion to
	// the servers; polling 10,000 of them every 2 ms would load this machine
	// more than the service does. 20 ms apart at 10,000.
	poll := max(2*time.Millisecond, time.Duration(len(addrs))*2*time.Microsecond)
	untilServers := func(what string, limit time.Duration, ok func(map[string]haproxytest.Server) bool) time.Duration {
		t0 := time.Now()
		for {
			byAddr := map[string]haproxytest.Server{}
			for _, srv := range w.h.Servers(b, "be") {
				byAddr[srv.Address] = srv
			}
			if ok(byAddr) {
				return time.Since(t0)
			}
			if time.Since(t0) > limit {
				b.Fatalf("%s: not in HAProxy after %s; logs:\n%s", what, limit, tail(s.logs.String(), 20))
			}
			time.Sleep(poll)
		}
	}
	untilServers("initial sync", 2*time.Minute, func(m map[string]haproxytest.Server) bool {
		for _, a := range addrs {
			if !inService(m[a]) {
				return false
			}
		}
		return len(m) == len(addrs)
	})
	synced := time.Since(start)
	b.ResetTimer()

	// No-op reconciles, POSTed.
	var noop []time.Duration
	before := proxy.received.Load()
	recBefore := s.metric(b, "haproxy_k8s_sync_reconciles_total")
	const noops = 20
	for range noops {
		t0 := time.Now()
		resp, err := http.Post(s.base+"/reconcile", "application/json", nil)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("POST /reconcile: %s", resp.Status)
		}
		noop = append(noop, time.Since(t0))
	}
	read := proxy.received.Load() - before
	reconciles := s.metric(b, "haproxy_k8s_sync_reconciles_total") - recBefore

	// One endpoint flips between ready and terminating, through the watch.
	var change []time.Duration
	first := eps[:min(perSlice, len(eps))]
	for i := range 10 {
		terminating := i%2 == 0
		flipped := slices.Clone(first)
		flipped[0].terminating = terminating
		t0 := time.Now()
		w.slice("web-000", "web", ports, flipped...)
		untilServers("flip", 10*time.Second, func(m map[string]haproxytest.Server) bool {
			return m[addrs[0]].Drain() == terminating && (terminating || inService(m[addrs[0]]))
		})
		change = append(change, time.Since(t0))
	}
	b.StopTimer()

	if r := w.h.Reloads(b); r != 0 {
		b.Errorf("%d reloads", r)
	}
	b.ReportMetric(ms(synced), "sync-ms")
	b.ReportMetric(ms(median(noop)), "noop-p50-ms")
	b.ReportMetric(ms(median(change)), "change-p50-ms")
	b.ReportMetric(float64(read)/reconciles/1024, "KB-read/reconcile")
	b.ReportMetric(reconciles/noops, "reconciles/POST")
	b.ReportMetric(float64(procStatus(b, s.cmd.Process.Pid, "VmHWM"))/1024, "peak-RSS-MB")
	b.ReportMetric(float64(procStatus(b, s.cmd.Process.Pid, "RssAnon"))/1024, "anon-RSS-MB")
}

func median(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}

// procStatus returns a memory figure of a process in KB: VmHWM (peak
// resident set), RssAnon (resident heap and stacks, not the binary's pages).
func procStatus(t testing.TB, pid int, field string) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			var kb int
			if _, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb); err != nil {
				t.Fatal(err)
			}
			return kb
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(len(l)-lines, 0):], "\n")
}
