package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
)

// fastClient is a clientset of the test API server without client-go's
// default limit of 5 requests a second, for setting up large clusters.
func fastClient(t testing.TB) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(cluster.cfg)
	cfg.QPS, cfg.Burst = 2000, 2000
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serviceClient is the service's own client of the test API server, its
// transport wrapped by wrap when set.
func serviceClient(t testing.TB, wrap func(http.RoundTripper) http.RoundTripper) *kube.Client {
	t.Helper()
	cfg := rest.CopyConfig(cluster.cfg)
	cfg.WrapTransport = wrap
	c, err := kube.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// manyNodes creates n Nodes labelled for this test (deleted when it ends) and
// returns their names; mutate, when set, shapes each.
func manyNodes(t testing.TB, prefix string, n int, mutate func(i int, node *corev1.Node)) []string {
	t.Helper()
	c := fastClient(t)
	names := make([]string, n)
	var g errgroup.Group
	g.SetLimit(32)
	for i := range n {
		names[i] = fmt.Sprintf("%s-%05d", prefix, i)
		g.Go(func() error {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: names[i], Labels: map[string]string{"e2e-scale": prefix}}}
			if mutate != nil {
				mutate(i, node)
			}
			status := node.Status
			created, err := c.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
			if err != nil || len(status.Addresses) == 0 {
				return err
			}
			created.Status = status
			_, err = c.CoreV1().Nodes().UpdateStatus(context.Background(), created, metav1.UpdateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.CoreV1().Nodes().DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "e2e-scale=" + prefix})
	})
	return names
}

// TestNodeReadsAreNarrowed: among 1,200 Nodes, a reconcile's read finds the
// Nodes that host endpoints and reads no other Node. A few are read with one
// GET each; many with one list selecting them by hostname label (whose
// answer, read again, holds only them), plus a GET for each name the label
// does not find: a Node whose hostname label is not its name, and one that is
// gone. Nodes are never listed whole.
func TestNodeReadsAreNarrowed(t *testing.T) {
	w := newWorld(t, "web", "node", nil)
	const every = 30 // Nodes 0, 30, 60, ... may host endpoints
	names := manyNodes(t, w.ns, 1200, func(i int, n *corev1.Node) {
		n.Labels[corev1.LabelHostname] = n.Name
		if i == every { // a Node the kubelet named otherwise
			n.Labels[corev1.LabelHostname] = "ip-127-1-0-31"
		}
		if i%every == 0 { // only the hosting Nodes need a status
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("127.1.%d.%d", i/250, i%250+1)}}
		}
	})
	for _, tc := range []struct {
		service string
		hosts   int // how many Nodes host its endpoints
		lists   bool
	}{{"few", 10, false}, {"many", 40, true}} {
		t.Run(tc.service, func(t *testing.T) {
			w.service(tc.service, corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
			var eps []endpoint
			hosting := map[string]bool{}
			for i := range tc.hosts {
				eps = append(eps, endpoint{ip: fmt.Sprintf("10.244.%d.%d", 9+i/200, i%200+1), node: names[i*every]})
				hosting[names[i*every]] = true
			}
			gone := w.ns + "-gone"
			eps = append(eps, endpoint{ip: "10.244.8.99", node: gone})
			w.slice(tc.service+"-1", tc.service, map[string]int32{"http": 8080}, eps...)

			var mu sync.Mutex
			var requests []*http.Request
			client := serviceClient(t, func(rt http.RoundTripper) http.RoundTripper {
				return roundTripFunc(func(r *http.Request) (*http.Response, error) {
					if strings.HasPrefix(r.URL.Path, "/api/v1/nodes") {
						mu.Lock()
						requests = append(requests, r)
						mu.Unlock()
					}
					return rt.RoundTrip(r)
				})
			})
			in, err := (&kube.Source{Client: client, Namespace: w.ns, Service: tc.service, Nodes: true}).Read(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, n := range in.Nodes {
				got = append(got, n.Name)
				if !hosting[n.Name] || len(n.Status.Addresses) == 0 {
					t.Errorf("node %s read", n.Name)
				}
			}
			if len(got) != len(hosting) {
				t.Errorf("%d nodes found, want %d", len(got), len(hosting))
			}

			wantGets := []string{gone}
			if tc.lists {
				wantGets = append(wantGets, names[every]) // its hostname label is not its name
			} else {
				wantGets = append(wantGets, slices.Collect(maps.Keys(hosting))...)
			}
			var gets []string
			var selectors []string
			for _, r := range requests {
				switch name, ok := strings.CutPrefix(r.URL.Path, "/api/v1/nodes/"); {
				case r.Method == http.MethodGet && ok:
					gets = append(gets, name)
				case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes" && r.URL.Query().Get("labelSelector") != "":
					selectors = append(selectors, r.URL.Query().Get("labelSelector"))
				default:
					t.Errorf("node request %s %s", r.Method, r.URL)
				}
			}
			slices.Sort(gets)
			slices.Sort(wantGets)
			if !slices.Equal(gets, wantGets) {
				t.Errorf("GETs %v\nwant %v", gets, wantGets)
			}
			if tc.lists != (len(selectors) == 1) || len(selectors) > 1 {
				t.Fatalf("lists by selector %q, want one: %v", selectors, tc.lists)
			}
			for _, sel := range selectors {
				l, err := cluster.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: sel})
				if err != nil {
					t.Fatal(err)
				}
				if len(l.Items) != len(hosting)-1 {
					t.Errorf("the list answered %d Nodes, want %d", len(l.Items), len(hosting)-1)
				}
				for _, n := range l.Items {
					if !hosting[n.Name] {
						t.Errorf("the list answered Node %s, which hosts nothing", n.Name)
					}
				}
			}
		})
	}
}

