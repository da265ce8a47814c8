package dataplane_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
)

func proxiesClient(t *testing.T) (*dataplanetest.Server, *dataplane.Client) {
	api := dataplanetest.New(t, dataplanetest.Options{ReloadDelay: time.Millisecond})
	u, _ := url.Parse(api.URL)
	return api, dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: 5 * time.Second})
}

var webPair = dataplane.Pair{Frontend: "fe_k8s_default_web_80", Backend: "be_k8s_default_web_80",
	Description: "haproxy-k8s-sync service=default/web", Address: "127.0.0.81", Port: 80}

// TestWriteProxiesCreatesInOneTransaction: a backend with the recommended
// lines, a frontend and its bind, one commit; read back whole.
func TestWriteProxiesCreatesInOneTransaction(t *testing.T) {
	api, c := proxiesClient(t)
	ctx := context.Background()
	held, err := c.ReadProxies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next, err := c.WriteProxies(ctx, held.Version, dataplane.ProxyWrite{CreateBackends: []dataplane.Pair{webPair}, CreateFrontends: []dataplane.Pair{webPair}})
	if err != nil {
		t.Fatal(err)
	}
	if next != held.Version+1 || api.Version() != next || api.Reloads() != 1 || api.OpenTransactions() != 0 {
		t.Errorf("version %d (API %d, was %d), reloads %d, transactions left %d; want one commit", next, api.Version(), held.Version, api.Reloads(), api.OpenTransactions())
	}
	be := api.Backend(webPair.Backend)
	if be.Mode != "tcp" || be.AdvCheck != "tcp-check" || *be.Balance.Algorithm != "roundrobin" || *be.Retries != 3 ||
		*be.Redispatch.Enabled != "enabled" || *be.Redispatch.Interval != 1 || be.DefaultServer != nil || be.Description != webPair.Description {
		t.Errorf("backend %+v: want the recommended lines and the mark", be.BackendBase)
	}
	got, err := c.ReadProxies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Frontends) != 1 || len(got.Backends) != 1 {
		t.Fatalf("read back %+v", got)
	}
	fe := got.Frontends[0]
	if fe.Name != webPair.Frontend || fe.Description != webPair.Description || fe.DefaultBackend != webPair.Backend ||
		len(fe.Binds) != 1 || fe.Binds[0] != (dataplane.Bind{Name: "vip", Address: "127.0.0.81", Port: 80}) {
		t.Errorf("frontend read back %+v", fe)
	}
	if got.Backends[0].Name != webPair.Backend || got.Backends[0].Description != webPair.Description || got.Version != next {
		t.Errorf("backend read back %+v at version %d", got.Backends[0], got.Version)
	}
}

// TestWriteProxiesRebinds: an owned frontend bound elsewhere, with a second
// bind, is bound on the pair's address:port alone; what else it holds stays.
func TestWriteProxiesRebinds(t *testing.T) {
	api, c := proxiesClient(t)
	ctx := context.Background()
	p81, p90 := int64(81), int64(90)
	maxconn := int64(500)
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: webPair.Backend, Description: webPair.Description}})
	api.AddFrontend(models.Frontend{FrontendBase: models.FrontendBase{Name: webPair.Frontend, Description: webPair.Description, DefaultBackend: webPair.Backend, Maxconn: &maxconn}},
		models.Bind{Name: "vip", Address: "127.0.0.82", Port: &p81}, models.Bind{Name: "extra", Address: "127.0.0.82", Port: &p90})
	held, err := c.ReadProxies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteProxies(ctx, held.Version, dataplane.ProxyWrite{UpdateFrontends: []dataplane.Pair{webPair}}); err != nil {
		t.Fatal(err)
	}
	fe, binds, _ := api.Frontend(webPair.Frontend)
	if len(binds) != 1 || binds[0].Name != "vip" || binds[0].Address != "127.0.0.81" || *binds[0].Port != 80 {
		t.Errorf("binds %+v, want vip on 127.0.0.81:80 alone", binds)
	}
	if fe.Maxconn == nil || *fe.Maxconn != 500 {
		t.Errorf("the frontend's maxconn was lost: %+v", fe.FrontendBase)
	}
	if api.Reloads() != 1 {
		t.Errorf("reloads %d, want 1", api.Reloads())
	}
}

// TestWriteProxiesFailures: a lost race is temporary (re-read, re-plan); a
// refused write (the name exists) is permanent; neither leaves a
// transaction behind nor changes anything.
func TestWriteProxiesFailures(t *testing.T) {
	api, c := proxiesClient(t)
	ctx := context.Background()
	held, _ := c.ReadProxies(ctx)
	create := dataplane.ProxyWrite{CreateBackends: []dataplane.Pair{webPair}, CreateFrontends: []dataplane.Pair{webPair}}
	api.BumpVersion()
	if _, err := c.WriteProxies(ctx, held.Version, create); failure.Of(err) != failure.Temporary {
		t.Errorf("stale version: %v (%s), want temporary", err, failure.Of(err))
	}
	api.AddFrontend(models.Frontend{FrontendBase: models.FrontendBase{Name: webPair.Frontend}})
	v := api.Version()
	if _, err := c.WriteProxies(ctx, v, create); err == nil || failure.Of(err) != failure.Permanent {
		t.Errorf("existing name: %v (%s), want permanent", err, failure.Of(err))
	}
	if api.OpenTransactions() != 0 || api.Version() != v || api.Backend(webPair.Backend).Name != "" || api.Reloads() != 0 {
		t.Errorf("after failures: %d transactions, version %d (was %d), backend %q, reloads %d; want nothing changed",
			api.OpenTransactions(), api.Version(), v, api.Backend(webPair.Backend).Name, api.Reloads())
	}
}
