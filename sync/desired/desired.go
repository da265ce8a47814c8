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
//     node mode, else the endpoint port;
//   - nothing from Kubernetes is trusted (validate.go): an endpoint or Node
//     with a bad address, port or name is skipped and reported, the rest
//     proceeds; names are unique, safe and at most 63 characters.
package desired

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"time"

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
	// Addresses decides which server addresses are acceptable.
	Addresses AddressPolicy
	// ManagedBy, when set, accepts only slices whose
	// endpointslice.kubernetes.io/managed-by label has this value.
	ManagedBy string
	// DrainCordoned drains the servers of cordoned Nodes (node mode).
	DrainCordoned bool
	// ReadinessGate (pod mode): an endpoint whose pod waits only for the
	// ReadinessGate condition counts as ready (see gate.go).
	ReadinessGate bool
	// HTTPHealthChecks says the backends' checks are (or are written as)
	// HTTP GET /healthz, which kube-proxy's health ports need; without it
	// Nodes are checked on their NodePort (see health.go).
	HTTPHealthChecks bool
	// HealthCheckNodePort: a Service with externalTrafficPolicy Local has
	// its Nodes checked on its healthCheckNodePort (with HTTPHealthChecks).
	HealthCheckNodePort bool
	// KubeProxyHealthPort, when not 0 (node mode, with HTTPHealthChecks),
	// is kube-proxy's own health port: Nodes are checked there unless the
	// Service's healthCheckNodePort is used.
	KubeProxyHealthPort int
	// NamePrefix, when set (CLUSTER_NAME and "-"), starts every server name:
	// the servers with it are this instance's (model.Owns).
	NamePrefix string
	// LocalZone, when set (HAPROXY_LOCAL_ZONE), makes the servers of other
	// zones (a Node's topology.kubernetes.io/zone label in node mode, an
	// endpoint's zone in pod mode; unknown counts as another zone) backup
	// servers, named with BackupSuffix (see zones.go).
	LocalZone string
}

// Input is what was read from Kubernetes.
type Input struct {
	Service *corev1.Service
	Slices  []discoveryv1.EndpointSlice
	Nodes   []corev1.Node
	// Pods are the pods of the endpoints that are not ready, read when
	// Options.ReadinessGate is on (the others are Ready already).
	Pods []corev1.Pod
}

// Compute returns one desired backend per configured port, each with its
// servers sorted by name, and a report of what was skipped and of what in
// the configuration matches nothing (warnings.go). An error means the input
// cannot be mapped to backends at all; the caller must then change nothing
// (the report still carries the warning that says why).
func Compute(in Input, opts Options) ([]model.Backend, Report, error) {
	if in.Service == nil {
		return nil, Report{}, fmt.Errorf("no service given")
	}
	c := computer{in: in, opts: opts, names: namer{prefix: opts.NamePrefix, roles: opts.LocalZone != ""}, nodes: make(map[string]*corev1.Node, len(in.Nodes)), pods: make(map[string]*corev1.Pod, len(in.Pods))}
	for i := range in.Nodes {
		c.nodes[in.Nodes[i].Name] = &in.Nodes[i]
	}
	for i := range in.Pods {
		if in.Pods[i].Namespace == in.Service.Namespace {
			c.pods[in.Pods[i].Name] = &in.Pods[i]
		}
	}
	backends := make([]model.Backend, 0, len(opts.Backends))
	for _, pb := range opts.Backends {
		sp, w := servicePort(in.Service, pb.Port, opts.FixedPort != 0)
		if w != nil {
			// The read cannot be used: the caller changes nothing, and
			// says why with the warning.
			return nil, Report{Warnings: []Warning{*w}}, errors.New(w.Message)
		}
		c.sliceWarnings(sp, pb.Backend)
		c.nodePortWarning(sp)
		c.excluded = nil
		servers := c.servers(sp)
		backends = append(backends, model.Backend{
			Name:     pb.Backend,
			Settings: c.settings(),
			Servers:  servers,
			Excluded: c.excluded,
		})
	}
	return backends, c.report, nil
}

type computer struct {
	in       Input
	opts     Options
	names    namer
	nodes    map[string]*corev1.Node
	pods     map[string]*corev1.Pod // by name, in the Service's namespace
	report   Report
	excluded map[string]string // of the backend being computed
}

