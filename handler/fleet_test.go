package handler_test

import (
	"context"
	"fmt"
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

// keysFleet is a fakeFleet that reconciles several Services together.
type keysFleet struct{ fakeFleet }

func (f *keysFleet) ReconcileServices(_ context.Context, keys []string) (fleet.Result, error) {
	f.record("keys:" + strings.Join(keys, "+"))
	res := fleet.Result{Status: reconcile.StatusApplied}
	for _, k := range keys {
		res.Services = append(res.Services, fleet.ServiceResult{Service: k, Result: reconcile.Result{Status: reconcile.StatusApplied}})
	}
	return res, nil
}

// ceBinary is a binary-mode ApiServerSource event about the Service ns/name.
func ceBinary(ns, name string) []string {
	return []string{"Ce-Specversion", "1.0", "Ce-Id", "e-" + name, "Ce-Source", "https://10.96.0.1:443",
		"Ce-Type", "dev.knative.apiserver.ref.update", "Ce-Kind", "Service", "Ce-Namespace", ns, "Ce-Name", name}
}

// In many-Services mode a CloudEvent about some Services reconciles those
// alone; anything else (no body, a Service not named for sure, too many
// Services) every Service; a malformed event nothing.
func TestCloudEventReconcilesItsServicesAlone(t *testing.T) {
	kf := &keysFleet{fakeFleet{selected: map[string]bool{"apps/web": true, "apps/api": true}}}
	srv := httptest.NewServer(handler.New(handler.Config{Fleet: kf}))
	t.Cleanup(srv.Close)

	a := send(t, http.MethodPost, srv.URL+"/reconcile", "application/json", "{}", ceBinary("apps", "web")...)
	svcs, _ := a.body["services"].([]any)
	if a.status != http.StatusOK || len(svcs) != 1 || svcs[0].(map[string]any)["service"] != "apps/web" {
		t.Fatalf("an event about apps/web: %d %v, want apps/web's result alone", a.status, a.body)
	}
	var batch []string
	for i := range 3 {
		batch = append(batch, fmt.Sprintf(`{"specversion":"1.0","id":"b%d","source":"s","type":"dev.knative.apiserver.ref.update","kind":"Service","namespace":"apps","name":"s%d"}`, i, i%2))
	}
	if a := send(t, http.MethodPost, srv.URL+"/", "application/cloudevents-batch+json", "["+strings.Join(batch, ",")+"]"); a.status != http.StatusOK {
		t.Fatalf("a batch: %d %v", a.status, a.body)
	}
	batch = batch[:0]
	for i := range handler.MaxEventKeys + 1 {
		batch = append(batch, fmt.Sprintf(`{"specversion":"1.0","id":"b%d","source":"s","type":"dev.knative.apiserver.ref.update","kind":"Service","namespace":"apps","name":"s%d"}`, i, i))
	}
	if a := send(t, http.MethodPost, srv.URL+"/", "application/cloudevents-batch+json", "["+strings.Join(batch, ",")+"]"); a.status != http.StatusOK {
		t.Fatalf("a batch over the bound: %d %v", a.status, a.body)
	}
	ping := []string{"Ce-Specversion", "1.0", "Ce-Id", "p1", "Ce-Source", "ping", "Ce-Type", "dev.knative.sources.ping"}
	if a := send(t, http.MethodPost, srv.URL+"/reconcile", "", "", ping...); a.status != http.StatusOK {
		t.Fatalf("a ping: %d %v", a.status, a.body)
	}
	if a := send(t, http.MethodPost, srv.URL+"/reconcile", "application/cloudevents+json", `{"specversion":"1.0"}`); a.status != http.StatusBadRequest {
		t.Fatalf("a malformed event: %d %v, want 400", a.status, a.body)
	}
	if a := send(t, http.MethodPost, srv.URL+"/reconcile?dryRun=true", "application/json", "{}", ceBinary("apps", "web")...); a.status != http.StatusOK {
		t.Fatalf("a dry run: %d %v", a.status, a.body)
	}
	kf.mu.Lock()
	defer kf.mu.Unlock()
	if got := strings.Join(kf.calls, ","); got != "keys:apps/web,keys:apps/s0+apps/s1,all,all,all" {
		t.Fatalf("calls = %s", got)
	}
}
