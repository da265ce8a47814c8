package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/events"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/lb"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

const (
	testClass = "haproxy-k8s-sync.io/haproxy"
	classVIP  = "127.0.0.90"
	// opBackend is an operator's own backend (and frontend) in haproxy.cfg:
	// nothing class Services do may touch it.
	opBackend = "be_op"
)

// classWorld is a namespace, a real HAProxy, the Data Plane test API over
// it (which writes the class sections it holds into haproxy.cfg and reloads
// HAProxy, as the real API does), and a fleet selecting LoadBalancer
// Services of testClass through it: lb.Manager makes their frontends, the
// Data Plane driver (with the socket) their servers, the kube client
// writes their status and Events.
type classWorld struct {
	*fleetWorld
	api      *dataplanetest.Server
	reloaded atomic.Int32
}

func newClassWorld(t *testing.T) *classWorld {
	t.Helper()
	w := newWorld(t, "unused", desired.PodMode, nil)
	cw := &classWorld{fleetWorld: &fleetWorld{t: t, ns: w.ns}}
	h := haproxytest.Start(t, haproxytest.Backend{Name: opBackend, Lines: []string{"balance roundrobin", "option tcp-check"}})
	cw.h = h
	cw.api = dataplanetest.Over(t, h, dataplanetest.Options{ReloadDelay: 50 * time.Millisecond},
		func(_, _ time.Time) { cw.reloaded.Add(1) }, opBackend)
	rr := "roundrobin"
	cw.api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: opBackend, Mode: "tcp", AdvCheck: "tcp-check", Balance: &models.Balance{Algorithm: &rr}}})
	host, port, _ := net.SplitHostPort(h.Frontends[opBackend])
	p, _ := strconv.ParseInt(port, 10, 64)
	cw.api.AddFrontend(models.Frontend{FrontendBase: models.FrontendBase{Name: "fe_" + opBackend, DefaultBackend: opBackend}},
		models.Bind{Name: "b", Address: host, Port: &p})

	opts := desired.Options{Mode: desired.PodMode, Settings: model.Settings{Balance: "roundrobin", TCPCheck: true},
		Check: shipped, Addresses: desired.AddressPolicy{Allowed: testCIDRs}}
	socket, err := runtimeapi.New(h.RuntimeURL(), opts.Settings, opts.Check)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(cw.api.URL)
	dp := dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: 5 * time.Second}, dataplane.WithDeleteBatch(10), dataplane.WithRuntime(socket))
	cw.drv = newCounting(dp)
	hub := events.NewHub(cluster.service, "e2e", nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go hub.Run(ctx)
	cw.f = &fleet.Fleet{
		Services:  cluster.service,
		Selection: services.Selection{Class: true, ClassName: testClass, Annotation: true, AllowedBackends: []string{opBackend}, Namespaces: []string{cw.ns}},
		Template:  &reconcile.Reconciler{Options: opts, Targets: []reconcile.Driver{cw.drv}, Timeout: 10 * time.Second, GuardPercent: 100},
		Source: func(ns, name string) reconcile.Source {
			return &kube.Source{Client: cluster.service, Namespace: ns, Service: name}
		},
		Frontends: &lb.Manager{Targets: []lb.Target{dp}, VIPs: []string{classVIP}},
		Status:    cluster.service,
		VIPs:      []string{classVIP},
		Warn: func(svc *corev1.Service, reason, message string) {
			hub.For(svc.Namespace, svc.Name).Warn(svc.UID, reason, message)
		},
	}
	t.Cleanup(func() {
		if t.Failed() {
			cfg, _ := h.Config()
			t.Logf("haproxy.cfg:\n%s", cfg)
		}
	})
	return cw
}

// lbService creates a LoadBalancer Service of testClass with one port
// "http", its pod at ip:podPort (an EndpointSlice and a listener answering
// pod).
func (cw *classWorld) lbService(name string, port int32, pod, ip string, podPort int32) {
	cw.t.Helper()
	cls, no := testClass, false
	_, err := quietClient(cw.t).CoreV1().Services(cw.ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls, AllocateLoadBalancerNodePorts: &no,
			Ports: []corev1.ServicePort{{Name: "http", Port: port}}, Selector: map[string]string{"app": name}},
	}, metav1.CreateOptions{})
	if err != nil {
		cw.t.Fatal(err)
	}
	if pod != "" {
		(&world{t: cw.t, ns: cw.ns, ctx: context.Background()}).slice(name+"-1", name, map[string]int32{"http": podPort}, endpoint{ip: ip, pod: pod})
		listen(cw.t, pod, ip, podPort)
	}
}

