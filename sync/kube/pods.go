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
// ready are read: a ready endpoint's pod is Ready, so its gate is True
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
// endpoints that are not ready (terminating ones included), sorted.
func notReadyPods(slices []discoveryv1.EndpointSlice, namespace string) []string {
	seen := map[string]bool{}
	for i := range slices {
		for _, e := range slices[i].Endpoints {
			ready := e.Conditions.Ready == nil || *e.Conditions.Ready
			ref := e.TargetRef
			if ready || ref == nil || ref.Kind != "Pod" || (ref.Namespace != "" && ref.Namespace != namespace) ||
				len(validation.IsDNS1123Subdomain(ref.Name)) > 0 {
				continue
			}
			seen[ref.Name] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
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
