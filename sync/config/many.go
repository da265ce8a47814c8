package config

import (
	"fmt"
	"net/netip"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// Selection words (SERVICE_SELECTION).
const (
	SelectName       = "name"
	SelectAnnotation = "annotation"
	SelectClass      = "class"
)

// ManyServices reports whether Services select themselves (annotation or
// class selection) instead of the one Service INGRESS_SERVICE_NAME names.
func (c Config) ManyServices() bool { return c.ByAnnotation || c.ByClass }

// Selecting returns what services.Select needs from this configuration.
func (c Config) Selecting() services.Selection {
	return services.Selection{
		Annotation: c.ByAnnotation, Class: c.ByClass, ClassName: c.LoadBalancerClass,
		Namespaces: c.Namespaces, AllowedBackends: c.AllowedBackends, Cluster: c.ClusterName,
	}
}

// Targets is the number of HAProxy instances this configuration reaches.
func (c Config) Targets() int {
	if len(c.Dataplanes) > 0 {
		return len(c.Dataplanes)
	}
	return len(c.RuntimeURLs)
}

// validateMany reads the many-Services variables. It runs after the URLs
// are read: HAPROXY_VIP is counted against the targets.
func (c *Config) validateMany() error {
	c.ByAnnotation, c.ByClass = false, false
	for _, w := range strings.Split(c.Selection, ",") {
		switch w = strings.TrimSpace(w); w {
		case SelectName:
			if strings.Contains(c.Selection, ",") {
				return fmt.Errorf("SERVICE_SELECTION: name cannot be combined; write name, annotation, class or annotation,class")
			}
		case SelectAnnotation:
			c.ByAnnotation = true
		case SelectClass:
			c.ByClass = true
		default:
			return fmt.Errorf("SERVICE_SELECTION: %q is not name, annotation, class or annotation,class", short(w))
		}
	}
	c.Namespaces = nil
	for _, ns := range splitList(c.WatchNamespaces) {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("WATCH_NAMESPACES: %q is not a namespace name", short(ns))
		}
		c.Namespaces = append(c.Namespaces, ns)
	}
	c.AllowedBackends = nil
	for _, p := range splitList(c.AnnotationBackends) {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("ANNOTATION_BACKENDS: %q is not a name or a pattern like be_*: %v", short(p), err)
		}
		c.AllowedBackends = append(c.AllowedBackends, p)
	}
	vips, err := c.readVIPs()
	if err != nil {
		return err
	}
	c.VIPs = vips
	if !c.ManyServices() {
		return c.unusedInNameMode()
	}
	// What names one Service's backends has no meaning when Services name
	// their own: said rather than ignored.
	for name, set := range map[string]bool{"HAPROXY_BACKENDS": c.BackendsSpec != "", "HAPROXY_BACKEND_PORT": c.BackendPort != 0} {
		if set {
			return fmt.Errorf("%s: not used with SERVICE_SELECTION=%s (each Service's annotation, or its ports, name its backends)", name, c.Selection)
		}
	}
	if c.ByAnnotation && len(c.AllowedBackends) == 0 {
		// Anyone who may annotate a Service in a watched namespace could
		// otherwise point any backend of the HAProxy at their pods.
		return fmt.Errorf("ANNOTATION_BACKENDS: required with annotation selection: list the backends annotated Services may name (e.g. be_apps_*)")
	}
	if c.ByClass {
		if len(c.Dataplanes) == 0 && c.needTarget {
			return fmt.Errorf("HAPROXY_DATAPLANE_URL: required with class selection: class Services' frontends and backends are created through the Data Plane API")
		}
		if len(c.VIPs) == 0 {
			return fmt.Errorf("HAPROXY_VIP: required with class selection: the address class Services' frontends bind")
		}
		if c.LoadBalancerClass == "" {
			return fmt.Errorf("LOAD_BALANCER_CLASS: must not be empty with class selection")
		}
		if n := c.Targets(); len(c.VIPs) != 1 && n > 0 && len(c.VIPs) != n {
			return fmt.Errorf("HAPROXY_VIP: %d addresses for %d HAProxy targets: give one for all, or one per target in target order", len(c.VIPs), n)
		}
	}
	if c.ByAnnotation && !c.ByClass && (len(c.VIPs) > 0 || c.VIPHostname != "") {
		return fmt.Errorf("HAPROXY_VIP: only used with class selection (SERVICE_SELECTION=class or annotation,class)")
	}
	return nil
}

// unusedInNameMode refuses the many-Services variables in the default mode:
// set, they say the operator meant another SERVICE_SELECTION.
func (c *Config) unusedInNameMode() error {
	for name, set := range map[string]bool{
		"WATCH_NAMESPACES": c.WatchNamespaces != "", "ANNOTATION_BACKENDS": c.AnnotationBackends != "",
		"HAPROXY_VIP": c.VIP != "", "HAPROXY_VIP_HOSTNAME": c.VIPHostname != "",
	} {
		if set {
			return fmt.Errorf("%s: only used with SERVICE_SELECTION=annotation, class or annotation,class (it is name)", name)
		}
	}
	return nil
}

// readVIPs reads HAPROXY_VIP and checks HAPROXY_VIP_HOSTNAME.
func (c *Config) readVIPs() ([]netip.Addr, error) {
	var out []netip.Addr
	for _, raw := range splitList(c.VIP) {
		a, err := netip.ParseAddr(raw)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("HAPROXY_VIP: %q is not an IP address", short(raw))
		}
		if a.IsUnspecified() || a.IsMulticast() {
			return nil, fmt.Errorf("HAPROXY_VIP: %s cannot be a Service's address", a)
		}
		out = append(out, a)
	}
	if h := c.VIPHostname; h != "" {
		if errs := validation.IsDNS1123Subdomain(h); len(errs) > 0 || !strings.Contains(h, ".") {
			return nil, fmt.Errorf("HAPROXY_VIP_HOSTNAME: %q is not a DNS name like lb.example.com", short(h))
		}
	}
	return out, nil
}

// ManyString describes the many-Services settings for the start-up log.
func (c Config) ManyString() string {
	ns := "all"
	if len(c.Namespaces) > 0 {
		ns = strings.Join(c.Namespaces, ",")
	}
	out := fmt.Sprintf("selection=%s namespaces=%s", c.Selection, ns)
	if c.ByAnnotation {
		out += " annotationBackends=" + strings.Join(c.AllowedBackends, ",")
	}
	if c.ByClass {
		out += fmt.Sprintf(" class=%s vip=%s", c.LoadBalancerClass, c.VIP)
		if c.VIPHostname != "" {
			out += " hostname=" + c.VIPHostname
		}
	}
	return out
}
