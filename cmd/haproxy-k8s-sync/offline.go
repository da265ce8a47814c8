package main

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// noHAProxy is the target of `reconcile --dry-run --manifests` when no
// HAProxy URL is set: every backend reads empty, so the plan adds each
// desired server, and nothing can be applied.
type noHAProxy struct{}

// noHAProxyName says, in the result, what the plan was made against.
const noHAProxyName = "none (no HAProxy URL set: planned against an empty backend)"

func (noHAProxy) Name() string        { return noHAProxyName }
func (noHAProxy) Policy() plan.Policy { return plan.Policy{} }

func (noHAProxy) Read(_ context.Context, backend string) (model.Backend, error) {
	return model.Backend{Name: backend}, nil
}

func (noHAProxy) Apply(context.Context, plan.Plan) (plan.Applied, error) {
	return plan.Applied{}, &failure.InputError{Err: errors.New("no HAProxy URL set: nothing to apply to (set HAPROXY_DATAPLANE_URL or HAPROXY_RUNTIME_URL)")}
}

// fileSource reads manifests. Whatever fails there (no such file, a document
// that does not decode, no Service) fails again until someone edits the
// files: its failures are permanent, unlike the API's.
type fileSource struct{ *kube.FileSource }

func (f fileSource) Read(ctx context.Context) (desired.Input, error) {
	in, err := f.FileSource.Read(ctx)
	if err != nil {
		return in, &failure.InputError{Err: err}
	}
	return in, nil
}

// fileServices lists the Services of manifests; its failures are
// permanent, as fileSource's.
type fileServices struct{ *kube.FileServices }

func (f fileServices) ListServices(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.ServiceList, error) {
	l, err := f.FileServices.ListServices(ctx, namespace, opts)
	if err != nil {
		return l, &failure.InputError{Err: err}
	}
	return l, nil
}
