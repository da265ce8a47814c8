package fleet

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/metrics"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// value reads one sample of name whose labels include want from reg.
func value(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) (float64, bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range families {
		if fam.GetName() != "haproxy_k8s_sync_"+name {
			continue
		}
	samples:
		for _, m := range fam.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue samples
				}
			}
			return sampleValue(m), true
		}
	}
	return 0, false
}

func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return 0
}

// TestFleetKeepsMetrics (issue 54 row 8): the many-Services path keeps the
// metrics of the single-Service one: last_success_timestamp_seconds after a
// successful reconcile (full or of one Service), reconciles_total, servers,
// servers_held per backend, consecutive_failures raised by what fails the
// instance and zeroed by a success; one Service's own failure raises
// nothing.
func TestFleetKeepsMetrics(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "web", "be_web"), "127.0.1.1", "127.0.1.2")
	c.add(annotatedSvc("apps", "broken", "be_missing"), "127.0.1.3")
	c.add(annotatedSvc("later", "claim", "be_web"), "127.0.1.4") // refused: same age, apps/web first by key
	c.add(annotatedSvc("apps", "bad", "stats"), "127.0.1.5")
	h := newMem("h", "be_web")
	f := newFleet(c, h)
	reg := prometheus.NewRegistry()
	f.Metrics = metrics.New(reg, "dev", "x")
	// As serve with SERVICE_EVENTS: Events wrap what the metrics wrap.
	f.Wrap = func(_ services.Selected, r reconcile.Runner) reconcile.Runner { return r }
	gauge := func(name string, labels map[string]string) float64 {
		t.Helper()
		v, ok := value(t, reg, name, labels)
		if !ok {
			t.Fatalf("no %s%v", name, labels)
		}
		return v
	}

	if _, err := f.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if v := gauge("last_success_timestamp_seconds", nil); v == 0 {
		t.Fatal("last_success_timestamp_seconds is 0 after a successful reconcile")
	}
	if v := gauge("consecutive_failures", nil); v != 0 {
		t.Fatalf("consecutive_failures %v after a success, though apps/broken failed for its own reason", v)
	}
	if v := gauge("reconciles_total", map[string]string{"result": "applied"}); v != 1 {
		t.Fatalf("reconciles_total{applied} = %v, want apps/web's", v)
	}
	if v := gauge("reconciles_total", map[string]string{"result": "error"}); v != 1 {
		t.Fatalf("reconciles_total{error} = %v, want apps/broken's", v)
	}
	if v := gauge("servers", map[string]string{"target": "h", "backend": "be_web", "state": "ready"}); v != 2 {
		t.Fatalf("servers{be_web,ready} = %v, want 2", v)
	}
	if _, ok := value(t, reg, "servers_held", map[string]string{"target": "h", "backend": "be_web", "why": "waiting"}); !ok {
		t.Fatal("no servers_held for be_web")
	}
	if f, r := gauge("services", map[string]string{"state": "followed"}), gauge("services", map[string]string{"state": "refused"}); f != 2 || r != 2 {
		t.Fatalf("services followed %v refused %v, want 2 (web, broken) and 2 (claim, bad)", f, r)
	}

	// Kubernetes cannot be read: the instance fails, twice in a row.
	c.listErr = &failure.NetworkError{Err: errors.New("connection reset")}
	for range 2 {
		if _, err := f.Reconcile(context.Background(), false); err == nil {
			t.Fatal("a failed list must fail")
		}
	}
	if v := gauge("consecutive_failures", nil); v != 2 {
		t.Fatalf("consecutive_failures = %v after two failed reconciles, want 2", v)
	}
	// One Service's reconcile (a lane's) succeeds: the instance works.
	c.listErr = nil
	if _, err := f.ReconcileService(context.Background(), "apps/web", false); err != nil {
		t.Fatal(err)
	}
	if v := gauge("consecutive_failures", nil); v != 0 {
		t.Fatalf("consecutive_failures = %v after a successful reconcile of apps/web, want 0", v)
	}
	if v := gauge("reconciles_total", map[string]string{"result": "unchanged"}); v != 1 {
		t.Fatalf("reconciles_total{unchanged} = %v, want apps/web's second", v)
	}
	// A Service not selected says nothing of the instance.
	c.listErr = nil
	_, _ = f.ReconcileService(context.Background(), "apps/nope", false)
	if v := gauge("consecutive_failures", nil); v != 0 {
		t.Fatalf("consecutive_failures = %v after asking for a Service not selected", v)
	}
}

