// Package kube reads the objects the desired state is computed from: the
// Service, its EndpointSlices and (in node mode) the Nodes they name. A failed
// or partial read is an error, never a shorter list: an empty list would tell
// the planner to remove servers. Client is the service's one connection to
// the API server, for these reads, the watches and token reviews alike;
// FileSource reads the same objects from manifests.
package kube

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
)

// ErrServiceNotFound means the followed Service does not exist; the error
// is a *desired.ServiceNotFoundError, which names it.
var ErrServiceNotFound = desired.ErrServiceNotFound

// pageSize bounds each list call; large clusters are read in pages.
const pageSize = 500

// Node reads. Only the Nodes the endpoints name are read: a 5,000-Node
// cluster costs a reconcile what its ingress Nodes cost, not what every
// Node's status (~12 KB each) does. Up to maxNodeGets names are read by name:
// one GET each, nodeGetters at a time, or, from minNodeSelect names, one list
// selecting them by hostname label (selectNodes); more are found in a paged
// list of every Node, keeping only the named ones, which is then fewer
// requests.
const (
	maxNodeGets = 256
	nodeGetters = 16
	nodePage    = 100 // ~1 MB of realistic Nodes per page
	// minNodeSelect is the fewest names read by one labelled list
	// (selectNodes) rather than GETs: from about a dozen realistic Nodes the
	// list is large enough for the API server to compress it.
	minNodeSelect = 12
)

// Reader is what a Source asks of the Kubernetes API; a *Client is one.
type Reader interface {
	GetService(ctx context.Context, namespace, name string) (*corev1.Service, error)
	ListEndpointSlices(ctx context.Context, namespace string, opts metav1.ListOptions) (*discoveryv1.EndpointSliceList, error)
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	ListNodes(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
}

// Source reads one Service's objects from the Kubernetes API.
type Source struct {
	Client    Reader
	Namespace string
	Service   string
	// Nodes says whether Nodes are needed (node mode).
	Nodes bool
	// Pods says whether the pods of endpoints that are not ready are
	// needed (POD_READINESS_GATE); Client must then be a PodReader.
	Pods bool
}

// Read returns the Service, its EndpointSlices and, if asked, the Nodes they
// name. A failed read is an error, never a shorter list.
func (s *Source) Read(ctx context.Context) (desired.Input, error) {
	var in desired.Input
	svc, err := s.Client.GetService(ctx, s.Namespace, s.Service)
	if apierrors.IsNotFound(err) {
		return in, fmt.Errorf("get service %s/%s: %w", s.Namespace, s.Service, &desired.ServiceNotFoundError{Namespace: s.Namespace, Name: s.Service})
	}
	if err != nil {
		return in, fmt.Errorf("get service %s/%s: %w", s.Namespace, s.Service, err)
	}
	in.Service = svc

	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: s.Service}).String()
	err = eachPage(ctx, pageSize, func(ctx context.Context, o metav1.ListOptions) (*discoveryv1.EndpointSliceList, error) {
		o.LabelSelector = sel
		return s.Client.ListEndpointSlices(ctx, s.Namespace, o)
	}, func() { in.Slices = nil }, func(l *discoveryv1.EndpointSliceList) { in.Slices = append(in.Slices, l.Items...) })
	if err != nil {
		return in, fmt.Errorf("list endpointslices %s/%s: %w", s.Namespace, s.Service, err)
	}

	if s.Nodes {
		if in.Nodes, err = s.readNodes(ctx, nodeNames(in.Slices)); err != nil {
			return in, err
		}
	}
	if s.Pods {
		if in.Pods, err = s.ReadPods(ctx, in.Slices); err != nil {
			return in, err
		}
	}
	return in, nil
}

