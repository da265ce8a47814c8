package metrics_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/metrics"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

type fixedResult reconcile.Result

func (f fixedResult) Reconcile(context.Context, bool) (reconcile.Result, error) {
	return reconcile.Result(f), nil
}

// TestSlotsGauge: a backend with slots has them counted by use, its
// overflow too; a backend without has no slots series at all.
func TestSlotsGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "v-test", "unknown")
	res := reconcile.Result{Status: reconcile.StatusApplied, Targets: []reconcile.TargetResult{
		{Target: "a", Backend: "slotted", Slots: map[string]int{"filled": 2, "idle": 0}, Overflow: []string{"node-c"}},
		{Target: "a", Backend: "plain", NoSlots: true},
	}}
	if _, err := m.WrapReconciler(fixedResult(res)).Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	want := `# HELP haproxy_k8s_sync_slots Slots of haproxy.cfg (server-template) in backends that have some, by use, as the last successful reconcile left them: filled, idle, and overflow (servers that found no free slot, added with add server).
# TYPE haproxy_k8s_sync_slots gauge
haproxy_k8s_sync_slots{backend="slotted",target="a",use="filled"} 2
haproxy_k8s_sync_slots{backend="slotted",target="a",use="idle"} 0
haproxy_k8s_sync_slots{backend="slotted",target="a",use="overflow"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "haproxy_k8s_sync_slots"); err != nil {
		t.Error(err)
	}
}
