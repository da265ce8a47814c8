package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube/kubetest"
)

func objects() []runtime.Object {
	sl := func(name, svc string, nodes ...string) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}}}
		for _, n := range nodes {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, NodeName: &n})
		}
		return s
	}
	return []runtime.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}},
		sl("web-1", "web", "node-a", "node-gone"), sl("web-2", "web", "node-a", strings.Repeat("x", 300)), sl("api-1", "api", "node-b"),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}},
	}
}

func TestReadSelectsTheServiceSlices(t *testing.T) {
	s := &Source{Client: kubetest.Clientset{Interface: fake.NewClientset(objects()...)}, Namespace: "ns", Service: "web", Nodes: true}
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
	s := &Source{Client: kubetest.Clientset{Interface: fake.NewClientset()}, Namespace: "ns", Service: "web"}
	if _, err := s.Read(context.Background()); !errors.Is(err, ErrServiceNotFound) {
		t.Fatalf("err = %v", err)
	}
}

func TestListErrorsAreErrorsNotEmptyLists(t *testing.T) {
	for verb, resource := range map[string]string{"list": "endpointslices", "get": "nodes"} {
		t.Run(resource, func(t *testing.T) {
			c := fake.NewClientset(objects()...)
			c.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, errors.New("etcdserver: request timed out")
			})
			s := &Source{Client: kubetest.Clientset{Interface: c}, Namespace: "ns", Service: "web", Nodes: true}
			if _, err := s.Read(context.Background()); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

// TestReadGetsOnlyTheNamedNodes: Nodes are read one GET each, only those the
// endpoints name with a valid name; a Node that is gone is simply absent.
func TestReadGetsOnlyTheNamedNodes(t *testing.T) {
	c := fake.NewClientset(objects()...)
	s := &Source{Client: kubetest.Clientset{Interface: c}, Namespace: "ns", Service: "web", Nodes: true}
	in, err := s.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Nodes) != 1 || in.Nodes[0].Name != "node-a" {
		t.Errorf("nodes %v", in.Nodes)
	}
	var got []string
	for _, a := range c.Actions() {
		if a.GetResource().Resource == "nodes" {
			name := ""
			if g, ok := a.(k8stesting.GetAction); ok {
				name = g.GetName()
			}
			got = append(got, a.GetVerb()+" "+name)
		}
	}
	sort.Strings(got) // read in parallel
	if fmt.Sprint(got) != "[get node-a get node-gone]" {
		t.Errorf("node requests %v", got)
	}
}

// TestReadListsNodesWhenManyAreNamed: past maxNodeGets names a paged list is
// fewer requests; only the named Nodes are kept.
func TestReadListsNodesWhenManyAreNamed(t *testing.T) {
	var objs []runtime.Object
	var names []string
	for i := range maxNodeGets + 50 {
		n := fmt.Sprintf("n%04d", i)
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
		if i%2 == 0 || i > 40 {
			names = append(names, n)
		}
	}
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}}
	for _, n := range names {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, NodeName: &n})
	}
	objs = append(objs, sl, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}})
	c := fake.NewClientset(objs...)
	in, err := (&Source{Client: kubetest.Clientset{Interface: c}, Namespace: "ns", Service: "web", Nodes: true}).Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Nodes) != len(names) {
		t.Errorf("%d nodes, want %d", len(in.Nodes), len(names))
	}
	for _, a := range c.Actions() {
		if a.GetResource().Resource == "nodes" && a.GetVerb() != "list" {
			t.Fatalf("%s nodes", a.GetVerb())
		}
	}
}

// TestAnExpiredContinueTokenStartsTheListOver: a 410 in the middle of a paged
// list starts it over instead of failing the reconcile.
func TestAnExpiredContinueTokenStartsTheListOver(t *testing.T) {
	var calls int
	pages := []struct {
		items    []string
		cont     string
		expired  bool
		wantCont string
	}{
		{items: []string{"a", "b"}, cont: "t1"},
		{expired: true, wantCont: "t1"},
		{items: []string{"a", "b"}, cont: "t2"},
		{items: []string{"c"}, wantCont: "t2"},
	}
	list := func(_ context.Context, o metav1.ListOptions) (*discoveryv1.EndpointSliceList, error) {
		p := pages[calls]
		calls++
		if o.Continue != p.wantCont {
			t.Errorf("call %d: continue %q, want %q", calls, o.Continue, p.wantCont)
		}
		if p.expired {
			return nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired}}
		}
		l := &discoveryv1.EndpointSliceList{ListMeta: metav1.ListMeta{Continue: p.cont}}
		for _, n := range p.items {
			l.Items = append(l.Items, discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: n}})
		}
		return l, nil
	}
	var got []string
	err := eachPage(context.Background(), 2, list, func() { got = nil }, func(l *discoveryv1.EndpointSliceList) {
		for _, s := range l.Items {
			got = append(got, s.Name)
		}
	})
	if err != nil || fmt.Sprint(got) != "[a b c]" || calls != 4 {
		t.Errorf("err %v, items %v after %d calls", err, got, calls)
	}
}

// TestNodesByHostnameLabel: from minNodeSelect names, the Nodes come from one
// list by hostname label; a name the label misses (a Node labelled otherwise,
// one that is gone, one too long for a label value) is read by GET. A failed
// list is an error, never fewer Nodes.
func TestNodesByHostnameLabel(t *testing.T) {
	var objs []runtime.Object
	var names []string
	for i := range 20 {
		n := fmt.Sprintf("node-%02d", i)
		names = append(names, n)
		host := n
		if i == 3 {
			host = "ip-10-0-0-3"
		}
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{corev1.LabelHostname: host}}})
	}
	long := strings.Repeat("n", 70) // a valid Node name, too long for a label value
	objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: long}})
	names = append(names, long, "node-gone")
	client := fake.NewClientset(objs...)
	s := &Source{Client: kubetest.Clientset{Interface: client}, Nodes: true}
	got, err := s.readNodes(context.Background(), names)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 21 {
		t.Errorf("%d nodes, want 21", len(got))
	}
	var lists, gets []string
	for _, a := range client.Actions() {
		switch a := a.(type) {
		case k8stesting.ListAction:
			lists = append(lists, a.GetListRestrictions().Labels.String())
		case k8stesting.GetAction:
			gets = append(gets, a.GetName())
		}
	}
	sort.Strings(gets)
	if len(lists) != 1 || !strings.HasPrefix(lists[0], corev1.LabelHostname+" in (") {
		t.Errorf("lists %q, want one by hostname", lists)
	}
	if want := []string{long, "node-03", "node-gone"}; fmt.Sprint(gets) != fmt.Sprint(want) {
		t.Errorf("GETs %v, want %v", gets, want)
	}

	client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is away")
	})
	if got, err := s.readNodes(context.Background(), names); err == nil {
		t.Errorf("failed list: %d nodes and no error", len(got))
	}
}