// endpoint is one endpoint address of one slice, reduced to what matters.
type endpoint struct {
	address  string
	family   discoveryv1.AddressType
	port     int
	state    model.State
	nodeName string
	podName  string
	zone     string    // the endpoint's zone, as its slice says
	changed  time.Time // the slice's last-change-trigger-time
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
		where := s.Namespace + "/" + quote(s.Name)
		if c.opts.ManagedBy != "" && s.Labels[discoveryv1.LabelManagedBy] != c.opts.ManagedBy {
			c.report.skip(where, ReasonUnmanaged, "managed by "+quote(s.Labels[discoveryv1.LabelManagedBy]))
			continue
		}
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			c.report.skip(where, ReasonAddressType, "address type "+quote(string(s.AddressType)))
			continue
		}
		changed := TriggerTime(s)
		port, ok := slicePort(s, sp)
		if !ok {
			continue
		}
		if port < 1 || port > 65535 {
			c.report.skip(where, ReasonInvalidPort, fmt.Sprintf("port %d", port))
			continue
		}
		for j := range s.Endpoints {
			e := &s.Endpoints[j]
			st := state(e.Conditions)
			for _, raw := range e.Addresses {
				addr, reason, detail := c.endpointAddress(raw, s.AddressType)
				if reason != "" {
					c.report.skip(where+" "+quote(raw), reason, detail)
					continue
				}
				ep := endpoint{address: addr, family: s.AddressType, port: port, state: st, changed: changed}
				if e.NodeName != nil {
					ep.nodeName = *e.NodeName
				}
				if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
					ep.podName = e.TargetRef.Name
				}
				if e.Zone != nil {
					ep.zone = *e.Zone
				}
				ep.state = c.gatedState(st, e.Conditions.Terminating != nil && *e.Conditions.Terminating, ep.podName, addr)
				if k, seen := byAddr[addr]; seen {
					newest := later(out[k].changed, changed)
					if ep.state.Rank() > out[k].state.Rank() {
						out[k] = ep
					}
					out[k].changed = newest
					continue
				}
				byAddr[addr] = len(out)
				out = append(out, ep)
			}
		}
	}
	return out
}

// LastChangeTriggerTime is the annotation the EndpointSlice controller
// stamps a slice with: when the newest change of its Pods or Service
// happened (RFC 3339). kube-proxy's network_programming_duration_seconds
// runs from it.
const LastChangeTriggerTime = "endpoints.kubernetes.io/last-change-trigger-time"

// TriggerTime returns the slice's last-change-trigger-time; zero when it
// has none or it does not parse (the annotation is not trusted either).
func TriggerTime(s *discoveryv1.EndpointSlice) time.Time {
	v, ok := s.Annotations[LastChangeTriggerTime]
	if !ok || len(v) > 64 {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}
	}
	return t
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// anyAddress accepts every well-formed unicast address (read only).
var anyAddress = AddressPolicy{Allowed: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}}

