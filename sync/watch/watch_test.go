package watch

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube/kubetest"
)

// scripted is a fake clientset whose watches the test drives by hand: each
// Watch call hands a new FakeWatcher to the test through a channel.
type scripted struct {
	client  *fake.Clientset
	watches map[string]chan *watch.FakeWatcher
	mu      sync.Mutex
	opts    map[string][]metav1.ListOptions
}

func newScripted(objs ...runtime.Object) *scripted {
	s := &scripted{client: fake.NewClientset(objs...), watches: map[string]chan *watch.FakeWatcher{}, opts: map[string][]metav1.ListOptions{}}
	for _, res := range []string{"services", "endpointslices", "nodes"} {
		ch := make(chan *watch.FakeWatcher, 10)
		s.watches[res] = ch
		s.client.PrependWatchReactor(res, func(a k8stesting.Action) (bool, watch.Interface, error) {
			wa := a.(k8stesting.WatchActionImpl)
			s.mu.Lock()
			s.opts[res] = append(s.opts[res], metav1.ListOptions{
				ResourceVersion: wa.WatchRestrictions.ResourceVersion,
				LabelSelector:   wa.WatchRestrictions.Labels.String(),
				FieldSelector:   wa.WatchRestrictions.Fields.String(),
			})
			s.mu.Unlock()
			fw := watch.NewFakeWithChanSize(10, false)
			ch <- fw
			return true, fw, nil
		})
	}
	return s
}

// next returns the next watch opened on res.
func (s *scripted) next(t *testing.T, res string) *watch.FakeWatcher {
	t.Helper()
	select {
	case fw := <-s.watches[res]:
		return fw
	case <-time.After(5 * time.Second):
		t.Fatalf("no watch of %s opened", res)
		return nil
	}
}

// pokes collects pokes.
type pokes struct {
	mu  sync.Mutex
	got []string
	ch  chan string
}

func newPokes() *pokes { return &pokes{ch: make(chan string, 100)} }

func (p *pokes) poke(reason string) {
	p.mu.Lock()
	p.got = append(p.got, reason)
	p.mu.Unlock()
	p.ch <- reason
}

// expect waits for a poke whose reason is want.
func (p *pokes) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-p.ch:
		if got != want {
			t.Fatalf("poke %q, want %q", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no poke, want %q", want)
	}
}

// none checks that no poke arrives for a while.
func (p *pokes) none(t *testing.T) {
	t.Helper()
	select {
	case got := <-p.ch:
		t.Fatalf("unexpected poke %q", got)
	case <-time.After(100 * time.Millisecond):
	}
}

func start(t *testing.T, s *scripted, nodes bool, p *pokes) *Watcher {
	t.Helper()
	w := &Watcher{Client: kubetest.Clientset{Interface: s.client}, Namespace: "ns", Service: "web", Nodes: nodes, Poke: p.poke,
		MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func slice(name, svc string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "7",
		Labels: map[string]string{discoveryv1.LabelServiceName: svc}}}
}

