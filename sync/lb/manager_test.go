package lb_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/lb"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

func clientOf(t *testing.T, api *dataplanetest.Server) *dataplane.Client {
	u, err := url.Parse(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	return dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: 5 * time.Second})
}

// TestManagerTwoTargets: each target's frontend binds that target's VIP; a
// Service is ready only when its frontends exist on both, and a failure on
// one target names it and holds back no other Service.
func TestManagerTwoTargets(t *testing.T) {
	a := dataplanetest.New(t, dataplanetest.Options{ReloadDelay: time.Millisecond})
	b := dataplanetest.New(t, dataplanetest.Options{ReloadDelay: time.Millisecond})
	// On b, an operator's frontend holds api's address:port.
	port := int64(8443)
	b.AddFrontend(models.Frontend{FrontendBase: models.FrontendBase{Name: "fe_tls"}}, models.Bind{Name: "b", Address: "127.0.0.72", Port: &port})
	m := &lb.Manager{Targets: []lb.Target{clientOf(t, a), clientOf(t, b)}, VIPs: []string{"127.0.0.71", "127.0.0.72"}, Cluster: "c1"}
	rep, err := m.Sync(context.Background(), []services.Selected{classService("web", 80), classService("api", 8443)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Ready["default/web"] || rep.Ready["default/api"] {
		t.Errorf("ready %v, want web only", rep.Ready)
	}
	if msg := rep.Failed["default/api"]; !strings.HasPrefix(msg, b.URL) || !strings.Contains(msg, "bound by frontend fe_tls") {
		t.Errorf("api failed %q, want it to name target %s and frontend fe_tls", msg, b.URL)
	}
	for i, api := range []*dataplanetest.Server{a, b} {
		fe, binds, ok := api.Frontend("fe_k8s_c1_default_web_80")
		if !ok || len(binds) != 1 || binds[0].Address != m.VIPs[i] || fe.Description != lb.Mark("c1", "default/web") {
			t.Errorf("target %d: web's frontend %+v %+v, want bound on %s and marked", i, fe, binds, m.VIPs[i])
		}
	}
	if _, _, ok := a.Frontend("fe_k8s_c1_default_api_8443"); !ok {
		t.Error("api's frontend is missing on the target where its address is free")
	}
}

// TestManagerLostRace: another writer moves the version on between the read
// and the transaction: the pass reads again and writes once, leaving no
// transaction behind.
func TestManagerLostRace(t *testing.T) {
	api := dataplanetest.New(t, dataplanetest.Options{ReloadDelay: time.Millisecond})
	var bumped atomic.Bool
	api.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/transactions") && bumped.CompareAndSwap(false, true) {
			api.BumpVersion()
		}
		return false
	})
	m := &lb.Manager{Targets: []lb.Target{clientOf(t, api)}, VIPs: []string{"127.0.0.71"}}
	rep, err := m.Sync(context.Background(), []services.Selected{classService("web", 80)}, nil)
	if err != nil || !rep.Ready["default/web"] || len(rep.Failed) != 0 {
		t.Fatalf("Sync: %+v %v, want web ready", rep, err)
	}
	if !bumped.Load() || api.Reloads() != 1 || api.OpenTransactions() != 0 {
		t.Errorf("bumped %v, reloads %d (want 1), transactions left %d", bumped.Load(), api.Reloads(), api.OpenTransactions())
	}
}

// TestManagerRefusesVIPCount: HAPROXY_VIP must give one address, or one
// per target.
func TestManagerRefusesVIPCount(t *testing.T) {
	api := dataplanetest.New(t, dataplanetest.Options{})
	m := &lb.Manager{Targets: []lb.Target{clientOf(t, api)}, VIPs: []string{"127.0.0.71", "127.0.0.72"}}
	if _, err := m.Sync(context.Background(), []services.Selected{classService("web", 80)}, nil); err == nil || !strings.Contains(err.Error(), "HAPROXY_VIP") {
		t.Errorf("Sync with 2 VIPs for 1 target: %v, want an error naming HAPROXY_VIP", err)
	}
	if api.Writes() != 0 {
		t.Error("something was written")
	}
}

