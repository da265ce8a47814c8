package dataplane_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// TestAnotherWritersSettingsKeepAddsOffTheSocket: one writer commits the
// backend's HTTP check of kube-proxy's health port with its servers (one
// transaction, its reload pending for reload_delay); another process (serve
// beside the one-shot run, a second replica) reads them written and not
// running yet. It must not add them through the socket: they would run the
// backend's old check, a tcp-check's "hc" sent to kube-proxy's HTTP port,
// which answers 400 and takes every Node out (history seed 219952848,
// serve-soak, Data Plane driver, HAProxy 3.4.0: health-port-spoken at the
// start). Only the writer that committed the settings knew to wait.
func TestAnotherWritersSettingsKeepAddsOffTheSocket(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api, lazy: true}
	u, _ := url.Parse(api.URL)
	first := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	second := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	w := want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready))
	w.Settings = model.Settings{Balance: "roundrobin", HTTPCheck: "/healthz"}
	for i := range w.Servers {
		w.Servers[i].Check.Port = 32001
	}
	socketAdds := hl.socketAdds
	syncOnce(t, first, w)
	if got := socketAdds(); len(got) != 0 {
		t.Fatalf("the writer of the settings added %v through the socket before they run", got)
	}
	p, _ := syncOnce(t, second, w)
	if got := socketAdds(); len(got) != 0 {
		t.Fatalf("another writer added %v through the socket while the reload that runs the backend's HTTP check is pending", got)
	}
	if len(p.Loading) != 2 {
		t.Errorf("another writer's plan: loading %v, want both servers waiting for the reload", p.Loading)
	}
	hl.reload()
	if p, _ := syncOnce(t, second, w); len(p.Loading) != 0 {
		t.Errorf("after the reload: loading %v", p.Loading)
	}
}

// TestAddsWaitForTheSettingsReload: the settings (the HTTP check of the
// health port) committed by one reconcile, the servers come in the next,
// while the settings' reload is pending: they go in a transaction or the
// API's add, never through the socket, where they would run the old check.
// Same history as above: the reconcile after the settings' added the Nodes
// through the socket.
func TestAddsWaitForTheSettingsReload(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{RuntimeFails: true}, dataplane.Auth{})
	hl := &healthLog{api: api, lazy: true}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	settings := model.Settings{Balance: "roundrobin", HTTPCheck: "/healthz"}
	none := want()
	none.Settings = settings
	if p, _ := syncOnce(t, c, none); p.Settings == nil {
		t.Fatal("the first reconcile wrote no settings")
	}
	w := want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready))
	w.Settings = settings
	for i := range w.Servers {
		w.Servers[i].Check.Port = 32001
	}
	syncOnce(t, c, w)
	if got := hl.socketAdds(); len(got) != 0 {
		t.Errorf("%v added through the socket while the settings' reload is pending", got)
	}
}

// TestALaterReloadDoesNotHoldAddsForSettingsLoaded: the settings this
// process wrote ran with their reload; a later write (another writer's
// add, which the API answers with a reload of its own) has a reload
// pending when a server haproxy.cfg holds is found not running. It is
// added through the socket: the backend runs its new settings already.
// Waiting for no reload to be in progress kept the settings' mark for good
// under an API that reloads for every write, and every server a reload
// dropped waited parked for the next one (history seed 821716727,
// serve-services, Data Plane API whose runtime writes fail: a ready pod
// out of service 2.3 s).
func TestALaterReloadDoesNotHoldAddsForSettingsLoaded(t *testing.T) {
	const delay = 2 * time.Second
	api, _ := setup(t, dataplanetest.Options{RuntimeFails: true, ReloadDelay: delay}, dataplane.Auth{})
	hl := &healthLog{api: api, lazy: true}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	settings := model.Settings{Balance: "leastconn", TCPCheck: true}
	none := want()
	none.Settings = settings
	if p, _ := syncOnce(t, c, none); p.Settings == nil {
		t.Fatal("the first reconcile wrote no settings")
	}
	time.Sleep(delay + 300*time.Millisecond) // the settings' reload ran
	hl.reload()
	w := want(srv("node-a", "127.0.1.1", model.Ready))
	w.Settings = settings
	other := dataplane.New(u, dataplane.Auth{}, http.DefaultClient) // no socket: the API adds it, and reloads
	syncOnce(t, other, w)
	if n := len(api.Servers("be")); n != 1 {
		t.Fatalf("haproxy.cfg holds %d servers, want node-a", n)
	}
	p, _ := syncOnce(t, c, w)
	if got := hl.socketAdds(); len(got) != 1 || got[0] != "node-a" {
		t.Errorf("socket adds %v (loading %v): node-a waited for a reload that is not its settings'", got, p.Loading)
	}
}
