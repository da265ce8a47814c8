// Package kube reads the objects the desired state is computed from: the
// Service, its EndpointSlices and (in node mode) the Nodes. A failed or
// partial read is an error, never a shorter list: an empty list would tell the
// planner to remove servers.
package kube

import (
	"context"
	"errors"
	"fmt"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
)

// ErrServiceNotFound means the followed Service does not exist.
var ErrServiceNotFound = errors.New("service not found")

// pageSize bounds each list call; large clusters are read in pages.
const pageSize = 500

// Source reads one Service's objects through client-go.
type Source struct {
	Client    kubernetes.Interface
	Namespace string
	Service   string
	// Nodes says whether Nodes are needed (node mode).
	Nodes bool
}

// Read returns the Service, its EndpointSlices and, if asked, the Nodes.
func (s *Source) Read(ctx context.Context) (desired.Input, error) {
	var in desired.Input
	svc, err := s.Client.CoreV1().Services(s.Namespace).Get(ctx, s.Service, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return in, fmt.Errorf("get service %s/%s: %w", s.Namespace, s.Service, ErrServiceNotFound)
	}
	if err != nil {
		return in, fmt.Errorf("get service %s/%s: %w", s.Namespace, s.Service, err)
	}
	in.Service = svc

	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: s.Service}).String()
	opts := metav1.ListOptions{LabelSelector: sel, Limit: pageSize}
	for {
		list, err := s.Client.DiscoveryV1().EndpointSlices(s.Namespace).List(ctx, opts)
		if err != nil {
			return in, fmt.Errorf("list endpointslices %s/%s: %w", s.Namespace, s.Service, err)
		}
		in.Slices = append(in.Slices, list.Items...)
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}

	if s.Nodes {
		opts := metav1.ListOptions{Limit: pageSize}
		for {
			list, err := s.Client.CoreV1().Nodes().List(ctx, opts)
			if err != nil {
				return in, fmt.Errorf("list nodes: %w", err)
			}
			in.Nodes = append(in.Nodes, list.Items...)
			if opts.Continue = list.Continue; opts.Continue == "" {
				break
			}
		}
	}
	return in, nil
}

// NewClient returns a clientset for cfg that speaks protobuf: the core and
// discovery types this service reads (and watches) decode several times
// faster than from JSON, and are smaller on the wire.
//
// client-go's default client-side limit (5 requests/s, bursts of 10) would
// hold each reconcile's reads back by ~400 ms under steady churn; reconciles
// are already bounded by the coalescer (at most one running, one waiting),
// so the limit here only guards against a bug: 50/s, bursts of 100.
func NewClient(cfg *rest.Config) (kubernetes.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.QPS, cfg.Burst = 50, 100
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return kc, nil
}

// RESTConfig returns the client configuration: the kubeconfig file when given,
// else the in-cluster configuration.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster config (set KUBECONFIG outside a cluster): %w", err)
	}
	return cfg, nil
}