// nodeNames returns the valid Node names the slices' endpoints name, sorted.
// An invalid name (the API server does not validate it) names no Node: the
// desired state then reports its endpoints as on a Node not found.
func nodeNames(slices []discoveryv1.EndpointSlice) []string {
	seen := map[string]bool{}
	for i := range slices {
		for _, e := range slices[i].Endpoints {
			if e.NodeName != nil && len(validation.IsDNS1123Subdomain(*e.NodeName)) == 0 {
				seen[*e.NodeName] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// readNodes returns the named Nodes that exist.
func (s *Source) readNodes(ctx context.Context, names []string) ([]corev1.Node, error) {
	if len(names) == 0 {
		return nil, nil
	}
	if len(names) > maxNodeGets {
		want := nameSet(names)
		var out []corev1.Node
		err := eachPage(ctx, nodePage, s.Client.ListNodes, func() { out = nil }, func(l *corev1.NodeList) {
			for i := range l.Items {
				if want[l.Items[i].Name] {
					out = append(out, l.Items[i])
				}
			}
		})
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		return out, nil
	}
	listed, names, err := s.selectNodes(ctx, names)
	if err != nil {
		return nil, err
	}
	found := make([]*corev1.Node, len(names))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(nodeGetters)
	for i, name := range names {
		g.Go(func() error {
			n, err := s.Client.GetNode(gctx, name)
			switch {
			case apierrors.IsNotFound(err):
				return nil // reported by the desired state as a Node not found
			case err != nil:
				return fmt.Errorf("get node %s: %w", name, err)
			}
			found[i] = n
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make([]corev1.Node, 0, len(listed)+len(found))
	out = append(out, listed...)
	for _, n := range found {
		if n != nil {
			out = append(out, *n)
		}
	}
	return out, nil
}

// selectNodes lists the named Nodes by their kubernetes.io/hostname label
// (which the kubelet sets, normally to the Node's name) in one request: the
// API server compresses a response this large (gzip, from 128 KB) where it
// sends each GET whole. It returns the Nodes found under their own name and
// the names still to GET: a Node whose hostname label is not its name, a name
// no label value can hold, and a Node that does not exist (all of them when
// fewer than minNodeSelect names can be selected).
//
// It is a consistent read, as fresh as the GETs it replaces: from Kubernetes
// 1.31 with etcd 3.5.13+ the API server answers it from its watch cache;
// with an older etcd it reads every Node from etcd to filter them. The
// selector bounds the answer (at most maxNodeGets values), so it is not paged.
func (s *Source) selectNodes(ctx context.Context, names []string) (found []corev1.Node, rest []string, err error) {
	var values []string
	for _, n := range names {
		if len(validation.IsValidLabelValue(n)) == 0 {
			values = append(values, n)
		}
	}
	if len(values) < minNodeSelect {
		return nil, names, nil
	}
	req, err := labels.NewRequirement(corev1.LabelHostname, selection.In, values)
	if err != nil {
		return nil, names, nil // not expressible: GET each
	}
	opts := metav1.ListOptions{LabelSelector: labels.NewSelector().Add(*req).String()}
	l, err := s.Client.ListNodes(ctx, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("list nodes by hostname: %w", err)
	}
	want := nameSet(names)
	for i := range l.Items {
		if want[l.Items[i].Name] {
			found = append(found, l.Items[i])
			delete(want, l.Items[i].Name)
		}
	}
	for _, n := range names {
		if want[n] {
			rest = append(rest, n)
		}
	}
	return found, rest, nil
}

func nameSet(names []string) map[string]bool {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return set
}

// eachPage lists in pages of size, giving each page to each. When a continue
// token expires (410: the list took longer than the API server keeps its
// snapshot) it starts over, after reset, with a fresh list instead of failing
// the reconcile; twice at most.
func eachPage[L metav1.ListInterface](ctx context.Context, size int64, list func(context.Context, metav1.ListOptions) (L, error), reset func(), each func(L)) error {
	for restarts := 0; ; restarts++ {
		opts := metav1.ListOptions{Limit: size}
		err := func() error {
			for {
				l, err := list(ctx, opts)
				if err != nil {
					return err
				}
				each(l)
				if opts.Continue = l.GetContinue(); opts.Continue == "" {
					return nil
				}
			}
		}()
		if err == nil || !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) || restarts == 2 {
			return err
		}
		reset()
	}
}

// RESTConfig returns the client configuration by client-go's loading rules,
// as kubectl does: kubeconfig (a list of files, like KUBECONFIG's, merged),
// else ~/.kube/config when it exists, else the in-cluster configuration;
// context, when set, picks a context other than the current one.
func RESTConfig(kubeconfig, context string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.Precedence = filepath.SplitList(kubeconfig)
		found := false
		for _, p := range rules.Precedence {
			if _, err := os.Stat(p); err == nil {
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("KUBECONFIG: none of %q exists", rules.Precedence)
		}
	}
	if context != "" {
		if raw, err := rules.Load(); err == nil && raw.Contexts[context] == nil {
			have := slices.Sorted(maps.Keys(raw.Contexts))
			return nil, fmt.Errorf("KUBE_CONTEXT: %q is not a context of the kubeconfig (it has %q)", context, have)
		}
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: context}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, fmt.Errorf("KUBECONFIG: no kubeconfig found and not in a cluster: set KUBECONFIG")
		}
		return nil, fmt.Errorf("KUBECONFIG: %w", err)
	}
	return cfg, nil
}
