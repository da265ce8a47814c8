package e2e

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/events"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile/reconciletest"
)

// TestServiceEvents: on a real kube-apiserver and HAProxy, the reconciles
// that change something leave Events on the Service that `kubectl describe
// svc` finds (by the Service's UID), naming the servers per target; no-op
// reconciles leave none; a failure leaves a warning; and an endpoint
// flapping 60 times writes at most the bucket's 25 Events.
func TestServiceEvents(t *testing.T) {
	w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}})
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort
	ports := map[string]int32{"http": 8080}
	a := w.node("a", "127.0.13.1")
	listen(t, a, "127.0.13.1", np)

	rec := events.New(cluster.service, w.ns, "web", "sync-0", nil)
	var writes, dropped atomic.Int32
	rec.OnWrite = func(op string) {
		if op == "dropped" {
			dropped.Add(1)
		} else {
			writes.Add(1)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go rec.Run(ctx)
	run := rec.Wrap(w.rec)
	reconcile := func() {
		t.Helper()
		for range 20 { // as the follow-up does, until nothing waits
			res, err := run.Reconcile(ctx, false)
			if err != nil || !res.Pending() {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// described lists the Service's Events as kubectl describe finds them,
	// ours alone: the API server tells its own on the Service at times
	// (ClusterIPNotAllocated while its repair loop catches up).
	described := func() []corev1.Event {
		t.Helper()
		sel := fields.Set{"involvedObject.kind": "Service", "involvedObject.name": "web", "involvedObject.uid": string(svc.UID),
			"source": "haproxy-k8s-sync"}.AsSelector().String()
		list, err := cluster.client.CoreV1().Events(w.ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].FirstTimestamp.Before(&list.Items[j].FirstTimestamp) })
		return list.Items
	}
	eventually := func(what string, ok func([]corev1.Event) bool) []corev1.Event {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			evs := described()
			if ok(evs) {
				return evs
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: events %s", what, show(evs))
			}
		}
	}

	w.slice("web-1", "web", ports, endpoint{ip: "10.244.13.1", node: a})
	reconcile()
	w.expectTraffic("be", a)
	target := w.rec.Targets[0].Name()
	// The recorder counts a write once the API server has answered it: an
	// Event can be listed a moment before it is counted.
	evs := eventually("added, then in service", func(evs []corev1.Event) bool { return len(evs) == 2 && writes.Load() == 2 })
	if evs[0].Reason != events.ReasonAdded || evs[0].Type != corev1.EventTypeNormal ||
		evs[0].Message != fmt.Sprintf("%s be: added 1 (%s)", target, a) || evs[1].Reason != events.ReasonUpdated {
		t.Errorf("events %s", show(evs))
	}

	before := writes.Load()
	for range 3 {
		reconcile()
	}
	time.Sleep(200 * time.Millisecond)
	if n := writes.Load(); n != before || len(described()) != 2 {
		t.Errorf("no-op reconciles wrote %d events: %s", n-before, show(described()))
	}

	good := w.src.src
	w.src.set(&desiredtest.Source{Err: errors.New("the API server is restarting")})
	reconcile()
	w.src.set(good)
	evs = eventually("a warning", func(evs []corev1.Event) bool { return len(evs) == 3 })
	if last := evs[2]; last.Type != corev1.EventTypeWarning || last.Reason != events.ReasonFailed || last.Message != "read kubernetes: the API server is restarting" {
		t.Errorf("failure event %s", show(evs))
	}

	for i := range 60 {
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.13.1", node: a, terminating: i%2 == 0})
		reconcile()
	}
	eventually("the flapping written or dropped", func([]corev1.Event) bool { return writes.Load()+dropped.Load() >= 63 })
	if n := writes.Load(); n > 25 || dropped.Load() == 0 {
		t.Errorf("%d event writes (%d dropped) over 60 flips, want at most 25", n, dropped.Load())
	}
}

func show(evs []corev1.Event) string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%s %s x%d %q", e.Type, e.Reason, e.Count, e.Message))
	}
	return strings.Join(out, "; ")
}

