package watch

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube/kubetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// recorded records what a Many sends, one line per call: "poke ns/name",
// "all <reason>", "left be_a be_b".
type recorded struct {
	mu  sync.Mutex
	ch  chan string
	all []string
}

func newRecorded() *recorded { return &recorded{ch: make(chan string, 100)} }

func (r *recorded) send(s string) {
	r.mu.Lock()
	r.all = append(r.all, s)
	r.mu.Unlock()
	r.ch <- s
}

func (r *recorded) Poke(key string) bool   { r.send("poke " + key); return true }
func (r *recorded) PokeAll(reason string)  { r.send("all " + reason) }
func (r *recorded) Left(backends []string) { r.send("left " + strings.Join(backends, " ")) }

func (r *recorded) expect(t *testing.T, want ...string) {
	t.Helper()
	var got []string
	for range want {
		select {
		case s := <-r.ch:
			got = append(got, s)
		case <-time.After(5 * time.Second):
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func (r *recorded) none(t *testing.T) {
	t.Helper()
	select {
	case s := <-r.ch:
		t.Fatalf("unexpected %q", s)
	case <-time.After(100 * time.Millisecond):
	}
}

const testClass = "haproxy-k8s-sync.io/haproxy"

func annotated(ns, name, backends string) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "5"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	if backends != "" {
		svc.Annotations = map[string]string{services.Annotation: backends}
	}
	return svc
}

func classed(ns, name string, ports ...int32) *corev1.Service {
	svc := annotated(ns, name, "")
	class := testClass
	svc.Spec.Type, svc.Spec.LoadBalancerClass, svc.Spec.Ports = corev1.ServiceTypeLoadBalancer, &class, nil
	for _, p := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Port: p})
	}
	return svc
}

func startMany(t *testing.T, s *scripted, m *Many) {
	t.Helper()
	m.Client = kubetest.Clientset{Interface: s.client}
	m.MinBackoff, m.MaxBackoff = time.Millisecond, 10*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestManyPokesOnlyTheServiceConcerned(t *testing.T) {
	s := newScripted(annotated("ns", "web", "be_web"), annotated("ns", "plain", ""), classed("ns", "lb", 443))
	r := newRecorded()
	startMany(t, s, &Many{Annotation: true, Class: testClass, Cluster: "blue", Pokes: r})
	svcs, sl := s.next(t, "services"), s.next(t, "endpointslices")

	t.Run("a slice pokes its Service", func(t *testing.T) {
		sl.Modify(slice("web-abcde", "web"))
		r.expect(t, "poke ns/web")
		sl.Add(slice("lb-abcde", "lb"))
		r.expect(t, "poke ns/lb")
	})
	t.Run("a slice of a Service that cannot be selected pokes nothing", func(t *testing.T) {
		sl.Modify(slice("plain-abcde", "plain"))
		sl.Modify(slice("orphan", ""))
		r.none(t)
	})
	t.Run("a status write pokes nothing", func(t *testing.T) {
		svc := classed("ns", "lb", 443)
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "127.0.0.10"}}
		svcs.Modify(svc)
		r.none(t)
	})
	t.Run("a Service annotated pokes itself", func(t *testing.T) {
		svcs.Modify(annotated("ns", "plain", "http=be_plain"))
		r.expect(t, "poke ns/plain")
		sl.Modify(slice("plain-abcde", "plain"))
		r.expect(t, "poke ns/plain")
	})
	t.Run("an annotation changed hands over the backends it no longer names", func(t *testing.T) {
		svcs.Modify(annotated("ns", "web", "http=be_web2"))
		r.expect(t, "left be_web", "poke ns/web")
	})
	t.Run("a Service leaving the class hands over its class backends", func(t *testing.T) {
		svcs.Modify(annotated("ns", "lb", ""))
		r.expect(t, "left be_k8s_blue_ns_lb_443", "poke ns/lb")
		sl.Modify(slice("lb-abcde", "lb"))
		r.none(t)
	})
	t.Run("a Service deleted hands over its backends", func(t *testing.T) {
		svcs.Delete(annotated("ns", "plain", "http=be_plain"))
		r.expect(t, "left be_plain", "poke ns/plain")
	})
	t.Run("a relist after 410 hands over the backends of Services gone meanwhile", func(t *testing.T) {
		// ns/web went while no watch ran: the new list lacks it.
		if err := s.client.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("services"), "ns", "web"); err != nil {
			t.Fatal(err)
		}
		svcs.Error(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired})
		s.next(t, "services")
		r.expect(t, "left be_web2", "all service restart")
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.opts["endpointslices"][0]; o.LabelSelector != "kubernetes.io/service-name" || o.FieldSelector != "" {
		t.Errorf("slice watch selectors %+v, want every slice of a Service", o)
	}
}

func TestManyNamespacesAndNodes(t *testing.T) {
	s := newScripted(node("n1"), annotated("a", "web", "be_a"), annotated("b", "web", "be_b"))
	r := newRecorded()
	m := &Many{Namespaces: []string{"a", "b"}, Annotation: true, Nodes: true, Pokes: r}
	startMany(t, s, m)
	// One Service and one slice watch per namespace, one Node watch.
	var sliceWatches []*watch.FakeWatcher
	for range 2 {
		s.next(t, "services")
		sliceWatches = append(sliceWatches, s.next(t, "endpointslices"))
	}
	nw := s.next(t, "nodes")
	for !m.Established() {
		time.Sleep(time.Millisecond)
	}
	for _, sw := range sliceWatches {
		// Each namespace's watch is sent slices of others too: only its
		// own count (the API server is not trusted to send only what was
		// asked).
		sw.Modify(sliceIn("a", "web-abcde", "web", "n1"))
		sw.Modify(sliceIn("b", "web-abcde", "web"))
		sw.Modify(sliceIn("c", "web-abcde", "web", "n1"))
	}
	r.expect(t, "poke a/web", "poke b/web")
	r.none(t)
	nw.Modify(node("n1", func(n *corev1.Node) { n.ResourceVersion = "100" }))
	r.none(t)
	nw.Modify(node("n1", func(n *corev1.Node) { n.Spec.Unschedulable = true }))
	r.expect(t, "poke a/web") // b/web has no endpoint on n1; c is not watched
}

