package desired

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// TestWarnings: each way a configuration can match nothing in Kubernetes is
// said, once, with what was expected and found; a configuration that
// matches, a Service scaled to zero (its placeholder slice) and a fixed port
// say nothing.
func TestWarnings(t *testing.T) {
	http := map[string]int32{"http": 8080}
	nodes := []corev1.Node{node("node-a", "127.0.1.1")}
	single := []PortBackend{{Backend: "be"}}
	named := []PortBackend{{Port: "http", Backend: "be_http"}}
	placeholder := discoveryv1.EndpointSlice{}
	placeholder.Namespace, placeholder.Name = ns, "web-empty"
	placeholder.Labels = map[string]string{discoveryv1.LabelServiceName: svcName}
	placeholder.AddressType = v4
	clusterIP := service(svcPort("http", 80, 0))
	clusterIP.Spec.Type = corev1.ServiceTypeClusterIP

	tests := []struct {
		name string
		in   Input
		opts Options
		// want is reason: a piece of the message, one per warning, in order.
		want []string
		err  bool
	}{
		{name: "it matches: nothing to say",
			in:   Input{Service: service(svcPort("http", 80, 30080)), Nodes: nodes, Slices: []discoveryv1.EndpointSlice{slice("web-1", svcName, v4, http, ep{addr: "10.244.0.1", node: "node-a"})}},
			opts: Options{Mode: NodeMode, Backends: named}},
		{name: "a Service scaled to zero has a placeholder slice: nothing to say",
			in:   Input{Service: service(svcPort("http", 80, 30080)), Slices: []discoveryv1.EndpointSlice{placeholder}},
			opts: Options{Mode: NodeMode, Backends: single}},
		{name: "no slice carries the Service's name",
			in: Input{Service: service(svcPort("http", 80, 30080)), Nodes: nodes, Slices: []discoveryv1.EndpointSlice{
				slice("other-1", "ingress-nginx-controller", v4, http, ep{addr: "10.244.0.1", node: "node-a"})}},
			opts: Options{Mode: NodeMode, Backends: named},
			want: []string{WarnNoEndpointSlices + ": no EndpointSlice in namespace ingress carries the label kubernetes.io/service-name=web"}},
		{name: "a slice of the same name in another namespace does not count",
			in: Input{Service: service(svcPort("http", 80, 0)), Slices: []discoveryv1.EndpointSlice{func() discoveryv1.EndpointSlice {
				s := slice("web-1", svcName, v4, http, ep{addr: "10.244.0.1"})
				s.Namespace = "default"
				return s
			}()}},
			opts: Options{Mode: PodMode, Backends: single},
			want: []string{WarnNoEndpointSlices + ": namespace ingress"}},
		{name: "the Service lacks the named port: the read cannot be used",
			in: Input{Service: service(svcPort("https", 443, 30443), svcPort("metrics", 10254, 0)), Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, map[string]int32{"https": 8443}, ep{addr: "10.244.0.1"})}},
			opts: Options{Mode: PodMode, Backends: named},
			want: []string{WarnServicePortNotFound + `: Service ingress/web has no port "http" (its ports: "https" 443, "metrics" 10254)`},
			err:  true},
		{name: "a port number that is no port",
			in:   Input{Service: service(svcPort("", 443, 0))},
			opts: Options{Mode: PodMode, Backends: []PortBackend{{Port: "80", Backend: "be"}}},
			want: []string{WarnServicePortNotFound + `: has no port "80" (its ports: 443)`},
			err:  true},
		{name: "several ports, none chosen",
			in:   Input{Service: service(svcPort("http", 80, 0), svcPort("https", 443, 0))},
			opts: Options{Mode: PodMode, Backends: single},
			want: []string{WarnServicePortAmbiguous + `: has 2 ports ("http" 80, "https" 443): set HAPROXY_BACKENDS`},
			err:  true},
		{name: "slices list endpoints, none on the Service port (the pods lack the targetPort)",
			in: Input{Service: service(svcPort("http", 80, 0)), Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, map[string]int32{"web": 8080}, ep{addr: "10.244.0.1"}, ep{addr: "10.244.0.2"}),
				slice("web-2", svcName, v4, nil, ep{addr: "10.244.0.3"})}},
			opts: Options{Mode: PodMode, Backends: named},
			want: []string{WarnSlicesLackPort + `: list 3 endpoints, none on Service port "http" (they have ports "web" 8080): backend be_http gets no server`}},
		{name: "one slice has the port: nothing to say of the others",
			in: Input{Service: service(svcPort("http", 80, 0)), Slices: []discoveryv1.EndpointSlice{
				slice("web-1", svcName, v4, map[string]int32{"web": 8080}, ep{addr: "10.244.0.1"}),
				slice("web-2", svcName, v4, http, ep{addr: "10.244.0.3"})}},
			opts: Options{Mode: PodMode, Backends: named}},
		{name: "node mode, a ClusterIP Service: servers get the target port",
			in:   Input{Service: clusterIP, Nodes: nodes, Slices: []discoveryv1.EndpointSlice{slice("web-1", svcName, v4, http, ep{addr: "10.244.0.1", node: "node-a"})}},
			opts: Options{Mode: NodeMode, Backends: single},
			want: []string{WarnNoNodePort + `: Service ingress/web (type ClusterIP) port "http" has no nodePort`}},
		{name: "node mode, a ClusterIP Service whose pods are on the host network: nothing to say",
			in:   Input{Service: clusterIP, Nodes: nodes, Slices: []discoveryv1.EndpointSlice{slice("web-1", svcName, v4, http, ep{addr: "127.0.1.1", node: "node-a"})}},
			opts: Options{Mode: NodeMode, Backends: single}},
		{name: "node mode, a ClusterIP Service with no endpoint: nothing to say",
			in:   Input{Service: clusterIP, Nodes: nodes, Slices: []discoveryv1.EndpointSlice{placeholder}},
			opts: Options{Mode: NodeMode, Backends: single}},
		{name: "node mode, a ClusterIP Service and a fixed port: nothing to say",
			in:   Input{Service: clusterIP, Nodes: nodes, Slices: []discoveryv1.EndpointSlice{slice("web-1", svcName, v4, http, ep{addr: "10.244.0.1", node: "node-a"})}},
			opts: Options{Mode: NodeMode, Backends: single, FixedPort: 80}},
		{name: "pod mode, a ClusterIP Service: the endpoint port is right",
			in:   Input{Service: clusterIP, Slices: []discoveryv1.EndpointSlice{slice("web-1", svcName, v4, http, ep{addr: "10.244.0.1"})}},
			opts: Options{Mode: PodMode, Backends: single}},
		{name: "two backends meet one missing slice: said once",
			in:   Input{Service: service(svcPort("http", 80, 30080), svcPort("https", 443, 30443))},
			opts: Options{Mode: NodeMode, Backends: []PortBackend{{Port: "http", Backend: "be_http"}, {Port: "https", Backend: "be_https"}}},
			want: []string{WarnNoEndpointSlices + ": kubernetes.io/service-name=web"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, rep, err := Compute(tt.in, tt.opts)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want an error: %v", err, tt.err)
			}
			if len(rep.Warnings) != len(tt.want) {
				t.Fatalf("warnings %+v, want %d", rep.Warnings, len(tt.want))
			}
			for i, w := range tt.want {
				reason, says, _ := strings.Cut(w, ": ")
				got := rep.Warnings[i]
				if got.Reason != reason || !strings.Contains(got.Message, says) {
					t.Errorf("warning %d: %s: %s\nwant %s: ...%s...", i, got.Reason, got.Message, reason, says)
				}
				if err != nil && err.Error() != got.Message {
					t.Errorf("error %q is not the warning's message %q", err, got.Message)
				}
			}
		})
	}
}

// TestReadWarnings: a Source's "Service not found" becomes a warning naming
// the Service, wrapped however deep; other failures say nothing.
func TestReadWarnings(t *testing.T) {
	err := fmt.Errorf("get service ingress/web: %w", &ServiceNotFoundError{Namespace: "ingress", Name: "web"})
	if !errors.Is(err, ErrServiceNotFound) || err.Error() != "get service ingress/web: service not found" {
		t.Errorf("error %q: not ErrServiceNotFound, or another message", err)
	}
	ws := ReadWarnings(fmt.Errorf("read kubernetes: %w", err))
	if len(ws) != 1 || ws[0].Reason != WarnServiceNotFound || !strings.HasPrefix(ws[0].Message, "Service ingress/web not found") {
		t.Errorf("warnings %+v", ws)
	}
	if ws := ReadWarnings(errors.New("forbidden")); ws != nil {
		t.Errorf("a failed read warns %+v", ws)
	}
}
