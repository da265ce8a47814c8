package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

func TestStatusChange(t *testing.T) {
	ours := []corev1.LoadBalancerIngress{{IP: "127.0.0.10"}}
	other := []corev1.LoadBalancerIngress{{IP: "127.0.0.99"}}
	withMode := []corev1.LoadBalancerIngress{{IP: "127.0.0.10", IPMode: ptrMode(corev1.LoadBalancerIPModeVIP)}}
	tests := []struct {
		name                      string
		cur                       []corev1.LoadBalancerIngress
		followed, ready, feFailed bool
		want                      string
	}{
		{"ready, none yet: written", nil, true, true, false, IngressWritten},
		{"ready, already ours: no write", ours, true, true, false, ""},
		{"ready, ours with another field set: no write", withMode, true, true, false, ""},
		{"not ready yet: nothing", nil, true, false, false, ""},
		{"ours, not ready for a moment: kept", ours, true, false, false, ""},
		{"ours, frontends failed: withdrawn", ours, true, false, true, IngressWithdrawn},
		{"ours, left the class: withdrawn", ours, false, false, false, IngressWithdrawn},
		{"another controller's, not followed: untouched", other, false, false, false, ""},
		{"another address, followed and ready: ours written", other, true, true, false, IngressWritten},
		{"ours with another ipMode (the setting changed since), left the class: withdrawn", []corev1.LoadBalancerIngress{{IP: "127.0.0.10", IPMode: ptrMode(corev1.LoadBalancerIPModeProxy)}}, false, false, false, IngressWithdrawn},
		{"ours with another ipMode, frontends failed: withdrawn", []corev1.LoadBalancerIngress{{IP: "127.0.0.10", IPMode: ptrMode(corev1.LoadBalancerIPModeProxy)}}, true, false, true, IngressWithdrawn},
		{"ours with another ipMode, followed and ready: written again with ours", []corev1.LoadBalancerIngress{{IP: "127.0.0.10", IPMode: ptrMode(corev1.LoadBalancerIPModeProxy)}}, true, true, false, IngressWritten},
	}
	for _, tt := range tests {
		to, change := statusChange(tt.cur, ours, tt.followed, tt.ready, tt.feFailed)
		if change != tt.want {
			t.Errorf("%s: change %q, want %q", tt.name, change, tt.want)
		}
		if change == IngressWritten && !sameIngress(to, ours) || change == IngressWithdrawn && len(to) != 0 {
			t.Errorf("%s: to %v", tt.name, to)
		}
	}
}

func ptrMode(m corev1.LoadBalancerIPMode) *corev1.LoadBalancerIPMode { return &m }