// benchNodes is how many realistic Nodes BenchmarkNodeModeRead creates for
// its large case: `make bench` sets HKS_BENCH_NODES=5000; the test run keeps
// it small.
func benchNodes(b *testing.B) int {
	n := 200
	if v := os.Getenv("HKS_BENCH_NODES"); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil {
			b.Fatalf("HKS_BENCH_NODES: %v", err)
		}
	}
	return n
}

// BenchmarkNodeModeRead measures one reconcile's Kubernetes read in node mode
// (Service, its slices, the Nodes hosting its endpoints) against the real
// API server, with realistic Nodes (~12.5 KB of JSON each), at 10 Nodes and
// at many, a Service with 10 (small) or 100 endpoints on as many Nodes. It
// reports the time per read and the bytes read from the API.
func BenchmarkNodeModeRead(b *testing.B) {
	for _, size := range []struct{ nodes, endpoints int }{{10, 10}, {benchNodes(b), 100}} {
		// Set up once, outside b.Run, which may run its function twice.
		w := newWorld(b, "web", "node", nil)
		names := manyNodes(b, w.ns, size.nodes, func(i int, n *corev1.Node) {
			real := desiredtest.RealisticNode(n.Name, fmt.Sprintf("127.2.%d.%d", i/250, i%250+1))
			real.Labels["e2e-scale"] = w.ns
			real.ResourceVersion = ""
			*n = *real
		})
		w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
		var eps []endpoint
		step := max(size.nodes/size.endpoints, 1)
		for i := 0; i < size.nodes && len(eps) < size.endpoints; i += step {
			eps = append(eps, endpoint{ip: fmt.Sprintf("10.244.%d.%d", 10+len(eps)/250, len(eps)%250+1), node: names[i]})
		}
		w.slice("web-1", "web", map[string]int32{"http": 8080}, eps...)
		var read, decoded atomic.Int64
		client := wireCountingClient(b, &read, &decoded)
		src := &kube.Source{Client: client, Namespace: w.ns, Service: "web", Nodes: true}
		b.Run(fmt.Sprintf("nodes-%d", size.nodes), func(b *testing.B) {
			read.Store(0)
			decoded.Store(0)
			for b.Loop() {
				in, err := src.Read(context.Background())
				if err != nil || len(in.Nodes) != len(eps) {
					b.Fatalf("%v: %d nodes", err, len(in.Nodes))
				}
			}
			b.ReportMetric(float64(read.Load())/float64(b.N)/1024, "KB-wire/op")
			b.ReportMetric(float64(decoded.Load())/float64(b.N)/1024, "KB-decoded/op")
		})
	}
}

// wireCountingClient is a serviceClient that adds to wire every byte it
// receives from the API server as sent (TLS, compressed or not), and to
// decoded every byte of response bodies once decompressed.
func wireCountingClient(t testing.TB, wire, decoded *atomic.Int64) *kube.Client {
	t.Helper()
	cfg := rest.CopyConfig(cluster.cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil {
				resp.Body = countingBody{resp.Body, decoded}
			}
			return resp, err
		})
	}
	var d net.Dialer
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, wire}, nil
	}
	c, err := kube.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}