// endpointAddress checks an endpoint address. In node mode the pod address
// never reaches HAProxy (the Node's does), so only its form is checked.
func (c *computer) endpointAddress(raw string, family discoveryv1.AddressType) (string, string, string) {
	if c.opts.Mode == NodeMode {
		return anyAddress.Check(raw, family)
	}
	return c.opts.Addresses.Check(raw, family)
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

// podServers names each endpoint after its Pod (else its address). A name
// shared by several endpoints (a dual-stack Pod, or Pods whose names become
// equal once made safe) gets a hash of the address on every one of them, so
// no name depends on which endpoint came first.
func (c *computer) podServers(eps []endpoint) []model.Server {
	sort.Slice(eps, func(i, j int) bool { return eps[i].address < eps[j].address })
	base := make([]string, len(eps))
	count := make(map[string]int, len(eps))
	for i, ep := range eps {
		base[i] = c.names.base(ep.address)
		if ep.podName != "" {
			base[i] = c.names.base(ep.podName)
		}
		count[base[i]]++
	}
	out := make([]model.Server, 0, len(eps))
	used := make(map[string]bool, len(eps))
	for i, ep := range eps {
		b, key := base[i], ""
		if count[b] > 1 {
			key = ep.address
			b = c.names.hashed(b, key)
		}
		raw := ep.address
		if ep.podName != "" {
			raw = ep.podName
		}
		backup := c.backup(ep.zone)
		name, _ := c.names.full(b, backup)
		if used[name] {
			c.report.skip(quote(ep.address), ReasonDuplicateName, "server name "+quote(name)+" is taken")
			continue
		}
		used[name] = true
		out = append(out, model.Server{
			Name: name, Address: ep.address, Port: c.port(ep, nil),
			Weight: 1, State: ep.state, Reason: ReasonEndpoints, Check: c.opts.Check,
			Changed: ep.changed, Pod: ep.podName,
			Zone: ep.zone, Backup: backup, Replaces: c.names.replaced(name, raw, key),
		})
	}
	return out
}

type nodeAcc struct {
	ep       endpoint // the first endpoint seen: its port is the node's
	state    model.State
	changed  time.Time // the newest stamp of its endpoints' slices
	ready    int
	families map[discoveryv1.AddressType]bool
}

func (c *computer) nodeServers(eps []endpoint, sp *corev1.ServicePort) []model.Server {
	acc := map[string]*nodeAcc{}
	var order []string
	for _, ep := range eps {
		if ep.nodeName == "" {
			c.report.skip(quote(ep.address), ReasonNoNodeName, "")
			continue
		}
		a, ok := acc[ep.nodeName]
		if !ok {
			a = &nodeAcc{ep: ep, state: ep.state, families: map[discoveryv1.AddressType]bool{}}
			acc[ep.nodeName] = a
			order = append(order, ep.nodeName)
		}
		a.families[ep.family] = true
		a.changed = later(a.changed, ep.changed)
		if ep.state.Rank() > a.state.Rank() {
			a.state = ep.state
		}
		if ep.state == model.Ready {
			a.ready++
		}
	}
	out := make([]model.Server, 0, len(order))
	used := make(map[string]bool, len(order))
	for _, name := range order {
		a := acc[name]
		node, ok := c.nodes[name]
		if !ok {
			c.report.skip("node "+quote(name), ReasonNodeNotFound, "its endpoints are skipped")
			continue
		}
		addr, reason, detail := c.nodeAddress(node, a.families)
		if reason != "" {
			c.report.skip("node "+quote(name), reason, detail)
			continue
		}
		if port := c.port(a.ep, sp); port < 1 || port > 65535 {
			c.report.skip("node "+quote(name), ReasonInvalidPort, fmt.Sprintf("port %d", port))
			continue
		}
		st, reason, excluded := c.nodeState(node, a.state)
		zone := node.Labels[corev1.LabelTopologyZone]
		backup := c.backup(zone)
		sname, _ := c.names.full(c.names.base(name), backup)
		if excluded {
			if c.excluded == nil {
				c.excluded = map[string]string{}
			}
			c.excluded[sname] = reason
			continue
		}
		if used[sname] {
			c.report.skip("node "+quote(name), ReasonDuplicateName, "server name "+quote(sname)+" is taken")
			continue
		}
		used[sname] = true
		weight := 1
		if c.opts.WeightByEndpoints {
			weight = min(max(a.ready, 1), MaxWeight)
		}
		out = append(out, model.Server{
			Name: sname, Address: addr, Port: c.port(a.ep, sp),
			Weight: weight, State: st, Reason: reason, Check: c.nodeCheck(),
			Changed: a.changed,
			Zone:    zone, Backup: backup, Replaces: c.names.replaced(sname, name, ""),
		})
	}
	return out
}

// nodeAddress picks the node's InternalIP of a family its endpoints use,
// preferring the Service's primary family, or says why there is none.
func (c *computer) nodeAddress(n *corev1.Node, families map[discoveryv1.AddressType]bool) (string, string, string) {
	var fams []discoveryv1.AddressType
	if pf := c.in.Service.Spec.IPFamilies; len(pf) > 0 && families[discoveryv1.AddressType(pf[0])] {
		fams = append(fams, discoveryv1.AddressType(pf[0]))
	}
	fams = append(fams, discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6)
	reason, detail := ReasonNodeNoAddress, "no InternalIP of the endpoints' family"
	for _, f := range fams {
		if !families[f] {
			continue
		}
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			addr, r, d := c.opts.Addresses.Check(a.Address, "")
			if r != "" {
				reason, detail = r, "InternalIP "+quote(a.Address)+": "+d
				continue
			}
			if netip.MustParseAddr(addr).Is4() == (f == discoveryv1.AddressTypeIPv4) {
				return addr, "", ""
			}
		}
	}
	return "", reason, detail
}
