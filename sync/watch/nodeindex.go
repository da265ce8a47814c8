package watch

import (
	"slices"
	"strings"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// The many-Services watch in node mode knows, from the EndpointSlices it
// watches, which Services have endpoints on each Node, so that a Node event
// pokes those Services alone: a 200-Node drain among 500 Services asked
// for 200 full reconciles before (coalesced, each reading every kind once),
// and now reconciles the few Services each Node carries. A Node that no
// endpoint names changes no server (servers come from the Nodes endpoints
// name), and one that an endpoint names before it exists is found here when
// it appears.

// Memory is bounded: a slice keeps its Nodes' names (at most wideSlice; one
// naming more is wide: its Service is poked on every Node event), and a
// Node event that concerns more than fanOut Services asks for one full
// reconcile instead, which reads every kind once.
const (
	wideSlice = 64
	fanOut    = 64
)

// nodeIndex is every watched namespace's slices, by namespace/name. Its
// methods may be called from the watches' goroutines at once. Until every
// namespace's slices are listed (at start, and again after a 410), it
// knows too little: a Node event pokes every Service.
type nodeIndex struct {
	mu      sync.Mutex
	slices  map[string]indexed
	listing map[*serviceCache]bool // namespaces whose slices are not all listed yet
}

// listing marks cache's namespace as being listed (or, done, as listed).
func (x *nodeIndex) setListing(cache *serviceCache, listing bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.listing == nil {
		x.listing = map[*serviceCache]bool{}
	}
	if listing {
		x.listing[cache] = true
	} else {
		delete(x.listing, cache)
	}
}

type indexed struct {
	service string // namespace/name of the Service the slice belongs to
	cache   *serviceCache
	nodes   []string // sorted, distinct; nil when wide
	wide    bool
}

// put records sl (a slice of a Service, seen by cache's watch).
func (x *nodeIndex) put(sl *discoveryv1.EndpointSlice, cache *serviceCache) {
	svc := sl.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		return
	}
	e := indexed{service: sl.Namespace + "/" + svc, cache: cache}
	for _, ep := range sl.Endpoints {
		if ep.NodeName == nil || *ep.NodeName == "" || slices.Contains(e.nodes, *ep.NodeName) {
			continue
		}
		if len(e.nodes) == wideSlice {
			e.nodes, e.wide = nil, true
			break
		}
		e.nodes = append(e.nodes, *ep.NodeName)
	}
	slices.Sort(e.nodes)
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.slices == nil {
		x.slices = map[string]indexed{}
	}
	for i, n := range e.nodes {
		e.nodes[i] = strings.Clone(n) // not the decoded object's buffer
	}
	x.slices[sl.Namespace+"/"+sl.Name] = e
}

func (x *nodeIndex) drop(sl *discoveryv1.EndpointSlice) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.slices, sl.Namespace+"/"+sl.Name)
}

// forget drops what cache's watch recorded: its list starts again.
func (x *nodeIndex) forget(cache *serviceCache) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for k, e := range x.slices {
		if e.cache == cache {
			delete(x.slices, k)
		}
	}
}

// services returns the Services, that may be selected, with endpoints on
// node (or a wide slice), sorted; all when more than fanOut.
func (x *nodeIndex) services(node string) (keys []string, all bool) {
	x.mu.Lock()
	if len(x.listing) > 0 {
		x.mu.Unlock()
		return nil, true
	}
	hit := map[string]*serviceCache{}
	for _, e := range x.slices {
		if _, found := slices.BinarySearch(e.nodes, node); found || e.wide {
			hit[e.service] = e.cache
		}
	}
	x.mu.Unlock()
	for k, cache := range hit {
		if cache.mayBeSelected(k) {
			keys = append(keys, k)
			if len(keys) > fanOut {
				return nil, true
			}
		}
	}
	slices.Sort(keys)
	return keys, false
}

// sliceLister feeds the index a namespace watch's list of slices (the
// watch's filter: every listed slice is seen).
type sliceLister struct {
	x     *nodeIndex
	cache *serviceCache
}

func (l sliceLister) reset() {
	l.x.forget(l.cache)
	l.x.setListing(l.cache, true)
}

func (l sliceLister) listDone() { l.x.setListing(l.cache, false) }

func (l sliceLister) listed(obj runtime.Object) {
	if sl, ok := obj.(*discoveryv1.EndpointSlice); ok && l.cache.inScope(sl.Namespace) {
		l.x.put(sl, l.cache)
	}
}

// matters is not asked: the slice watch's events go to Many.slice.
func (l sliceLister) matters(watch.Event) bool { return true }
