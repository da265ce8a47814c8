// Package lb gives class-selected Services (SERVICE_SELECTION=class) their
// HAProxy side through the Data Plane API: per Service port a frontend bound
// on the target's HAPROXY_VIP and a backend with the recommended lines, both
// named by services.ClassNames and marked in their description. Ownership
// is read back from HAProxy on every pass (name prefix and mark), never
// kept: a section without the mark is an operator's, never touched.
//
// plan decides with no I/O; Manager reads, plans and writes each target.
package lb

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// MarkWord starts the description of every section this service creates.
const MarkWord = "haproxy-k8s-sync"

// Owner is who this instance is on an HAProxy several installs may share:
// the LOAD_BALANCER_CLASS it implements and its CLUSTER_NAME, the words its
// marks carry. Two installs of two classes, or of two clusters, never take
// each other's sections.
type Owner struct {
	Class, Cluster string
	// Classes and Namespaces decide the sections marked before marks
	// carried the class (legacy): the spec.loadBalancerClass of every
	// listed LoadBalancer Service that has one, by key, and the namespaces
	// listed (WATCH_NAMESPACES; empty: all).
	Classes    map[string]string
	Namespaces []string
}

// Mark is the description a class Service's frontend and backend carry:
// "haproxy-k8s-sync service=ns/name class=CLASS", and " cluster=NAME" with
// a CLUSTER_NAME.
func (o Owner) Mark(key string) string {
	m := MarkWord + " service=" + key
	if o.Class != "" {
		m += " class=" + o.Class
	}
	if o.Cluster != "" {
		m += " cluster=" + o.Cluster
	}
	return m
}

// Mark is the mark of an instance of cluster whose class is not said (the
// marks written before they carried it).
func Mark(cluster, key string) string { return Owner{Cluster: cluster}.Mark(key) }

// mark is what a description says, when it is a mark at all (ok).
type mark struct {
	ok, classed             bool
	service, class, cluster string
}

func parseMark(description string) mark {
	f := strings.Fields(description)
	if len(f) < 2 || f[0] != MarkWord {
		return mark{}
	}
	svc, ok := strings.CutPrefix(f[1], "service=")
	if !ok {
		return mark{}
	}
	m := mark{ok: true, service: svc}
	for _, w := range f[2:] {
		if c, ok := strings.CutPrefix(w, "cluster="); ok {
			m.cluster = c
		}
		if c, ok := strings.CutPrefix(w, "class="); ok {
			m.class, m.classed = c, true
		}
	}
	return m
}

// Owned reports whether a frontend or backend is o's: its name starts with
// fe_ or be_ and services.ClassPrefix, and its description is a mark of
// o's cluster and class (any Service). A mark without a class (written
// before marks carried it) is decided by legacy; wanted are the keys of
// the class Services o follows now.
func (o Owner) Owned(name, description string, wanted map[string]bool) bool {
	if !strings.HasPrefix(name, "fe_"+services.ClassPrefix) && !strings.HasPrefix(name, "be_"+services.ClassPrefix) {
		return false
	}
	m := parseMark(description)
	switch {
	case !m.ok || m.cluster != o.Cluster:
		return false
	case m.classed:
		return m.class == o.Class
	default:
		return o.legacy(m.service, wanted)
	}
}

// legacy decides whether a section whose mark carries no class is o's, so
// that an upgrade neither orphans nor deletes what the install made before
// it: a Service o follows now adopts it (its frontend's mark is rewritten
// with the class); a Service listed with another class is another
// install's, left for it to adopt when it upgrades; a Service outside o's
// namespaces cannot be seen, so is left alone; any other (deleted, left
// the class, refused) is o's, drained and removed as before.
func (o Owner) legacy(key string, wanted map[string]bool) bool {
	ns, _, _ := strings.Cut(key, "/")
	switch {
	case wanted[key]:
		return true
	case o.Classes[key] != "" && o.Classes[key] != o.Class:
		return false
	case len(o.Namespaces) > 0 && !slices.Contains(o.Namespaces, ns):
		return false
	default:
		return true
	}
}

// Write is one transaction of a Plan: one Service's frontends and
// backends, or one unwanted pair's removal.
type Write struct {
	// Service is the key of the Service the write is for; empty for a
	// removal.
	Service string
	dataplane.ProxyWrite
}

