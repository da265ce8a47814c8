package e2e

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/events"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// TestMisconfigurationIsSaid: on a real kube-apiserver and HAProxy, a
// configuration that matches nothing is said in the result's warnings and
// in a Misconfigured Event on the Service, and changes nothing it must not:
// a Service without the port HAPROXY_BACKENDS names (503, servers as they
// were), then no EndpointSlice carrying the Service's name (every server
// parked, none deleted), then no Service at all (503, and no Event: there is
// nothing to put it on).
func TestMisconfigurationIsSaid(t *testing.T) {
	w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Port: "http", Backend: "be"}})
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	a := w.node("a", "127.0.14.1")
	listen(t, a, "127.0.14.1", svc.Spec.Ports[0].NodePort)
	w.slice("web-1", "web", map[string]int32{"http": 8080}, endpoint{ip: "10.244.14.1", node: a})
	if res := w.mustReconcile(); len(res.Warnings) != 0 {
		t.Fatalf("a configuration that matches warns: %+v", res.Warnings)
	}
	w.expectTraffic("be", a)

	rec := events.New(cluster.service, w.ns, "web", "sync-0", nil)
	var writes atomic.Int32
	rec.OnWrite = func(op string) {
		if op != "dropped" {
			writes.Add(1)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go rec.Run(ctx)
	run := rec.Wrap(w.rec)
	sel := fields.Set{"involvedObject.kind": "Service", "involvedObject.name": "web", "involvedObject.uid": string(svc.UID)}.AsSelector().String()
	eventually := func(what string, ok func([]corev1.Event) bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			list, err := cluster.client.CoreV1().Events(w.ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
			if err != nil {
				t.Fatal(err)
			}
			if ok(list.Items) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: events %s", what, show(list.Items))
			}
		}
	}
	has := func(evs []corev1.Event, reason, says string) bool {
		for _, e := range evs {
			if e.Type == corev1.EventTypeWarning && e.Reason == reason && strings.Contains(e.Message, says) {
				return true
			}
		}
		return false
	}
	warned := func(res reconcile.Result, reason, says string) bool {
		for _, w := range res.Warnings {
			if w.Reason == reason && strings.Contains(w.Message, says) {
				return true
			}
		}
		return false
	}

	// The Service's port is renamed: HAPROXY_BACKENDS's "http" names none.
	cur, err := cluster.client.CoreV1().Services(w.ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Ports = []corev1.ServicePort{{Name: "https", Port: 443, NodePort: svc.Spec.Ports[0].NodePort}}
	if _, err := cluster.client.CoreV1().Services(w.ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, res := w.reconcile()
	const noPort = `has no port "http" (its ports: "https" 443)`
	if code != http.StatusServiceUnavailable || !warned(res, desired.WarnServicePortNotFound, noPort) {
		t.Errorf("no such port: %d %+v", code, res)
	}
	w.expectTraffic("be", a)
	if res, _ := run.Reconcile(ctx, false); !warned(res, desired.WarnServicePortNotFound, noPort) {
		t.Errorf("no such port, through the recorder: %+v", res)
	}
	eventually("the port's Event", func(evs []corev1.Event) bool {
		return has(evs, events.ReasonMisconfigured, noPort) && !has(evs, events.ReasonFailed, "")
	})

	// The port is back; the slice goes: no EndpointSlice carries the name.
	cur, err = cluster.client.CoreV1().Services(w.ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Ports[0].Name = "http"
	if _, err := cluster.client.CoreV1().Services(w.ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.client.DiscoveryV1().EndpointSlices(w.ns).Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err = run.Reconcile(ctx, false)
	const noSlice = "carries the label kubernetes.io/service-name=web"
	if err != nil || res.Desired != 0 || !warned(res, desired.WarnNoEndpointSlices, noSlice) || len(res.Targets[0].Delete) != 0 {
		t.Errorf("no slice: %v %+v", err, res)
	}
	if s, ok := w.h.Servers(t, "be")[a]; !ok || !s.Maint() {
		t.Errorf("no slice: server %s %+v, want kept in maintenance", a, s)
	}
	eventually("the slices' Event", func(evs []corev1.Event) bool { return has(evs, events.ReasonMisconfigured, noSlice) })

	// No Service at all: said in the result, no Event.
	if err := cluster.client.CoreV1().Services(w.ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the Events above are written
	before := writes.Load()
	res, err = run.Reconcile(ctx, false)
	if err == nil || !warned(res, desired.WarnServiceNotFound, "Service "+w.ns+"/web not found") {
		t.Errorf("no Service: %v %+v", err, res)
	}
	time.Sleep(200 * time.Millisecond)
	if n := writes.Load(); n != before {
		t.Errorf("%d Events written about a Service that does not exist", n-before)
	}
	if _, ok := w.h.Servers(t, "be")[a]; !ok {
		t.Errorf("no Service: server %s deleted", a)
	}
}
