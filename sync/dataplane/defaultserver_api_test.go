package dataplane_test

import (
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// TestDefaultServerNotCarriedIsLeftToTheReload: the defaults section's
// default-server has a keyword "add server" is not given here (sni), beside
// send-proxy-v2. New servers are then never added through the socket, where
// they would run without it: one transaction writes them parked, nothing
// goes to the socket while the reload is pending (not even for a server
// haproxy.cfg holds that is not running yet), and once the reload loaded
// them they are gated where they are (not renewed: that is an add too), and
// put in service once checked. Before, they were added through the socket
// with neither keyword.
func TestDefaultServerNotCarriedIsLeftToTheReload(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	api.AddDefaults(models.Defaults{DefaultsBase: models.DefaultsBase{Name: "unnamed_defaults_1", Mode: "tcp",
		DefaultServer: &models.DefaultServer{ServerParams: models.ServerParams{Sni: "str(ingress)", SendProxyV2: "enabled"}}}})
	hl := &healthLog{api: api, lazy: true}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	w := want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready))
	socketAdds := hl.socketAdds

	p, _ := syncOnce(t, c, w)
	if got := socketAdds(); len(got) != 0 {
		t.Fatalf("added through the socket without their default-server keywords: %v", got)
	}
	if in, all := persisted(api); in != 0 || all != 2 || api.Reloads() != 1 {
		t.Errorf("haproxy.cfg: %d servers, %d in service, %d reloads; want both written parked by one transaction", all, in, api.Reloads())
	}
	if !reflect.DeepEqual(p.Waiting, []string{"node-a", "node-b"}) {
		t.Errorf("waiting %v, want both", p.Waiting)
	}
	if p, a := syncOnce(t, c, w); p.HasChanges() || a.Writes != 0 || len(p.Loading) != 2 || len(socketAdds()) != 0 || len(hl.calls) != 0 {
		t.Errorf("before the reload: %+v, socket adds %v, gates %v; want both loading, nothing sent", p, socketAdds(), hl.calls)
	}
	hl.reload()
	if p, _ := syncOnce(t, c, w); len(p.Loading) != 0 || !slices.Equal(hl.calls, []string{"be/node-a", "be/node-b"}) || len(socketAdds()) != 0 {
		t.Errorf("after the reload: %+v, gated %v, socket adds %v; want both gated in place", p, hl.calls, socketAdds())
	}
	hl.passed = true
	if p, _ := syncOnce(t, c, w); len(p.Names(plan.Update)) != 2 || p.Pending() {
		t.Errorf("after the checks passed: %+v", p)
	}
	if in, _ := persisted(api); in != 2 || len(socketAdds()) != 0 {
		t.Errorf("%d servers written in service (want 2), socket adds %v", in, socketAdds())
	}
	for _, r := range api.Requests() {
		if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/servers") && strings.Contains(r.Query, "version=") {
			t.Errorf("%s %s?%s: an add through the API outside the transaction", r.Method, r.Path, r.Query)
		}
	}
}

// TestDefaultServerKeywordsReachEverySocketAdd: with send-proxy-v2 and
// maxconn in the backend's default-server, every add the driver sends to
// the socket carries them (plan.Change.Inherit): the add the API answered
// with a reload, the adds that then go through the socket alone (a burst),
// and a large scale-up's.
func TestDefaultServerKeywordsReachEverySocketAdd(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	be := api.Backend("be")
	be.DefaultServer = &models.DefaultServer{ServerParams: models.ServerParams{SendProxyV2: "enabled", Maxconn: ptr(int64(100))}}
	api.AddBackend(be)
	hl := &healthLog{api: api, lazy: true}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	syncOnce(t, c, want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready)))
	syncOnce(t, c, burst(dataplane.MaxRuntimeAdds+5))
	adds := 0
	for _, p := range hl.applied {
		for _, ch := range p.Changes {
			if ch.Action != plan.Add {
				continue
			}
			adds++
			if !slices.Equal(ch.Inherit, []string{"send-proxy-v2", "check-send-proxy", "maxconn 100"}) {
				t.Errorf("socket add of %s carries %q, want send-proxy-v2, check-send-proxy and maxconn 100", ch.Name, ch.Inherit)
			}
		}
	}
	if adds < dataplane.MaxRuntimeAdds+5 {
		t.Errorf("%d adds through the socket, want node-a, node-b and the burst's", adds)
	}
}