// ingress returns the IPs of each Service's status.loadBalancer.ingress.
func (cw *classWorld) ingress() map[string]string {
	cw.t.Helper()
	list, err := cluster.client.CoreV1().Services(cw.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		cw.t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range list.Items {
		var ips []string
		for _, in := range s.Status.LoadBalancer.Ingress {
			ips = append(ips, in.IP)
		}
		if len(ips) > 0 {
			out[s.Name] = strings.Join(ips, ",")
		}
	}
	return out
}

// reconcile reconciles every Service, and again (up to 4 times) when one
// found HAProxy's admin socket closed for a moment: a reload the API ran
// for another Service's frontend, between two processes. serve's reload
// watcher reconciles again once a reload is done; so does this.
func (cw *classWorld) reconcile(ctx context.Context) (fleet.Result, error) {
	cw.t.Helper()
	for i := 0; ; i++ {
		res, err := cw.f.Reconcile(ctx, false)
		if err == nil || res.ErrorClass != failure.Unreachable || i == 4 {
			return res, err
		}
		cw.t.Logf("a reconcile met HAProxy reloading (%v): again once it settled", err)
		cw.settled()
		time.Sleep(100 * time.Millisecond)
	}
}

// settled waits until HAProxy went through every reload the API asked for.
func (cw *classWorld) settled() {
	cw.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for int(cw.reloaded.Load()) < cw.api.ReloadsRun() {
		if time.Now().After(deadline) {
			cw.t.Fatalf("HAProxy reloaded %d times, the API ran %d reloads", cw.reloaded.Load(), cw.api.ReloadsRun())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// withoutSections is cfg less the named sections (a section runs from its
// header to the next unindented line).
func withoutSections(cfg string, names ...string) string {
	var out []string
	skip := false
	for _, l := range strings.SplitAfter(cfg, "\n") {
		if l != "" && l[0] != ' ' && l[0] != '\t' && l != "\n" {
			f := strings.Fields(l)
			skip = len(f) == 2 && (f[0] == "frontend" || f[0] == "backend") && slices.Contains(names, f[1])
		}
		if !skip {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

// TestFleetClass20LoadBalancerServices: on a real kube-apiserver and
// HAProxy through the Data Plane test API, 20 LoadBalancer Services of the
// class (and an annotated one, filling the operator's backend) converge
// from nothing: each gets its frontend on VIP:port, its
// backend's server in service, and its status.loadBalancer.ingress only
// once traffic through its frontend reaches its pod. A Service asking for a
// port another holds is refused with an Event naming the holder. Deleting
// one drains, then removes its frontend and backend, and nothing else.
func TestFleetClass20LoadBalancerServices(t *testing.T) {
	const n = 20
	cw := newClassWorld(t)
	ports := haproxytest.FreePorts(t, classVIP, n)
	name := func(i int) string { return fmt.Sprintf("lb%02d", i) }
	for i := range n {
		cw.lbService(name(i), int32(ports[i]), name(i)+"-a", "10.244.0.1", int32(22000+i))
	}
	// Asks for lb03's port, later: refused, told who holds it.
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has a second's grain
	cw.lbService("clash", int32(ports[3]), "", "", 0)
	cw.annotated("plain", opBackend)
	(&world{t: t, ns: cw.ns, ctx: context.Background()}).slice("plain-1", "plain", map[string]int32{"http": 22100}, endpoint{ip: "10.244.0.2", pod: "plain-a"})
	listen(t, "plain-a", "10.244.0.2", 22100)
	ctx := context.Background()

	first, err := cw.reconcile(ctx)
	if err != nil {
		t.Fatalf("first reconcile: %v %+v", err, first)
	}
	if first.Frontends == nil || len(first.Frontends.Created) != n {
		t.Fatalf("first reconcile created %+v, want %d frontends", first.Frontends, n)
	}
	if got := cw.ingress(); len(got) != 0 {
		t.Fatalf("status written before any server passed its check: %v", got)
	}
	// Each reconcile: a Service with an address answers through it.
	start := time.Now()
	var res fleet.Result
	for deadline := time.Now().Add(30 * time.Second); ; {
		res, err = cw.reconcile(ctx)
		if err != nil {
			t.Fatalf("reconcile: %v %+v", err, res)
		}
		cw.settled()
		got := cw.ingress()
		if got["plain"] != "" {
			t.Fatalf("the annotated Service got an address: %v", got)
		}
		for _, sr := range res.Services {
			for _, tr := range sr.Targets {
				if svc := strings.TrimPrefix(sr.Service, cw.ns+"/"); len(tr.Waiting) > 0 && tr.Servers[string(model.Ready)] == 0 && got[svc] != "" {
					t.Fatalf("%s has an address while its servers wait for their first check: %+v", svc, tr)
				}
			}
		}
		for svc, ip := range got {
			i, _ := strconv.Atoi(strings.TrimPrefix(svc, "lb"))
			addr := net.JoinHostPort(ip, strconv.Itoa(ports[i]))
			if ip != classVIP || reach(addr) != svc+"-a" {
				t.Fatalf("%s has ingress %s but %s answers %q, want its pod", svc, ip, addr, reach(addr))
			}
		}
		if len(got) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, %d of %d Services have an address: %v", len(got), n, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d LoadBalancer Services converged in %s", n, time.Since(start).Round(time.Millisecond))
	for i := range n {
		fe, be := services.ClassNames("", cw.ns, name(i), int32(ports[i]))
		if _, binds, ok := cw.api.Frontend(fe); !ok || len(binds) != 1 || binds[0].Address != classVIP || int(*binds[0].Port) != ports[i] {
			t.Fatalf("%s: frontend %s binds %+v, want %s:%d", name(i), fe, binds, classVIP, ports[i])
		}
		for s, st := range cw.h.Servers(t, be) {
			if !st.Up() || st.Maint() {
				t.Fatalf("%s server %s: admin %#x op %d, want in service", be, s, st.Admin, st.Op)
			}
		}
	}

	expectSpread(t, cw.h.Frontends[opBackend], "plain-a")

	// clash: refused, an Event on it naming lb03, said once.
	holder := cw.ns + "/" + name(3)
	var refusedOK bool
	for _, r := range res.Refused {
		refusedOK = refusedOK || r.Service == cw.ns+"/clash" && r.Holder == holder
	}
	if !refusedOK {
		t.Fatalf("refused %+v, want clash held by %s", res.Refused, holder)
	}
	var evs []corev1.Event
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		list, err := cluster.client.CoreV1().Events(cw.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=clash"})
		if err != nil {
			t.Fatal(err)
		}
		evs = slices.DeleteFunc(list.Items, func(e corev1.Event) bool { return e.Source.Component != "haproxy-k8s-sync" }) // the API server's own
		if len(evs) > 0 {
			break
		}
	}
	if len(evs) != 1 || evs[0].Type != corev1.EventTypeWarning || evs[0].Reason != fleet.ReasonRefused ||
		!strings.Contains(evs[0].Message, holder) || evs[0].Count != 1 || evs[0].InvolvedObject.UID == "" {
		t.Fatalf("events on clash: %+v, want one Warning %s naming %s, told once", evs, fleet.ReasonRefused, holder)
	}

	// Deleting lb05: drained first, then its frontend and backend go;
	// haproxy.cfg loses those two sections and nothing else.
	gone := 5
	feGone, beGone := services.ClassNames("", cw.ns, name(gone), int32(ports[gone]))
	// The configuration as the API holds it (haproxy.cfg on disk is written
	// at reloads only; servers added at runtime reach it at the next one).
	all := func(string) bool { return true }
	before := cw.api.Sections(all)
	if err := cluster.client.CoreV1().Services(cw.ns).Delete(ctx, name(gone), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cw.drv.touched()
	res, err = cw.reconcile(ctx)
	if err != nil || res.Frontends == nil || fmt.Sprint(res.Frontends.Draining) != "["+beGone+"]" || len(res.Frontends.Removed) != 0 {
		t.Fatalf("after delete: %v, frontends %+v; want %s draining, nothing removed", err, res.Frontends, beGone)
	}
	if _, written := cw.drv.touched(); fmt.Sprint(written) != "["+beGone+"]" {
		t.Fatalf("after delete the reconcile wrote %v, want %s alone (parked)", written, beGone)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		res, err = cw.reconcile(ctx)
		if err != nil {
			t.Fatalf("reconcile: %v %+v", err, res)
		}
		if res.Frontends != nil && slices.Contains(res.Frontends.Removed, feGone) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never removed: %+v", feGone, res.Frontends)
		}
	}
	cw.settled()
	if after, want := cw.api.Sections(all), withoutSections(before, feGone, beGone); after != want {
		t.Fatalf("haproxy.cfg after %s went is not the one before less its two sections:\n%s", name(gone), lineDiff(want, after))
	}
	onDisk, err := cw.h.Config()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(onDisk, feGone) || strings.Contains(onDisk, beGone) || !strings.Contains(onDisk, "frontend fe_"+opBackend) {
		t.Fatalf("haproxy.cfg after the reload still has %s or %s, or lost the operator's frontend", feGone, beGone)
	}
	for i := range n {
		if i == gone {
			continue
		}
		addr := net.JoinHostPort(classVIP, strconv.Itoa(ports[i]))
		if got := reach(addr); got != name(i)+"-a" {
			t.Fatalf("%s answers %q after %s went, want %s-a", addr, got, name(gone), name(i))
		}
	}
	if got := reach(net.JoinHostPort(classVIP, strconv.Itoa(ports[gone]))); got != "" {
		t.Fatalf("%s's address still answers %q", name(gone), got)
	}
	if _, _, ok := cw.api.Frontend("fe_" + opBackend); !ok {
		t.Fatal("the operator's frontend was removed")
	}
}

// reach returns the name of the pod a connection to addr reaches ("" when
// none does).
func reach(addr string) string {
	name, err := haproxytest.Ask(addr)
	if err != nil {
		return ""
	}
	return name
}

// lineDiff lists the lines only one of want and got has ("-" want, "+" got).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out []string
	for _, l := range w {
		if !slices.Contains(g, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			out = append(out, "+ "+l)
		}
	}
	if len(out) == 0 {
		return "(the same lines in another order)"
	}
	return strings.Join(out, "\n")
}
