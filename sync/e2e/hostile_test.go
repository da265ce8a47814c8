package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// skippedReasons maps each skipped endpoint's address (or node name) part to
// its reason.
func skippedReasons(res reconcile.Result) map[string]string {
	out := map[string]string{}
	for _, s := range res.Skipped {
		out[s.Endpoint] = s.Reason
	}
	return out
}

// checkNames checks every server name is safe and unique.
func checkNames(t *testing.T, servers map[string]haproxytest.Server) {
	t.Helper()
	for name := range servers {
		if len(name) > desired.MaxNameLength || strings.ContainsFunc(name, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
		}) {
			t.Errorf("server name %q", name)
		}
	}
}

// TestHostileEndpointsPodMode writes, through the real API server, the
// EndpointSlice a hostile or careless writer could: an octal address
// (HAProxy would read 0177.0.0.1 as 127.0.0.1), an address outside
// ALLOWED_SERVER_CIDRS, Pod names that collide once made safe, a 20,000
// character Pod name. The good endpoints become servers and take traffic,
// the bad ones are listed under skipped, the reconcile succeeds, and a
// second one changes nothing.
func TestHostileEndpointsPodMode(t *testing.T) {
	w := newWorld(t, "web", desired.PodMode, []desired.PortBackend{{Backend: "be"}})
	w.service("web", corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "http", Port: 80})
	port := int32(haproxytest.FreePort(t, "10.244.0.1"))
	good := []string{"10.244.0.1", "10.244.0.2", "10.244.0.3", "10.244.0.4", "10.244.1.1"}
	for _, ip := range good {
		listen(t, ip, ip, port)
	}
	long := strings.Repeat("p", 20000)
	w.slice("web-1", "web", map[string]int32{"http": port},
		endpoint{ip: "10.244.0.1", pod: "web-a"},
		endpoint{ip: "10.244.0.2", pod: "x"}, endpoint{ip: "10.244.0.3", pod: "x"},
		endpoint{ip: "10.244.0.4", pod: "x-10.244.0.2"},
		endpoint{ip: "10.244.1.1", pod: long},
		endpoint{ip: "0177.0.0.1", pod: "octal"},
		endpoint{ip: "10.9.9.9", pod: "outside"},
	)
	res := w.mustReconcile()
	if res.Status != "applied" || len(res.Targets[0].Add) != 5 {
		t.Fatalf("%+v", res)
	}
	got := w.h.Servers(t, "be")
	checkNames(t, got)
	addrs := map[string]string{}
	for name, s := range got {
		addrs[s.Address] = name
	}
	for _, ip := range good {
		if _, ok := addrs[ip]; !ok {
			t.Errorf("no server for %s: %v", ip, addrs)
		}
	}
	if len(got) != len(good) {
		t.Errorf("servers %v", addrs)
	}
	if addrs["10.244.0.4"] != "x-10.244.0.2" || addrs["10.244.0.2"] == "x" || addrs["10.244.0.3"] == "x" || !strings.HasPrefix(addrs["10.244.1.1"], "ppp") {
		t.Errorf("names %v", addrs)
	}
	reasons := skippedReasons(res)
	want := map[string]string{}
	for ep, r := range reasons {
		switch {
		case strings.Contains(ep, "0177.0.0.1"):
			want[ep] = desired.ReasonInvalidAddress
		case strings.Contains(ep, "10.9.9.9"):
			want[ep] = desired.ReasonAddressNotAllowed
		default:
			t.Errorf("skipped %s (%s)", ep, r)
		}
	}
	if len(reasons) != 2 || fmt.Sprint(reasons) != fmt.Sprint(want) {
		t.Errorf("skipped %v, want the octal and the outside address", res.Skipped)
	}
	w.expectTraffic("be", good...)
	if res := w.mustReconcile(); res.Status != "unchanged" || len(res.Skipped) != 2 {
		t.Errorf("second reconcile: %+v", res)
	}
}

