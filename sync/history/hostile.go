package history

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Config.Hostile: Kubernetes is not trusted. Beside the Service's own
// slices it holds slices the service must take no server from, each
// endpoint of them ready. A server for any of them is a server at an
// address no pod has, which Converges reports as running for no pod; its
// check fails, so clients do not see it. Every address is one a wrong
// server could reach without leaving the machine (loopback) or the
// history's network namespace.

// controllerManaged is the EndpointSlice controller's managed-by label,
// which the histories' own slices carry; with Config.Hostile,
// ENDPOINTSLICE_MANAGED_BY names it.
const controllerManaged = "endpointslice-controller.k8s.io"

// allowedCIDRs is ALLOWED_SERVER_CIDRS in histories: the pods' and the
// Nodes' networks, and of loopback only 127.0.0.0/16, so that 127.1.0.0/16
// is outside it and still loopback.
const allowedCIDRs = "127.0.0.0/16,10.244.0.0/16,10.250.0.0/24"

// hostileAddr is an address of the pods' network no pod has (podAddr's
// third byte reaches 200 only past pod 49,749).
func hostileAddr(last int) string {
	return fmt.Sprintf("%d.%d.200.%d", podNet[0], podNet[1], last)
}

// hostileSlices are the slices of Config.Hostile, for the Service's port
// tcp at port:
//   - an address outside ALLOWED_SERVER_CIDRS;
//   - an address with a leading zero, which the API server takes and
//     HAProxy would read another way;
//   - an IPv6 slice whose address is outside ALLOWED_SERVER_CIDRS (::1,
//     or a unique local address in the tests' network namespace);
//   - a slice whose only port is one the Service does not name;
//   - a slice of another controller (the mirroring one's label), which
//     ENDPOINTSLICE_MANAGED_BY leaves out;
//   - in the tests' own network namespace, an FQDN slice (outside it a
//     wrong server would send a DNS query).
func hostileSlices(port int32) []discoveryv1.EndpointSlice {
	// The API server refuses loopback addresses in a slice: in the tests'
	// own network namespace (serve histories) the outside addresses are
	// ones no route there leads to.
	outside, outside6 := "127.1.0.1", "::1"
	if privateNet {
		outside, outside6 = "10.245.0.1", "fd00:245::1"
	}
	tcp, other := "tcp", "other"
	slice := func(name string, family discoveryv1.AddressType, manager, portName string, addrs ...string) discoveryv1.EndpointSlice {
		sl := discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: service + "-" + name, Labels: map[string]string{
				discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: manager}},
			AddressType: family,
			Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
		}
		for i, a := range addrs {
			ready := true
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{a},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: fmt.Sprintf("%s-%d", name, i)},
			})
		}
		return sl
	}
	out := []discoveryv1.EndpointSlice{
		slice("hostile-v4", discoveryv1.AddressTypeIPv4, controllerManaged, tcp, outside, fmt.Sprintf("%d.%d.200.03", podNet[0], podNet[1])),
		slice("hostile-v6", discoveryv1.AddressTypeIPv6, controllerManaged, tcp, outside6),
		slice("hostile-port", discoveryv1.AddressTypeIPv4, controllerManaged, other, hostileAddr(4)),
		slice("mirrored", discoveryv1.AddressTypeIPv4, "endpointslicemirroring-controller.k8s.io", tcp, hostileAddr(5)),
	}
	if privateNet {
		out = append(out, slice("hostile-fqdn", discoveryv1.AddressTypeFQDN, controllerManaged, tcp, "pod.hostile.test"))
	}
	return out
}
