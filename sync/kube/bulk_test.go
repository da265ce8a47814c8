package kube

import (
	"context"
	"errors"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube/kubetest"
)

// TestBulkReadsWhatEachSourceReads: in node mode and pod mode, Bulk's one
// list of slices (and of Nodes) gives each Service what its Source reads
// alone: its own slices, the Nodes they name that exist; with two requests
// (or one in pod mode), whatever the number of Services. A failed list is
// an error, never a shorter answer.
func TestBulkReadsWhatEachSourceReads(t *testing.T) {
	api := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "api"}}
	objs := append(objects(), api)
	svcs := []corev1.Service{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}, *api}
	for _, nodes := range []bool{true, false} {
		c := fake.NewClientset(objs...)
		got, err := Bulk{Client: kubetest.Clientset{Interface: c}, Nodes: nodes}.Inputs(context.Background(), svcs)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 2, false: 1}[nodes]; len(c.Actions()) != want {
			t.Errorf("nodes %v: %d requests, want %d", nodes, len(c.Actions()), want)
		}
		for _, s := range svcs {
			one, err := (&Source{Client: kubetest.Clientset{Interface: fake.NewClientset(objs...)}, Namespace: s.Namespace, Service: s.Name, Nodes: nodes}).Read(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			b := got[s.Namespace+"/"+s.Name]
			if !reflect.DeepEqual(b.Slices, one.Slices) || !reflect.DeepEqual(b.Nodes, one.Nodes) {
				t.Errorf("nodes %v, %s: bulk %d slices %v nodes, alone %d slices %v nodes", nodes, s.Name, len(b.Slices), b.Nodes, len(one.Slices), one.Nodes)
			}
			if len(b.Slices) == 0 {
				t.Errorf("%s: no slice", s.Name)
			}
		}
	}
	c := fake.NewClientset(objs...)
	c.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcdserver: request timed out")
	})
	if got, err := (Bulk{Client: kubetest.Clientset{Interface: c}, Nodes: true}).Inputs(context.Background(), svcs); err == nil {
		t.Fatalf("a failed list of Nodes: %v, want an error", got)
	}
}