// TestTwoClassesOnOneHAProxy (issue 54 row 3): two installs of two
// classes share one HAProxy (one Data Plane API), each with its Service,
// and sync at once, pass after pass: neither takes the other's sections
// for its own, so neither drains nor removes them. Before, the mark did
// not carry the class: each removed the other's (unwanted, drained) at
// every pass.
func TestTwoClassesOnOneHAProxy(t *testing.T) {
	api := dataplanetest.New(t, dataplanetest.Options{ReloadDelay: time.Millisecond})
	a := &lb.Manager{Targets: []lb.Target{clientOf(t, api)}, VIPs: []string{"127.0.0.71"}, Class: "example.org/a"}
	b := &lb.Manager{Targets: []lb.Target{clientOf(t, api)}, VIPs: []string{"127.0.0.72"}, Class: "example.org/b"}
	classes := map[string]string{"default/web": "example.org/a", "default/api": "example.org/b"}
	pass := func(m *lb.Manager, s services.Selected) (services.FrontendReport, error) {
		// A lost race against the other install is read again (attempts);
		// one that still loses is retried by the next pass, as the fleet's.
		return m.Sync(context.Background(), []services.Selected{s}, classes)
	}
	for n := range 4 {
		var wg sync.WaitGroup
		var ra, rb services.FrontendReport
		wg.Go(func() { ra, _ = pass(a, classService("web", 80)) })
		wg.Go(func() { rb, _ = pass(b, classService("api", 8080)) })
		wg.Wait()
		for _, r := range []services.FrontendReport{ra, rb} {
			if len(r.Draining) > 0 || len(r.Removed) > 0 {
				t.Fatalf("pass %d: draining %v, removed %v: an install took the other's sections for its own", n, r.Draining, r.Removed)
			}
		}
	}
	for _, c := range []struct {
		m                 *lb.Manager
		frontend, backend string
		key               string
	}{{a, "fe_k8s_default_web_80", "be_k8s_default_web_80", "default/web"}, {b, "fe_k8s_default_api_8080", "be_k8s_default_api_8080", "default/api"}} {
		mark := lb.Owner{Class: c.m.Class}.Mark(c.key)
		if fe, _, ok := api.Frontend(c.frontend); !ok || fe.Description != mark {
			t.Errorf("%s: %+v, want it there, marked %q", c.frontend, fe, mark)
		}
		if be := api.Backend(c.backend); be.Description != mark {
			t.Errorf("%s: %+v, want it there, marked %q", c.backend, be, mark)
		}
	}
	// Each install's Service gone: each removes its own sections alone.
	if rep, err := a.Sync(context.Background(), nil, classes); err != nil || len(rep.Removed) != 1 || rep.Removed[0] != "fe_k8s_default_web_80" {
		t.Fatalf("a without its Service: %+v %v, want its own frontend removed and no other", rep, err)
	}
	if _, _, ok := api.Frontend("fe_k8s_default_api_8080"); !ok {
		t.Fatal("b's frontend removed by a")
	}
}

