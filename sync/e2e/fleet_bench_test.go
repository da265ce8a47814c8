package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// BenchmarkFleetReconcile measures a many-Services reconcile that changes
// nothing (the resync's and the CronJob's cost) against the number of
// annotated Services: a real kube-apiserver, a real HAProxy with one backend
// per Service (two servers each, in service), the runtime driver. Each op is
// one Reconcile of every Service: list the Services, select, then per
// Service read its backend and its Service and EndpointSlices. It reports
// ms per op, µs/service and the HAProxy reads per op (one per Service: no
// write, no reload).
func BenchmarkFleetReconcile(b *testing.B) {
	for _, n := range []int{10, 100, 500} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			var backends []string
			for i := range n {
				backends = append(backends, fmt.Sprintf("be_%03d", i))
			}
			fw := newFleetWorld(b, backends...)
			w := &world{t: b, ns: fw.ns, ctx: context.Background()}
			// Every Service's pods answer on the same two listeners: what
			// is measured is the reconcile, not the pods.
			listen(b, "a", "10.244.0.1", 30000)
			listen(b, "b", "10.244.0.2", 30000)
			for i := range n {
				svc := fmt.Sprintf("web%03d", i)
				fw.annotated(svc, backends[i])
				w.slice(svc+"-1", svc, map[string]int32{"http": 30000},
					endpoint{ip: "10.244.0.1", pod: svc + "-a"}, endpoint{ip: "10.244.0.2", pod: svc + "-b"})
			}
			ctx := context.Background()
			settle(b, func() fleet.Result {
				res, err := fw.f.Reconcile(ctx, false)
				if err != nil {
					b.Fatalf("converge: %v", err)
				}
				return res
			})
			fw.drv.touched()
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
			if len(written) != 0 || len(read) != n {
				b.Fatalf("a no-op reconcile wrote %v and read %d backends, want none and %d", written, len(read), n)
			}
			per := time.Since(start) / time.Duration(b.N)
			b.ReportMetric(float64(per.Microseconds())/float64(n), "µs/service")
			b.ReportMetric(float64(n), "haproxy-reads/op")
		})
	}
}
