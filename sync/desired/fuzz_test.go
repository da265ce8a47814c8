package desired

import (
	"net/netip"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzCompute builds Services, slices and Nodes from arbitrary strings and
// numbers, as a hostile writer of EndpointSlices and Node status could, and
// checks the properties every desired state must have: no panic, every
// address canonical and allowed, every name unique, at most 63 characters,
// of [A-Za-z0-9._-].
func FuzzCompute(f *testing.F) {
	f.Add("web-abc", "10.244.0.1", "node-a", "10.0.0.1", int32(8080), int32(30080), uint8(3), true, false)
	f.Add("x", "0177.0.0.1", "n", "169.254.169.254", int32(0), int32(0), uint8(0), false, true)
	f.Add("x-10.0.0.2", "::ffff:10.1.1.1", "n n", "fe80::1%eth0", int32(70000), int32(-1), uint8(9), true, true)
	f.Add("p\x00q", "127.0.2.2 backup", "", "0.0.0.0", int32(1), int32(65535), uint8(255), false, false)
	f.Fuzz(func(t *testing.T, pod, addr, nodeName, nodeIP string, port, nodePort int32, n uint8, v6, nodeMode bool) {
		fam := discoveryv1.AddressTypeIPv4
		if v6 {
			fam = discoveryv1.AddressTypeIPv6
		}
		pname := "http"
		sl := discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: fam,
			Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port}},
		}
		var nodes []corev1.Node
		for i := range int(n%8) + 1 {
			suffix := strconv.Itoa(i)
			nn := nodeName + suffix[:i%2]
			a := addr
			if i%3 == 1 {
				a = addr + suffix
			}
			e := discoveryv1.Endpoint{Addresses: []string{a}, NodeName: &nn,
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod + suffix[:i%2]}}
			sl.Endpoints = append(sl.Endpoints, e)
			nodes = append(nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nn},
				Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP + suffix[:i%3/2]}}}})
		}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, NodePort: nodePort}}}}
		mode := PodMode
		if nodeMode {
			mode = NodeMode
		}
		pol := AddressPolicy{}
		if n%2 == 1 {
			pol.Allowed = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8")}
		}
		backends, report, err := Compute(Input{Service: svc, Slices: []discoveryv1.EndpointSlice{sl}, Nodes: nodes},
			Options{Mode: mode, Backends: []PortBackend{{Backend: "be"}}, Addresses: pol})
		if err != nil {
			return
		}
		if len(report.Skipped) > MaxSkippedListed {
			t.Fatalf("%d skipped listed", len(report.Skipped))
		}
		for _, b := range backends {
			names := map[string]bool{}
			for _, s := range b.Servers {
				if names[s.Name] {
					t.Fatalf("duplicate name %q", s.Name)
				}
				names[s.Name] = true
				if len(s.Name) == 0 || len(s.Name) > MaxNameLength {
					t.Fatalf("name of %d characters", len(s.Name))
				}
				for _, ch := range []byte(s.Name) {
					if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_' || ch == '.') {
						t.Fatalf("name %q has %q", s.Name, ch)
					}
				}
				a, err := netip.ParseAddr(s.Address)
				if err != nil || a.String() != s.Address {
					t.Fatalf("address %q is not canonical", s.Address)
				}
				if canon, reason, _ := pol.Check(s.Address, ""); reason != "" || canon != s.Address {
					t.Fatalf("address %q is not allowed: %s", s.Address, reason)
				}
				if s.Port < 1 || s.Port > 65535 {
					t.Fatalf("port %d", s.Port)
				}
			}
		}
	})
}
