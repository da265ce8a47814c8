// Package desired turns a Service, its EndpointSlices and the cluster's Nodes
// into the servers each HAProxy backend should have. It is pure: the caller
// reads the objects (package kube) and logs the warnings.
//
// Rules, from the product contract:
//   - only slices labelled kubernetes.io/service-name=<service> count, and an
//     endpoint listed in two slices counts once (its most serving state wins);
//   - ready -> Ready; serving and terminating -> Drain; anything else -> Maint;
//   - node mode: one server per Node hosting endpoints, address = its
//     InternalIP, state = the best of its endpoints' states;
//   - pod mode: one server per endpoint address, named after the Pod;
//   - server port: the fixed port if set, else the Service port's nodePort in
//     node mode, else the endpoint port.
package desired

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// Mode says what a server stands for.
type Mode string

const (
	// NodeMode makes one server per Node that hosts endpoints.
	NodeMode Mode = "node"
	// PodMode makes one server per endpoint address.
	PodMode Mode = "pod"
)

// MaxWeight is HAProxy's largest server weight.
const MaxWeight = 256

// PortBackend maps one Service port to one HAProxy backend. An empty Port means
// "the Service's only port".
type PortBackend struct {
	Port    string // Service port name or number
	Backend string
}

// Options shape the desired servers; they come from the configuration.
type Options struct {
	Mode     Mode
	Backends []PortBackend
	// FixedPort, when not 0, is every server's port.
	FixedPort int
	// WeightByEndpoints sets a node's weight to its number of ready endpoints.
	WeightByEndpoints bool
	Settings          model.Settings
	Check             model.Check
}

// Input is what was read from Kubernetes.
type Input struct {
	Service *corev1.Service
	Slices  []discoveryv1.EndpointSlice
	Nodes   []corev1.Node
}

// Compute returns one desired backend per configured port, each with its
// servers sorted by name, and warnings about endpoints that were skipped. An
// error means the input cannot be mapped to backends at all; the caller must
// then change nothing.
func Compute(in Input, opts Options) ([]model.Backend, []string, error) {
	if in.Service == nil {
		return nil, nil, fmt.Errorf("no service given")
	}
	c := computer{in: in, opts: opts, nodes: make(map[string]*corev1.Node, len(in.Nodes))}
	for i := range in.Nodes {
		c.nodes[in.Nodes[i].Name] = &in.Nodes[i]
	}
	backends := make([]model.Backend, 0, len(opts.Backends))
	for _, pb := range opts.Backends {
		sp, err := servicePort(in.Service, pb.Port, opts.FixedPort != 0)
		if err != nil {
			return nil, nil, err
		}
		backends = append(backends, model.Backend{
			Name:     pb.Backend,
			Settings: opts.Settings,
			Servers:  c.servers(sp),
		})
	}
	return backends, c.warnings, nil
}

// servicePort finds the Service port a backend follows. nil means "any port":
// allowed only for a multi-port Service whose server port is fixed anyway.
func servicePort(svc *corev1.Service, want string, fixed bool) (*corev1.ServicePort, error) {
	ports := svc.Spec.Ports
	if want == "" {
		switch {
		case len(ports) == 1:
			return &ports[0], nil
		case fixed:
			return nil, nil
		case len(ports) == 0:
			return nil, fmt.Errorf("service %s/%s has no ports", svc.Namespace, svc.Name)
		default:
			return nil, fmt.Errorf("service %s/%s has %d ports: set HAPROXY_BACKENDS or HAPROXY_BACKEND_PORT", svc.Namespace, svc.Name, len(ports))
		}
	}
	for i := range ports {
		if ports[i].Name == want || strconv.Itoa(int(ports[i].Port)) == want {
			return &ports[i], nil
		}
	}
	return nil, fmt.Errorf("service %s/%s has no port %q", svc.Namespace, svc.Name, want)
}

type computer struct {
	in       Input
	opts     Options
	nodes    map[string]*corev1.Node
	warnings []string
	warned   map[string]bool
}

func (c *computer) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if c.warned == nil {
		c.warned = map[string]bool{}
	}
	if !c.warned[msg] { // one warning per cause, not one per backend
		c.warned[msg] = true
		c.warnings = append(c.warnings, msg)
	}
}

// endpoint is one endpoint address of one slice, reduced to what matters.
type endpoint struct {
	address  string
	family   discoveryv1.AddressType
	port     int
	state    model.State
	nodeName string
	podName  string
}

// endpoints yields each endpoint address of the Service's slices once, with the
// port of sp (or the first port when sp is nil).
func (c *computer) endpoints(sp *corev1.ServicePort) []endpoint {
	byAddr := map[string]int{}
	var out []endpoint
	for i := range c.in.Slices {
		s := &c.in.Slices[i]
		if s.Labels[discoveryv1.LabelServiceName] != c.in.Service.Name || s.Namespace != c.in.Service.Namespace {
			continue
		}
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			c.warn("endpointslice %s: address type %s skipped", s.Name, s.AddressType)
			continue
		}
		port, ok := slicePort(s, sp)
		if !ok {
			continue
		}
		for j := range s.Endpoints {
			e := &s.Endpoints[j]
			st := state(e.Conditions)
			for _, addr := range e.Addresses {
				ep := endpoint{address: addr, family: s.AddressType, port: port, state: st}
				if e.NodeName != nil {
					ep.nodeName = *e.NodeName
				}
				if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
					ep.podName = e.TargetRef.Name
				}
				if k, seen := byAddr[addr]; seen {
					if st.Rank() > out[k].state.Rank() {
						out[k] = ep
					}
					continue
				}
				byAddr[addr] = len(out)
				out = append(out, ep)
			}
		}
	}
	return out
}

