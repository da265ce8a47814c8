package dataplane_test

// The reconciler with the Data Plane API driver: what the driver does to a
// whole reconcile (reloads per batch of deletions, calls and writes per
// reconcile at 1,000 servers).

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile/reconciletest"
)

func cluster(podIPs ...string) desired.Input {
	return desiredtest.PodCluster("ingress", "web", podIPs...)
}

func reconciler(src reconcile.Source, targets ...reconcile.Driver) *reconcile.Reconciler {
	return reconciletest.Reconciler(src, targets...)
}

func addrs(api *dataplanetest.Server) map[string]string { return api.States("be") }

// TestScaleDownParksThenDeletesInBatches: with the Data Plane API, removed
// servers leave traffic at once (maint, no reload) and are deleted three at a
// time in one transaction: one reload per batch, never more than two parked.
func TestScaleDownParksThenDeletesInBatches(t *testing.T) {
	api := dataplanetest.New(t, dataplanetest.Options{})
	rr := "roundrobin"
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "be", Mode: "tcp", AdvCheck: "tcp-check", Balance: &models.Balance{Algorithm: &rr}}})
	u, _ := url.Parse(api.URL)
	drv := dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: 2 * time.Second}, dataplane.WithDeleteBatch(3))
	ips := []string{"10.244.0.1", "10.244.0.2", "10.244.0.3", "10.244.0.4", "10.244.0.5", "10.244.0.6", "10.244.0.7"}
	src := &desiredtest.Source{In: cluster(ips...)}
	r := reconciler(src, drv)
	if _, err := r.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	base := api.Reloads()
	wantReloads := []int{0, 0, 1, 1, 1, 2} // after removing 1, 2, ... 6 servers
	for i := 1; i <= 6; i++ {
		src.In = cluster(ips[i:]...)
		res, err := r.Reconcile(context.Background(), false)
		if err != nil {
			t.Fatal(err)
		}
		if got := api.Reloads() - base; got != wantReloads[i-1] {
			t.Errorf("after removing %d: %d reloads, want %d (%+v)", i, got, wantReloads[i-1], res.Targets[0])
		}
		parked := 0
		for addr, st := range addrs(api) {
			wanted := false
			for _, ip := range ips[i:] {
				wanted = wanted || ip == addr
			}
			switch {
			case !wanted && st != "maint":
				t.Errorf("after removing %d: %s still in traffic (%s)", i, addr, st)
			case !wanted:
				parked++
			}
		}
		if parked > 2 {
			t.Errorf("after removing %d: %d parked servers, want at most 2", i, parked)
		}
	}
	if got := len(api.Servers("be")); got != 1 {
		t.Errorf("%d servers left, want 1", got)
	}
}

func podIPs(n int) []string {
	ips := make([]string, n)
	for i := range ips {
		ips[i] = fmt.Sprintf("10.244.%d.%d", i/250, i%250+1)
	}
	return ips
}

// emptyAPI is a test Data Plane API with an empty backend "be".
func emptyAPI(b *testing.B) (*dataplanetest.Server, reconcile.Driver) {
	api := dataplanetest.New(b, dataplanetest.Options{})
	rr := "roundrobin"
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "be", Mode: "tcp", AdvCheck: "tcp-check", Balance: &models.Balance{Algorithm: &rr}}})
	u, _ := url.Parse(api.URL)
	return api, dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: 10 * time.Second}, dataplane.WithDeleteBatch(10))
}

// BenchmarkDataplane1000 measures reconciles of 1 000 servers against the
// spec-validating test server (its validation included in the time), and
// reports HTTP calls, writes and reloads per reconcile.
func BenchmarkDataplane1000(b *testing.B) {
	ips := podIPs(1000)
	b.Run("noop", func(b *testing.B) {
		api, drv := emptyAPI(b)
		r := reconciler(&desiredtest.Source{In: cluster(ips...)}, drv)
		if _, err := r.Reconcile(context.Background(), false); err != nil {
			b.Fatal(err)
		}
		calls, writes := len(api.Requests()), api.Writes()
		b.ResetTimer()
		for b.Loop() {
			if res, err := r.Reconcile(context.Background(), false); err != nil || res.Status != reconcile.StatusUnchanged {
				b.Fatalf("%v %s", err, res.Status)
			}
		}
		b.ReportMetric(float64(len(api.Requests())-calls)/float64(b.N), "calls/op")
		b.ReportMetric(float64(api.Writes()-writes)/float64(b.N), "writes/op")
	})
	b.Run("one-change", func(b *testing.B) {
		api, drv := emptyAPI(b)
		src := &desiredtest.Source{In: cluster(ips...)}
		r := reconciler(src, drv)
		if _, err := r.Reconcile(context.Background(), false); err != nil {
			b.Fatal(err)
		}
		// Each op flips one endpoint between ready and terminating (drain).
		writes, reloads := api.Writes(), api.Reloads()
		b.ResetTimer()
		terminating := false
		for b.Loop() {
			terminating = !terminating
			in := cluster(ips...)
			no, yes := false, true
			if terminating {
				in.Slices[0].Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}
			}
			src.In = in
			res, err := r.Reconcile(context.Background(), false)
			if err != nil || res.Status != reconcile.StatusApplied {
				b.Fatalf("%v %s", err, res.Status)
			}
		}
		b.ReportMetric(float64(api.Writes()-writes)/float64(b.N), "writes/op")
		b.ReportMetric(float64(api.Reloads()-reloads)/float64(b.N), "reloads/op")
	})
	b.Run("initial-sync", func(b *testing.B) {
		reloads := 0
		for b.Loop() {
			b.StopTimer()
			api, drv := emptyAPI(b)
			r := reconciler(&desiredtest.Source{In: cluster(ips...)}, drv)
			r.Timeout = time.Minute
			b.StartTimer()
			if _, err := r.Reconcile(context.Background(), false); err != nil {
				b.Fatal(err)
			}
			reloads += api.Reloads()
			if n := len(api.Servers("be")); n != 1000 {
				b.Fatalf("%d servers", n)
			}
		}
		b.ReportMetric(float64(reloads)/float64(b.N), "reloads/op")
	})
}
