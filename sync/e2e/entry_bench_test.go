package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// BenchmarkEntryOnDefaults measures what a user gets as shipped: the real
// service (`serve`, watching, nobody POSTing but the one timed POST) on the
// shipped check timing (no HAPROXY_CHECK_* variable), a real kube-apiserver,
// a real HAProxy, and a second HAProxy target that is down (connection
// refused) the whole time. With each driver (the runtime API; the Data
// Plane API test server with the instance's socket) it reports:
//   - entry-p50-ms, entry-max-ms: from the EndpointSlice write that puts an
//     endpoint on a new node to that node's server in service (UP, ready),
//     over 10 nodes added one at a time; each is then checked to take a
//     client connection;
//   - programming-p50-ms, programming-p99-ms, in-service-p50-ms,
//     in-service-p99-ms: the same ten entries as the service's
//     network-programming histograms (from the slice's
//     last-change-trigger-time, stamped at the write) tell them, scraped
//     from its /metrics and read as Prometheus' histogram_quantile would;
//   - back-max-ms: a node whose NodePort answered nothing starts to answer
//     → its server in service, over 3 tries;
//   - ready-again-max-ms: a node's endpoint, not ready for 2 s (its server
//     parked), is ready again (the slice write) → its server in service,
//     over 3 tries;
//   - out-max-ms: a node in service stops answering while clients send
//     traffic → its server out of service (DOWN), over 3 tries;
//   - post-ms: POST /reconcile answered (503, both targets listed, the dead
//     one with its error);
//   - reloads: Data Plane API and HAProxy reloads over all of it (target 0).
func BenchmarkEntryOnDefaults(b *testing.B) {
	for i, driver := range []string{"runtime", "dataplane"} {
		b.Run(driver, func(b *testing.B) {
			w := newWorld(b, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}})
			svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
			np := svc.Spec.Ports[0].NodePort
			ip := func(n int) string { return fmt.Sprintf("127.0.%d.%d", 20+i, n+1) }
			var nodes []string
			for n := range 13 {
				nodes = append(nodes, w.node(fmt.Sprintf("n%d", n), ip(n)))
			}
			listeners := map[string]*haproxytest.Listener{}
			for n := range 11 {
				listeners[nodes[n]] = listen(b, nodes[n], ip(n), np)
			}
			ports := map[string]int32{"http": 8080}
			var eps []endpoint
			addNode := func(n int) {
				eps = append(eps, endpoint{ip: fmt.Sprintf("10.244.%d.%d", i, n+1), node: nodes[n]})
				w.slice("web-1", "web", ports, eps...)
			}
			addNode(0)

			deadSock := fmt.Sprintf("tcp://127.0.0.1:%d", haproxytest.FreePort(b, "127.0.0.1"))
			env := []string{"KUBECONFIG=" + kubeconfigVia(b, apiHostPort(b)), "INGRESS_NAMESPACE=" + w.ns, "INGRESS_SERVICE_NAME=web",
				"HAPROXY_BACKEND_NAME=be", "HAPROXY_RUNTIME_URL=" + w.h.RuntimeURL() + "," + deadSock}
			reloads := func() int { return w.h.Reloads(b) }
			if driver == "dataplane" {
				api := testAPI(b, w.h)
				deadAPI := fmt.Sprintf("http://127.0.0.1:%d", haproxytest.FreePort(b, "127.0.0.1"))
				env = append(env, "HAPROXY_DATAPLANE_URL="+api.URL+","+deadAPI)
				reloads = func() int { return w.h.Reloads(b) + api.Reloads() }
			}
			s := startService(b, env...)
			inService := func(name string) bool {
				srv, ok := w.h.Servers(b, "be")[name]
				return ok && srv.Up() && !srv.Drain() && !srv.Maint() && srv.Weight > 0
			}
			until := func(what string, ok func() bool) time.Duration {
				start := time.Now()
				for !ok() {
					if time.Since(start) > 30*time.Second {
						b.Fatalf("%s: not after 30s; servers %+v", what, w.h.Servers(b, "be"))
					}
					time.Sleep(2 * time.Millisecond)
				}
				return time.Since(start)
			}
			until("first node in service", func() bool { return inService(nodes[0]) })
			b.ResetTimer()

			var entry []time.Duration
			for n := 1; n <= 10; n++ {
				start := time.Now()
				addNode(n)
				until("new node in service", func() bool { return inService(nodes[n]) })
				entry = append(entry, time.Since(start))
				connectTo(b, w.h.Frontends["be"], nodes[n]).Close() // it takes client connections
			}
			// What the service's own histograms say of those ten entries.
			timed := scrapeQuantiles(b, s.base, map[string]string{
				"programming": "haproxy_k8s_sync_network_programming_duration_seconds",
				"in-service":  "haproxy_k8s_sync_network_in_service_duration_seconds",
			})

			// A node whose NodePort answers nothing: its server waits,
			// gated; then the node answers.
			var back time.Duration
			late := 11
			addNode(late)
			for try := range 3 {
				time.Sleep(time.Second) // checks fail meanwhile
				if inService(nodes[late]) {
					b.Fatalf("try %d: %s in service with nothing answering", try, nodes[late])
				}
				l := listen(b, nodes[late], ip(late), np)
				back = max(back, until("node back in service", func() bool { return inService(nodes[late]) }))
				l.Close()
				until("node out again", func() bool { return !inService(nodes[late]) })
			}

			// A node in service goes not ready (its server parked in
			// maintenance) for longer than a steady check interval, then
			// is ready again.
			var again time.Duration
			for try := range 3 {
				k := 6 + try
				eps[k].notReady = true
				w.slice("web-1", "web", ports, eps...)
				until("not-ready node parked", func() bool { return w.h.Servers(b, "be")[nodes[k]].Maint() })
				time.Sleep(2 * time.Second)
				eps[k].notReady = false
				w.slice("web-1", "web", ports, eps...)
				again = max(again, until("node ready again in service", func() bool { return inService(nodes[k]) }))
			}

			// Clients keep sending while a node in service stops answering.
			var stop atomic.Bool
			done := make(chan struct{})
			go func() {
				defer close(done)
				for !stop.Load() {
					_, _ = haproxytest.Ask(w.h.Frontends["be"])
					time.Sleep(5 * time.Millisecond)
				}
			}()
			var out time.Duration
			for try := range 3 {
				victim := nodes[1+try]
				start := time.Now()
				listeners[victim].Close()
				until("dead node out of service", func() bool { return !w.h.Servers(b, "be")[victim].Up() })
				out = max(out, time.Since(start))
			}
			stop.Store(true)
			<-done

			start := time.Now()
			resp, err := http.Post(s.base+"/reconcile", "", nil)
			if err != nil {
				b.Fatal(err)
			}
			post := time.Since(start)
			var res reconcile.Result
			if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || len(res.Targets) != 2 ||
				res.Targets[0].Error != "" || !strings.Contains(res.Targets[1].Error, "refused") {
				b.Errorf("POST: %d %+v; want 503, the live target fine and the dead one refused", resp.StatusCode, res.Targets)
			}
			b.StopTimer()

			slices.Sort(entry)
			b.ReportMetric(float64(entry[len(entry)/2].Milliseconds()), "entry-p50-ms")
			b.ReportMetric(float64(entry[len(entry)-1].Milliseconds()), "entry-max-ms")
			for _, name := range slices.Sorted(maps.Keys(timed)) {
				b.ReportMetric(timed[name], name)
			}
			b.ReportMetric(float64(back.Milliseconds()), "back-max-ms")
			b.ReportMetric(float64(again.Milliseconds()), "ready-again-max-ms")
			b.ReportMetric(float64(out.Milliseconds()), "out-max-ms")
			b.ReportMetric(float64(post.Milliseconds()), "post-ms")
			b.ReportMetric(float64(reloads()), "reloads")
			if n := reloads(); n != 0 {
				b.Errorf("%d reloads, want 0", n)
			}
		})
	}
}

