package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"
	"github.com/sethvargo/go-retry"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

func cluster(podIPs ...string) desired.Input {
	return desiredtest.PodCluster("ingress", "web", podIPs...)
}

func newAPI(t *testing.T) (*dataplanetest.Server, reconcile.Driver) {
	t.Helper()
	api := dataplanetest.New(t, dataplanetest.Options{})
	rr := "roundrobin"
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "be", Mode: "tcp", AdvCheck: "tcp-check", Balance: &models.Balance{Algorithm: &rr}}})
	u, _ := url.Parse(api.URL)
	return api, dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: 2 * time.Second})
}

func reconciler(src reconcile.Source, targets ...reconcile.Driver) *reconcile.Reconciler {
	return &reconcile.Reconciler{
		Source: src,
		Options: desired.Options{
			Mode: desired.PodMode, Backends: []desired.PortBackend{{Backend: "be"}},
			Settings: model.Settings{Balance: "roundrobin", TCPCheck: true},
			Check:    model.Check{Inter: 5 * time.Second, Rise: 2, Fall: 2},
		},
		Targets: targets,
		Timeout: 5 * time.Second,
		Backoff: func() retry.Backoff { return retry.NewConstant(5 * time.Millisecond) },
	}
}

func addrs(api *dataplanetest.Server) map[string]string { return api.States("be") }