func TestInService(t *testing.T) {
	s := services.Selected{Namespace: "a", Name: "b", Ports: []services.Port{{Port: 80, Backend: "be_80"}, {Port: 443, Backend: "be_443"}}}
	tr := func(target, backend string, ready int, err string) reconcile.TargetResult {
		return reconcile.TargetResult{Target: target, Backend: backend, Error: err, Servers: map[string]int{"ready": ready, "maint": 1}}
	}
	res := func(ts ...reconcile.TargetResult) reconcile.Result {
		return reconcile.Result{Status: reconcile.StatusUnchanged, Targets: ts}
	}
	t1ready := res(tr("t1", "be_80", 1, ""), tr("t1", "be_443", 2, ""))
	tests := []struct {
		name   string
		before []reconcile.Result // earlier reconciles of the Service
		now    reconcile.Result
		want   bool
	}{
		{"every backend on every target", nil, res(tr("t1", "be_80", 1, ""), tr("t1", "be_443", 2, ""), tr("t2", "be_80", 1, ""), tr("t2", "be_443", 1, "")), true},
		{"one target without a ready server", nil, res(tr("t1", "be_80", 1, ""), tr("t1", "be_443", 2, ""), tr("t2", "be_80", 0, ""), tr("t2", "be_443", 1, "")), false},
		{"one target failed", nil, res(tr("t1", "be_80", 1, ""), tr("t1", "be_443", 2, ""), tr("t2", "be_80", 1, "boom"), tr("t2", "be_443", 1, "")), false},
		{"one target missing", nil, t1ready, false},
		// A follow-up reconciles one target at a time (a check passed
		// there): the other's earlier result counts.
		{"the other target in service at its own last reconcile", []reconcile.Result{res(tr("t2", "be_80", 1, ""), tr("t2", "be_443", 1, ""))}, t1ready, true},
		{"the other target out of service since", []reconcile.Result{res(tr("t2", "be_80", 1, ""), tr("t2", "be_443", 1, "")),
			res(tr("t2", "be_80", 0, ""), tr("t2", "be_443", 1, ""))}, t1ready, false},
		{"the other target's earlier result for another backend", []reconcile.Result{res(tr("t2", "be_8080", 1, ""))}, t1ready, false},
		{"a failed reconcile", []reconcile.Result{res(tr("t2", "be_80", 1, ""), tr("t2", "be_443", 1, ""))},
			reconcile.Result{Status: reconcile.StatusError, Targets: t1ready.Targets}, false},
	}
	for _, tt := range tests {
		var known served
		for _, r := range tt.before {
			_, known = inService(known, r, s, []string{"t1", "t2"})
		}
		if got, _ := inService(known, tt.now, s, []string{"t1", "t2"}); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// flakyHAProxy is memHAProxy that refuses while down.
type flakyHAProxy struct {
	*memHAProxy
	down bool
}

func (f *flakyHAProxy) Read(ctx context.Context, backend string) (model.Backend, error) {
	if f.down {
		return model.Backend{}, &failure.NetworkError{Err: syscall.ECONNREFUSED}
	}
	return f.memHAProxy.Read(ctx, backend)
}

func (f *flakyHAProxy) Apply(ctx context.Context, p plan.Plan) (plan.Applied, error) {
	if f.down {
		return plan.Applied{}, &failure.NetworkError{Err: syscall.ECONNREFUSED}
	}
	return f.memHAProxy.Apply(ctx, p)
}

// TestStatusWrittenWhenTheLastTargetEntersService (found by class history
// seed 4, an HA pair): a follow-up reconciles one target at a time
// (reconcile.OnlyTarget, a check passed there); the reconcile that puts the
// last target's servers in service writes the status, counting the other
// target's earlier result. It waited for a full reconcile (a resync, off
// in the binary; a reload), 11 s in that history.
func TestStatusWrittenWhenTheLastTargetEntersService(t *testing.T) {
	c := &cluster{}
	c.add(lbService("web", 80), "127.0.1.1")
	_, be := services.ClassNames("", "apps", "web", 80)
	a, b := newMem("a", be), &flakyHAProxy{memHAProxy: newMem("b", be), down: true}
	f := newFleet(c, a, b)
	f.Frontends = &fakeFrontends{report: services.FrontendReport{Ready: map[string]bool{"apps/web": true}}}
	f.VIPs = []string{"127.0.0.10", "127.0.0.11"}
	if _, err := f.Reconcile(context.Background(), false); err == nil {
		t.Fatal("want b's failure")
	}
	if len(c.updates) != 0 {
		t.Fatalf("status writes %v with b down", c.updates)
	}
	b.down = false
	if _, err := f.ReconcileService(reconcile.OnlyTarget(context.Background(), "b"), "apps/web", false); err != nil {
		t.Fatal(err)
	}
	if len(c.updates) != 1 {
		t.Fatalf("status writes %v: want it written once b's servers are in service too", c.updates)
	}
}

// TestOursPerTarget: an HA pair whose addresses differ (HAPROXY_VIP one per
// target) publishes each address once, in target order, so external-dns
// gets both; a pair sharing a VIP publishes it once; a hostname replaces
// the addresses.
func TestOursPerTarget(t *testing.T) {
	for _, c := range []struct {
		vips     []string
		hostname string
		want     string
	}{
		{vips: []string{"127.0.0.71", "127.0.0.72"}, want: "127.0.0.71,127.0.0.72"},
		{vips: []string{"127.0.0.71", "127.0.0.71"}, want: "127.0.0.71"},
		{vips: []string{"127.0.0.72", "127.0.0.71", "127.0.0.72"}, want: "127.0.0.72,127.0.0.71"},
		{vips: []string{"127.0.0.71", "127.0.0.72"}, hostname: "lb.example.org", want: "lb.example.org"},
		{want: ""},
	} {
		var got []string
		for _, in := range (&Fleet{VIPs: c.vips, Hostname: c.hostname}).ours() {
			got = append(got, in.IP+in.Hostname)
		}
		if strings.Join(got, ",") != c.want {
			t.Errorf("VIPs %v hostname %q: ingress %v, want %s", c.vips, c.hostname, got, c.want)
		}
	}
}

// TestStatusWithdrawnByItsOwnReconcile (issue 54 row 4): a class Service
// whose status this instance wrote has it withdrawn by the reconcile of
// that Service alone (the watch's poke, through its lane) once it leaves
// the class or is refused: external-dns must not publish the VIP until the
// next full reconcile. Another Service's status is left as it is.
func TestStatusWithdrawnByItsOwnReconcile(t *testing.T) {
	cls := "lb"
	lbSvc := func(name string, ports ...int32) corev1.Service {
		s := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls}}
		for _, p := range ports {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprint("p", p), Port: p})
		}
		return s
	}
	for _, tt := range []struct {
		name  string
		leave func(a *corev1.Service)
	}{
		{"leaves the class", func(a *corev1.Service) { a.Spec.LoadBalancerClass = nil }},

		{"refused: names a port apps/b holds", func(a *corev1.Service) {
			a.Spec.Ports = append(a.Spec.Ports, corev1.ServicePort{Name: "p443", Port: 443})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &cluster{}
			c.add(lbSvc("a", 80), "127.0.1.1")
			c.add(lbSvc("b", 443), "127.0.1.2")
			_, beA := services.ClassNames("", "apps", "a", 80)
			_, beB := services.ClassNames("", "apps", "b", 443)
			h := newMem("h", beA, beB)
			f := newFleet(c, h)
			f.Frontends = &fakeFrontends{report: services.FrontendReport{Ready: map[string]bool{"apps/a": true, "apps/b": true}}}
			l := &Lanes{Fleet: f}
			defer l.Close()
			if _, err := l.Full(context.Background()); err != nil {
				t.Fatal(err)
			}
			if len(c.updates) != 2 {
				t.Fatalf("updates %v: want both statuses written", c.updates)
			}
			c.mu.Lock()
			tt.leave(&c.svcs[0])
			c.mu.Unlock()
			_, err := l.Run(context.Background(), "apps/a")
			var nse *NotSelectedError
			if !errors.As(err, &nse) {
				t.Fatalf("err = %v, want apps/a not followed", err)
			}
			if len(c.updates) != 3 || c.updates[2] != "apps/a=[]" {
				t.Fatalf("updates %v: want apps/a's status withdrawn by its own reconcile", c.updates)
			}
			c.mu.Lock()
			bIngress := c.svcs[1].Status.LoadBalancer.Ingress
			c.mu.Unlock()
			if len(bIngress) != 1 {
				t.Fatalf("apps/b's status %v: want it kept", bIngress)
			}
		})
	}
}

