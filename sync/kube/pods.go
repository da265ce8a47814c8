package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Pod reads (POD_READINESS_GATE). Only the pods of endpoints that are not
// ready (see notReadyPods) are read: a ready endpoint's pod is Ready, so its gate is True
// already if it has one. In a steady Service that is none; during a
// rollout, the pods coming and going. At most maxPodGets per read (the
// rest wait for a later reconcile), podGetters at a time.
const (
	maxPodGets = 256
	podGetters = 16
)

// PodReader reads pods; a *Client is one.
type PodReader interface {
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// GetPod reads one pod.
func (c *Client) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	return out, c.core.Get().Namespace(namespace).Resource("pods").Name(name).Do(ctx).Into(out)
}

// PatchPodCondition sets one condition of a pod's status (the status
// subresource, as a kubelet writes it), leaving the others as they are.
func (c *Client) PatchPodCondition(ctx context.Context, namespace, name string, cond corev1.PodCondition) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{cond}}})
	if err != nil {
		return err
	}
	return c.core.Patch(types.StrategicMergePatchType).Namespace(namespace).Resource("pods").Name(name).
		SubResource("status").Body(patch).Do(ctx).Error()
}

// notReadyPods returns the valid names of the pods behind the slices'
// endpoints whose pod may not be Ready, sorted: those coming in first, then
// the terminating ones, each by name, so that the new pods of a rollout
// larger than maxPodGets are not left behind the old ones.
//
// An endpoint's ready condition says its pod is Ready, except on a Service
// with publishNotReadyAddresses, where every endpoint is ready: there
// serving is the pod's readiness (the EndpointSlice controller sets it from
// the pod's Ready condition either way), so a pod is taken as Ready only
// when its endpoint is ready, serving (when given) and not terminating.
func notReadyPods(slices []discoveryv1.EndpointSlice, namespace string) []string {
	leaving := map[string]bool{} // name → terminating
	for i := range slices {
		for _, e := range slices[i].Endpoints {
			c := e.Conditions
			terminating := c.Terminating != nil && *c.Terminating
			ready := (c.Ready == nil || *c.Ready) && (c.Serving == nil || *c.Serving) && !terminating
			ref := e.TargetRef
			if ready || ref == nil || ref.Kind != "Pod" || (ref.Namespace != "" && ref.Namespace != namespace) ||
				len(validation.IsDNS1123Subdomain(ref.Name)) > 0 {
				continue
			}
			leaving[ref.Name] = leaving[ref.Name] || terminating
		}
	}
	out := make([]string, 0, len(leaving))
	for n := range leaving {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool {
		if leaving[out[i]] != leaving[out[j]] {
			return !leaving[out[i]]
		}
		return out[i] < out[j]
	})
	return out
}

// ReadPods returns the pods of the slices' endpoints that are not ready
// and exist (the first maxPodGets).
func (s *Source) ReadPods(ctx context.Context, slices []discoveryv1.EndpointSlice) ([]corev1.Pod, error) {
	pr, ok := s.Client.(PodReader)
	if !ok {
		return nil, fmt.Errorf("read pods: this client cannot")
	}
	names := notReadyPods(slices, s.Namespace)
	names = names[:min(len(names), maxPodGets)]
	found := make([]*corev1.Pod, len(names))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(podGetters)
	for i, name := range names {
		g.Go(func() error {
			p, err := pr.GetPod(gctx, s.Namespace, name)
			switch {
			case apierrors.IsNotFound(err):
				return nil // gone meanwhile: its endpoint stays not ready
			case err != nil:
				return fmt.Errorf("get pod %s/%s: %w", s.Namespace, name, err)
			}
			found[i] = p
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range found {
		if p != nil {
			out = append(out, *p)
		}
	}
	return out, nil
}
