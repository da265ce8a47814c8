package fleet

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

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
	tests := []struct {
		name    string
		targets []reconcile.TargetResult
		want    bool
	}{
		{"every backend on every target", []reconcile.TargetResult{tr("t1", "be_80", 1, ""), tr("t1", "be_443", 2, ""), tr("t2", "be_80", 1, ""), tr("t2", "be_443", 1, "")}, true},
		{"one target without a ready server", []reconcile.TargetResult{tr("t1", "be_80", 1, ""), tr("t1", "be_443", 2, ""), tr("t2", "be_80", 0, ""), tr("t2", "be_443", 1, "")}, false},
		{"one target failed", []reconcile.TargetResult{tr("t1", "be_80", 1, ""), tr("t1", "be_443", 2, ""), tr("t2", "be_80", 1, "boom"), tr("t2", "be_443", 1, "")}, false},
		{"one target missing", []reconcile.TargetResult{tr("t1", "be_80", 1, ""), tr("t1", "be_443", 2, "")}, false},
	}
	for _, tt := range tests {
		if got := inService(reconcile.Result{Status: reconcile.StatusUnchanged, Targets: tt.targets}, s, 2); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
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
