package handler_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/trigger"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// fakeFleet follows the Services in selected; it records the calls.
type fakeFleet struct {
	selected map[string]bool
	mu       sync.Mutex
	calls    []string
}

func (f *fakeFleet) record(c string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
}

func (f *fakeFleet) Reconcile(_ context.Context, dryRun bool) (fleet.Result, error) {
	f.record("all")
	res := fleet.Result{Status: reconcile.StatusUnchanged}
	for k := range f.selected {
		res.Services = append(res.Services, fleet.ServiceResult{Service: k, Result: reconcile.Result{Status: reconcile.StatusUnchanged}})
	}
	return res, nil
}

func (f *fakeFleet) ReconcileService(_ context.Context, key string, dryRun bool) (fleet.Result, error) {
	f.record(key)
	if !f.selected[key] {
		return fleet.Result{}, &fleet.NotSelectedError{Key: key}
	}
	return fleet.Result{Status: reconcile.StatusApplied, Services: []fleet.ServiceResult{{Service: key, Result: reconcile.Result{Status: reconcile.StatusApplied}}}}, nil
}

func TestReconcileOneService(t *testing.T) {
	ff := &fakeFleet{selected: map[string]bool{"apps/web": true, "apps/api": true}}
	srv := httptest.NewServer(handler.New(handler.Config{Fleet: ff}))
	t.Cleanup(srv.Close)

	a := send(t, http.MethodPost, srv.URL+"/reconcile?service=apps/web", "", "")
	if a.status != http.StatusOK || a.body["status"] != "applied" {
		t.Fatalf("?service=apps/web: %d %v", a.status, a.body)
	}
	svcs, _ := a.body["services"].([]any)
	if len(svcs) != 1 || svcs[0].(map[string]any)["service"] != "apps/web" || svcs[0].(map[string]any)["status"] != "applied" {
		t.Fatalf("services = %v, want apps/web alone with its result's fields", a.body["services"])
	}
	if a := send(t, http.MethodPost, srv.URL+"/reconcile?service=apps/gone", "", ""); a.status != http.StatusNotFound || !strings.Contains(a.body["error"].(string), "apps/gone") {
		t.Fatalf("a Service not selected: %d %v, want 404 naming it", a.status, a.body)
	}
	for _, bad := range []string{"web", "apps/web/x", "Apps/web", "/web", "apps/"} {
		if a := send(t, http.MethodPost, srv.URL+"/reconcile?service="+bad, "", ""); a.status != http.StatusBadRequest || a.body["status"] != "error" {
			t.Errorf("?service=%s: %d %v, want 400", bad, a.status, a.body)
		}
	}
	if a := send(t, http.MethodPost, srv.URL+"/reconcile", "", ""); a.status != http.StatusOK || len(a.body["services"].([]any)) != 2 {
		t.Fatalf("every Service: %d %v", a.status, a.body)
	}
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if strings.Join(ff.calls, ",") != "apps/web,apps/gone,all" {
		t.Fatalf("calls = %v: a malformed key must reach no reconcile", ff.calls)
	}
}

// In single-Service mode ?service= may only name the Service followed.
func TestSingleServiceRefusesAnotherService(t *testing.T) {
	srv := httptest.NewServer(handler.New(handler.Config{Reconciler: nopRunner{}, Target: trigger.Target{Namespace: "ns", Service: "web"}}))
	t.Cleanup(srv.Close)
	if a := send(t, http.MethodPost, srv.URL+"/reconcile?service=ns/other", "", ""); a.status != http.StatusBadRequest || !strings.Contains(a.body["error"].(string), "ns/web") {
		t.Fatalf("another Service: %d %v, want 400 naming the followed one", a.status, a.body)
	}
	if a := send(t, http.MethodPost, srv.URL+"/reconcile?service=ns/web", "", ""); a.status != http.StatusOK {
		t.Fatalf("the followed Service: %d %v, want 200", a.status, a.body)
	}
}

type nopRunner struct{}

func (nopRunner) Reconcile(context.Context, bool) (reconcile.Result, error) {
	return reconcile.Result{Status: reconcile.StatusUnchanged, Targets: []reconcile.TargetResult{}}, nil
}