// TestUpgradeAdoptsLegacyMarks (issue 54 row 3): sections marked before
// marks carried the class are neither orphaned nor deleted by an upgrade:
// the install that follows their Service adopts them (its frontend's mark
// is rewritten with the class), another install whose class their Service
// does not have leaves them alone, and the sections of a Service that went
// meanwhile are drained and removed as before.
func TestUpgradeAdoptsLegacyMarks(t *testing.T) {
	api := dataplanetest.New(t, dataplanetest.Options{ReloadDelay: time.Millisecond})
	old := &lb.Manager{Targets: []lb.Target{clientOf(t, api)}, VIPs: []string{"127.0.0.71"}}
	if _, err := old.Sync(context.Background(), []services.Selected{classService("web", 80), classService("gone", 81)}, nil); err != nil {
		t.Fatal(err)
	}
	if fe, _, _ := api.Frontend("fe_k8s_default_web_80"); fe.Description != lb.Mark("", "default/web") {
		t.Fatalf("the old install's mark %q", fe.Description)
	}
	classes := map[string]string{"default/web": "example.org/a"}
	other := &lb.Manager{Targets: []lb.Target{clientOf(t, api)}, VIPs: []string{"127.0.0.72"}, Class: "example.org/b"}
	if rep, err := other.Sync(context.Background(), nil, classes); err != nil || slices.Contains(rep.Removed, "fe_k8s_default_web_80") || slices.Contains(rep.Draining, "be_k8s_default_web_80") {
		t.Fatalf("another class's install: %+v %v, want default/web's sections left alone", rep, err)
	}
	upgraded := &lb.Manager{Targets: []lb.Target{clientOf(t, api)}, VIPs: []string{"127.0.0.71"}, Class: "example.org/a"}
	rep, err := upgraded.Sync(context.Background(), []services.Selected{classService("web", 80)}, classes)
	if err != nil || !rep.Ready["default/web"] || len(rep.Failed) != 0 {
		t.Fatalf("upgraded: %+v %v, want default/web's sections adopted", rep, err)
	}
	// Adopted as it is: rewritten for the class alone, a replica of the
	// old release still running would write it back, each reloading
	// HAProxy at every pass.
	writes := api.Writes()
	for range 2 {
		if rep, err := upgraded.Sync(context.Background(), []services.Selected{classService("web", 80)}, classes); err != nil || !rep.Ready["default/web"] {
			t.Fatalf("upgraded, again: %+v %v", rep, err)
		}
	}
	if fe, _, ok := api.Frontend("fe_k8s_default_web_80"); !ok || fe.Description != lb.Mark("", "default/web") || api.Writes() != writes {
		t.Fatalf("adopted frontend %+v, %d writes: want it kept with its mark, nothing written", fe, api.Writes()-writes)
	}
	if _, _, ok := api.Frontend("fe_k8s_default_gone_81"); ok {
		t.Fatal("the sections of a Service gone before the upgrade are left behind")
	}
}