// TestManyNodeEventsPokeTheServicesOnThatNode: in node mode a Node event
// that can change a server pokes the Services with endpoints on that Node,
// as the slices listed at start and watched since say; a Node no endpoint
// names pokes nothing; a slice naming more Nodes than the index keeps is
// poked on every Node event; more Services than fanOut on one Node ask for
// one full reconcile.
func TestManyNodeEventsPokeTheServicesOnThatNode(t *testing.T) {
	objs := []runtime.Object{node("n1"), node("n2"), node("n3"),
		annotated("a", "web", "be_web"), annotated("a", "api", "be_api"), annotated("a", "wide", "be_wide"), annotated("a", "plain", ""),
		sliceIn("a", "web-1", "web", "n1")}
	for i := range fanOut + 1 {
		objs = append(objs, annotated("many", fmt.Sprintf("s%d", i), fmt.Sprintf("be_%d", i)))
	}
	s := newScripted(objs...)
	r := newRecorded()
	m := &Many{Annotation: true, Nodes: true, Pokes: r}
	startMany(t, s, m)
	s.next(t, "services")
	sw := s.next(t, "endpointslices")
	nw := s.next(t, "nodes")
	for !m.Established() {
		time.Sleep(time.Millisecond)
	}
	gen := 0
	change := func(name string) {
		gen++
		nw.Modify(node(name, func(n *corev1.Node) { n.Labels["test/gen"] = strconv.Itoa(gen) }))
	}

	change("n1") // the listed slice
	r.expect(t, "poke a/web")
	sw.Add(sliceIn("a", "api-1", "api", "n1", "n2", "n2"))
	r.expect(t, "poke a/api")
	change("n2")
	r.expect(t, "poke a/api")
	change("n1")
	r.expect(t, "poke a/api", "poke a/web")
	change("n3")
	r.none(t)
	nw.Add(node("n9")) // a new Node no endpoint names
	r.none(t)
	sw.Add(sliceIn("a", "plain-1", "plain", "n3")) // a Service never selected
	r.none(t)
	change("n3")
	r.none(t)

	// An endpoint moved off n2, then the slice deleted.
	sw.Modify(sliceIn("a", "api-1", "api", "n1"))
	r.expect(t, "poke a/api")
	change("n2")
	r.none(t)
	sw.Delete(sliceIn("a", "api-1", "api", "n1"))
	r.expect(t, "poke a/api")
	change("n1")
	r.expect(t, "poke a/web")

	var many []string
	for i := range wideSlice + 1 {
		many = append(many, fmt.Sprintf("w%d", i))
	}
	sw.Add(sliceIn("a", "wide-1", "wide", many...))
	r.expect(t, "poke a/wide")
	change("n3")
	r.expect(t, "poke a/wide")

	for i := range fanOut + 1 {
		sw.Add(sliceIn("many", fmt.Sprintf("s%d-1", i), fmt.Sprintf("s%d", i), "n2"))
		r.expect(t, fmt.Sprintf("poke many/s%d", i))
	}
	change("n2")
	r.expect(t, "all node MODIFIED")
}

// sliceIn is a slice of Service svc in ns, with an endpoint on each of
// nodes.
func sliceIn(ns, name, svc string, nodes ...string) *discoveryv1.EndpointSlice {
	sl := slice(name, svc)
	sl.Namespace = ns
	for i, n := range nodes {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)}, NodeName: &n})
	}
	return sl
}

// slowSlices holds the slice lists until release is closed.
type slowSlices struct {
	kubetest.Clientset
	release chan struct{}
}

func (c slowSlices) ListEndpointSlices(ctx context.Context, ns string, o metav1.ListOptions) (*discoveryv1.EndpointSliceList, error) {
	<-c.release
	return c.Clientset.ListEndpointSlices(ctx, ns, o)
}

// TestANodeEventBeforeTheSlicesAreListedPokesAll: until every slice is
// listed (a large cluster's, 100 a page) the index knows too little, and a
// Node change pokes every Service: nothing else would poke the Service
// with endpoints on it (second reader).
func TestANodeEventBeforeTheSlicesAreListedPokesAll(t *testing.T) {
	s := newScripted(node("n1"), annotated("a", "web", "be_web"), sliceIn("a", "web-1", "web", "n1"))
	r := newRecorded()
	m := &Many{Annotation: true, Nodes: true, Pokes: r}
	release := make(chan struct{})
	m.Client = slowSlices{kubetest.Clientset{Interface: s.client}, release}
	m.MinBackoff, m.MaxBackoff = time.Millisecond, 10*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer func() { unblock(); cancel(); <-done }()
	s.next(t, "services")
	nw := s.next(t, "nodes")
	nw.Modify(node("n1", func(n *corev1.Node) { n.Spec.Unschedulable = true }))
	r.expect(t, "all node MODIFIED")
	unblock()
	s.next(t, "endpointslices")
	nw.Modify(node("n1", func(n *corev1.Node) { n.Spec.Unschedulable = false }))
	r.expect(t, "poke a/web")
}
