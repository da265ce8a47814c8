package services

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Annotation names an annotated Service's backends.
const Annotation = "haproxy-k8s-sync.io/backends"

// maxAnnotation bounds the annotation read: a Service's author is not
// trusted, and a real one is a few dozen characters.
const maxAnnotation = 1024

// Selection is how Services select themselves (the configuration's
// SERVICE_SELECTION, WATCH_NAMESPACES, LOAD_BALANCER_CLASS,
// ANNOTATION_BACKENDS, CLUSTER_NAME).
type Selection struct {
	Annotation, Class bool
	ClassName         string
	// Namespaces whose Services may select themselves; empty: all.
	Namespaces []string
	// AllowedBackends are the names or path.Match patterns an annotation
	// may name.
	AllowedBackends []string
	Cluster         string
}

// Refused is a Service (or one of its ports) that asked to be followed and
// is not: why, and the other Service that holds what it asked for.
type Refused struct {
	Service string `json:"service"`
	Reason  string `json:"reason"`
	Holder  string `json:"holder,omitempty"`
}

// Select returns the Services sel chooses, sorted by key, and those refused.
// held is what the previous selection gave (Holdings of its chosen; nil
// when there was none). It is pure: the same Services and held give the
// same answer on every replica.
//
// Decisions:
//   - A Service both annotated and of the class is a class Service: its
//     spec.loadBalancerClass asks for a load balancer, which only its own
//     frontend gives; the annotation alone would not publish its address.
//   - A class Service's UDP or SCTP port is refused alone and its TCP ports
//     served: HAProxy fronts TCP, and the other ports work without it.
//   - The holder keeps what it serves: a backend (annotation) or a port of
//     the load balancer address (class, one address for all) claimed by
//     several Services goes to the one that holds it (Award: held, then a
//     class Service's written status), and only between claimants that
//     hold nothing yet to the oldest (creationTimestamp, then key). Every
//     other claimant is refused whole, naming the holder; the holder is
//     followed as before, so naming what another serves freezes nobody.
func Select(svcs []corev1.Service, sel Selection, held map[string]string) (chosen []Selected, refused []Refused) {
	var candidates []Selected
	var claims []Claim
	claim := func(s *corev1.Service, sl Selected) {
		candidates = append(candidates, sl)
		for _, r := range sl.resources() {
			c := Claim{Resource: r, Service: key(s), Created: s.CreationTimestamp.Time}
			switch {
			case held[r] == key(s):
				c.Hold = HoldsResource
			case sl.Class && len(s.Status.LoadBalancer.Ingress) > 0:
				c.Hold = HoldsStatus
			}
			claims = append(claims, c)
		}
	}
	for i := range svcs {
		s := &svcs[i]
		if len(sel.Namespaces) > 0 && !slices.Contains(sel.Namespaces, s.Namespace) {
			continue
		}
		switch {
		case sel.Class && isClass(s, sel.ClassName):
			sl, why := classPorts(s, sel.Cluster)
			refused = append(refused, why...)
			if len(sl.Ports) == 0 {
				if len(why) == 0 {
					refused = append(refused, Refused{Service: key(s), Reason: "it has no port"})
				}
				continue
			}
			claim(s, sl)
		case sel.Annotation && hasAnnotation(s):
			sl, err := annotatedPorts(s, sel.AllowedBackends)
			if err != "" {
				refused = append(refused, Refused{Service: key(s), Reason: err})
				continue
			}
			claim(s, sl)
		}
	}
	winner := Award(claims)
	for _, sl := range candidates {
		if why := lost(sl, winner); why != nil {
			refused = append(refused, *why)
			continue
		}
		chosen = append(chosen, sl)
	}
	slices.SortFunc(chosen, func(a, b Selected) int { return cmp.Compare(a.Key(), b.Key()) })
	slices.SortStableFunc(refused, func(a, b Refused) int { return cmp.Compare(a.Service, b.Service) })
	return chosen, refused
}

// lost says why sl is refused when another Service won one of its
// resources (the first, by port), or nil.
func lost(sl Selected, winner map[string]string) *Refused {
	for i, r := range sl.resources() {
		h := winner[r]
		if h == sl.Key() {
			continue
		}
		p := sl.Ports[i]
		if sl.Class {
			return &Refused{Service: sl.Key(), Holder: h,
				Reason: fmt.Sprintf("port %d of the load balancer address is held by %s", p.Port, h)}
		}
		return &Refused{Service: sl.Key(), Holder: h,
			Reason: fmt.Sprintf("backend %s is held by %s, which keeps it: this Service is followed once it names another backend or %s stops naming it", p.Backend, h, h)}
	}
	return nil
}

