package watch

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkNodeIndex: the many-Services watch's Node index at scale, in node
// mode: Services, each with one EndpointSlice of 20 endpoints on random
// Nodes among 5,000. Reported: the index's live heap once every slice is
// put (index-MB), and the cost of one Node event's lookup (ns/op), which
// scans every slice. docs/benchmarks.md has the figures.
func BenchmarkNodeIndex(b *testing.B) {
	const nodes, perSlice = 5000, 20
	for _, services := range []int{500, 2000} {
		b.Run(fmt.Sprintf("services=%d", services), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, uint64(services)))
			cache := newServiceCache(nil, "shop")
			slicesOf := make([]*discoveryv1.EndpointSlice, services)
			for i := range services {
				sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("svc-%d-abcde", i),
					Labels: map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("svc-%d", i)}}}
				for range perSlice {
					n := fmt.Sprintf("ip-10-0-%d-%d.eu-west-1.compute.internal", rng.IntN(nodes)/250, rng.IntN(nodes))
					sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.1.0.1"}, NodeName: &n})
				}
				slicesOf[i] = sl
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			x := &nodeIndex{}
			for _, sl := range slicesOf {
				x.put(sl, cache)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(slicesOf) // measured beside them: the index's own
			node := x.slices["shop/svc-0-abcde"].nodes[0]
			b.ResetTimer()
			for b.Loop() {
				if keys, all := x.services(node); len(keys) == 0 && !all {
					b.Fatal("no Service found on a Node its slice names")
				}
			}
			runtime.KeepAlive(x)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "index-MB") // after the loop: ResetTimer drops metrics
		})
	}
}