// TestAnotherClassStatusIsLeftAlone (a second reader): two installs of two
// classes on one HAProxy may write the same VIP; a Service of the other
// class whose status equals ours is that install's, never withdrawn here
// (its class cannot change in Kubernetes), by a full reconcile or by its
// own key's.
func TestAnotherClassStatusIsLeftAlone(t *testing.T) {
	cls, other := "lb", "other"
	c := &cluster{}
	a := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "a"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls, Ports: []corev1.ServicePort{{Name: "p80", Port: 80}}}}
	b := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "b"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &other, Ports: []corev1.ServicePort{{Name: "p443", Port: 443}}}}
	c.add(a, "127.0.1.1")
	c.add(b, "127.0.1.2")
	_, beA := services.ClassNames("", "apps", "a", 80)
	f := newFleet(c, newMem("h", beA))
	f.Frontends = &fakeFrontends{report: services.FrontendReport{Ready: map[string]bool{"apps/a": true}}}
	l := &Lanes{Fleet: f}
	defer l.Close()
	if _, err := l.Full(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.svcs[1].Status.LoadBalancer.Ingress = f.ours() // the other install's, the same VIP
	c.updates = nil
	c.mu.Unlock()
	if _, err := l.Full(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, _ = l.Run(context.Background(), "apps/b")
	for _, u := range c.updates {
		if strings.HasPrefix(u, "apps/b=") {
			t.Fatalf("updates %v: the other class's status was written", c.updates)
		}
	}
}

// TestRetryableFrontendFailureKeepsTheStatus (a second reader): a class
// Service whose frontend write failed for a reason a retry mends (the Data
// Plane API answered 503, a reload under way) keeps the status this
// instance wrote, as a failed reconcile does: withdrawing it would have
// external-dns drop and publish the VIP again at every hiccup. A failure of
// its own (its port taken by an operator's frontend) withdraws it.
func TestRetryableFrontendFailureKeepsTheStatus(t *testing.T) {
	cls := "lb"
	for _, tt := range []struct {
		class     failure.Class
		withdrawn bool
	}{
		{failure.Temporary, false},
		{failure.Unreachable, false},
		{failure.Permanent, true},
	} {
		t.Run(string(tt.class), func(t *testing.T) {
			c := &cluster{}
			c.add(corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "a"},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls, Ports: []corev1.ServicePort{{Name: "p80", Port: 80}}}}, "127.0.1.1")
			_, beA := services.ClassNames("", "apps", "a", 80)
			f := newFleet(c, newMem("h", beA))
			fe := &fakeFrontends{report: services.FrontendReport{Ready: map[string]bool{"apps/a": true}}}
			f.Frontends = fe
			l := &Lanes{Fleet: f}
			defer l.Close()
			if _, err := l.Full(context.Background()); err != nil {
				t.Fatal(err)
			}
			if len(c.updates) != 1 {
				t.Fatalf("updates %v: want the status written", c.updates)
			}
			fe.report = services.FrontendReport{Failed: map[string]string{"apps/a": "writing the frontend: 503"},
				FailedClass: map[string]failure.Class{"apps/a": tt.class}}
			_, _ = l.Full(context.Background())
			withdrawn := len(c.updates) == 2 && c.updates[1] == "apps/a=[]"
			if withdrawn != tt.withdrawn || len(c.updates) > 2 {
				t.Errorf("updates %v after a %s frontend failure: withdrawn %v, want %v", c.updates, tt.class, withdrawn, tt.withdrawn)
			}
		})
	}
}

