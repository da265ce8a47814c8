package e2e

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// BenchmarkFleetReconcile measures a many-Services reconcile that changes
// nothing (the resync's and the CronJob's cost) against the number of
// annotated Services: a real kube-apiserver, a real HAProxy with one backend
// per Service (two servers each, in service), the runtime driver. Each op is
// one Reconcile of every Service. read=once is what serve ships
// (fleet.Inputs): one read of every backend per target, one list of
// Services, of EndpointSlices, then each Service planned from that; read=each
// is every Service reading its backend, its Service and its slices (before
// 0.8.6). It reports µs/service and the HAProxy reads per op.
func BenchmarkFleetReconcile(b *testing.B) {
	sizes := []int{10, 100, 500}
	if s := os.Getenv("HKS_BENCH_SERVICES"); s != "" { // make bench: 10,100,500,2000
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatalf("HKS_BENCH_SERVICES: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	for _, once := range []bool{true, false} {
		for _, n := range sizes {
			name := "read=each"
			if once {
				name = "read=once"
			}
			b.Run(fmt.Sprintf("%s/services=%d", name, n), func(b *testing.B) {
				benchFleetReconcile(b, n, once, false)
			})
		}
	}
	// The Data Plane driver (with the socket beside it, as shipped): its
	// bulk read is one request for every backend with its servers and the
	// socket's two commands. The test API stands for the real one (its
	// latency is not the real one's); 500 unless asked (make bench).
	for _, once := range []bool{true, false} {
		for _, n := range sizes {
			if n > 100 && os.Getenv("HKS_BENCH_SERVICES") == "" {
				continue
			}
			name := "dataplane-each"
			if once {
				name = "dataplane-once"
			}
			b.Run(fmt.Sprintf("%s/services=%d", name, n), func(b *testing.B) {
				benchFleetReconcile(b, n, once, true)
			})
		}
	}
}

// onTwoPods makes a Service annotated with each backend (web0000, ...),
// each with two ready pods. Every Service's pods answer on the same two
// listeners: what is measured is the service, not the pods.
func (fw *fleetWorld) onTwoPods(backends []string) {
	w := &world{t: fw.t, ns: fw.ns, ctx: context.Background()}
	listen(fw.t, "a", "10.244.0.1", 30000)
	listen(fw.t, "b", "10.244.0.2", 30000)
	for i, be := range backends {
		svc := fmt.Sprintf("web%04d", i)
		fw.annotated(svc, be)
		w.slice(svc+"-1", svc, map[string]int32{"http": 30000},
			endpoint{ip: "10.244.0.1", pod: svc + "-a"}, endpoint{ip: "10.244.0.2", pod: svc + "-b"})
	}
}

func benchFleetReconcile(b *testing.B, n int, once, dataplaneAPI bool) {
	var backends []string
	for i := range n {
		backends = append(backends, fmt.Sprintf("be_%04d", i))
	}
	fw := newFleetWorldOf(b, dataplaneAPI, backends...)
	if once {
		fw.f.Inputs = kube.Bulk{Client: cluster.service, Namespaces: []string{fw.ns}}
	}
	fw.onTwoPods(backends)
	ctx := context.Background()
	// Until a reconcile changes nothing: settle's bound is short for
	// thousands of Services' first checks.
	for deadline := time.Now().Add(2 * time.Minute); ; {
		res := settle(b, func() fleet.Result {
			res, err := fw.f.Reconcile(ctx, false)
			if err != nil {
				b.Fatalf("converge: %v", err)
			}
			return res
		})
		if res.Status == reconcile.StatusUnchanged {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d Services not converged in 2 minutes", n)
		}
	}
	fw.drv.touched()
	fw.drv.bulkReads()
	var apiBefore time.Duration
	if fw.api != nil {
		apiBefore = fw.api.Busy()
	}
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		res, err := fw.f.Reconcile(ctx, false)
		if err != nil || res.Status != reconcile.StatusUnchanged || len(res.Services) != n {
			b.Fatalf("no-op reconcile: %v %s, %d Services", err, res.Status, len(res.Services))
		}
	}
	b.StopTimer()
	read, written := fw.drv.touched()
	bulk := fw.drv.bulkReads()
	switch {
	case len(written) != 0:
		b.Fatalf("a no-op reconcile wrote %v", written)
	case once && (len(read) != 0 || bulk != b.N):
		b.Fatalf("read once: %d backends read one by one and %d bulk reads in %d reconciles, want none and one each", len(read), bulk, b.N)
	case !once && len(read) != n:
		b.Fatalf("read each: %d backends read, want %d", len(read), n)
	}
	per := time.Since(start) / time.Duration(b.N)
	b.ReportMetric(float64(per.Microseconds())/float64(n), "µs/service")
	reads := float64(n)
	if once {
		reads = 1
	}
	b.ReportMetric(reads, "haproxy-reads/op")
	if fw.api != nil {
		// The test API's own time answering (its spec checks included),
		// which the real API's answer does not cost: the rest of ns/op
		// is the service's, the socket's and the kube-apiserver's.
		api := (fw.api.Busy() - apiBefore) / time.Duration(b.N)
		b.ReportMetric(float64(api.Microseconds())/1000, "test-api-ms/op")
		b.ReportMetric(float64((per-api).Microseconds())/1000, "without-test-api-ms/op")
	}
	// The live heap after the reconciles: the fleet's Reconcilers, lanes'
	// state and the last results, plus this test's harness (an upper bound
	// of what serve keeps for n Services).
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MB")
}
