package metrics_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/auth"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/trigger"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/metrics"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile/reconciletest"
)

func cluster(ips ...string) desired.Input { return desiredtest.PodCluster("ns", "web", ips...) }

func TestMetricsThroughTheHandler(t *testing.T) {
	// Writes in transactions that reload, as the Data Plane API does.
	// A plain tcp backend: it lacks option redispatch 1.
	d := &reconciletest.Driver{ID: "haproxy-a", Kind: plan.TransactionWrite, Reload: true, Retry: &model.RetryLines{Mode: "tcp"}}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "v-test", "unknown")
	tok, err := auth.NewToken("tok-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	src := &desiredtest.Source{In: cluster("10.244.0.1", "10.244.0.2")}
	rec := &reconcile.Reconciler{
		Source: m.WrapSource(src),
		Options: desired.Options{Mode: desired.PodMode, Backends: []desired.PortBackend{{Backend: "be"}},
			Settings: model.Settings{Balance: "roundrobin", TCPCheck: true}, Check: model.Check{Inter: time.Second, Rise: 1, Fall: 1}},
		Targets: []reconcile.Driver{m.WrapDriver(d)},
		Timeout: 2 * time.Second,
	}
	srv := httptest.NewServer(handler.New(handler.Config{
		Reconciler: m.WrapReconciler(rec), Target: trigger.Target{Namespace: "ns", Service: "web"},
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), OnIgnored: m.Ignored, Auth: tok,
	}))
	defer srv.Close()
	post := func(body, ctype string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/reconcile", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok-0123456789abcdef")
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	post("", "")                                 // applied: 2 adds
	src.In = cluster("10.244.0.1", "10.244.0.9") // a server replaced: add + park
	post("", "")                                 // applied
	post("", "")                                 // unchanged
	post(`{"type":"BOOKMARK","object":{}}`, "application/json")
	src.In = cluster("10.244.0.1", "10.244.0.9", "0177.0.0.1") // an octal address: skipped
	post("", "")                                               // unchanged
	dryRun := func() {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/plan", nil)
		req.Header.Set("Authorization", "Bearer tok-0123456789abcdef")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	dryRun()
	src.Err = errors.New("apiserver down")
	if code := post("", ""); code != 503 {
		t.Errorf("kubernetes down: %d", code)
	}
	post("", "")
	dryRun()

	expect := map[string]float64{
		`haproxy_k8s_sync_reconciles_total{result="applied"}`:   2,
		`haproxy_k8s_sync_reconciles_total{result="unchanged"}`: 2,
		`haproxy_k8s_sync_reconciles_total{result="error"}`:     2,
		`haproxy_k8s_sync_consecutive_failures`:                 2,
		`haproxy_k8s_sync_dry_runs_total{result="planned"}`:     1,
		`haproxy_k8s_sync_dry_runs_total{result="error"}`:       1,
		// As the last successful reconcile left the backend.
		`haproxy_k8s_sync_servers{backend="be",state="ready",target="haproxy-a"}`:      2,
		`haproxy_k8s_sync_servers{backend="be",state="maint",target="haproxy-a"}`:      0,
		`haproxy_k8s_sync_servers_held{backend="be",target="haproxy-a",why="guarded"}`: 0,
		`haproxy_k8s_sync_health_port_tcp_checks{backend="be",target="haproxy-a"}`:     0,
		`haproxy_k8s_sync_backend_missing_lines{backend="be",target="haproxy-a"}`:      1,
		`haproxy_k8s_sync_events_ignored_total`:                                        1,
		`haproxy_k8s_sync_kubernetes_reads_total{result="ok"}`:                         5, // the dry run included
		// Kept through the failed read that followed.
		`haproxy_k8s_sync_skipped_endpoints{reason="invalid-address"}`:                                           1,
		`haproxy_k8s_sync_kubernetes_reads_total{result="error"}`:                                                3,
		`haproxy_k8s_sync_haproxy_reloads_total`:                                                                 2,
		`haproxy_k8s_sync_build_info{goversion="` + runtime.Version() + `",revision="unknown",version="v-test"}`: 1,
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for series, want := range expect {
		line := ""
		for _, l := range strings.Split(string(text), "\n") {
			if strings.HasPrefix(l, series+" ") {
				line = l
			}
		}
		if line == "" || !strings.HasSuffix(line, " "+strconv.FormatFloat(want, 'f', -1, 64)) {
			t.Errorf("%s: got line %q, want value %v", series, line, want)
		}
	}
	for _, name := range []string{"haproxy_k8s_sync_haproxy_writes_total", "haproxy_k8s_sync_reconcile_duration_seconds",
		"haproxy_k8s_sync_haproxy_calls_total", "haproxy_k8s_sync_last_success_timestamp_seconds", "haproxy_k8s_sync_retries_total"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n == 0 {
			t.Errorf("%s: %d series, %v", name, n, err)
		}
	}
	// Writes by kind: first sync 2 adds; second: one add, the removed server
	// parked (its deletion waits for the next reconcile).
	if !strings.Contains(string(text), `haproxy_k8s_sync_haproxy_writes_total{kind="transaction"} 4`) {
		t.Errorf("writes by kind:\n%s", grep(string(text), "writes_total"))
	}
}

func grep(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// plainDriver is a driver whose Read says which servers are UP: no ReadUp.
type plainDriver struct{ reconcile.Driver }

// TestWrappedDriverReadsUpOnlyWhenItsDriverDoes: the reconciler asks a
// driver for UP states only when it is a reconcile.UpReader; the wrapper
// must be one exactly when the driver it wraps is.
func TestWrappedDriverReadsUpOnlyWhenItsDriverDoes(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry(), "v-test", "unknown")
	u, _ := url.Parse("http://127.0.0.1:1")
	dp := dataplane.New(u, dataplane.Auth{}, http.DefaultClient)
	if _, ok := m.WrapDriver(dp).(reconcile.UpReader); !ok {
		t.Error("the Data Plane driver reads UP states; its wrapper does not")
	}
	if _, ok := m.WrapDriver(plainDriver{dp}).(reconcile.UpReader); ok {
		t.Error("a driver without ReadUp got one from its wrapper")
	}
}

// TestProgrammed: the latency of a change lands in its stage's histogram,
// on the ProgrammingBuckets; an unmeasured one only in the counter.
func TestProgrammed(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "v", "r")
	m.Programmed(reconcile.Programmed{Target: "a", Stage: reconcile.StageApplied, Latency: 30 * time.Millisecond})
	m.Programmed(reconcile.Programmed{Target: "a", Stage: reconcile.StageApplied, Latency: 200 * time.Second})
	m.Programmed(reconcile.Programmed{Target: "a", Stage: reconcile.StageInService, Latency: 1500 * time.Millisecond})
	m.Programmed(reconcile.Programmed{Target: "a", Stage: reconcile.StageInService, Unmeasured: reconcile.Unstamped})
	want := `
# HELP haproxy_k8s_sync_network_in_service_duration_seconds From an EndpointSlice's last-change-trigger-time to the server it brought in taking traffic after its passed check, by target.
# TYPE haproxy_k8s_sync_network_in_service_duration_seconds histogram
haproxy_k8s_sync_network_in_service_duration_seconds_bucket{target="a",le="0.01"} 0
haproxy_k8s_sync_network_in_service_duration_seconds_bucket{target="a",le="0.025"} 0
haproxy_k8s_sync_network_in_service_duration_seconds_bucket{target="a",le="0.05"} 0
haproxy_k8s_sync_network_in_service_duration_seconds_bucket{target="a",le="0.1"} 0
haproxy_k8s_sync_network_in_service_duration_seconds_bucket{target="a",le="0.25"} 0
haproxy_k8s_sync_network_in_service_duration_seconds_bucket{target="a",le="0.5"} 0
haproxy_k8s_sync_network_in_service_duration_seconds_bucket{target="a",le="1"} 0
haproxy_k8s_sync_network_in_service_duration_seconds_bucket{target="a",le="2"} 1
haproxy_k8s_sync_network_in_service_duration_seconds_bucket{target="a",le="4"} 1
haproxy_k8s_sync_network_in_service_duration_seconds_bucket{target="a",le="8"} 1
haproxy_k8s_sync_network_in_service_duration_seconds_bucket{target="a",le="15"} 1
haproxy_k8s_sync_network_in_service_duration_seconds_bucket{target="a",le="30"} 1
haproxy_k8s_sync_network_in_service_duration_seconds_bucket{target="a",le="60"} 1
haproxy_k8s_sync_network_in_service_duration_seconds_bucket{target="a",le="120"} 1
haproxy_k8s_sync_network_in_service_duration_seconds_bucket{target="a",le="300"} 1
haproxy_k8s_sync_network_in_service_duration_seconds_bucket{target="a",le="+Inf"} 1
haproxy_k8s_sync_network_in_service_duration_seconds_sum{target="a"} 1.5
haproxy_k8s_sync_network_in_service_duration_seconds_count{target="a"} 1
# HELP haproxy_k8s_sync_network_programming_duration_seconds From an EndpointSlice's last-change-trigger-time to the change applied in HAProxy, by target (kube-proxy's SLI).
# TYPE haproxy_k8s_sync_network_programming_duration_seconds histogram
haproxy_k8s_sync_network_programming_duration_seconds_bucket{target="a",le="0.01"} 0
haproxy_k8s_sync_network_programming_duration_seconds_bucket{target="a",le="0.025"} 0
haproxy_k8s_sync_network_programming_duration_seconds_bucket{target="a",le="0.05"} 1
haproxy_k8s_sync_network_programming_duration_seconds_bucket{target="a",le="0.1"} 1
haproxy_k8s_sync_network_programming_duration_seconds_bucket{target="a",le="0.25"} 1
haproxy_k8s_sync_network_programming_duration_seconds_bucket{target="a",le="0.5"} 1
haproxy_k8s_sync_network_programming_duration_seconds_bucket{target="a",le="1"} 1
haproxy_k8s_sync_network_programming_duration_seconds_bucket{target="a",le="2"} 1
haproxy_k8s_sync_network_programming_duration_seconds_bucket{target="a",le="4"} 1
haproxy_k8s_sync_network_programming_duration_seconds_bucket{target="a",le="8"} 1
haproxy_k8s_sync_network_programming_duration_seconds_bucket{target="a",le="15"} 1
haproxy_k8s_sync_network_programming_duration_seconds_bucket{target="a",le="30"} 1
haproxy_k8s_sync_network_programming_duration_seconds_bucket{target="a",le="60"} 1
haproxy_k8s_sync_network_programming_duration_seconds_bucket{target="a",le="120"} 1
haproxy_k8s_sync_network_programming_duration_seconds_bucket{target="a",le="300"} 2
haproxy_k8s_sync_network_programming_duration_seconds_bucket{target="a",le="+Inf"} 2
haproxy_k8s_sync_network_programming_duration_seconds_sum{target="a"} 200.03
haproxy_k8s_sync_network_programming_duration_seconds_count{target="a"} 2
# HELP haproxy_k8s_sync_network_programming_unmeasured_total Changes applied but not timed, by target, stage (applied, in-service) and reason: unstamped (no last-change-trigger-time on their slices), stale (older than 15 min: a restore).
# TYPE haproxy_k8s_sync_network_programming_unmeasured_total counter
haproxy_k8s_sync_network_programming_unmeasured_total{reason="unstamped",stage="in-service",target="a"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"haproxy_k8s_sync_network_programming_duration_seconds", "haproxy_k8s_sync_network_in_service_duration_seconds",
		"haproxy_k8s_sync_network_programming_unmeasured_total"); err != nil {
		t.Error(err)
	}
}

// TestOneTargetsReconcileSaysNothingOfTheOthers: a reconcile of one target
// alone (the follow-up's entry while another target is down) neither
// clears the failure count nor stamps a last success.
func TestOneTargetsReconcileSaysNothingOfTheOthers(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "v-test", "unknown")
	live, down := &reconciletest.Driver{ID: "live"}, &reconciletest.Driver{ID: "down", ReadErr: errors.New("down")}
	rec := reconciletest.Reconciler(&desiredtest.Source{In: cluster("10.244.0.1")}, live, down)
	rec.Timeout = 200 * time.Millisecond
	wrapped := m.WrapReconciler(rec)
	for range 2 {
		if _, err := wrapped.Reconcile(context.Background(), false); err == nil {
			t.Fatal("a whole reconcile with a target down succeeded")
		}
	}
	if _, err := wrapped.Reconcile(reconcile.OnlyTarget(context.Background(), "live"), false); err != nil {
		t.Fatal(err)
	}
	if got := gaugeValue(t, reg, "haproxy_k8s_sync_consecutive_failures"); got != 2 {
		t.Errorf("consecutive failures %v after one target's own reconcile, want 2", got)
	}
	if got := gaugeValue(t, reg, "haproxy_k8s_sync_last_success_timestamp_seconds"); got != 0 {
		t.Errorf("last success stamped (%v) by one target's own reconcile", got)
	}
}

// gaugeValue is the value of the unlabelled gauge name in reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// TestUnexpectedReloadsAreCounted: each write the API reloaded for where it
// applies it at runtime counts in haproxy_unexpected_reloads_total, by
// target, and the result carries the count.
func TestUnexpectedReloadsAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "v-test", "unknown")
	d := &reconciletest.Driver{ID: "a", Unexpected: "a default-server line"}
	rec := reconciletest.Reconciler(&desiredtest.Source{In: cluster("10.244.0.1")}, m.WrapDriver(d))
	res, err := m.WrapReconciler(rec).Reconcile(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Targets[0].UnexpectedReloads != 1 {
		t.Errorf("result: %d unexpected reloads, want 1", res.Targets[0].UnexpectedReloads)
	}
	const want = `
# HELP haproxy_k8s_sync_haproxy_unexpected_reloads_total Writes the Data Plane API answered with a reload where it applies them at runtime (a server add, a weight, address or maintenance change), by target; the log says why once.
# TYPE haproxy_k8s_sync_haproxy_unexpected_reloads_total counter
haproxy_k8s_sync_haproxy_unexpected_reloads_total{target="a"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "haproxy_k8s_sync_haproxy_unexpected_reloads_total"); err != nil {
		t.Error(err)
	}
}

// TestTargetMismatched: target_mismatched follows what package pair tells,
// by target.
func TestTargetMismatched(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "v-test", "unknown")
	m.Mismatched("http://a:5555", false)
	m.Mismatched("http://b:5555", true)
	const want = `
# HELP haproxy_k8s_sync_target_mismatched 1 while a target's runtime socket and its Data Plane API reach different HAProxy (nothing is written to it), 0 once they were seen to match; by target (the Data Plane URL).
# TYPE haproxy_k8s_sync_target_mismatched gauge
haproxy_k8s_sync_target_mismatched{target="http://a:5555"} 0
haproxy_k8s_sync_target_mismatched{target="http://b:5555"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "haproxy_k8s_sync_target_mismatched"); err != nil {
		t.Error(err)
	}
}
