package kube

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func objects() []runtime.Object {
	sl := func(name, svc string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}}}
	}
	return []runtime.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}},
		sl("web-1", "web"), sl("web-2", "web"), sl("api-1", "api"),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}},
	}
}

func TestReadSelectsTheServiceSlices(t *testing.T) {
	s := &Source{Client: fake.NewClientset(objects()...), Namespace: "ns", Service: "web", Nodes: true}
	in, err := s.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if in.Service.Name != "web" || len(in.Slices) != 2 || len(in.Nodes) != 1 {
		t.Fatalf("service %v, %d slices, %d nodes", in.Service.Name, len(in.Slices), len(in.Nodes))
	}
	for _, sl := range in.Slices {
		if sl.Labels[discoveryv1.LabelServiceName] != "web" {
			t.Errorf("slice %s of another service", sl.Name)
		}
	}
	s.Nodes = false
	if in, _ := s.Read(context.Background()); in.Nodes != nil {
		t.Error("nodes listed in pod mode")
	}
}

func TestMissingServiceIsAnError(t *testing.T) {
	s := &Source{Client: fake.NewClientset(), Namespace: "ns", Service: "web"}
	if _, err := s.Read(context.Background()); !errors.Is(err, ErrServiceNotFound) {
		t.Fatalf("err = %v", err)
	}
}

func TestListErrorsAreErrorsNotEmptyLists(t *testing.T) {
	for _, resource := range []string{"endpointslices", "nodes"} {
		t.Run(resource, func(t *testing.T) {
			c := fake.NewClientset(objects()...)
			c.PrependReactor("list", resource, func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, errors.New("etcdserver: request timed out")
			})
			s := &Source{Client: c, Namespace: "ns", Service: "web", Nodes: true}
			if _, err := s.Read(context.Background()); err == nil {
				t.Fatal("no error")
			}
		})
	}
}