func TestSyncFirstRoundThenIdempotent(t *testing.T) {
	api, drv := newAPI(t)
	r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1", "10.244.0.2")}, drv)
	res, err := r.Reconcile(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != reconcile.StatusApplied || res.Desired != 2 || len(res.Targets) != 1 {
		t.Fatalf("result %+v", res)
	}
	tr := res.Targets[0]
	if strings.Join(tr.Add, ",") != "10-244-0-1,10-244-0-2" || tr.Attempts != 1 || tr.Target != api.URL || tr.Backend != "be" || tr.Error != "" {
		t.Errorf("target result %+v", tr)
	}

	version, writes := api.Version(), api.Writes()
	res, err = r.Reconcile(context.Background(), false)
	if err != nil || res.Status != reconcile.StatusUnchanged {
		t.Fatalf("second: %v %+v", err, res)
	}
	if api.Version() != version || api.Writes() != writes {
		t.Errorf("second reconcile wrote: version %d -> %d, writes %d -> %d", version, api.Version(), writes, api.Writes())
	}
}

func TestConflictIsRetriedFromAFreshRead(t *testing.T) {
	api, drv := newAPI(t)
	src := &desiredtest.Source{In: cluster("10.244.0.1")}
	r := reconciler(src, drv)
	if _, err := r.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	// Another writer moves the version just before our first write, twice.
	var bumps atomic.Int32
	api.Intercept(func(w http.ResponseWriter, req *http.Request) bool {
		if req.Method != http.MethodGet && bumps.Add(1) <= 2 {
			api.BumpVersion()
		}
		return false
	})
	src.In = cluster("10.244.0.1", "10.244.0.3")
	res, err := r.Reconcile(context.Background(), false)
	if err != nil {
		t.Fatalf("%v %+v", err, res)
	}
	if res.Targets[0].Attempts != 3 {
		t.Errorf("attempts = %d, want 3", res.Targets[0].Attempts)
	}
	if got := addrs(api); len(got) != 2 || got["10.244.0.3"] != "ready" {
		t.Errorf("servers = %v", got)
	}
	if api.OpenTransactions() != 0 {
		t.Errorf("%d transactions left", api.OpenTransactions())
	}
}

func TestKubernetesFailureChangesNothing(t *testing.T) {
	api, drv := newAPI(t)
	src := &desiredtest.Source{In: cluster("10.244.0.1")}
	r := reconciler(src, drv)
	if _, err := r.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	n := api.Writes()
	src.Err = errors.New("connection refused")
	res, err := r.Reconcile(context.Background(), false)
	if err == nil || res.Status != reconcile.StatusError || !strings.Contains(res.Error, "connection refused") {
		t.Fatalf("err %v result %+v", err, res)
	}
	if api.Writes() != n {
		t.Error("HAProxy was written after a failed Kubernetes read")
	}
	if got := addrs(api); got["10.244.0.1"] != "ready" {
		t.Errorf("servers = %v", got)
	}
}

func TestZeroEndpointsParksAndDeletesNothing(t *testing.T) {
	api, drv := newAPI(t)
	src := &desiredtest.Source{In: cluster("10.244.0.1", "10.244.0.2")}
	r := reconciler(src, drv)
	if _, err := r.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	reloads := api.Reloads()
	src.In = cluster()
	res, err := r.Reconcile(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if got := addrs(api); len(got) != 2 || got["10.244.0.1"] != "maint" || got["10.244.0.2"] != "maint" {
		t.Errorf("servers = %v", got)
	}
	if len(res.Targets[0].Delete) != 0 || len(res.Targets[0].Maint) != 2 || api.Reloads() != reloads {
		t.Errorf("result %+v, reloads +%d", res.Targets[0], api.Reloads()-reloads)
	}
}

func TestDryRunAppliesNothing(t *testing.T) {
	api, drv := newAPI(t)
	r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1")}, drv)
	res, err := r.Reconcile(context.Background(), true)
	if err != nil || res.Status != reconcile.StatusPlanned || len(res.Targets[0].Add) != 1 {
		t.Fatalf("%v %+v", err, res)
	}
	if api.Writes() != 0 || len(api.Servers("be")) != 0 {
		t.Error("dry run wrote")
	}
}

func TestOneTargetDownTheOtherConverges(t *testing.T) {
	api, good := newAPI(t)
	down, _ := url.Parse("http://127.0.0.1:1")
	bad := dataplane.New(down, dataplane.Auth{}, &http.Client{Timeout: time.Second})
	r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1")}, bad, good)
	r.Timeout = 30 * time.Second // the shipped RECONCILE_TIMEOUT: a retried refusal would hold the result that long
	res, err := r.Reconcile(context.Background(), false)
	if !errors.Is(err, reconcile.ErrTargets) || res.Status != reconcile.StatusError {
		t.Fatalf("err %v status %s", err, res.Status)
	}
	if len(res.Targets) != 2 || res.Targets[0].Error == "" || res.Targets[1].Error != "" {
		t.Fatalf("targets %+v", res.Targets)
	}
	// Nothing listens: the attempt fails at once and is not retried within
	// this reconcile (the follow-up tries again), so the result of the
	// target that answers is not held back.
	if res.Targets[0].Attempts != 1 || !strings.Contains(res.Targets[0].Error, "connection refused") {
		t.Errorf("down target: %d attempts, error %q; want 1, connection refused", res.Targets[0].Attempts, res.Targets[0].Error)
	}
	if got := addrs(api); got["10.244.0.1"] != "ready" {
		t.Errorf("healthy target not converged: %v", got)
	}
}

func TestPermanentErrorIsNotRetried(t *testing.T) {
	api, drv := newAPI(t)
	api.SetCheck(func(dataplanetest.Config) error { return errors.New("bad config") })
	r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1")}, drv)
	res, err := r.Reconcile(context.Background(), false)
	if err == nil || res.Targets[0].Attempts != 1 || !strings.Contains(res.Targets[0].Error, "bad config") {
		t.Fatalf("err %v %+v", err, res.Targets)
	}
	if api.OpenTransactions() != 0 {
		t.Errorf("%d transactions left", api.OpenTransactions())
	}
}

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

// TestDeletionGuardParksAndReports: every server replaced at once (e.g. a
// wrong selector): the old ones are parked, not deleted, and the result says
// so; once the replacements are in, the next reconcile deletes them.
func TestDeletionGuardParksAndReports(t *testing.T) {
	api, drv := newAPI(t)
	src := &desiredtest.Source{In: cluster("10.244.0.1", "10.244.0.2")}
	r := reconciler(src, drv)
	r.GuardPercent = 100
	if _, err := r.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	src.In = cluster("10.244.9.1")
	res, err := r.Reconcile(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	tr := res.Targets[0]
	if len(tr.Guarded) != 2 || len(tr.Delete) != 0 || len(tr.Maint) != 2 {
		t.Errorf("result %+v", tr)
	}
	if got := addrs(api); len(got) != 3 || got["10.244.0.1"] != "maint" || got["10.244.0.2"] != "maint" || got["10.244.9.1"] != "ready" {
		t.Errorf("servers = %v", got)
	}
	res, err = r.Reconcile(context.Background(), false)
	if err != nil || len(res.Targets[0].Guarded) != 0 || len(res.Targets[0].Delete) != 2 {
		t.Fatalf("%v %+v", err, res.Targets[0])
	}
	if got := addrs(api); len(got) != 1 {
		t.Errorf("servers = %v", got)
	}
}

func TestRoundRobinPast4095ServersIsWarned(t *testing.T) {
	for _, n := range []int{4095, 4096} {
		ips := make([]string, n)
		for i := range ips {
			ips[i] = fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)
		}
		var logs strings.Builder
		r := reconciler(&desiredtest.Source{In: cluster(ips...)}, &memDriver{servers: map[string]model.Server{}})
		r.MaxServers = 10000
		r.Log = slog.New(slog.NewJSONHandler(&logs, nil))
		if _, err := r.Reconcile(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		if warned := strings.Contains(logs.String(), "at most 4095"); warned != (n > 4095) {
			t.Errorf("%d servers: warned %v", n, warned)
		}
	}
}
