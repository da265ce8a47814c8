package main

import (
	"errors"
	"log/slog"
	"os/exec"
	"strings"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/lb"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// TestManyServicesClassStarts: class selection (with SERVICE_EVENTS) is
// taken at start; the reconcile then fails on the unreachable API server,
// not on the configuration (exit 1, a result on stdout).
func TestManyServicesClassStarts(t *testing.T) {
	for _, sel := range []string{"class", "annotation,class"} {
		cmd := command(t, "reconcile", "HAPROXY_DATAPLANE_URL=http://127.0.0.1:1", "KUBECONFIG="+kubeconfig(t),
			"SERVICE_SELECTION="+sel, "ANNOTATION_BACKENDS=be_*", "HAPROXY_VIP=127.0.0.5", "SERVICE_EVENTS=true", "RECONCILE_TIMEOUT=3s")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || strings.Contains(stderr.String(), "configuration:") || !strings.Contains(string(out), `"status":"error"`) {
			t.Fatalf("%s: %v, stdout %q, stderr %q; want exit 1 from the reconcile, not the configuration", sel, err, out, stderr.String())
		}
	}
}

// TestNewFleetWiresFrontends: class Services' frontends are made through
// the Data Plane clients the drivers use, in target order, binding
// HAPROXY_VIP's addresses, named with CLUSTER_NAME; serve tells refusals.
func TestNewFleetWiresFrontends(t *testing.T) {
	t.Setenv("KUBECONFIG", kubeconfig(t))
	t.Setenv("HAPROXY_DATAPLANE_URL", "http://127.0.0.1:1,http://127.0.0.2:1")
	t.Setenv("SERVICE_SELECTION", "class")
	t.Setenv("HAPROXY_VIP", "127.0.0.5,127.0.0.6")
	t.Setenv("CLUSTER_NAME", "eu1")
	cfg, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	m := metrics.New(prometheus.NewRegistry(), "dev", "x")
	rec, _, _, kc, dps, err := newReconciler(cfg, "", log, m)
	if err != nil || len(dps) != 2 {
		t.Fatalf("newReconciler: %v, %d Data Plane clients", err, len(dps))
	}
	f, err := newFleet(cfg, rec, dps, nil, kc, "", log, m, true)
	if err != nil {
		t.Fatal(err)
	}
	lm, ok := f.Frontends.(*lb.Manager)
	if !ok || len(lm.Targets) != 2 || lm.Targets[0] != dps[0] || lm.Targets[1] != dps[1] ||
		strings.Join(lm.VIPs, ",") != "127.0.0.5,127.0.0.6" || lm.Cluster != "eu1" {
		t.Fatalf("frontends %+v, want lb.Manager over the drivers' clients with both VIPs and the cluster", f.Frontends)
	}
	if f.Warn == nil || f.Wrap != nil || f.Status == nil {
		t.Fatal("serve tells refusals (Warn), writes status, and wraps reconciles in Events only with SERVICE_EVENTS")
	}
}
