package desired

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

const ns, svcName = "ingress", "web"

var check = model.Check{Inter: 5 * time.Second, Rise: 2, Fall: 2}

func service(ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svcName},
		Spec:       corev1.ServiceSpec{Ports: ports},
	}
}

func svcPort(name string, port, nodePort int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, NodePort: nodePort}
}

func node(name string, addrs ...string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name})
	return n
}

type cond int

const (
	ready cond = iota
	terminating
	notReady
	unknown
)

type ep struct {
	addr, node, pod string
	c               cond
}

func b(v bool) *bool { return &v }

func slice(name, svc string, family discoveryv1.AddressType, ports map[string]int32, eps ...ep) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: family,
	}
	for pn, p := range ports {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: &pn, Port: &p})
	}
	for _, e := range eps {
		x := discoveryv1.Endpoint{Addresses: []string{e.addr}}
		switch e.c {
		case ready:
			x.Conditions = discoveryv1.EndpointConditions{Ready: b(true), Serving: b(true), Terminating: b(false)}
		case terminating:
			x.Conditions = discoveryv1.EndpointConditions{Ready: b(false), Serving: b(true), Terminating: b(true)}
		case notReady:
			x.Conditions = discoveryv1.EndpointConditions{Ready: b(false), Serving: b(false), Terminating: b(false)}
		}
		if e.node != "" {
			x.NodeName = &e.node
		}
		if e.pod != "" {
			x.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: e.pod}
		}
		s.Endpoints = append(s.Endpoints, x)
	}
	return s
}

var v4, v6 = discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6

func s(name, addr string, port, weight int, st model.State) model.Server {
	return model.Server{Name: name, Address: addr, Port: port, Weight: weight, State: st, Reason: ReasonEndpoints, Check: check}
}

