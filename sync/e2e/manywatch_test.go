package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/watch"
)

// TestManyServicesWatch: on a real kube-apiserver, the many-Services watch
// and its queue poke only the Service an event concerns, hand over the
// backends a Service no longer names, and see nothing of a namespace not
// watched.
func TestManyServicesWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := cluster.client
	for _, ns := range []string{"mw-a", "mw-b", "mw-c"} {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	service := func(ns, name, backends string) {
		t.Helper()
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{services.Annotation: backends}},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
		if _, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	slice := func(ns, svc, ip string) {
		t.Helper()
		port, name := int32(8080), "http"
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: svc + "-abcde", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}}},
			Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		}
		api := c.DiscoveryV1().EndpointSlices(ns)
		if old, err := api.Get(ctx, sl.Name, metav1.GetOptions{}); err == nil {
			sl.ResourceVersion = old.ResourceVersion
			_, err = api.Update(ctx, sl, metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		if _, err := api.Create(ctx, sl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	service("mw-a", "one", "http=be_one")
	service("mw-a", "two", "be_two")
	service("mw-b", "three", "http=be_three")
	service("mw-c", "four", "http=be_four")
	for _, s := range [][2]string{{"mw-a", "one"}, {"mw-a", "two"}, {"mw-b", "three"}, {"mw-c", "four"}} {
		slice(s[0], s[1], "10.244.0.1")
	}

	got := make(chan string, 100)
	q := watch.NewQueue(
		func(_ context.Context, key string) { got <- "poke " + key },
		func(_ context.Context, backends []string) { got <- "left " + strings.Join(backends, " ") },
		watch.QueueLimits{}, nil)
	m := &watch.Many{Client: cluster.service, Namespaces: []string{"mw-a", "mw-b"}, Annotation: true, Pokes: q}
	go q.Run(ctx)
	go m.Run(ctx)
	for deadline := time.Now().Add(10 * time.Second); !m.Established(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the watches were not established")
		}
	}
	expect := func(t *testing.T, want ...string) {
		t.Helper()
		var seen []string
		deadline := time.After(5 * time.Second)
		for len(seen) < len(want) {
			select {
			case s := <-got:
				seen = append(seen, s)
			case <-deadline:
				t.Fatalf("saw %v, want %v", seen, want)
			}
		}
		// Then nothing more for a while.
		select {
		case s := <-got:
			seen = append(seen, s)
		case <-time.After(300 * time.Millisecond):
		}
		slices.Sort(seen)
		want = slices.Clone(want)
		slices.Sort(want)
		if !slices.Equal(seen, want) {
			t.Fatalf("saw %v, want %v", seen, want)
		}
	}

	step(t, "an EndpointSlice change pokes only its Service", func(t *testing.T) {
		slice("mw-a", "one", "10.244.0.2")
		expect(t, "poke mw-a/one")
	})
	step(t, "a namespace not watched pokes nothing", func(t *testing.T) {
		slice("mw-c", "four", "10.244.0.2")
		service("mw-c", "five", "be_five")
		expect(t)
	})
	step(t, "an annotation removed hands over its backends", func(t *testing.T) {
		svc, err := c.CoreV1().Services("mw-a").Get(ctx, "two", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delete(svc.Annotations, services.Annotation)
		if _, err := c.CoreV1().Services("mw-a").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		expect(t, "left be_two", "poke mw-a/two")
		slice("mw-a", "two", "10.244.0.3") // not selectable any more
		expect(t)
	})
	step(t, "a Service deleted hands over its backends", func(t *testing.T) {
		if err := c.CoreV1().Services("mw-b").Delete(ctx, "three", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		expect(t, "left be_three", "poke mw-b/three")
	})
}