// scrapeQuantiles reads the histograms of the service at base (name ->
// metric family, summed over labels) and returns their p50 and p99 in ms,
// keyed "<name>-p50-ms", interpolated within buckets as Prometheus'
// histogram_quantile does.
func scrapeQuantiles(b testing.TB, base string, histograms map[string]string) map[string]float64 {
	b.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for name, family := range histograms {
		counts := map[float64]float64{} // upper bound -> cumulative count
		mf, ok := families[family]
		if !ok {
			b.Fatalf("no %s in /metrics", family)
		}
		for _, m := range mf.GetMetric() {
			for _, bk := range m.GetHistogram().GetBucket() {
				if !math.IsInf(bk.GetUpperBound(), 1) { // the text form lists +Inf too
					counts[bk.GetUpperBound()] += float64(bk.GetCumulativeCount())
				}
			}
			counts[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
		}
		for _, q := range []float64{0.5, 0.99} {
			out[fmt.Sprintf("%s-p%d-ms", name, int(q*100))] = 1000 * bucketQuantile(q, counts)
		}
	}
	return out
}

// bucketQuantile is histogram_quantile over cumulative bucket counts: linear
// within the bucket the rank falls in; the highest finite bound when it
// falls in +Inf.
func bucketQuantile(q float64, counts map[float64]float64) float64 {
	bounds := slices.Collect(maps.Keys(counts))
	sort.Float64s(bounds)
	total := counts[math.Inf(1)]
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for _, ub := range bounds {
		if counts[ub] >= rank {
			if math.IsInf(ub, 1) {
				return lower
			}
			if counts[ub] == below {
				return ub
			}
			return lower + (ub-lower)*(rank-below)/(counts[ub]-below)
		}
		lower, below = ub, counts[ub]
	}
	return lower
}

func TestBucketQuantile(t *testing.T) {
	counts := map[float64]float64{0.01: 0, 0.025: 2, 0.05: 3, 0.1: 4, math.Inf(1): 4}
	for q, want := range map[float64]float64{0.5: 0.025, 0.25: 0.0175, 0.99: 0.098, 0.75: 0.05} {
		if got := bucketQuantile(q, counts); math.Abs(got-want) > 1e-9 {
			t.Errorf("q%v = %v, want %v", q, got, want)
		}
	}
	if got := bucketQuantile(0.99, map[float64]float64{1: 1, math.Inf(1): 2}); got != 1 {
		t.Errorf("rank in +Inf: %v, want the highest finite bound", got)
	}
}