func key(s *corev1.Service) string { return s.Namespace + "/" + s.Name }

func isClass(s *corev1.Service, class string) bool {
	return s.Spec.Type == corev1.ServiceTypeLoadBalancer && s.Spec.LoadBalancerClass != nil && *s.Spec.LoadBalancerClass == class
}

func hasAnnotation(s *corev1.Service) bool {
	_, ok := s.Annotations[Annotation]
	return ok
}

// classPorts maps a class Service's TCP ports to the backends ClassNames
// gives them; its other ports are refused one by one.
func classPorts(s *corev1.Service, cluster string) (Selected, []Refused) {
	out := Selected{Namespace: s.Namespace, Name: s.Name, Class: true}
	var refused []Refused
	for _, p := range s.Spec.Ports {
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			refused = append(refused, Refused{Service: key(s),
				Reason: fmt.Sprintf("port %d/%s: HAProxy fronts TCP only; its other ports are served", p.Port, p.Protocol)})
			continue
		}
		_, be := ClassNames(cluster, s.Namespace, s.Name, p.Port)
		out.Ports = append(out.Ports, Port{Name: p.Name, Port: p.Port, Backend: be})
	}
	slices.SortFunc(out.Ports, func(a, b Port) int { return cmp.Compare(a.Port, b.Port) })
	return out, refused
}

// annotatedPorts reads an annotated Service's backends, or says why not.
func annotatedPorts(s *corev1.Service, allowed []string) (Selected, string) {
	out := Selected{Namespace: s.Namespace, Name: s.Name}
	v := strings.TrimSpace(s.Annotations[Annotation])
	switch {
	case v == "":
		return out, "annotation " + Annotation + " is empty"
	case len(v) > maxAnnotation:
		return out, fmt.Sprintf("annotation %s is longer than %d characters", Annotation, maxAnnotation)
	}
	if !strings.Contains(v, "=") {
		// One backend name: the Service's only port.
		if len(s.Spec.Ports) != 1 {
			return out, fmt.Sprintf("annotation %s names one backend but the Service has %d ports: write PORT=BACKEND,...", Annotation, len(s.Spec.Ports))
		}
		if why := allowedBackend(v, allowed); why != "" {
			return out, why
		}
		p := s.Spec.Ports[0]
		out.Ports = []Port{{Name: p.Name, Port: p.Port, Backend: v}}
		return out, ""
	}
	seen := map[int32]bool{}
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		port, be, _ := strings.Cut(item, "=")
		port, be = strings.TrimSpace(port), strings.TrimSpace(be)
		if port == "" || be == "" {
			return out, fmt.Sprintf("annotation %s: %q is not PORT=BACKEND", Annotation, quoteShort(item))
		}
		sp, ok := findPort(s.Spec.Ports, port)
		if !ok {
			return out, fmt.Sprintf("annotation %s: the Service has no port %q", Annotation, quoteShort(port))
		}
		if seen[sp.Port] {
			return out, fmt.Sprintf("annotation %s: port %d is named twice", Annotation, sp.Port)
		}
		seen[sp.Port] = true
		if why := allowedBackend(be, allowed); why != "" {
			return out, why
		}
		for _, q := range out.Ports {
			if q.Backend == be {
				return out, fmt.Sprintf("annotation %s: backend %s is named twice", Annotation, be)
			}
		}
		out.Ports = append(out.Ports, Port{Name: sp.Name, Port: sp.Port, Backend: be})
	}
	slices.SortFunc(out.Ports, func(a, b Port) int { return cmp.Compare(a.Port, b.Port) })
	return out, ""
}

func findPort(ports []corev1.ServicePort, want string) (corev1.ServicePort, bool) {
	for _, p := range ports {
		if p.Name == want || strconv.Itoa(int(p.Port)) == want {
			return p, true
		}
	}
	return corev1.ServicePort{}, false
}

// allowedBackend says why an annotation may not name backend, or "".
func allowedBackend(backend string, allowed []string) string {
	if !validBackendName(backend) {
		return fmt.Sprintf("annotation %s: %q is not a backend name (letters, digits, '-', '_', '.', ':')", Annotation, quoteShort(backend))
	}
	if strings.HasPrefix(backend, "be_"+ClassPrefix) || strings.HasPrefix(backend, ClassPrefix) {
		return fmt.Sprintf("annotation %s: backend %s is a class Service's name (prefix %s), not for annotations", Annotation, backend, ClassPrefix)
	}
	for _, p := range allowed {
		if ok, _ := path.Match(p, backend); ok {
			return ""
		}
	}
	return fmt.Sprintf("annotation %s: backend %s is not allowed by ANNOTATION_BACKENDS", Annotation, backend)
}

func quoteShort(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
