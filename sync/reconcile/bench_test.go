package reconcile_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// bigCluster has n endpoints in slices of 100 (the EndpointSlice controller's
// default), spread over n/20 nodes.
func bigCluster(n int) desired.Input {
	in := desired.Input{Service: &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ingress", Name: "web"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, NodePort: 30080}}},
	}}
	nodes := max(n/20, 1)
	for i := range nodes {
		in.Nodes = append(in.Nodes, corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%04d", i)},
			Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("127.1.%d.%d", i/250, i%250+1)}}},
		})
	}
	name, port, yes, no := "http", int32(8080), true, false
	for s := 0; s*100 < n; s++ {
		sl := discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "ingress", Name: fmt.Sprintf("web-%d", s), Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		}
		for i := s * 100; i < min(n, (s+1)*100); i++ {
			node := fmt.Sprintf("node-%04d", i%nodes)
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", i/65536, i/256%256, i%256)},
				Conditions: discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no},
				NodeName:   &node,
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: fmt.Sprintf("web-%d", i)},
			})
		}
		in.Slices = append(in.Slices, sl)
	}
	return in
}

// BenchmarkDesiredAndPlan measures the pure part of one reconcile: desired
// state from n endpoints, then the plan against a backend that differs in one
// server. Target: 10 000 endpoints in < 20 ms and < 20 MB per op.
func BenchmarkDesiredAndPlan(b *testing.B) {
	for _, mode := range []desired.Mode{desired.PodMode, desired.NodeMode} {
		for _, n := range []int{10, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/endpoints=%d", mode, n), func(b *testing.B) {
				in := bigCluster(n)
				opts := desired.Options{
					Mode: mode, Backends: []desired.PortBackend{{Backend: "be"}},
					Settings: model.Settings{Balance: "roundrobin", TCPCheck: true},
					Check:    model.Check{Inter: 5 * time.Second, Rise: 2, Fall: 2},
					// The benchmark's Nodes are on loopback.
					Addresses: desired.AddressPolicy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")}},
				}
				want, _, err := desired.Compute(in, opts)
				if err != nil {
					b.Fatal(err)
				}
				current := want[0]
				current.Servers = append([]model.Server(nil), current.Servers...)
				current.Servers[0].Address = "127.9.9.9"
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					backends, _, err := desired.Compute(in, opts)
					if err != nil {
						b.Fatal(err)
					}
					if p := plan.Calculate(current, backends[0]); len(p.Changes) != 1 {
						b.Fatalf("%d changes, want 1", len(p.Changes))
					}
				}
			})
		}
	}
}
