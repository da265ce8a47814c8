package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// Client reads and watches the few kinds of objects this service uses —
// Services, EndpointSlices, Nodes — and creates TokenReviews, over client-go's
// REST client with a scheme holding only their API groups.
//
// It is not client-go's clientset on purpose: the typed clients register the
// types of every built-in API group (~60 of them) when the program starts.
// The service sees three; with all of them its idle resident memory was 34
// MB, without them 20 MB.
type Client struct {
	core, discovery, authn *rest.RESTClient
	params                 runtime.ParameterCodec
}

// reviewQPS bounds the TokenReviews sent a second.
const reviewQPS = 20

// NewClient returns a client for cfg that speaks protobuf: the core and
// discovery types this service reads (and watches) decode several times
// faster than from JSON, and are smaller on the wire.
//
// client-go's default client-side limit (5 requests/s, bursts of 10) would
// hold each reconcile's reads back by ~400 ms under steady churn, and a
// reconcile in node mode reads one GET per Node hosting endpoints (up to
// maxNodeGets, nodeGetters at a time). Reconciles are already bounded by the
// coalescer (at most one running, one waiting) and the API server protects
// itself (API Priority and Fairness), so the limit here only guards against
// a bug: 1,000/s.
//
// TokenReviews (Kubernetes auth) are asked by callers from outside, so they
// get a limiter of their own, reviewQPS: a flood of made-up tokens, past the
// authenticator's own bounds, cannot spend the service's share of the API
// server on reviews, and never queues reads or watches behind them.
func NewClient(cfg *rest.Config) (*Client, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, discoveryv1.AddToScheme, authnv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
	}
	// Options (ListOptions, ...) are encoded as query parameters by their
	// unversioned conversion, as client-go's own scheme registers them.
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})

	base := rest.CopyConfig(cfg)
	base.ContentType = "application/vnd.kubernetes.protobuf"
	base.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	base.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if base.UserAgent == "" {
		base.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	hc, err := rest.HTTPClientFor(base)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	group := func(apiPath string, gv schema.GroupVersion, qps int) (*rest.RESTClient, error) {
		c := rest.CopyConfig(base)
		c.QPS, c.Burst = float32(qps), qps
		c.APIPath, c.GroupVersion = apiPath, &gv
		rc, err := rest.RESTClientForConfigAndClient(c, hc)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client for %s: %w", gv, err)
		}
		return rc, nil
	}
	c := &Client{params: runtime.NewParameterCodec(scheme)}
	if c.core, err = group("/api", corev1.SchemeGroupVersion, 1000); err != nil {
		return nil, err
	}
	if c.discovery, err = group("/apis", discoveryv1.SchemeGroupVersion, 1000); err != nil {
		return nil, err
	}
	if c.authn, err = group("/apis", authnv1.SchemeGroupVersion, reviewQPS); err != nil {
		return nil, err
	}
	return c, nil
}

// GetService reads one Service.
func (c *Client) GetService(ctx context.Context, namespace, name string) (*corev1.Service, error) {
	out := &corev1.Service{}
	return out, c.core.Get().Namespace(namespace).Resource("services").Name(name).Do(ctx).Into(out)
}

// ListServices lists Services of namespace.
func (c *Client) ListServices(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.ServiceList, error) {
	out := &corev1.ServiceList{}
	return out, c.list(ctx, c.core, namespace, "services", opts, out)
}

// WatchServices watches Services of namespace.
func (c *Client) WatchServices(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	return c.watch(ctx, c.core, namespace, "services", opts)
}

// ListEndpointSlices lists EndpointSlices of namespace.
func (c *Client) ListEndpointSlices(ctx context.Context, namespace string, opts metav1.ListOptions) (*discoveryv1.EndpointSliceList, error) {
	out := &discoveryv1.EndpointSliceList{}
	return out, c.list(ctx, c.discovery, namespace, "endpointslices", opts, out)
}

// WatchEndpointSlices watches EndpointSlices of namespace.
func (c *Client) WatchEndpointSlices(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	return c.watch(ctx, c.discovery, namespace, "endpointslices", opts)
}

// GetNode reads one Node.
func (c *Client) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	out := &corev1.Node{}
	return out, c.core.Get().Resource("nodes").Name(name).Do(ctx).Into(out)
}

// ListNodes lists Nodes.
func (c *Client) ListNodes(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	out := &corev1.NodeList{}
	return out, c.list(ctx, c.core, "", "nodes", opts, out)
}

// WatchNodes watches Nodes.
func (c *Client) WatchNodes(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return c.watch(ctx, c.core, "", "nodes", opts)
}

// CreateTokenReview asks the API server to review a token.
func (c *Client) CreateTokenReview(ctx context.Context, tr *authnv1.TokenReview) (*authnv1.TokenReview, error) {
	out := &authnv1.TokenReview{}
	return out, c.authn.Post().Resource("tokenreviews").Body(tr).Do(ctx).Into(out)
}

// CreateEvent writes a core/v1 Event (package events).
func (c *Client) CreateEvent(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	return out, c.core.Post().Namespace(ev.Namespace).Resource("events").Body(ev).Do(ctx).Into(out)
}

// PatchEvent sets an Event's count, last time and message: a repeat of it.
func (c *Client) PatchEvent(ctx context.Context, namespace, name string, count int32, last metav1.Time, message string) (*corev1.Event, error) {
	patch, err := json.Marshal(map[string]any{"count": count, "lastTimestamp": last, "message": message})
	if err != nil {
		return nil, err
	}
	out := &corev1.Event{}
	return out, c.core.Patch(types.MergePatchType).Namespace(namespace).Resource("events").Name(name).Body(patch).Do(ctx).Into(out)
}

// list and watch address namespace's resource, or the cluster's when
// namespace is empty; the server-side timeout, when asked, bounds the client's
// too, as client-go's typed clients do.
func (c *Client) list(ctx context.Context, rc *rest.RESTClient, namespace, resource string, opts metav1.ListOptions, into runtime.Object) error {
	return c.request(rc, namespace, resource, &opts).Do(ctx).Into(into)
}

func (c *Client) watch(ctx context.Context, rc *rest.RESTClient, namespace, resource string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.request(rc, namespace, resource, &opts).Watch(ctx)
}

func (c *Client) request(rc *rest.RESTClient, namespace, resource string, opts *metav1.ListOptions) *rest.Request {
	r := rc.Get().NamespaceIfScoped(namespace, namespace != "").Resource(resource).VersionedParams(opts, c.params)
	if opts.TimeoutSeconds != nil {
		r = r.Timeout(time.Duration(*opts.TimeoutSeconds) * time.Second)
	}
	return r
}