// Plan is what one target needs.
type Plan struct {
	Writes []Write
	// Ready names the class Services whose frontends are in place already.
	Ready map[string]bool
	// Draining are owned backends no Service wants, not drained yet.
	Draining []string
	// Failed says, per Service key, why nothing is written for it.
	Failed map[string]string
}

// wildcard reports whether a bind address takes every address.
func wildcard(addr string) bool {
	return addr == "" || addr == "*" || addr == "0.0.0.0" || addr == "::" || addr == "[::]"
}

// counterpart is the frontend of an owned backend and the reverse.
func counterpart(name string) string {
	if rest, ok := strings.CutPrefix(name, "be_"); ok {
		return "fe_" + rest
	}
	return "be_" + strings.TrimPrefix(name, "fe_")
}

// pairsOf are the frontend/backend pairs a class Service's ports need, or
// why it cannot have them.
func pairsOf(s services.Selected, o Owner, vip string) ([]dataplane.Pair, string) {
	cluster, mark := o.Cluster, o.Mark(s.Key())
	var out []dataplane.Pair
	for _, p := range s.Ports {
		if p.Port < 1 || p.Port > 65535 {
			return nil, fmt.Sprintf("port %d is not a TCP port", p.Port)
		}
		fe, be := services.ClassNames(cluster, s.Namespace, s.Name, p.Port)
		if p.Backend != "" && p.Backend != be {
			return nil, fmt.Sprintf("port %d maps to backend %s; a class Service's port has backend %s", p.Port, p.Backend, be)
		}
		out = append(out, dataplane.Pair{Frontend: fe, Backend: be, Description: mark, Address: vip, Port: int64(p.Port)})
	}
	if len(out) == 0 {
		return nil, "the Service has no port"
	}
	return out, ""
}

// Unwanted returns the owned backends no class Service in want asks for:
// those to drain, then remove.
func Unwanted(want []services.Selected, held dataplane.Proxies, o Owner) []dataplane.ProxyBackend {
	wanted, keys := wantedNames(want, o.Cluster), wantedKeys(want)
	var out []dataplane.ProxyBackend
	for _, b := range held.Backends {
		if o.Owned(b.Name, b.Description, keys) && !wanted[b.Name] {
			out = append(out, b)
		}
	}
	return out
}

// wantedKeys are the keys of the class Services in want.
func wantedKeys(want []services.Selected) map[string]bool {
	out := map[string]bool{}
	for _, s := range want {
		if s.Class {
			out[s.Key()] = true
		}
	}
	return out
}

func wantedNames(want []services.Selected, cluster string) map[string]bool {
	out := map[string]bool{}
	for _, s := range want {
		if !s.Class {
			continue
		}
		for _, p := range s.Ports {
			fe, be := services.ClassNames(cluster, s.Namespace, s.Name, p.Port)
			out[fe], out[be] = true, true
		}
	}
	return out
}

// Drained reports whether an unwanted backend may go: it has no server, or
// every server is in maintenance and the runtime socket shows no session on
// any (known false: sessions cannot be seen, so it waits until the
// reconcile, which handles it as zero endpoints, has deleted its servers).
func Drained(b dataplane.ProxyBackend, sessions int, known bool) bool {
	if len(b.Servers) == 0 {
		return true
	}
	if slices.ContainsFunc(b.Servers, func(s dataplane.ProxyServer) bool { return !s.Maint }) {
		return false
	}
	return known && sessions == 0
}