// holdingFrontends is fakeFrontends that also reads back who holds what
// (as *lb.Manager does from the frontends' marks).
type holdingFrontends struct {
	fakeFrontends
	holders map[string]string
	reads   int
}

func (h *holdingFrontends) Holders(context.Context) (map[string]string, error) {
	h.reads++
	return h.holders, nil
}

// TestARestartKeepsThePortWithItsHolder (issue 54 row 2): apps/new serves
// port 80 (its frontend binds it), and the older apps/old is edited to
// claim it too, while neither has a status (not written yet, or written by
// no one). A new process (a restart, a second replica) has no earlier
// selection: it reads back the frontends' marks, and the holder keeps the
// port; the older claimant is refused. Without the read-back, age gave the
// port to apps/old and its clients reached the other Service's pods. The
// frontends are read once, by the first selection.
func TestARestartKeepsThePortWithItsHolder(t *testing.T) {
	cls := "lb"
	svc := func(name string, created time.Time, ports ...int32) corev1.Service {
		s := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, CreationTimestamp: metav1.NewTime(created)},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls}}
		for _, p := range ports {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprint("p", p), Port: p})
		}
		return s
	}
	for _, readBack := range []bool{true, false} {
		c := &cluster{}
		c.add(svc("old", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), 80, 81), "127.0.1.1")
		c.add(svc("new", time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), 80), "127.0.1.2")
		_, beNew := services.ClassNames("", "apps", "new", 80)
		f := newFleet(c, newMem("h", beNew))
		fe := &holdingFrontends{fakeFrontends: fakeFrontends{report: services.FrontendReport{Ready: map[string]bool{"apps/new": true}}}}
		if readBack {
			fe.holders = map[string]string{services.PortResource(80): "apps/new"}
		}
		f.Frontends = fe
		res, _ := f.Reconcile(context.Background(), false)
		refused := map[string]bool{}
		for _, r := range res.Refused {
			refused[r.Service] = true
		}
		if got := refused["apps/old"] && !refused["apps/new"]; got != readBack {
			t.Errorf("read back %v: refused %+v; want the holder apps/new kept: %v", readBack, res.Refused, readBack)
		}
		_, _ = f.Reconcile(context.Background(), false)
		if fe.reads != 1 {
			t.Errorf("read back %v: the frontends' holders read %d times, want once (the first selection)", readBack, fe.reads)
		}
	}
}

