package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// BenchmarkServeManyServices runs serve itself as shipped for many
// Services (annotation mode, pod mode, the runtime socket): its watch of a
// real kube-apiserver, its bulk reads, its lanes. The Services (the
// largest of HKS_BENCH_SERVICES: make bench 2,000; 50 in make test) are
// annotated, each naming its own backend of a real HAProxy with two ready
// pods (every Service's pods answer on the same two listeners: what is
// measured is the service). Once every server is in service, each op is
// a full reconcile (POST /reconcile, a no-op). It reports:
//   - fill-s: from the process start to every server in service;
//   - noop-ms: a full reconcile's round trip;
//   - rss-MB: resident memory at the end; peak-rss-MB: the peak (VmHWM),
//     the start, the lists and the mass entry included. The shipped limit
//     is 128 Mi.
func BenchmarkServeManyServices(b *testing.B) {
	n := 50
	if s := os.Getenv("HKS_BENCH_SERVICES"); s != "" {
		f := strings.Split(s, ",")
		var err error
		if n, err = strconv.Atoi(f[len(f)-1]); err != nil {
			b.Fatalf("HKS_BENCH_SERVICES: %v", err)
		}
	}
	var backends []string
	for i := range n {
		backends = append(backends, fmt.Sprintf("be_%04d", i))
	}
	fw := newFleetWorldOf(b, false, backends...)
	fw.onTwoPods(backends)
	serving := func() int {
		reply, err := fw.h.Command("show servers state")
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for _, be := range backends {
			got += inServiceCount(haproxytest.ParseServers(reply, be))
		}
		return got
	}
	serviceBinary(b) // built before the clock starts
	start := time.Now()
	env := []string{"KUBECONFIG=" + kubeconfigVia(b, apiHostPort(b)), "SERVICE_SELECTION=annotation", "ANNOTATION_BACKENDS=be_*",
		"WATCH_NAMESPACES=" + fw.ns, "HAPROXY_RUNTIME_URL=" + fw.h.RuntimeURL(), "TARGET_ADDRESS=pod", "LOG_LEVEL=error"}
	if l := os.Getenv("HKS_BENCH_GOMEMLIMIT"); l != "" {
		env = append(env, "GOMEMLIMIT="+l) // the chart's extraEnv knob
	}
	s := startService(b, env...)
	for deadline := time.Now().Add(5 * time.Minute); serving() != 2*n; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%d servers in service of %d after 5 minutes; service logs:\n%s", serving(), 2*n, tail(s.logs.String(), 30))
		}
	}
	filled := time.Since(start)
	full := func() {
		resp, err := http.Post(s.base+"/reconcile", "", nil)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("full reconcile: %d; service logs:\n%s", resp.StatusCode, tail(s.logs.String(), 30))
		}
	}
	full() // the first one after the entry: its follow-ups settle
	b.ResetTimer()
	t0 := time.Now()
	for b.Loop() {
		full()
	}
	b.StopTimer()
	b.ReportMetric(float64(n), "services")
	b.ReportMetric(filled.Seconds(), "fill-s")
	b.ReportMetric(float64(time.Since(t0).Microseconds())/1000/float64(b.N), "noop-ms")
	b.ReportMetric(float64(procStatus(b, s.cmd.Process.Pid, "VmRSS"))/1024, "rss-MB")
	b.ReportMetric(float64(procStatus(b, s.cmd.Process.Pid, "VmHWM"))/1024, "peak-rss-MB")
}