// BenchmarkServiceEventsRollout1000 measures what SERVICE_EVENTS costs the
// API server when a Deployment of 1,000 pods rolls (maxSurge 10): per step
// ten new pods become ready, ten old ones terminate, then go; a reconcile
// after each, 300 in all, every one with changes. HAProxy is the in-memory
// driver (what is measured is Event writes); the Events go to the real
// kube-apiserver. Reports event writes (creates and patches) per reconcile
// with changes, dropped ones, and Event objects left.
func BenchmarkServiceEventsRollout1000(b *testing.B) {
	ns := strings.ToLower(b.Name())
	if _, err := cluster.client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	ip := func(gen, i int) string { return fmt.Sprintf("10.%d.%d.%d", 244+gen, i/200, i%200+1) }
	var old, next []string
	for i := range 1000 {
		old = append(old, ip(0, i))
	}
	src := desiredtest.NewLive(desiredtest.PodCluster(ns, "web", old...))
	rec := reconciletest.Reconciler(src, &reconciletest.Driver{})
	if _, err := rec.Reconcile(context.Background(), false); err != nil {
		b.Fatal(err)
	}
	ev := events.New(cluster.service, ns, "web", "sync-0", nil)
	var writes, dropped atomic.Int32
	ev.OnWrite = func(op string) {
		if op == "dropped" {
			dropped.Add(1)
		} else {
			writes.Add(1)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ev.Run(ctx)
	run := ev.Wrap(rec)
	reconciles := 0
	step := func(in desired.Input) {
		src.Set(in)
		res, err := run.Reconcile(ctx, false)
		if err != nil || res.Status != "applied" {
			b.Fatalf("reconcile: %v %s", err, res.Status)
		}
		reconciles++
	}
	b.ResetTimer()
	for s := 0; s < 1000; s += 10 {
		for i := s; i < s+10; i++ {
			next = append(next, ip(1, i))
		}
		in := desiredtest.PodCluster(ns, "web", append(append([]string{}, old[s:]...), next...)...)
		step(in)
		in = desiredtest.Terminating(in, old[s:s+10]...)
		step(in)
		in = desiredtest.PodCluster(ns, "web", append(append([]string{}, old[s+10:]...), next...)...)
		step(in)
	}
	for deadline := time.Now().Add(30 * time.Second); int(writes.Load()+dropped.Load()) < reconciles && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	b.StopTimer()
	list, err := cluster.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(reconciles), "reconciles")
	b.ReportMetric(float64(writes.Load())/float64(reconciles), "writes/reconcile")
	b.ReportMetric(float64(writes.Load()), "writes")
	b.ReportMetric(float64(dropped.Load()), "dropped")
	b.ReportMetric(float64(len(list.Items)), "events")
	if writes.Load() > 25 {
		b.Errorf("%d event writes, want at most the bucket's 25", writes.Load())
	}
}

// TestServeWritesServiceEvents: the released binary, with SERVICE_EVENTS
// set, writes the Event of the entry its own watch made.
func TestServeWritesServiceEvents(t *testing.T) {
	w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}})
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	a := w.node("a", "127.0.13.11")
	listen(t, a, "127.0.13.11", svc.Spec.Ports[0].NodePort)
	w.slice("web-1", "web", map[string]int32{"http": 8080}, endpoint{ip: "10.244.13.11", node: a})
	startService(t, "KUBECONFIG="+kubeconfigVia(t, apiHostPort(t)), "INGRESS_NAMESPACE="+w.ns, "INGRESS_SERVICE_NAME=web",
		"HAPROXY_BACKEND_NAME=be", "HAPROXY_RUNTIME_URL="+w.h.RuntimeURL(), "SERVICE_EVENTS=true")
	sel := fields.Set{"involvedObject.kind": "Service", "involvedObject.name": "web", "involvedObject.uid": string(svc.UID)}.AsSelector().String()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		list, err := cluster.client.CoreV1().Events(w.ns).List(context.Background(), metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Reason == events.ReasonAdded && strings.Contains(e.Message, "added 1 ("+a+")") && e.Source.Component == "haproxy-k8s-sync" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ServersAdded event: %s", show(list.Items))
		}
	}
}