// slicePort returns the slice's port number for the Service port sp. Slice
// ports carry the Service port's name, not its number.
func slicePort(s *discoveryv1.EndpointSlice, sp *corev1.ServicePort) (int, bool) {
	for _, p := range s.Ports {
		if p.Port == nil {
			continue
		}
		if sp == nil || (p.Name != nil && *p.Name == sp.Name) || (p.Name == nil && sp.Name == "") {
			return int(*p.Port), true
		}
	}
	return 0, false
}

// state maps endpoint conditions to a server state. A nil ready or serving
// means "unknown" and, as the EndpointSlice API asks, is read as true.
func state(c discoveryv1.EndpointConditions) model.State {
	isTrue := func(b *bool, unknown bool) bool {
		if b == nil {
			return unknown
		}
		return *b
	}
	switch {
	case isTrue(c.Ready, true) && !isTrue(c.Terminating, false):
		return model.Ready
	case isTrue(c.Serving, isTrue(c.Ready, true)) && isTrue(c.Terminating, false):
		return model.Drain
	default:
		return model.Maint
	}
}

func (c *computer) servers(sp *corev1.ServicePort) []model.Server {
	eps := c.endpoints(sp)
	var out []model.Server
	if c.opts.Mode == PodMode {
		out = c.podServers(eps)
	} else {
		out = c.nodeServers(eps, sp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (c *computer) port(ep endpoint, sp *corev1.ServicePort) int {
	switch {
	case c.opts.FixedPort != 0:
		return c.opts.FixedPort
	case c.opts.Mode == NodeMode && sp != nil && sp.NodePort != 0:
		return int(sp.NodePort)
	default:
		return ep.port
	}
}

func (c *computer) podServers(eps []endpoint) []model.Server {
	// Sorting by address makes the choice of which duplicate name gets a
	// suffix (dual-stack pods appear once per family) deterministic.
	sort.Slice(eps, func(i, j int) bool { return eps[i].address < eps[j].address })
	out := make([]model.Server, 0, len(eps))
	used := make(map[string]bool, len(eps))
	for _, ep := range eps {
		name := ServerName(ep.podName)
		if name == "" {
			name = ServerName(ep.address)
		}
		if used[name] {
			name = ServerName(name + "-" + ep.address)
		}
		used[name] = true
		out = append(out, model.Server{
			Name: name, Address: ep.address, Port: c.port(ep, nil),
			Weight: 1, State: ep.state, Check: c.opts.Check,
		})
	}
	return out
}

type nodeAcc struct {
	ep       endpoint // the first endpoint seen: its port is the node's
	state    model.State
	ready    int
	families map[discoveryv1.AddressType]bool
}

func (c *computer) nodeServers(eps []endpoint, sp *corev1.ServicePort) []model.Server {
	acc := map[string]*nodeAcc{}
	var order []string
	for _, ep := range eps {
		if ep.nodeName == "" {
			c.warn("endpoint %s has no nodeName: skipped", ep.address)
			continue
		}
		a, ok := acc[ep.nodeName]
		if !ok {
			a = &nodeAcc{ep: ep, state: ep.state, families: map[discoveryv1.AddressType]bool{}}
			acc[ep.nodeName] = a
			order = append(order, ep.nodeName)
		}
		a.families[ep.family] = true
		if ep.state.Rank() > a.state.Rank() {
			a.state = ep.state
		}
		if ep.state == model.Ready {
			a.ready++
		}
	}
	out := make([]model.Server, 0, len(order))
	for _, name := range order {
		a := acc[name]
		node, ok := c.nodes[name]
		if !ok {
			c.warn("node %s not found: its endpoints are skipped", name)
			continue
		}
		addr := c.nodeAddress(node, a.families)
		if addr == "" {
			c.warn("node %s has no InternalIP: its endpoints are skipped", name)
			continue
		}
		weight := 1
		if c.opts.WeightByEndpoints {
			weight = min(max(a.ready, 1), MaxWeight)
		}
		out = append(out, model.Server{
			Name: ServerName(name), Address: addr, Port: c.port(a.ep, sp),
			Weight: weight, State: a.state, Check: c.opts.Check,
		})
	}
	return out
}

// nodeAddress picks the node's InternalIP of a family its endpoints use,
// preferring the Service's primary family.
func (c *computer) nodeAddress(n *corev1.Node, families map[discoveryv1.AddressType]bool) string {
	var fams []discoveryv1.AddressType
	if pf := c.in.Service.Spec.IPFamilies; len(pf) > 0 && families[discoveryv1.AddressType(pf[0])] {
		fams = append(fams, discoveryv1.AddressType(pf[0]))
	}
	fams = append(fams, discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6)
	for _, f := range fams {
		if !families[f] {
			continue
		}
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			ip := net.ParseIP(a.Address)
			if ip == nil {
				continue
			}
			if (ip.To4() != nil) == (f == discoveryv1.AddressTypeIPv4) {
				return a.Address
			}
		}
	}
	return ""
}

// ServerName turns a Node name, Pod name or IP address into a valid HAProxy
// server name: letters, digits, '-', '_' and '.' are kept, and dots of an IP
// address and every other character become '-'.
func ServerName(s string) string {
	if net.ParseIP(s) != nil {
		s = strings.NewReplacer(".", "-", ":", "-").Replace(s)
	}
	b := []byte(s)
	for i, ch := range b {
		ok := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_' || ch == '.'
		if !ok {
			b[i] = '-'
		}
	}
	return string(b)
}
