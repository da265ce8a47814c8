package lb_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
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
	rep, err := m.Sync(context.Background(), []services.Selected{classService("web", 80), classService("api", 8443)})
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
	rep, err := m.Sync(context.Background(), []services.Selected{classService("web", 80)})
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
	if _, err := m.Sync(context.Background(), []services.Selected{classService("web", 80)}); err == nil || !strings.Contains(err.Error(), "HAPROXY_VIP") {
		t.Errorf("Sync with 2 VIPs for 1 target: %v, want an error naming HAPROXY_VIP", err)
	}
	if api.Writes() != 0 {
		t.Error("something was written")
	}
}
