package watch

import (
	"context"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// servicePage bounds one page of the Service list.
const servicePage = 500

// nodeIndexPage is the page of the slices listed for the Node index: a
// slice of 100 endpoints is about 30 KB.
const nodeIndexPage = 100

// Pokes is where the many-Services watch sends what it noticed; a *Queue is
// one. None of its methods may block.
type Pokes interface {
	// Poke asks for a reconcile of one Service ("namespace/name").
	Poke(key string) bool
	// PokeAll asks for a full reconcile.
	PokeAll(reason string)
	// Left hands over backends a Service named and names no more.
	Left(backends []string)
}

// Many watches, in many-Services mode, the Services and EndpointSlices of
// the watched namespaces and, in node mode, the Nodes, and pokes only the
// Service an event concerns:
//
//   - a Service event pokes that Service, when it may be selected (it
//     carries the backends annotation, with Annotation, or is of type
//     LoadBalancer with the class Class) or was before; an update that
//     changes only its status pokes nothing (this service writes it);
//   - an EndpointSlice event pokes the Service its kubernetes.io/service-name
//     label names, in its namespace, when that Service may be selected;
//   - a Node event that can change a server (NodeFilter) pokes the
//     Services with endpoints on that Node (nodeIndex), or every Service
//     when there are many: the full reconcile reads each kind once and
//     writes only the Services whose servers change (fleet.Fleet.Inputs);
//   - a watch restart pokes every Service (changes may have been missed).
//
// A Service deleted, or updated so that it names backends no more (its
// annotation changed or went, it left the class), hands over the backends
// its old object named and the new one does not as Left; so does a relist
// that finds a Service gone or changed. Left is a hint from Kubernetes: the
// receiver reconciles only backends it would manage, and not those another
// selected Service names.
//
// Run it once.
type Many struct {
	Client Client
	// Namespaces are the watched namespaces (WATCH_NAMESPACES); empty: all.
	// One watch per namespace and resource when several are listed.
	Namespaces []string
	// Nodes says whether Nodes are watched too (node mode).
	Nodes bool
	// Annotation says whether Services select themselves by
	// services.Annotation; Class, when set, is the LOAD_BALANCER_CLASS of
	// class selection; Cluster is CLUSTER_NAME, part of class backends'
	// names.
	Annotation bool
	Class      string
	Cluster    string
	Pokes      Pokes
	// OnEvent, OnRestart, MinBackoff, MaxBackoff and Log are as Watcher's.
	OnEvent                func(kind string, typ watch.EventType, poked bool)
	OnRestart              func(kind string)
	MinBackoff, MaxBackoff time.Duration
	Log                    *slog.Logger

	w     Watcher
	index nodeIndex
}

// Established reports whether every watch has been established at least once.
func (m *Many) Established() bool { return m.w.Established() }

// Run watches until ctx is done.
func (m *Many) Run(ctx context.Context) {
	// Field by field: Established reads m.w's counters meanwhile.
	w := &m.w
	w.Client, w.Poke, w.OnEvent, w.OnRestart = m.Client, m.Pokes.PokeAll, m.OnEvent, m.OnRestart
	w.MinBackoff, w.MaxBackoff, w.Log = m.MinBackoff, m.MaxBackoff, m.Log
	m.w.run(ctx, m.resources())
}

func (m *Many) resources() []resource {
	namespaces := m.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var out []resource
	for _, ns := range namespaces {
		cache := newServiceCache(m, ns)
		slicePage, sliceFilter := int64(1), filter(nil)
		if m.Nodes {
			// Every slice is listed, for the index.
			slicePage, sliceFilter = nodeIndexPage, sliceLister{x: &m.index, cache: cache}
			m.index.setListing(cache, true) // until its first list is done
		}
		out = append(out,
			resource{
				kind: KindService, page: servicePage, namespace: ns, filter: cache, on: cache.event,
				list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return m.Client.ListServices(ctx, ns, o)
				},
				watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return m.Client.WatchServices(ctx, ns, o)
				},
			},
			resource{
				kind: KindEndpointSlice, page: slicePage, namespace: ns, filter: sliceFilter,
				on: func(ev watch.Event) bool { return m.slice(ev, cache) },
				// Slices of no Service concern none.
				list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					o.LabelSelector = discoveryv1.LabelServiceName
					return m.Client.ListEndpointSlices(ctx, ns, o)
				},
				watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					o.LabelSelector = discoveryv1.LabelServiceName
					return m.Client.WatchEndpointSlices(ctx, ns, o)
				},
			})
	}
	if m.Nodes {
		nodes := &NodeFilter{}
		out = append(out, resource{
			kind: KindNode, page: nodePage, on: func(ev watch.Event) bool { return m.node(ev, nodes) },
			list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return m.Client.ListNodes(ctx, o)
			},
			watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return m.Client.WatchNodes(ctx, o)
			},
			filter: nodes,
		})
	}
	return out
}

// slice pokes the Service an EndpointSlice event concerns.
func (m *Many) slice(ev watch.Event, cache *serviceCache) bool {
	sl, ok := ev.Object.(*discoveryv1.EndpointSlice)
	if !ok || !cache.inScope(sl.Namespace) {
		return false
	}
	if m.Nodes {
		if ev.Type == watch.Deleted {
			m.index.drop(sl)
		} else {
			m.index.put(sl, cache)
		}
	}
	svc := sl.Labels[discoveryv1.LabelServiceName]
	key := sl.Namespace + "/" + svc
	if svc == "" || !ValidKey(key) || !cache.mayBeSelected(key) {
		return false
	}
	return m.Pokes.Poke(key)
}

// node pokes the Services a Node event that can change a server concerns.
func (m *Many) node(ev watch.Event, f *NodeFilter) bool {
	n, ok := ev.Object.(*corev1.Node)
	if !ok || !f.matters(ev) {
		return false
	}
	keys, all := m.index.services(n.Name)
	if all {
		m.Pokes.PokeAll("node " + string(ev.Type))
		return true
	}
	poked := false
	for _, k := range keys {
		poked = m.Pokes.Poke(k) || poked
	}
	return poked
}

// classed reports whether svc is of the class this instance implements.
func (m *Many) classed(svc *corev1.Service) bool {
	return m.Class != "" && svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass == m.Class
}
