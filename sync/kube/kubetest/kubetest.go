// Package kubetest lets tests stand client-go's clientset — a fake one with
// reactors, or one for a test API server — where the service takes its own
// small client (kube.Client): the same calls, through the typed clients.
// Only tests import it, so the service's binary does not carry every API
// group's types.
package kubetest

import (
	"context"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// Clientset has the methods of kube.Client, answered by a clientset.
type Clientset struct {
	kubernetes.Interface
}

// GetService reads one Service.
func (c Clientset) GetService(ctx context.Context, namespace, name string) (*corev1.Service, error) {
	return c.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
}

// ListServices lists Services of namespace.
func (c Clientset) ListServices(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.ServiceList, error) {
	return c.CoreV1().Services(namespace).List(ctx, opts)
}

// WatchServices watches Services of namespace.
func (c Clientset) WatchServices(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	return c.CoreV1().Services(namespace).Watch(ctx, opts)
}

// ListEndpointSlices lists EndpointSlices of namespace.
func (c Clientset) ListEndpointSlices(ctx context.Context, namespace string, opts metav1.ListOptions) (*discoveryv1.EndpointSliceList, error) {
	return c.DiscoveryV1().EndpointSlices(namespace).List(ctx, opts)
}

// WatchEndpointSlices watches EndpointSlices of namespace.
func (c Clientset) WatchEndpointSlices(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	return c.DiscoveryV1().EndpointSlices(namespace).Watch(ctx, opts)
}

// GetNode reads one Node.
func (c Clientset) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// ListNodes lists Nodes.
func (c Clientset) ListNodes(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	return c.CoreV1().Nodes().List(ctx, opts)
}

// WatchNodes watches Nodes.
func (c Clientset) WatchNodes(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return c.CoreV1().Nodes().Watch(ctx, opts)
}

// CreateTokenReview asks for a token review.
func (c Clientset) CreateTokenReview(ctx context.Context, tr *authnv1.TokenReview) (*authnv1.TokenReview, error) {
	return c.AuthenticationV1().TokenReviews().Create(ctx, tr, metav1.CreateOptions{})
}
