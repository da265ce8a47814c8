package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServiceLister lists Services; a *Client is one.
type ServiceLister interface {
	ListServices(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.ServiceList, error)
}

// ReadServices lists the Services of namespaces (all when empty), in pages.
// A failed list is an error, never a shorter list: a Service missing from it
// would be taken for one that left the selection.
func ReadServices(ctx context.Context, c ServiceLister, namespaces []string) ([]corev1.Service, error) {
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	var out []corev1.Service
	for _, ns := range namespaces {
		var got []corev1.Service
		err := eachPage(ctx, pageSize, func(ctx context.Context, o metav1.ListOptions) (*corev1.ServiceList, error) {
			return c.ListServices(ctx, ns, o)
		}, func() { got = nil }, func(l *corev1.ServiceList) { got = append(got, l.Items...) })
		if err != nil {
			where := "all namespaces"
			if ns != "" {
				where = "namespace " + ns
			}
			return nil, fmt.Errorf("list services in %s: %w", where, err)
		}
		out = append(out, got...)
	}
	return out, nil
}

// UpdateServiceStatus writes a Service's status (the services/status
// subresource), as client-go's UpdateStatus does: the object's
// resourceVersion makes a concurrent change a conflict, not a lost write.
func (c *Client) UpdateServiceStatus(ctx context.Context, svc *corev1.Service) (*corev1.Service, error) {
	out := &corev1.Service{}
	return out, c.core.Put().Namespace(svc.Namespace).Resource("services").Name(svc.Name).SubResource("status").Body(svc).Do(ctx).Into(out)
}