// TestSameIngress: ipMode counts, unset being VIP (what the API server
// defaults it to), so that a status written without it is not written
// again for ever; another field does not.
func TestSameIngress(t *testing.T) {
	proxy, vip := ptrMode(corev1.LoadBalancerIPModeProxy), ptrMode(corev1.LoadBalancerIPModeVIP)
	ing := func(ip string, mode *corev1.LoadBalancerIPMode) []corev1.LoadBalancerIngress {
		return []corev1.LoadBalancerIngress{{IP: ip, IPMode: mode}}
	}
	for _, c := range []struct {
		name string
		a, b []corev1.LoadBalancerIngress
		same bool
	}{
		{"unset and VIP", ing("127.0.0.10", nil), ing("127.0.0.10", vip), true},
		{"Proxy and unset", ing("127.0.0.10", proxy), ing("127.0.0.10", nil), false},
		{"Proxy and VIP", ing("127.0.0.10", proxy), ing("127.0.0.10", vip), false},
		{"Proxy and Proxy", ing("127.0.0.10", proxy), ing("127.0.0.10", proxy), true},
		{"another address", ing("127.0.0.10", nil), ing("127.0.0.11", nil), false},
		{"ports said by another", ing("127.0.0.10", nil), []corev1.LoadBalancerIngress{{IP: "127.0.0.10", Ports: []corev1.PortStatus{{Port: 80}}}}, true},
	} {
		if got := sameIngress(c.a, c.b); got != c.same {
			t.Errorf("%s: same %v, want %v", c.name, got, c.same)
		}
	}
}

// TestIPModeProxyWithSendProxyV2 (issue 54, status that tells the truth
// about the path): with HAPROXY_SEND_PROXY_V2 the status says ipMode:
// Proxy, so that kube-proxy does not short-cut in-cluster clients of the
// VIP to pods that expect the header; without it, no ipMode (VIP). An API
// server that drops the field (before 1.30) gets the status once, and a
// warning, not a write at every reconcile.
func TestIPModeProxyWithSendProxyV2(t *testing.T) {
	cls := "lb"
	for _, tt := range []struct {
		name            string
		proxy, dropping bool
		want            string
	}{
		{"send-proxy-v2", true, false, "Proxy"},
		{"no PROXY protocol", false, false, "VIP"},
		{"send-proxy-v2, an API server before 1.30", true, true, "VIP"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &cluster{dropIPMode: tt.dropping}
			c.add(corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "a"},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls, Ports: []corev1.ServicePort{{Name: "p80", Port: 80}}}}, "127.0.1.1")
			_, be := services.ClassNames("", "apps", "a", 80)
			f := newFleet(c, newMem("h", be))
			f.ProxyProtocol = tt.proxy
			f.Frontends = &fakeFrontends{report: services.FrontendReport{Ready: map[string]bool{"apps/a": true}}}
			for range 3 {
				if _, err := f.Reconcile(context.Background(), false); err != nil {
					t.Fatal(err)
				}
			}
			if len(c.updates) != 1 {
				t.Fatalf("updates %v: want the status written once", c.updates)
			}
			c.mu.Lock()
			ing := c.svcs[0].Status.LoadBalancer.Ingress
			c.mu.Unlock()
			if len(ing) != 1 || string(ipModeOf(ing[0])) != tt.want || tt.want == "VIP" && ing[0].IPMode != nil {
				t.Errorf("ingress %+v, want ipMode %s", ing, tt.want)
			}
		})
	}
}