// Compute plans one target bound on vip: what held (every frontend and
// backend HAProxy has, read back) lacks for the class Services in want,
// and which owned pairs no Service wants may go (drained, by backend name).
func Compute(want []services.Selected, held dataplane.Proxies, o Owner, vip string, drained map[string]bool) Plan {
	cluster, keys := o.Cluster, wantedKeys(want)
	owned := func(name, description string) bool { return o.Owned(name, description, keys) }
	out := Plan{Ready: map[string]bool{}, Failed: map[string]string{}}
	fes := map[string]dataplane.Frontend{}
	for _, f := range held.Frontends {
		fes[f.Name] = f
	}
	bes := map[string]dataplane.ProxyBackend{}
	for _, b := range held.Backends {
		bes[b.Name] = b
	}
	// claimed holds the address:port a Service of this pass binds, by the
	// frontend that binds it: a later Service asking for it is refused.
	claimed := map[string]string{}
	for _, s := range want {
		if !s.Class {
			continue
		}
		key := s.Key()
		pairs, why := pairsOf(s, o, vip)
		if why == "" {
			why = refusal(pairs, held.Frontends, fes, bes, claimed, owned)
		}
		if why != "" {
			out.Failed[key] = why
			continue
		}
		w := Write{Service: key}
		for _, p := range pairs {
			claimed[net.JoinHostPort(p.Address, strconv.FormatInt(p.Port, 10))] = p.Frontend
			if _, ok := bes[p.Backend]; !ok {
				w.CreateBackends = append(w.CreateBackends, p)
			}
			f, ok := fes[p.Frontend]
			switch {
			case !ok:
				w.CreateFrontends = append(w.CreateFrontends, p)
			case !inPlace(f, p):
				w.UpdateFrontends = append(w.UpdateFrontends, p)
			}
		}
		if w.Empty() {
			out.Ready[key] = true
			continue
		}
		out.Writes = append(out.Writes, w)
	}

	wanted := wantedNames(want, cluster)
	for _, b := range held.Backends {
		if !owned(b.Name, b.Description) || wanted[b.Name] {
			continue
		}
		if !drained[b.Name] {
			out.Draining = append(out.Draining, b.Name)
			continue
		}
		w := Write{}
		if f, ok := fes[counterpart(b.Name)]; ok && owned(f.Name, f.Description) {
			w.DeleteFrontends = []string{f.Name}
		}
		w.DeleteBackends = []string{b.Name}
		out.Writes = append(out.Writes, w)
	}
	// An owned frontend no Service wants whose backend is not an owned
	// one (gone, or never made): nothing to drain, it goes at once.
	for _, f := range held.Frontends {
		if !owned(f.Name, f.Description) || wanted[f.Name] {
			continue
		}
		if b, ok := bes[counterpart(f.Name)]; ok && owned(b.Name, b.Description) {
			continue // goes with its backend
		}
		out.Writes = append(out.Writes, Write{ProxyWrite: dataplane.ProxyWrite{DeleteFrontends: []string{f.Name}}})
	}
	return out
}

// refusal says why a Service's pairs cannot be made on this target: a
// section of the same name without the mark (an operator's, never
// touched), or its address:port bound by another frontend.
func refusal(pairs []dataplane.Pair, all []dataplane.Frontend, fes map[string]dataplane.Frontend, bes map[string]dataplane.ProxyBackend, claimed map[string]string, owned func(name, description string) bool) string {
	for _, p := range pairs {
		if f, ok := fes[p.Frontend]; ok && !owned(f.Name, f.Description) {
			return fmt.Sprintf("frontend %s exists in haproxy.cfg without this instance's mark (description %q): left alone", f.Name, f.Description)
		}
		if b, ok := bes[p.Backend]; ok && !owned(b.Name, b.Description) {
			return fmt.Sprintf("backend %s exists in haproxy.cfg without this instance's mark (description %q): left alone", b.Name, b.Description)
		}
		addr := net.JoinHostPort(p.Address, strconv.FormatInt(p.Port, 10))
		if holder, ok := claimed[addr]; ok {
			return fmt.Sprintf("address %s is asked for by frontend %s first", addr, holder)
		}
		for _, f := range all {
			if f.Name == p.Frontend {
				continue
			}
			for _, b := range f.Binds {
				if b.Port == p.Port && (b.Address == p.Address || wildcard(b.Address)) {
					return fmt.Sprintf("address %s is bound by frontend %s (bind %s:%d)", addr, f.Name, b.Address, b.Port)
				}
			}
		}
	}
	return ""
}

// inPlace reports whether an owned frontend is what p asks for: its mark,
// its backend, and one bind, on p's address and port. A mark without a
// class (an earlier release's) of the same Service and cluster is in
// place: rewritten for the class alone, an older replica still running
// during the upgrade would write it back (it compares the whole
// description), and each would reload HAProxy at every pass.
func inPlace(f dataplane.Frontend, p dataplane.Pair) bool {
	return sameMark(f.Description, p.Description) && f.DefaultBackend == p.Backend &&
		len(f.Binds) == 1 && f.Binds[0].Address == p.Address && f.Binds[0].Port == p.Port
}

// sameMark says whether the mark have stands for want: equal, or the same
// Service and cluster without a class.
func sameMark(have, want string) bool {
	if have == want {
		return true
	}
	h, w := parseMark(have), parseMark(want)
	return h.ok && w.ok && !h.classed && h.service == w.service && h.cluster == w.cluster
}