func TestEveryServiceAndSliceEventPokes(t *testing.T) {
	s := newScripted()
	p := newPokes()
	w := start(t, s, false, p)
	svc, sl := s.next(t, "services"), s.next(t, "endpointslices")
	for !w.Established() {
		time.Sleep(time.Millisecond)
	}
	sl.Add(slice("web-1", "web"))
	p.expect(t, "endpointslice ADDED")
	sl.Modify(slice("web-1", "web"))
	p.expect(t, "endpointslice MODIFIED")
	sl.Delete(slice("web-1", "web"))
	p.expect(t, "endpointslice DELETED")
	svc.Modify(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", ResourceVersion: "8"}})
	p.expect(t, "service MODIFIED")
	sl.Action(watch.Bookmark, slice("", ""))
	p.none(t)

	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.opts["endpointslices"][0]; o.LabelSelector != "kubernetes.io/service-name=web" {
		t.Errorf("slice watch selector %q", o.LabelSelector)
	}
	if o := s.opts["services"][0]; o.FieldSelector != "metadata.name=web" {
		t.Errorf("service watch selector %q", o.FieldSelector)
	}
}

func TestRestartsPokeAndResume(t *testing.T) {
	s := newScripted()
	p := newPokes()
	var restarts sync.Map
	w := &Watcher{Client: kubetest.Clientset{Interface: s.client}, Namespace: "ns", Service: "web", Poke: p.poke,
		MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
		OnRestart: func(kind string) { n, _ := restarts.LoadOrStore(kind, new(int)); *n.(*int)++ }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	s.next(t, "services")
	sl := s.next(t, "endpointslices")

	t.Run("a closed connection resumes from the last version seen, then pokes", func(t *testing.T) {
		sl.Modify(slice("web-1", "web")) // resourceVersion 7
		p.expect(t, "endpointslice MODIFIED")
		sl.Stop()
		sl = s.next(t, "endpointslices")
		p.expect(t, "endpointslice restart")
		s.mu.Lock()
		rv := s.opts["endpointslices"][len(s.opts["endpointslices"])-1].ResourceVersion
		s.mu.Unlock()
		if rv != "7" {
			t.Errorf("resumed from %q, want 7", rv)
		}
	})
	t.Run("410 Gone lists again, then pokes", func(t *testing.T) {
		sl.Error(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
		sl = s.next(t, "endpointslices")
		p.expect(t, "endpointslice restart")
		s.mu.Lock()
		rv := s.opts["endpointslices"][len(s.opts["endpointslices"])-1].ResourceVersion
		s.mu.Unlock()
		if rv == "7" {
			t.Errorf("after 410 the watch resumed from the expired version 7")
		}
	})
	t.Run("a watch that fails to open is retried", func(t *testing.T) {
		failures := 2
		var mu sync.Mutex
		s.client.PrependWatchReactor("endpointslices", func(k8stesting.Action) (bool, watch.Interface, error) {
			mu.Lock()
			defer mu.Unlock()
			if failures > 0 {
				failures--
				return true, nil, errString("connection refused")
			}
			return false, nil, nil
		})
		sl.Stop()
		s.next(t, "endpointslices")
		p.expect(t, "endpointslice restart")
	})
	if n, _ := restarts.Load(KindEndpointSlice); n == nil || *n.(*int) < 3 {
		t.Errorf("restarts counted: %v", n)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func node(name string, mutate ...func(*corev1.Node)) *corev1.Node {
	n := desiredtest.RealisticNode(name, "10.0.0.1")
	for _, m := range mutate {
		m(n)
	}
	return n
}

func TestNodeFilter(t *testing.T) {
	heartbeat := func(n *corev1.Node) {
		for i := range n.Status.Conditions {
			n.Status.Conditions[i].LastHeartbeatTime = metav1.NewTime(time.Unix(1e9, 0))
		}
		n.Status.Images = n.Status.Images[1:]
		n.ResourceVersion = "99"
	}
	cases := []struct {
		name   string
		change func(*corev1.Node)
		want   bool
	}{
		{"heartbeat, images, resourceVersion", heartbeat, false},
		{"another annotation", func(n *corev1.Node) { n.Annotations["node.alpha.kubernetes.io/ttl"] = "15" }, false},
		{"memory pressure condition", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionTrue }, false},
		{"InternalIP", func(n *corev1.Node) { n.Status.Addresses[0].Address = "10.0.0.2" }, true},
		{"not Ready", func(n *corev1.Node) { n.Status.Conditions[len(n.Status.Conditions)-1].Status = corev1.ConditionFalse }, true},
		{"cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }, true},
		{"taint", func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "ToBeDeletedByClusterAutoscaler", Effect: corev1.TaintEffectNoSchedule})
		}, true},
		{"taint effect", func(n *corev1.Node) { n.Spec.Taints[0].Effect = corev1.TaintEffectNoExecute }, true},
		{"label added", func(n *corev1.Node) { n.Labels["node.kubernetes.io/exclude-from-external-load-balancers"] = "" }, true},
		{"label value", func(n *corev1.Node) { n.Labels["topology.kubernetes.io/zone"] = "b" }, true},
		{"label removed", func(n *corev1.Node) { delete(n.Labels, "topology.kubernetes.io/zone") }, true},
		{"our annotation", func(n *corev1.Node) { n.Annotations[AnnotationPrefix+"state"] = "drain" }, true},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			f := &NodeFilter{}
			f.reset()
			f.listed(node("n1"))
			if got := f.matters(watch.Event{Type: watch.Modified, Object: node("n1", tt.change)}); got != tt.want {
				t.Errorf("matters = %v, want %v", got, tt.want)
			}
			// The fingerprint is now the changed Node's: the same event again
			// (a heartbeat on top of it) does not matter.
			if f.matters(watch.Event{Type: watch.Modified, Object: node("n1", tt.change, heartbeat)}) {
				t.Errorf("a heartbeat after the change mattered")
			}
		})
	}
	t.Run("appearing and going", func(t *testing.T) {
		f := &NodeFilter{}
		if !f.matters(watch.Event{Type: watch.Added, Object: node("n2")}) {
			t.Error("a new Node did not matter")
		}
		if !f.matters(watch.Event{Type: watch.Modified, Object: node("n3")}) {
			t.Error("an unknown Node did not matter")
		}
		if !f.matters(watch.Event{Type: watch.Deleted, Object: node("n2")}) {
			t.Error("a deleted Node did not matter")
		}
		if f.matters(watch.Event{Type: watch.Bookmark, Object: node("")}) {
			t.Error("a bookmark mattered")
		}
	})
	t.Run("a relist forgets Nodes gone meanwhile", func(t *testing.T) {
		f := &NodeFilter{}
		f.reset()
		f.listed(node("gone"))
		f.reset()
		if !f.matters(watch.Event{Type: watch.Modified, Object: node("gone")}) {
			t.Error("a Node not in the new list did not matter")
		}
	})
}

