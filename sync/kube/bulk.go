package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
)

// Bulk reads, for a full reconcile of many Services, what each one's Source
// would read alone: one list of EndpointSlices per namespace (one for all
// when not restricted) and, in node mode, one of Nodes, where Sources read
// a Service, its slices and its Nodes each. Not the pods of the readiness
// gate: a Reconciler with the gate reads its own.
type Bulk struct {
	Client Reader
	// Namespaces restrict the lists (WATCH_NAMESPACES); empty: all.
	Namespaces []string
	Nodes      bool
}

// Inputs returns each of svcs' objects by key ("namespace/name"), as of
// these lists. A failed list is an error, never a shorter answer.
func (b Bulk) Inputs(ctx context.Context, svcs []corev1.Service) (map[string]desired.Input, error) {
	namespaces := b.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	// Only the slices of svcs are kept, page by page, and only the Nodes
	// they name: a cluster's other Services cost a list, not memory.
	want := make(map[string]bool, len(svcs))
	for i := range svcs {
		want[svcs[i].Namespace+"/"+svcs[i].Name] = true
	}
	slices := map[string][]discoveryv1.EndpointSlice{}
	for _, ns := range namespaces {
		var got []discoveryv1.EndpointSlice
		err := eachPage(ctx, pageSize, func(ctx context.Context, o metav1.ListOptions) (*discoveryv1.EndpointSliceList, error) {
			o.LabelSelector = discoveryv1.LabelServiceName // every slice of a Service
			return b.Client.ListEndpointSlices(ctx, ns, o)
		}, func() { got = nil }, func(l *discoveryv1.EndpointSliceList) {
			for _, s := range l.Items {
				if want[s.Namespace+"/"+s.Labels[discoveryv1.LabelServiceName]] {
					got = append(got, s)
				}
			}
		})
		if err != nil {
			return nil, fmt.Errorf("list endpointslices: %w", err)
		}
		for _, s := range got {
			k := s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]
			slices[k] = append(slices[k], s)
		}
	}
	var nodes map[string]corev1.Node
	if b.Nodes {
		named := map[string]bool{}
		for _, l := range slices {
			for _, n := range nodeNames(l) {
				named[n] = true
			}
		}
		nodes = map[string]corev1.Node{}
		err := eachPage(ctx, nodePage, b.Client.ListNodes, func() { clear(nodes) }, func(l *corev1.NodeList) {
			for _, n := range l.Items {
				if named[n.Name] {
					nodes[n.Name] = n
				}
			}
		})
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
	}
	out := make(map[string]desired.Input, len(svcs))
	for i := range svcs {
		svc := svcs[i]
		k := svc.Namespace + "/" + svc.Name
		in := desired.Input{Service: &svc, Slices: slices[k]}
		if b.Nodes {
			// The Nodes the slices name, as Source.Read reads them.
			for _, name := range nodeNames(in.Slices) {
				if n, ok := nodes[name]; ok {
					in.Nodes = append(in.Nodes, n)
				}
			}
		}
		out[k] = in
	}
	return out, nil
}