// TestIPModeDroppedIsNotedWithinOnePass (a second reader): on an API server
// that drops ipMode, the first write shows it, and the Services after it in
// the same pass are written without: each status is written once, not
// once more at every restart's next pass.
func TestIPModeDroppedIsNotedWithinOnePass(t *testing.T) {
	cls := "lb"
	c := &cluster{dropIPMode: true}
	var bes []string
	for _, name := range []string{"a", "b", "c"} {
		c.add(corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls, Ports: []corev1.ServicePort{{Name: "p", Port: 80 + int32(len(bes))}}}}, "127.0.1."+fmt.Sprint(len(bes)+1))
		_, be := services.ClassNames("", "apps", name, 80+int32(len(bes)))
		bes = append(bes, be)
	}
	f := newFleet(c, newMem("h", bes...))
	f.ProxyProtocol = true
	f.Frontends = &fakeFrontends{report: services.FrontendReport{Ready: map[string]bool{"apps/a": true, "apps/b": true, "apps/c": true}}}
	for range 2 {
		if _, err := f.Reconcile(context.Background(), false); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.updates) != 3 {
		t.Fatalf("updates %v: want each status written once", c.updates)
	}
	if c.modes[0] != "Proxy" || c.modes[1] != "" || c.modes[2] != "" {
		t.Errorf("ipModes sent %q: want Proxy first, then none once the API server was seen to drop it", c.modes)
	}
}

// TestServedForgetsATargetThatFailed (a second reader): a target whose
// reconcile failed before any backend (its lock wait timed out) is known in
// service nowhere: the next follow-up of the other target alone writes no
// status from what b served before.
func TestServedForgetsATargetThatFailed(t *testing.T) {
	s := services.Selected{Ports: []services.Port{{Backend: "be_80"}}}
	names := []string{"a", "b"}
	tr := func(target, backend string, ready int, err string) reconcile.TargetResult {
		return reconcile.TargetResult{Target: target, Backend: backend, Error: err, Servers: map[string]int{"ready": ready}}
	}
	var known served
	// earlier incarnation: in service on both
	_, known = inService(known, reconcile.Result{Status: reconcile.StatusApplied, Targets: []reconcile.TargetResult{tr("a", "be_80", 1, ""), tr("b", "be_80", 1, "")}}, s, names)
	// new incarnation: a waits for its check, b's lock wait timed out
	_, known = inService(known, reconcile.Result{Status: reconcile.StatusError, Targets: []reconcile.TargetResult{tr("a", "be_80", 0, ""),
		{Target: "b", Error: "another reconcile of b still runs: context deadline exceeded"}}}, s, names)
	// follow-up of a alone
	if got, _ := inService(known, reconcile.Result{Status: reconcile.StatusApplied, Targets: []reconcile.TargetResult{tr("a", "be_80", 1, "")}}, s, names); got {
		t.Errorf("in service with b never reconciled since its failure: %v", known)
	}
}

// TestServedForgetsADeletedService (a second reader): a deleted Service is
// listed no more; a full reconcile forgets what it served.
func TestServedForgetsADeletedService(t *testing.T) {
	c := &cluster{}
	c.add(lbService("web", 80), "127.0.1.1")
	_, be := services.ClassNames("", "apps", "web", 80)
	f := newFleet(c, newMem("a", be), newMem("b", be))
	f.Frontends = &fakeFrontends{report: services.FrontendReport{Ready: map[string]bool{"apps/web": true}}}
	if _, err := f.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.svcs = nil
	c.mu.Unlock()
	_, _ = f.Reconcile(context.Background(), false)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.servedBy) != 0 {
		t.Errorf("servedBy still holds the deleted Service: %v", f.servedBy)
	}
}

// TestStatusWrittenByALeftBackendsReconcile (class history seed 971962119,
// a Service deleted and created again under its name and port): the
// reconcile of a left backend that a Service names again reconciles that
// Service, and its servers may enter service there; its status is written
// then. It waited for the next reconcile of that Service, which nothing
// asked for: 22 s in that history.
func TestStatusWrittenByALeftBackendsReconcile(t *testing.T) {
	c := &cluster{}
	c.add(lbService("web", 80), "127.0.1.1")
	_, be := services.ClassNames("", "apps", "web", 80)
	f := newFleet(c, newMem("a", be))
	f.Frontends = &fakeFrontends{report: services.FrontendReport{Ready: map[string]bool{"apps/web": true}}}
	res, err := f.ReconcileLeft(context.Background(), []string{be})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Services) != 1 || res.Services[0].Ingress != IngressWritten {
		t.Errorf("result %+v: want apps/web reconciled and its ingress written", res.Services)
	}
	if len(c.updates) != 1 {
		t.Fatalf("status writes %v: want one, its servers in service", c.updates)
	}
}