func TestNodeEventsOnlyPokeWhenTheyMatter(t *testing.T) {
	s := newScripted(node("n1"), node("n2"))
	p := newPokes()
	start(t, s, true, p)
	s.next(t, "services")
	s.next(t, "endpointslices")
	nw := s.next(t, "nodes")
	nw.Modify(node("n1", func(n *corev1.Node) { n.ResourceVersion = "100" }))
	p.none(t)
	nw.Modify(node("n2", func(n *corev1.Node) { n.Spec.Unschedulable = true }))
	p.expect(t, "node MODIFIED")
	nw.Add(node("n3"))
	p.expect(t, "node ADDED")
}

func TestBackoffGrowsAndIsCapped(t *testing.T) {
	w := &Watcher{MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 10: time.Second} {
		got := w.backoff(n)
		if got > want || got < want*8/10 {
			t.Errorf("backoff(%d) = %v, want %v less up to 20%%", n, got, want)
		}
	}
}

func TestAfterWatch(t *testing.T) {
	gone := fmt.Errorf("%w: 410", errGone)
	tests := []struct {
		name         string
		failures     int
		events       int
		err          error
		wantFailures int
		wantRelist   bool
	}{
		{"closed after events: progress", 3, 5, nil, 0, false},
		{"closed at once: a failure", 3, 0, nil, 4, false},
		{"error event: a failure", 0, 1, errString("internal error"), 1, false},
		{"expired after events: list again, progress", 3, 6, gone, 0, true},
		// A server answering 410 to every watch: each relist is backed
		// off, not run in a loop.
		{"expired at once: list again, a failure", 3, 1, gone, 4, true},
	}
	for _, tt := range tests {
		f, relist := afterWatch(tt.failures, tt.events, tt.err)
		if f != tt.wantFailures || relist != tt.wantRelist {
			t.Errorf("%s: failures %d relist %v, want %d %v", tt.name, f, relist, tt.wantFailures, tt.wantRelist)
		}
	}
}