func TestCompute(t *testing.T) {
	http := map[string]int32{"http": 8080}
	nodes := []corev1.Node{node("node-a", "127.0.1.1"), node("node-b", "127.0.1.2"), node("node-c", "127.0.1.3")}
	single := []PortBackend{{Backend: "be"}}

	tests := []struct {
		name    string
		in      Input
		opts    Options
		want    map[string][]model.Server
		skipped []string // reasons, in order
		err     string
	}{
		{name: "node mode: one server per node, nodePort wins over endpoint port",
			in: Input{Service: service(svcPort("http", 80, 30080)), Nodes: nodes, Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, http, ep{addr: "10.244.0.1", node: "node-a"}, ep{addr: "10.244.0.2", node: "node-a"}, ep{addr: "10.244.1.1", node: "node-b"}),
			}},
			opts: Options{Mode: NodeMode, Backends: single},
			want: map[string][]model.Server{"be": {s("node-a", "127.0.1.1", 30080, 1, model.Ready), s("node-b", "127.0.1.2", 30080, 1, model.Ready)}}},
		{name: "node mode without nodePort uses the endpoint port; weight by endpoints",
			in: Input{Service: service(svcPort("http", 80, 0)), Nodes: nodes, Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, http, ep{addr: "10.244.0.1", node: "node-a"}, ep{addr: "10.244.0.2", node: "node-a"}, ep{addr: "10.244.0.3", node: "node-a", c: terminating}, ep{addr: "10.244.1.1", node: "node-b"}),
			}},
			opts: Options{Mode: NodeMode, Backends: single, WeightByEndpoints: true},
			want: map[string][]model.Server{"be": {s("node-a", "127.0.1.1", 8080, 2, model.Ready), s("node-b", "127.0.1.2", 8080, 1, model.Ready)}}},
		{name: "fixed port overrides nodePort",
			in: Input{Service: service(svcPort("http", 80, 30080)), Nodes: nodes, Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, http, ep{addr: "10.244.0.1", node: "node-a"}),
			}},
			opts: Options{Mode: NodeMode, Backends: single, FixedPort: 443},
			want: map[string][]model.Server{"be": {s("node-a", "127.0.1.1", 443, 1, model.Ready)}}},
		{name: "node state: ready beats drain beats maint",
			in: Input{Service: service(svcPort("http", 80, 0)), Nodes: nodes, Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, http,
					ep{addr: "10.244.0.1", node: "node-a", c: terminating}, ep{addr: "10.244.0.2", node: "node-a"},
					ep{addr: "10.244.1.1", node: "node-b", c: notReady}, ep{addr: "10.244.1.2", node: "node-b", c: terminating},
					ep{addr: "10.244.2.1", node: "node-c", c: notReady}),
			}},
			opts: Options{Mode: NodeMode, Backends: single},
			want: map[string][]model.Server{"be": {s("node-a", "127.0.1.1", 8080, 1, model.Ready), s("node-b", "127.0.1.2", 8080, 1, model.Drain), s("node-c", "127.0.1.3", 8080, 1, model.Maint)}}},
		{name: "missing node and node without InternalIP are skipped with warnings",
			in: Input{Service: service(svcPort("http", 80, 0)), Nodes: []corev1.Node{node("node-a", "127.0.1.1"), node("node-x")}, Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, http, ep{addr: "10.244.0.1", node: "node-a"}, ep{addr: "10.244.9.1", node: "node-gone"}, ep{addr: "10.244.8.1", node: "node-x"}, ep{addr: "10.244.7.1"}),
			}},
			opts:    Options{Mode: NodeMode, Backends: single},
			want:    map[string][]model.Server{"be": {s("node-a", "127.0.1.1", 8080, 1, model.Ready)}},
			skipped: []string{ReasonNoNodeName, ReasonNodeNotFound, ReasonNodeNoAddress}},
		{name: "pod mode: pod names, endpoint port, conditions",
			in: Input{Service: service(svcPort("http", 80, 30080)), Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, http, ep{addr: "10.244.0.1", pod: "web-abc"}, ep{addr: "10.244.0.2", pod: "web-def", c: terminating}, ep{addr: "10.244.0.3", pod: "web-ghi", c: notReady}, ep{addr: "10.244.0.4", c: unknown}),
			}},
			opts: Options{Mode: PodMode, Backends: single},
			want: map[string][]model.Server{"be": {
				s("10-244-0-4", "10.244.0.4", 8080, 1, model.Ready),
				s("web-abc", "10.244.0.1", 8080, 1, model.Ready), s("web-def", "10.244.0.2", 8080, 1, model.Drain), s("web-ghi", "10.244.0.3", 8080, 1, model.Maint)}}},
		{name: "endpoint listed in two slices counts once, its best state wins",
			in: Input{Service: service(svcPort("http", 80, 0)), Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, http, ep{addr: "10.244.0.1", pod: "web-abc", c: notReady}),
				slice("web-2", svcName, v4, http, ep{addr: "10.244.0.1", pod: "web-abc"}, ep{addr: "10.244.0.2", pod: "web-def"}),
			}},
			opts: Options{Mode: PodMode, Backends: single},
			want: map[string][]model.Server{"be": {s("web-abc", "10.244.0.1", 8080, 1, model.Ready), s("web-def", "10.244.0.2", 8080, 1, model.Ready)}}},
		{name: "endpoint on two slices counts once for a node's weight",
			in: Input{Service: service(svcPort("http", 80, 0)), Nodes: nodes, Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, http, ep{addr: "10.244.0.1", node: "node-a"}),
				slice("web-2", svcName, v4, http, ep{addr: "10.244.0.1", node: "node-a"}, ep{addr: "10.244.0.2", node: "node-a"}),
			}},
			opts: Options{Mode: NodeMode, Backends: single, WeightByEndpoints: true},
			want: map[string][]model.Server{"be": {s("node-a", "127.0.1.1", 8080, 2, model.Ready)}}},
		{name: "slices of another service or namespace never leak in",
			in: Input{Service: service(svcPort("http", 80, 0)), Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, http, ep{addr: "10.244.0.1", pod: "web-abc"}),
				slice("api-1", "api", v4, http, ep{addr: "10.244.5.1", pod: "api-abc"}),
				func() discoveryv1.EndpointSlice {
					x := slice("web-x", svcName, v4, http, ep{addr: "10.244.6.1", pod: "web-other-ns"})
					x.Namespace = "other"
					return x
				}(),
			}},
			opts: Options{Mode: PodMode, Backends: single},
			want: map[string][]model.Server{"be": {s("web-abc", "10.244.0.1", 8080, 1, model.Ready)}}},
		{name: "empty service gives empty backends",
			in:   Input{Service: service(svcPort("http", 80, 0))},
			opts: Options{Mode: PodMode, Backends: single},
			want: map[string][]model.Server{"be": {}}},
		{name: "two ports, two backends, by name and by number",
			in: Input{Service: service(svcPort("http", 80, 30080), svcPort("https", 443, 30443)), Nodes: nodes, Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, map[string]int32{"http": 8080, "https": 8443}, ep{addr: "10.244.0.1", node: "node-a"}),
			}},
			opts: Options{Mode: NodeMode, Backends: []PortBackend{{Port: "http", Backend: "be_http"}, {Port: "443", Backend: "be_https"}}},
			want: map[string][]model.Server{
				"be_http":  {s("node-a", "127.0.1.1", 30080, 1, model.Ready)},
				"be_https": {s("node-a", "127.0.1.1", 30443, 1, model.Ready)}}},
		{name: "pod mode with two ports uses each endpoint port",
			in: Input{Service: service(svcPort("http", 80, 30080), svcPort("https", 443, 30443)), Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, map[string]int32{"http": 8080, "https": 8443}, ep{addr: "10.244.0.1", pod: "web-abc"}),
			}},
			opts: Options{Mode: PodMode, Backends: []PortBackend{{Port: "http", Backend: "be_http"}, {Port: "https", Backend: "be_https"}}},
			want: map[string][]model.Server{
				"be_http":  {s("web-abc", "10.244.0.1", 8080, 1, model.Ready)},
				"be_https": {s("web-abc", "10.244.0.1", 8443, 1, model.Ready)}}},
		{name: "IPv6 pods: colons become dashes in names",
			in: Input{Service: service(svcPort("http", 80, 0)), Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v6, http, ep{addr: "fd00:10:244::1"}),
			}},
			opts: Options{Mode: PodMode, Backends: single},
			want: map[string][]model.Server{"be": {s("fd00-10-244--1", "fd00:10:244::1", 8080, 1, model.Ready)}}},
		{name: "IPv6 nodes: the node's IPv6 InternalIP is used for IPv6 slices",
			in: Input{Service: service(svcPort("http", 80, 0)), Nodes: []corev1.Node{node("node-a", "127.0.1.1", "fd00::a")}, Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v6, http, ep{addr: "fd00:10:244::1", node: "node-a"}),
			}},
			opts: Options{Mode: NodeMode, Backends: single},
			want: map[string][]model.Server{"be": {s("node-a", "fd00::a", 8080, 1, model.Ready)}}},
		{name: "dual-stack pod gets one server per address, names kept unique",
			in: Input{Service: service(svcPort("http", 80, 0)), Slices: []discoveryv1.EndpointSlice{
				slice("web-4", svcName, v4, http, ep{addr: "10.244.0.1", pod: "web-abc"}),
				slice("web-6", svcName, v6, http, ep{addr: "fd00:10:244::1", pod: "web-abc"}),
			}},
			opts: Options{Mode: PodMode, Backends: single},
			want: map[string][]model.Server{"be": {s(withHash("web-abc", "10.244.0.1", MaxNameLength), "10.244.0.1", 8080, 1, model.Ready), s(withHash("web-abc", "fd00:10:244::1", MaxNameLength), "fd00:10:244::1", 8080, 1, model.Ready)}}},
		{name: "names that collide once made safe all get a hash; a name over 63 characters is cut and hashed",
			in: Input{Service: service(svcPort("http", 80, 0)), Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, http, ep{addr: "10.0.0.2", pod: "x"}, ep{addr: "10.0.0.3", pod: "x"},
					ep{addr: "10.0.0.0", pod: "x-10.0.0.2"}, ep{addr: "10.0.0.9", pod: strings.Repeat("p", 20000)}),
			}},
			opts: Options{Mode: PodMode, Backends: single},
			want: map[string][]model.Server{"be": {
				s(strings.Repeat("p", 54)+"-"+fmt.Sprintf("%08x", fnv32(strings.Repeat("p", 20000))), "10.0.0.9", 8080, 1, model.Ready),
				s("x-10.0.0.2", "10.0.0.0", 8080, 1, model.Ready),
				s(withHash("x", "10.0.0.2", MaxNameLength), "10.0.0.2", 8080, 1, model.Ready), s(withHash("x", "10.0.0.3", MaxNameLength), "10.0.0.3", 8080, 1, model.Ready)}}},
		{name: "hostile addresses are skipped, the rest proceeds; canonical forms",
			in: Input{Service: service(svcPort("http", 80, 0)), Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, http, ep{addr: "10.0.0.1", pod: "good"}, ep{addr: "0177.0.0.1", pod: "octal"}, ep{addr: "010.0.0.1", pod: "octal2"},
					ep{addr: "127.0.2.2 backup", pod: "space"}, ep{addr: "0.0.0.0", pod: "zero"}, ep{addr: "fd00::1", pod: "v6-in-v4"}),
				slice("web-6", svcName, v6, http, ep{addr: "fd00:0:0:0::5", pod: "long-v6"}, ep{addr: "::ffff:10.1.1.1", pod: "mapped"}, ep{addr: "fe80::1%eth0", pod: "zone"}),
			}},
			opts:    Options{Mode: PodMode, Backends: single, Addresses: AddressPolicy{}},
			want:    map[string][]model.Server{"be": {s("good", "10.0.0.1", 8080, 1, model.Ready), s("long-v6", "fd00::5", 8080, 1, model.Ready)}},
			skipped: []string{ReasonInvalidAddress, ReasonInvalidAddress, ReasonInvalidAddress, ReasonAddressNotAllowed, ReasonFamilyMismatch, ReasonInvalidAddress, ReasonInvalidAddress}},
		{name: "node addresses the API server does not validate",
			in: Input{Service: service(svcPort("http", 80, 0)), Nodes: []corev1.Node{node("meta", "169.254.169.254"), node("zero", "0.0.0.0"), node("mapped", "::ffff:10.1.1.1"), node("ok", "10.1.0.1")},
				Slices: []discoveryv1.EndpointSlice{slice("web-1", svcName, v4, http, ep{addr: "10.244.0.1", node: "meta"}, ep{addr: "10.244.0.2", node: "zero"}, ep{addr: "10.244.0.3", node: "mapped"}, ep{addr: "10.244.0.4", node: "ok"})}},
			opts:    Options{Mode: NodeMode, Backends: single, Addresses: AddressPolicy{}},
			want:    map[string][]model.Server{"be": {s("ok", "10.1.0.1", 8080, 1, model.Ready)}},
			skipped: []string{ReasonAddressNotAllowed, ReasonAddressNotAllowed, ReasonInvalidAddress}},
		{name: "ALLOWED_SERVER_CIDRS: only inside, loopback too when listed",
			in: Input{Service: service(svcPort("http", 80, 0)), Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, http, ep{addr: "10.0.0.1", pod: "in"}, ep{addr: "10.9.0.1", pod: "out"}),
			}},
			opts:    Options{Mode: PodMode, Backends: single, Addresses: AddressPolicy{Allowed: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}}},
			want:    map[string][]model.Server{"be": {s("in", "10.0.0.1", 8080, 1, model.Ready)}},
			skipped: []string{ReasonAddressNotAllowed}},
		{name: "only slices of the given manager, when asked",
			in: Input{Service: service(svcPort("http", 80, 0)), Slices: []discoveryv1.EndpointSlice{
				func() discoveryv1.EndpointSlice {
					x := slice("web-1", svcName, v4, http, ep{addr: "10.0.0.1", pod: "managed"})
					x.Labels[discoveryv1.LabelManagedBy] = "endpointslice-controller.k8s.io"
					return x
				}(),
				slice("web-2", svcName, v4, http, ep{addr: "10.0.0.2", pod: "by-hand"}),
			}},
			opts:    Options{Mode: PodMode, Backends: single, ManagedBy: "endpointslice-controller.k8s.io"},
			want:    map[string][]model.Server{"be": {s("managed", "10.0.0.1", 8080, 1, model.Ready)}},
			skipped: []string{ReasonUnmanaged}},
		{name: "multi-port service without HAPROXY_BACKENDS is an error",
			in:   Input{Service: service(svcPort("http", 80, 0), svcPort("https", 443, 0))},
			opts: Options{Mode: PodMode, Backends: single},
			err:  "has 2 ports"},
		{name: "unknown port is an error",
			in:   Input{Service: service(svcPort("http", 80, 0))},
			opts: Options{Mode: PodMode, Backends: []PortBackend{{Port: "grpc", Backend: "be"}}},
			err:  `no port "grpc"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Check = check
			if tt.opts.Addresses.Allowed == nil && !strings.Contains(tt.name, "hostile") && !strings.Contains(tt.name, "validate") {
				tt.opts.Addresses = testAddresses
			}
			got, report, err := Compute(tt.in, tt.opts)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gotMap := map[string][]model.Server{}
			for _, be := range got {
				for i := range be.Servers {
					be.Servers[i].Pod = ""       // TestReadinessGate checks it
					be.Servers[i].Replaces = nil // TestClusterPrefixAndZones checks it
				}
				gotMap[be.Name] = be.Servers
			}
			if !reflect.DeepEqual(gotMap, tt.want) {
				t.Errorf("got  %+v\nwant %+v", gotMap, tt.want)
			}
			var reasons []string
			for _, sk := range report.Skipped {
				reasons = append(reasons, sk.Reason)
			}
			if !reflect.DeepEqual(reasons, tt.skipped) || report.Total() != len(tt.skipped) {
				t.Errorf("skipped %+v, want reasons %v", report.Skipped, tt.skipped)
			}
		})
	}
}

// testAddresses allows the loopback Node addresses and private pod
// addresses the tables use.
var testAddresses = AddressPolicy{Allowed: []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}}

func fnv32(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

func TestServerName(t *testing.T) {
	for in, want := range map[string]string{
		"node-a.example.com": "node-a.example.com",
		"10.1.2.3":           "10-1-2-3",
		"fd00::1":            "fd00--1",
		"weird name/x":       "weird-name-x",
		"":                   withHash("", "", MaxNameLength),
		"backup:8443 check":  "backup-8443-check",
	} {
		if got := ServerName(in); got != want {
			t.Errorf("ServerName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestNodeLifecycle: what moves a Node's server besides its endpoints, each
// Node hosting one ready endpoint.
func TestNodeLifecycle(t *testing.T) {
	withNode := func(name string, f func(*corev1.Node)) corev1.Node {
		n := node(name, "127.0.1.1")
		n.Labels, n.Annotations = map[string]string{}, map[string]string{}
		f(&n)
		return n
	}
	taint := func(key string) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
		}
	}
	annotate := func(v string) func(*corev1.Node) { return func(n *corev1.Node) { n.Annotations[AnnotationState] = v } }
	for _, tt := range []struct {
		name          string
		node          func(*corev1.Node)
		c             cond
		drainCordoned bool
		state         model.State // "" = no server
		reason        string
		skipped       string
	}{
		{"plain", func(*corev1.Node) {}, ready, false, model.Ready, ReasonEndpoints, ""},
		{"exclude label, any value", func(n *corev1.Node) { n.Labels[LabelExcludeFromLB] = "" }, ready, false, "", ReasonLabel, ""},
		{"autoscaler deletion taint drains", taint(TaintToBeDeleted), ready, false, model.Drain, ReasonTaint, ""},
		{"Karpenter's disruption taint drains", taint(TaintKarpenterDisrupted), ready, false, model.Drain, ReasonTaint, ""},
		{"the legacy exclude label, any value", func(n *corev1.Node) { n.Labels[LabelExcludeBalancer] = "true" }, ready, false, "", ReasonLabel, ""},
		{"the taint never raises a maint node", taint(TaintToBeDeleted), notReady, false, model.Maint, ReasonEndpoints, ""},
		{"another taint changes nothing", taint("example.com/gpu"), ready, false, model.Ready, ReasonEndpoints, ""},
		{"cordoned: unchanged by default", func(n *corev1.Node) { n.Spec.Unschedulable = true }, ready, false, model.Ready, ReasonEndpoints, ""},
		{"cordoned with CORDONED_NODES=drain", func(n *corev1.Node) { n.Spec.Unschedulable = true }, ready, true, model.Drain, ReasonCordon, ""},
		{"annotation maint", annotate("maint"), ready, false, model.Maint, ReasonAnnotation, ""},
		{"annotation drain beats endpoints", annotate("drain"), ready, false, model.Drain, ReasonAnnotation, ""},
		{"annotation ready beats the taint and not-ready endpoints", func(n *corev1.Node) { annotate("ready")(n); taint(TaintToBeDeleted)(n) }, notReady, false, model.Ready, ReasonAnnotation, ""},
		{"an invalid annotation is skipped and reported", annotate("off"), ready, false, model.Ready, ReasonEndpoints, ReasonInvalidAnnotation},
		{"the label beats the annotation", func(n *corev1.Node) { annotate("ready")(n); n.Labels[LabelExcludeFromLB] = "true" }, ready, false, "", ReasonLabel, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Service: service(svcPort("http", 80, 0)), Nodes: []corev1.Node{withNode("n", tt.node)},
				Slices: []discoveryv1.EndpointSlice{slice("web-1", svcName, v4, map[string]int32{"http": 8080}, ep{addr: "10.244.0.1", node: "n", c: tt.c})}}
			got, report, err := Compute(in, Options{Mode: NodeMode, Backends: []PortBackend{{Backend: "be"}}, Addresses: testAddresses, DrainCordoned: tt.drainCordoned})
			if err != nil {
				t.Fatal(err)
			}
			b := got[0]
			switch {
			case tt.state == "":
				if len(b.Servers) != 0 || b.Excluded["n"] != tt.reason {
					t.Errorf("servers %+v, excluded %v", b.Servers, b.Excluded)
				}
			case len(b.Servers) != 1 || b.Servers[0].State != tt.state || b.Servers[0].Reason != tt.reason:
				t.Errorf("servers %+v, want %s because of %s", b.Servers, tt.state, tt.reason)
			}
			if tt.skipped != "" && (len(report.Skipped) != 1 || report.Skipped[0].Reason != tt.skipped) || tt.skipped == "" && report.Total() != 0 {
				t.Errorf("skipped %+v", report.Skipped)
			}
		})
	}
}

// TestSkippedCountOnceEach: an endpoint met by several backends (ports) is
// one skipped item, past the listed ones too (they were counted again once
// the list was full, and each was looked for in the whole list).
func TestSkippedCountOnceEach(t *testing.T) {
	var r Report
	n := MaxSkippedListed + 50
	for range 2 { // two backends meet every endpoint
		for i := range n {
			r.skip(fmt.Sprintf("ns/web-1 \"10.0.0.%d\"", i), ReasonAddressNotAllowed, "")
		}
	}
	if r.Total() != n || len(r.Skipped) != MaxSkippedListed {
		t.Errorf("total %d, listed %d; want %d and %d", r.Total(), len(r.Skipped), n, MaxSkippedListed)
	}
}

// TestChangedStamp: a desired server carries the newest
// last-change-trigger-time of the slices its endpoints come from; a missing
// or malformed stamp counts as none.
func TestChangedStamp(t *testing.T) {
	http := map[string]int32{"http": 8080}
	t1 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	t2 := t1.Add(1500 * time.Millisecond)
	stamped := func(sl discoveryv1.EndpointSlice, v string) discoveryv1.EndpointSlice {
		sl.Annotations = map[string]string{LastChangeTriggerTime: v}
		return sl
	}
	nodes := []corev1.Node{node("node-a", "127.0.1.1"), node("node-b", "127.0.1.2")}
	for _, tt := range []struct {
		name   string
		mode   Mode
		slices []discoveryv1.EndpointSlice
		want   map[string]time.Time
	}{
		{"pod mode: each endpoint its slice's stamp", PodMode, []discoveryv1.EndpointSlice{
			stamped(slice("a", svcName, v4, http, ep{addr: "10.244.0.1", pod: "p1"}), t1.Format(time.RFC3339Nano)),
			stamped(slice("b", svcName, v4, http, ep{addr: "10.244.0.2", pod: "p2"}), t2.Format(time.RFC3339Nano)),
		}, map[string]time.Time{"p1": t1, "p2": t2}},
		{"pod mode: an endpoint in two slices takes the newer stamp", PodMode, []discoveryv1.EndpointSlice{
			stamped(slice("a", svcName, v4, http, ep{addr: "10.244.0.1", pod: "p1"}), t2.Format(time.RFC3339Nano)),
			stamped(slice("b", svcName, v4, http, ep{addr: "10.244.0.1", pod: "p1", c: terminating}), t1.Format(time.RFC3339)),
		}, map[string]time.Time{"p1": t2}},
		{"node mode: the newest stamp of the node's endpoints", NodeMode, []discoveryv1.EndpointSlice{
			stamped(slice("a", svcName, v4, http, ep{addr: "10.244.0.1", node: "node-a"}, ep{addr: "10.244.1.1", node: "node-b"}), t1.Format(time.RFC3339)),
			stamped(slice("b", svcName, v4, http, ep{addr: "10.244.0.2", node: "node-a"}), t2.Format(time.RFC3339Nano)),
		}, map[string]time.Time{"node-a": t2, "node-b": t1}},
		{"no stamp, or one that does not parse: zero", PodMode, []discoveryv1.EndpointSlice{
			slice("a", svcName, v4, http, ep{addr: "10.244.0.1", pod: "p1"}),
			stamped(slice("b", svcName, v4, http, ep{addr: "10.244.0.2", pod: "p2"}), "yesterday"),
			stamped(slice("c", svcName, v4, http, ep{addr: "10.244.0.3", pod: "p3"}), t1.Format(time.RFC3339)+strings.Repeat("0", 64)),
		}, map[string]time.Time{"p1": {}, "p2": {}, "p3": {}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Service: service(svcPort("http", 80, 0)), Nodes: nodes, Slices: tt.slices}
			got, _, err := Compute(in, Options{Mode: tt.mode, Backends: []PortBackend{{Backend: "be"}}, Addresses: anyAddress})
			if err != nil {
				t.Fatal(err)
			}
			if len(got[0].Servers) != len(tt.want) {
				t.Fatalf("servers %+v, want %v", got[0].Servers, tt.want)
			}
			for _, srv := range got[0].Servers {
				if w, ok := tt.want[srv.Name]; !ok || !srv.Changed.Equal(w) {
					t.Errorf("%s: changed %v, want %v", srv.Name, srv.Changed, w)
				}
			}
		})
	}
}