// TestFailedRemovalStaysDraining: a drained backend whose removal the Data
// Plane API refuses (503 on every try) is still there, and the report says
// so (Draining), so that its follow-up comes back to remove it; before, it
// was in neither Removed nor Draining and the fleet took it for gone.
func TestFailedRemovalStaysDraining(t *testing.T) {
	api := dataplanetest.New(t, dataplanetest.Options{ReloadDelay: time.Millisecond})
	m := &lb.Manager{Targets: []lb.Target{clientOf(t, api)}, VIPs: []string{"127.0.0.71"}}
	if _, err := m.Sync(context.Background(), []services.Selected{classService("web", 80)}, nil); err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int32
	api.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/transactions/") {
			refused.Add(1)
			http.Error(w, `{"code":503,"message":"try again"}`, http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	rep, err := m.Sync(context.Background(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, be := services.ClassNames("", "default", "web", 80)
	if refused.Load() == 0 || len(rep.Removed) != 0 || !slices.Contains(rep.Draining, be) {
		t.Fatalf("removal refused %d times: report %+v, want %s still draining and nothing removed", refused.Load(), rep, be)
	}
	api.Intercept(nil)
	if rep, err := m.Sync(context.Background(), nil, nil); err != nil || len(rep.Removed) == 0 || len(rep.Draining) != 0 {
		t.Fatalf("the next pass: %+v %v, want the sections removed", rep, err)
	}
}

// TestAHungTargetHoldsBackNoOther: one HAProxy of the pair accepts and never
// answers; the pass writes the other's frontends and returns once the hung
// one straggled past Straggle, its error a temporary StragglingError that
// names it, no Service failed for it (history seed 534110162, class, 3.0:
// the pass waited for the hung target 20 s, and so did every Service's
// change on the target that answered).
func TestAHungTargetHoldsBackNoOther(t *testing.T) {
	a := dataplanetest.New(t, dataplanetest.Options{ReloadDelay: time.Millisecond})
	b := dataplanetest.New(t, dataplanetest.Options{ReloadDelay: time.Millisecond})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	b.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return true
	})
	m := &lb.Manager{Targets: []lb.Target{clientOf(t, a), clientOf(t, b)}, VIPs: []string{"127.0.0.71", "127.0.0.72"}, Straggle: 50 * time.Millisecond}
	for _, read := range []string{"sync", "holders"} {
		var err error
		switch read {
		case "sync":
			var rep services.FrontendReport
			rep, err = m.Sync(context.Background(), []services.Selected{classService("web", 80)}, nil)
			if len(rep.Failed) != 0 || rep.Ready["default/web"] || !slices.Equal(rep.Behind, []string{b.URL}) {
				t.Errorf("report %+v: want no Service failed, web not ready (its frontend is not known on b), b behind", rep)
			}
			if _, _, ok := a.Frontend("fe_k8s_default_web_80"); !ok {
				t.Error("the target that answers did not get web's frontend")
			}
		case "holders":
			var held map[string]string
			held, err = m.Holders(context.Background())
			if held[services.PortResource(80)] != "default/web" {
				t.Errorf("holders %v: want the answering target's", held)
			}
		}
		var s *lb.StragglingError
		if !errors.As(err, &s) || failure.Of(err) != failure.Temporary || !strings.Contains(err.Error(), b.URL) {
			t.Errorf("%s: error %v (%s), want a temporary StragglingError naming %s", read, err, failure.Of(err), b.URL)
		}
	}
}

// TestSyncTargetTouchesOnlyThatTarget: a pass over one target of a pair
// (a left Service's sections removed where its servers were deleted)
// writes there alone, with that target's VIP; a target it has not is no
// error and writes nothing.
func TestSyncTargetTouchesOnlyThatTarget(t *testing.T) {
	a := dataplanetest.New(t, dataplanetest.Options{ReloadDelay: time.Millisecond})
	b := dataplanetest.New(t, dataplanetest.Options{ReloadDelay: time.Millisecond})
	ca, cb := clientOf(t, a), clientOf(t, b)
	m := &lb.Manager{Targets: []lb.Target{ca, cb}, VIPs: []string{"127.0.0.71", "127.0.0.72"}, Cluster: "c1"}
	want := []services.Selected{classService("web", 80)}
	if rep, err := m.SyncTarget(context.Background(), "no-such-target", want, nil); err != nil || len(rep.Created) != 0 {
		t.Fatalf("%+v %v: want nothing done", rep, err)
	}
	if _, err := m.SyncTarget(context.Background(), cb.Name(), want, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := a.Frontend("fe_k8s_c1_default_web_80"); ok {
		t.Error("web's frontend written on a: want the pass over b alone")
	}
	if _, binds, ok := b.Frontend("fe_k8s_c1_default_web_80"); !ok || len(binds) != 1 || binds[0].Address != "127.0.0.72" {
		t.Errorf("web's frontend on b: %v %+v, want bound on b's VIP 127.0.0.72", ok, binds)
	}
}

// TestRemovalFreesTheAddressInTheSamePass (history seed 682573831): web
// left, its drained frontend bound VIP:80; api claims port 80: the pass
// that removes web's sections plans again and gives api its frontend,
// rather than refuse it until its own retry (2 s there, its clients
// refused meanwhile).
func TestRemovalFreesTheAddressInTheSamePass(t *testing.T) {
	api := dataplanetest.New(t, dataplanetest.Options{ReloadDelay: time.Millisecond})
	m := &lb.Manager{Targets: []lb.Target{clientOf(t, api)}, VIPs: []string{"127.0.0.71"}, Cluster: "c1"}
	if _, err := m.Sync(context.Background(), []services.Selected{classService("web", 80)}, nil); err != nil {
		t.Fatal(err)
	}
	rep, err := m.Sync(context.Background(), []services.Selected{classService("api", 80)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Removed) == 0 || !rep.Ready["default/api"] || rep.Failed["default/api"] != "" {
		t.Fatalf("report %+v: want web's sections removed and api's frontend made in one pass", rep)
	}
	if _, binds, ok := api.Frontend("fe_k8s_c1_default_api_80"); !ok || len(binds) != 1 || binds[0].Address != "127.0.0.71" {
		t.Errorf("api's frontend %v %+v: want it bound on the VIP", ok, binds)
	}
}
