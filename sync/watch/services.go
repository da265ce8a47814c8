package watch

import (
	"hash/maphash"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// leftBackends returns the backends of old that now does not name.
func leftBackends(old, now []string) []string {
	var out []string
	for _, b := range old {
		if !slices.Contains(now, b) {
			out = append(out, b)
		}
	}
	return out
}

// serviceState is what the watch remembers of a Service that may be
// selected: the backends it names and a fingerprint of what a reconcile
// reads of it (not its status, which this service writes).
type serviceState struct {
	backends []string
	print    uint64
}

// serviceCache remembers, for the Services of one watched namespace (or of
// all) that may be selected, the backends they name: a watch event carries
// only the new object, and a relist after a gap shows no deletion. It is
// written by the Service loop and read by the EndpointSlice loop.
type serviceCache struct {
	m *Many
	// namespace is the watched namespace; empty: all.
	namespace string
	seed      maphash.Seed

	mu       sync.Mutex
	known    map[string]serviceState
	building map[string]serviceState // during a list
	loaded   bool                    // a whole list was seen
}

func newServiceCache(m *Many, namespace string) *serviceCache {
	return &serviceCache{m: m, namespace: namespace, seed: maphash.MakeSeed(), known: map[string]serviceState{}}
}

// inScope reports whether an object of namespace belongs to this watch: the
// API server answers only for the namespace asked, but what it sends is not
// trusted.
func (c *serviceCache) inScope(namespace string) bool {
	return c.namespace == "" || namespace == c.namespace
}

// state says whether svc may be selected and, if so, what is remembered.
func (c *serviceCache) state(svc *corev1.Service) (serviceState, bool) {
	var st serviceState
	candidate := false
	if v, ok := svc.Annotations[services.Annotation]; ok && c.m.Annotation {
		candidate = true
		st.backends = services.NamedBackends(v)
	}
	if c.m.classed(svc) {
		candidate = true
		for _, p := range svc.Spec.Ports {
			_, be := services.ClassNames(c.m.Cluster, svc.Namespace, svc.Name, p.Port)
			if !slices.Contains(st.backends, be) {
				st.backends = append(st.backends, be)
			}
		}
		slices.Sort(st.backends)
	}
	if !candidate {
		return st, false
	}
	var h maphash.Hash
	h.SetSeed(c.seed)
	h.WriteString(svc.Spec.String())
	st.print = h.Sum64() + mapHash(c.seed, svc.Labels, "") + 3*mapHash(c.seed, svc.Annotations, "")
	return st, true
}

func (c *serviceCache) reset() {
	c.mu.Lock()
	c.building = map[string]serviceState{}
	c.mu.Unlock()
}

func (c *serviceCache) listed(obj runtime.Object) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return
	}
	if st, ok := c.state(svc); ok {
		c.mu.Lock()
		c.building[svc.Namespace+"/"+svc.Name] = st
		c.mu.Unlock()
	}
}

// listDone replaces what was known by the new list and hands over the
// backends of Services that went, or changed, while no watch ran.
func (c *serviceCache) listDone() {
	var left []string
	c.mu.Lock()
	for k, old := range c.known {
		left = append(left, leftBackends(old.backends, c.building[k].backends)...)
	}
	c.known, c.building, c.loaded = c.building, nil, true
	c.mu.Unlock()
	if len(left) > 0 {
		c.m.Pokes.Left(left)
	}
}

// matters is not used: the Service loop handles events with event.
func (c *serviceCache) matters(watch.Event) bool { return true }

// event remembers a Service event, hands over the backends the old object
// named and the new one does not, and pokes the Service when it may be
// selected now or was before and what a reconcile reads of it changed.
func (c *serviceCache) event(ev watch.Event) bool {
	svc, ok := ev.Object.(*corev1.Service)
	if !ok || !c.inScope(svc.Namespace) {
		return false
	}
	key := svc.Namespace + "/" + svc.Name
	if !ValidKey(key) {
		return false
	}
	st, candidate := c.state(svc)
	if ev.Type == watch.Deleted {
		st, candidate = serviceState{}, false
	}
	c.mu.Lock()
	old, had := c.known[key]
	if candidate {
		c.known[key] = st
	} else {
		delete(c.known, key)
	}
	c.mu.Unlock()
	if left := leftBackends(old.backends, st.backends); len(left) > 0 {
		c.m.Pokes.Left(left)
	}
	if !had && !candidate || had && candidate && old.print == st.print {
		return false // not ours, or only its status changed
	}
	c.m.Pokes.Poke(key)
	return true
}

// mayBeSelected reports whether an EndpointSlice of key can matter: its
// Service may be selected, or the Services are not known yet.
func (c *serviceCache) mayBeSelected(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.known[key]
	return ok || !c.loaded
}
