package desired

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// A configuration that matches nothing in Kubernetes reads like a Service
// with no endpoints: no server desired, every server parked (the safety
// rule), and nothing says why. These warnings say why. They never change
// the plan: a read that warns deletes no server, as before.
//
//	service-not-found          the configured Service does not exist (the read fails)
//	service-port-not-found     the Service lacks the port HAPROXY_BACKENDS names, or has none (the read fails)
//	service-port-ambiguous     several ports and none chosen (the read fails)
//	no-endpointslices          no EndpointSlice carries kubernetes.io/service-name=<service>
//	endpointslices-lack-port   slices list endpoints, none of them with the Service port
//	no-node-port               node mode: the Service port has no nodePort, so servers get the endpoints' port
const (
	WarnServiceNotFound      = "service-not-found"
	WarnServicePortNotFound  = "service-port-not-found"
	WarnServicePortAmbiguous = "service-port-ambiguous"
	WarnNoEndpointSlices     = "no-endpointslices"
	WarnSlicesLackPort       = "endpointslices-lack-port"
	WarnNoNodePort           = "no-node-port"
)

// Warning is a mismatch between the configuration and what Kubernetes
// holds, said in the result, the log and (on a Service that exists) an
// Event.
type Warning struct {
	// Reason is one of the Warn constants.
	Reason string `json:"reason"`
	// Message says what was expected, what was found, and what to change.
	Message string `json:"message"`
}

// ErrServiceNotFound means the followed Service does not exist; a Source's
// error wraps it (as a *ServiceNotFoundError, which names the Service).
var ErrServiceNotFound = errors.New("service not found")

// ServiceNotFoundError is a Source's error when the followed Service does
// not exist. errors.Is(err, ErrServiceNotFound) holds for it.
type ServiceNotFoundError struct{ Namespace, Name string }

func (e *ServiceNotFoundError) Error() string { return ErrServiceNotFound.Error() }

// Is makes errors.Is(err, ErrServiceNotFound) hold.
func (e *ServiceNotFoundError) Is(target error) bool { return target == ErrServiceNotFound }

// ReadWarnings returns the warnings a Source's failed read calls for: a
// Service not found. Other failures (the API server, RBAC) are errors
// only.
func ReadWarnings(err error) []Warning {
	var nf *ServiceNotFoundError
	if !errors.As(err, &nf) {
		return nil
	}
	return []Warning{{Reason: WarnServiceNotFound, Message: fmt.Sprintf(
		"Service %s/%s not found: check INGRESS_NAMESPACE and INGRESS_SERVICE_NAME; nothing changes in HAProxy until it exists",
		nf.Namespace, nf.Name)}}
}

// warn records w once (same reason and message), however many backends
// meet it.
func (r *Report) warn(w Warning) {
	for _, have := range r.Warnings {
		if have == w {
			return
		}
	}
	r.Warnings = append(r.Warnings, w)
}

// servicePort finds the Service port a backend follows. nil means "any port":
// allowed only for a multi-port Service whose server port is fixed anyway.
// A port that cannot be found is a warning, and the read cannot be used.
func servicePort(svc *corev1.Service, want string, fixed bool) (*corev1.ServicePort, *Warning) {
	ports := svc.Spec.Ports
	if want == "" {
		switch {
		case len(ports) == 1:
			return &ports[0], nil
		case fixed:
			return nil, nil
		case len(ports) == 0:
			return nil, &Warning{Reason: WarnServicePortNotFound,
				Message: fmt.Sprintf("Service %s/%s has no ports", svc.Namespace, svc.Name)}
		default:
			return nil, &Warning{Reason: WarnServicePortAmbiguous,
				Message: fmt.Sprintf("Service %s/%s has %d ports (%s): set HAPROXY_BACKENDS or HAPROXY_BACKEND_PORT", svc.Namespace, svc.Name, len(ports), portList(ports))}
		}
	}
	for i := range ports {
		if ports[i].Name == want || strconv.Itoa(int(ports[i].Port)) == want {
			return &ports[i], nil
		}
	}
	has := "none"
	if len(ports) > 0 {
		has = portList(ports)
	}
	return nil, &Warning{Reason: WarnServicePortNotFound, Message: fmt.Sprintf(
		"Service %s/%s has no port %q (its ports: %s): HAPROXY_BACKENDS names a Service port by name or number; nothing changes in HAProxy until they agree",
		svc.Namespace, svc.Name, want, has)}
}