func TestOutcome(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		counted, ok bool
	}{
		{"success", nil, true, true},
		{"a Service failed mendably", ErrServices, true, false},
		{"the list failed", errors.New("connection refused"), true, false},
		{"not selected", &NotSelectedError{Key: "a/b"}, false, false},
		{"shutdown", context.Canceled, false, false},
	}
	for _, tt := range tests {
		if counted, ok := outcome(tt.err); counted != tt.counted || ok != tt.ok {
			t.Errorf("%s: outcome = %v %v, want %v %v", tt.name, counted, ok, tt.counted, tt.ok)
		}
	}
}

// TestLeftBackendsMetricsAreForgotten (a second reader): once a deleted
// Service's backend has no server left, its per-backend series (servers,
// servers_held) are deleted; before, they stayed at their last values for
// the process's life. Another Service's stay.
func TestLeftBackendsMetricsAreForgotten(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "web", "be_web"), "127.0.1.1", "127.0.1.2")
	c.add(annotatedSvc("apps", "stay", "be_stay"), "127.0.1.3")
	h := newMem("h", "be_web", "be_stay")
	f := newFleet(c, h)
	reg := prometheus.NewRegistry()
	f.Metrics = metrics.New(reg, "dev", "x")
	if _, err := f.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if _, ok := value(t, reg, "servers", map[string]string{"backend": "be_web"}); !ok {
		t.Fatal("no servers series for be_web to begin with")
	}
	c.mu.Lock()
	c.svcs = c.svcs[1:] // apps/web deleted
	c.mu.Unlock()
	for read := range 2 { // parked, then deleted on the second read
		if _, err := f.ReconcileLeft(context.Background(), []string{"be_web"}); err != nil {
			t.Fatal(err)
		}
		if _, ok := value(t, reg, "servers", map[string]string{"backend": "be_web"}); read == 0 && !ok {
			t.Fatal("be_web's series gone while its servers are only parked")
		}
	}
	if st := h.states("be_web"); len(st) != 0 {
		t.Fatalf("be_web %v: want its servers deleted", st)
	}
	for _, name := range []string{"servers", "servers_held"} {
		if v, ok := value(t, reg, name, map[string]string{"backend": "be_web"}); ok {
			t.Errorf("%s{backend=be_web} = %v still there", name, v)
		}
	}
	if _, ok := value(t, reg, "servers", map[string]string{"backend": "be_stay"}); !ok {
		t.Error("be_stay's series gone")
	}
}

// TestOnePassForEveryService (issue 54: the pair check runs once per
// reconcile and target): every Service's reconcile of one full reconcile
// reads its target in one pass (reconcile.PassOf), so a target's pair
// check, which runs once a pass, runs once, not once per Service; the next
// full reconcile is another pass.
func TestOnePassForEveryService(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "a", "be_a"), "127.0.1.1")
	c.add(annotatedSvc("apps", "b", "be_b"), "127.0.1.2")
	c.add(annotatedSvc("apps", "c", "be_c"), "127.0.1.3")
	h := newMem("h", "be_a", "be_b", "be_c")
	f := newFleet(c, h)
	for range 2 {
		if _, err := f.Reconcile(context.Background(), false); err != nil {
			t.Fatal(err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.passes) != 2 {
		t.Fatalf("reads by pass %v: want the reads of each full reconcile in one pass, two passes", h.passes)
	}
	for p := range h.passes {
		if p == nil {
			t.Fatal("a read outside any pass")
		}
	}
}
