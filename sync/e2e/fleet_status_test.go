package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// givenFrontends stands for package lb: every class Service's frontends
// exist (the backends are in haproxy.cfg), or, once failed is set, failed.
type givenFrontends struct{ failed bool }

func (g *givenFrontends) Sync(_ context.Context, want []services.Selected, _ map[string]string) (services.FrontendReport, error) {
	r := services.FrontendReport{Ready: map[string]bool{}, Failed: map[string]string{}}
	for _, s := range want {
		if g.failed {
			r.Failed[s.Key()] = "bind refused"
		} else {
			r.Ready[s.Key()] = true
		}
	}
	return r, nil
}

// TestFleetWritesLoadBalancerStatus: on a real kube-apiserver, a class
// Service's status.loadBalancer.ingress gets the VIP once its backend has a
// server in service, is not written again while unchanged, and is withdrawn
// when its frontends fail, and by the Service's own reconcile when it is
// refused.
func TestFleetWritesLoadBalancerStatus(t *testing.T) {
	const class = "haproxy-k8s-sync.io/haproxy"
	ns := newWorld(t, "unused", "pod", nil).ns
	_, be := services.ClassNames("", ns, "shop", 80)
	fw := newFleetWorld(t, be)
	fw.ns = ns
	fw.f.Selection = services.Selection{Class: true, ClassName: class, Namespaces: []string{ns}}
	fe := &givenFrontends{}
	fw.f.Frontends, fw.f.Status, fw.f.VIPs = fe, cluster.service, []string{"127.0.0.10"}
	cls, no := class, false
	svcs := cluster.client.CoreV1().Services(ns)
	_, err := svcs.Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "shop"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls, AllocateLoadBalancerNodePorts: &no,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}, Selector: map[string]string{"app": "shop"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, ns: ns, ctx: context.Background()}
	w.slice("shop-1", "shop", map[string]int32{"http": 21500}, endpoint{ip: "10.244.0.1", pod: "shop-a"})
	listen(t, "shop-a", "10.244.0.1", 21500)

	get := func() *corev1.Service {
		s, err := svcs.Get(context.Background(), "shop", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// The first reconcile adds the server held out of service until its
	// check passes: no address yet.
	first, err := fw.f.Reconcile(context.Background(), false)
	if err != nil || len(first.Services) != 1 || len(first.Services[0].Targets) != 1 {
		t.Fatalf("first reconcile: %v %+v", err, first)
	}
	if first.Services[0].Targets[0].Servers["ready"] != 0 || len(get().Status.LoadBalancer.Ingress) != 0 {
		t.Fatalf("first reconcile: servers %v, ingress %v; want none in service and no address", first.Services[0].Targets[0].Servers, get().Status.LoadBalancer.Ingress)
	}
	res := settle(t, func() fleet.Result {
		res, err := fw.f.Reconcile(context.Background(), false)
		if err != nil {
			t.Fatalf("reconcile: %v %+v", err, res)
		}
		return res
	})
	if ing := get().Status.LoadBalancer.Ingress; len(ing) != 1 || ing[0].IP != "127.0.0.10" {
		t.Fatalf("ingress %v after %+v, want the VIP", ing, res.Services)
	}
	expectSpread(t, fw.h.Frontends[be], "shop-a") // traffic flows where the status says
	rv := get().ResourceVersion
	if _, err := fw.f.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if get().ResourceVersion != rv {
		t.Fatal("status written again though unchanged")
	}
	fe.failed = true
	res, err = fw.f.Reconcile(context.Background(), false)
	// Its own failure (an operator's frontend, say), listed; a lone
	// Service failing for good fails for its own reason, not the
	// instance's (issue 54 row 6: 200, the Service listed failed).
	if err != nil || len(res.Services) != 1 || res.Services[0].Status != reconcile.StatusError || res.Services[0].ErrorClass != failure.Permanent || res.Services[0].Ingress != fleet.IngressWithdrawn {
		t.Fatalf("frontends failed: %v %+v, want the Service failed and its status withdrawn", err, res.Services)
	}
	if ing := get().Status.LoadBalancer.Ingress; len(ing) != 0 {
		t.Fatalf("ingress %v after its frontends failed, want it withdrawn", ing)
	}

	// Written again, then the Service asks for a port another Service
	// holds: refused, its status is withdrawn by the reconcile of that
	// Service alone (the watch's poke), not the next full one (issue 54
	// row 4). (Leaving the class means leaving type LoadBalancer, since
	// the class cannot change: the API server clears the status itself.)
	fe.failed = false
	if _, err := svcs.Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "other"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls, AllocateLoadBalancerNodePorts: &no,
			Ports: []corev1.ServicePort{{Name: "https", Port: 443}}, Selector: map[string]string{"app": "other"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	settle(t, func() fleet.Result {
		res, _ := fw.f.Reconcile(context.Background(), false) // other holds 443 from now on
		return res
	})
	if ing := get().Status.LoadBalancer.Ingress; len(ing) != 1 {
		t.Fatalf("ingress %v, want the VIP written again", ing)
	}
	claim := get()
	claim.Spec.Ports = append(claim.Spec.Ports, corev1.ServicePort{Name: "https", Port: 443})
	if _, err := svcs.Update(context.Background(), claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var nse *fleet.NotSelectedError
	if _, err := fw.f.ReconcileService(context.Background(), ns+"/shop", false); !errors.As(err, &nse) || !strings.Contains(nse.Reason, "held by "+ns+"/other") {
		t.Fatalf("the Service's own reconcile: %v, want it refused, naming the holder", err)
	}
	if ing := get().Status.LoadBalancer.Ingress; len(ing) != 0 {
		t.Fatalf("ingress %v after the Service was refused, want it withdrawn by its own reconcile", ing)
	}
}

// TestFleetWritesIPModeProxy: on a real kube-apiserver (1.34), with
// HAPROXY_SEND_PROXY_V2 a class Service's ingress keeps ipMode: Proxy
// (KEP-1860), so kube-proxy sends in-cluster clients of the VIP through
// HAProxy; the status is written once.
func TestFleetWritesIPModeProxy(t *testing.T) {
	const class = "haproxy-k8s-sync.io/haproxy"
	ns := newWorld(t, "unused", "pod", nil).ns
	_, be := services.ClassNames("", ns, "shop", 80)
	fw := newFleetWorld(t, be)
	fw.ns = ns
	fw.f.Selection = services.Selection{Class: true, ClassName: class, Namespaces: []string{ns}}
	fw.f.Frontends, fw.f.Status, fw.f.VIPs = &givenFrontends{}, cluster.service, []string{"127.0.0.10"}
	fw.f.ProxyProtocol = true // as HAPROXY_SEND_PROXY_V2 sets it (the servers' own PROXY header is not what is tested)
	cls, no := class, false
	svcs := cluster.client.CoreV1().Services(ns)
	if _, err := svcs.Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "shop"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls, AllocateLoadBalancerNodePorts: &no,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}, Selector: map[string]string{"app": "shop"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	(&world{t: t, ns: ns, ctx: context.Background()}).slice("shop-1", "shop", map[string]int32{"http": 21510}, endpoint{ip: "10.244.0.1", pod: "shop-a"})
	listen(t, "shop-a", "10.244.0.1", 21510)
	get := func() *corev1.Service {
		s, err := svcs.Get(context.Background(), "shop", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// Reconciled until the status is written (its server in service).
	var ing []corev1.LoadBalancerIngress
	for deadline := time.Now().Add(15 * time.Second); len(ing) == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if res, err := fw.f.Reconcile(context.Background(), false); err != nil {
			t.Fatalf("reconcile: %v %+v", err, res)
		}
		ing = get().Status.LoadBalancer.Ingress
	}
	if len(ing) != 1 || ing[0].IP != "127.0.0.10" || ing[0].IPMode == nil || *ing[0].IPMode != corev1.LoadBalancerIPModeProxy {
		t.Fatalf("ingress %+v, want the VIP with ipMode Proxy", ing)
	}
	rv := get().ResourceVersion
	if _, err := fw.f.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if get().ResourceVersion != rv {
		t.Fatal("status written again though unchanged")
	}
}