// TestHostileNodesNodeMode: Node addresses are not validated by the API
// server at all. A Node whose InternalIP is the metadata service, 0.0.0.0 or
// an IPv4-mapped IPv6 address gets no server; the good Node does.
func TestHostileNodesNodeMode(t *testing.T) {
	w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}})
	good := w.node("good", "127.0.6.1")
	meta, zero, mapped := w.node("meta", "169.254.169.254"), w.node("zero", "0.0.0.0"), w.node("mapped", "::ffff:127.0.6.2")
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	listen(t, good, "127.0.6.1", svc.Spec.Ports[0].NodePort)
	w.slice("web-1", "web", map[string]int32{"http": 8080},
		endpoint{ip: "10.244.0.1", node: good}, endpoint{ip: "10.244.0.2", node: meta},
		endpoint{ip: "10.244.0.3", node: zero}, endpoint{ip: "10.244.0.4", node: mapped})
	res := w.mustReconcile()
	w.expectServers("be", map[string]server{good: {"127.0.6.1", int(svc.Spec.Ports[0].NodePort), "ready"}})
	w.expectTraffic("be", good)
	reasons := map[string]string{}
	for _, s := range res.Skipped {
		reasons[strings.Trim(strings.TrimPrefix(s.Endpoint, "node "), `"`)] = s.Reason
	}
	want := map[string]string{meta: desired.ReasonAddressNotAllowed, zero: desired.ReasonAddressNotAllowed, mapped: desired.ReasonInvalidAddress}
	if fmt.Sprint(reasons) != fmt.Sprint(want) {
		t.Errorf("skipped %v, want %v", reasons, want)
	}
	if res := w.mustReconcile(); res.Status != "unchanged" {
		t.Errorf("second reconcile: %+v", res)
	}
}

// TestGuardHoldsUntilReplacementsAreUp replaces every server at once, on a
// real HAProxy: two reconciles in a row delete nothing while the
// replacements' checks fail, the old servers keep serving meanwhile
// (make-before-break: parking them would empty the backend), and they go
// only once the replacements are UP.
func TestGuardHoldsUntilReplacementsAreUp(t *testing.T) {
	w := newWorld(t, "web", desired.PodMode, []desired.PortBackend{{Backend: "be"}})
	w.rec.GuardPercent = 100
	w.service("web", corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "http", Port: 80})
	port := int32(haproxytest.FreePort(t, "10.244.0.1"))
	listen(t, "a", "10.244.0.1", port)
	listen(t, "b", "10.244.0.2", port)
	ports := map[string]int32{"http": port}
	w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.1", pod: "a"}, endpoint{ip: "10.244.0.2", pod: "b"})
	w.mustReconcile()
	w.expectTraffic("be", "a", "b")

	w.slice("web-1", "web", ports, endpoint{ip: "10.244.0.3", pod: "c"}, endpoint{ip: "10.244.0.4", pod: "d"})
	for i := range 2 {
		res := w.mustReconcile()
		if len(res.Targets[0].Delete) != 0 || fmt.Sprint(res.Targets[0].HandingOver) != "[a b]" {
			t.Fatalf("reconcile %d while c and d are not UP: %+v", i+1, res.Targets[0])
		}
		w.expectTraffic("be", "a", "b")
		// Nothing answers on c and d: their checks, every downinter
		// while they are DOWN, keep failing.
		time.Sleep(5 * shipped.DownInter)
	}
	if got := w.h.Servers(t, "be"); len(got) != 4 || got["c"].Up() || got["d"].Up() || got["a"].Maint() || got["b"].Maint() {
		t.Fatalf("servers %+v", got)
	}

	listen(t, "c", "10.244.0.3", port)
	listen(t, "d", "10.244.0.4", port)
	deadline := time.Now().Add(5 * time.Second)
	for s := w.h.Servers(t, "be"); !s["c"].Up() || !s["d"].Up(); s = w.h.Servers(t, "be") {
		if time.Now().After(deadline) {
			t.Fatalf("c and d never UP: %+v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	res := w.mustReconcile()
	if fmt.Sprint(res.Targets[0].Delete) != "[a b]" || len(res.Targets[0].Guarded) != 0 {
		t.Fatalf("once c and d are UP: %+v", res.Targets[0])
	}
	w.expectServers("be", map[string]server{"c": {"10.244.0.3", int(port), "ready"}, "d": {"10.244.0.4", int(port), "ready"}})
	w.expectTraffic("be", "c", "d")
}