// portList names a Service's ports, as "name number" or the number alone.
func portList(ports []corev1.ServicePort) string {
	out := make([]string, 0, len(ports))
	for _, p := range ports {
		s := strconv.Itoa(int(p.Port))
		if p.Name != "" {
			s = quote(p.Name) + " " + s
		}
		out = append(out, s)
	}
	return bounded(out)
}

// bounded joins up to 5 items, then says how many more.
func bounded(items []string) string {
	if len(items) <= 5 {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:5], ", "), len(items)-5)
}

// sliceWarnings says when the Service's EndpointSlices cannot give backend
// a server: there are none, or they list endpoints but none on port sp.
func (c *computer) sliceWarnings(sp *corev1.ServicePort, backend string) {
	svc := c.in.Service
	var slices, endpoints int
	seen := map[string]bool{}
	var found []string
	for i := range c.in.Slices {
		s := &c.in.Slices[i]
		if s.Labels[discoveryv1.LabelServiceName] != svc.Name || s.Namespace != svc.Namespace {
			continue
		}
		slices++
		if len(s.Endpoints) == 0 {
			continue // a placeholder slice (no endpoints, no ports) says nothing
		}
		if _, ok := slicePort(s, sp); ok {
			return
		}
		endpoints += len(s.Endpoints)
		for _, p := range s.Ports {
			name := "unnamed"
			if p.Name != nil && *p.Name != "" {
				name = quote(*p.Name)
			}
			if p.Port != nil {
				name += " " + strconv.Itoa(int(*p.Port))
			}
			if !seen[name] {
				seen[name] = true
				found = append(found, name)
			}
		}
	}
	switch {
	case slices == 0:
		c.report.warn(Warning{Reason: WarnNoEndpointSlices, Message: fmt.Sprintf(
			"no EndpointSlice in namespace %s carries the label %s=%s: no server is desired, so every server is put in maintenance and none is deleted; is INGRESS_SERVICE_NAME the Service's name, and does a Service without a selector have EndpointSlices with that label?",
			svc.Namespace, discoveryv1.LabelServiceName, svc.Name)})
	case endpoints > 0:
		has := "no ports"
		if len(found) > 0 {
			has = "ports " + bounded(found)
		}
		c.report.warn(Warning{Reason: WarnSlicesLackPort, Message: fmt.Sprintf(
			"the EndpointSlices of Service %s/%s list %d endpoints, none on Service port %s (they have %s): backend %s gets no server; does the pods' container declare the port the Service's targetPort names?",
			svc.Namespace, svc.Name, endpoints, portName(sp), has, backend)})
	}
}

// nodePortWarning says, in node mode, when servers get the endpoints' port
// because the Service port has no nodePort (a ClusterIP Service): that port
// answers on a Node's address only for pods on the host network or with a
// hostPort.
func (c *computer) nodePortWarning(sp *corev1.ServicePort) {
	if c.opts.Mode != NodeMode || c.opts.FixedPort != 0 || sp == nil || sp.NodePort != 0 || !c.onPodNetwork(sp) {
		return
	}
	svc := c.in.Service
	typ := svc.Spec.Type
	if typ == "" {
		typ = corev1.ServiceTypeClusterIP
	}
	c.report.warn(Warning{Reason: WarnNoNodePort, Message: fmt.Sprintf(
		"Service %s/%s (type %s) port %s has no nodePort: in node mode servers get the endpoints' port on each Node's InternalIP, which answers only for pods on the host network or with a hostPort; make the Service a NodePort or LoadBalancer, or set HAPROXY_BACKEND_PORT",
		svc.Namespace, svc.Name, typ, portName(sp))})
}

// onPodNetwork says whether an endpoint of sp has an address its Node does
// not: a pod on the pod network, which a Node's address with the endpoint's
// port does not reach. Pods on the host network (a DaemonSet ingress with
// hostNetwork) answer there: for them the missing nodePort is no mistake,
// and saying so at every reconcile would hide the warnings that matter.
// No endpoint (none, or on Nodes not read) says nothing either way.
func (c *computer) onPodNetwork(sp *corev1.ServicePort) bool {
	for _, ep := range c.endpoints(sp) {
		n, ok := c.nodes[ep.nodeName]
		if !ok {
			continue
		}
		if !slices.ContainsFunc(n.Status.Addresses, func(a corev1.NodeAddress) bool { return a.Address == ep.address }) {
			return true
		}
	}
	return false
}

// portName names a Service port for a message.
func portName(sp *corev1.ServicePort) string {
	if sp == nil {
		return "(any)"
	}
	if sp.Name != "" {
		return quote(sp.Name)
	}
	return strconv.Itoa(int(sp.Port))
}
