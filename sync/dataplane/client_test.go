package dataplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	stdsync "sync"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

var chk = model.Check{Inter: 2 * time.Second, Rise: 2, Fall: 3}

func want(servers ...model.Server) model.Backend {
	return model.Backend{Name: "be", Settings: model.Settings{Balance: "roundrobin", TCPCheck: true}, Servers: servers}
}

func srv(name, addr string, st model.State) model.Server {
	return model.Server{Name: name, Address: addr, Port: 30080, Weight: 1, State: st, Check: chk}
}

func setup(t *testing.T, opts dataplanetest.Options, auth dataplane.Auth) (*dataplanetest.Server, *dataplane.Client) {
	t.Helper()
	api := dataplanetest.New(t, opts)
	rr := "roundrobin"
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{
		Name: "be", Mode: "tcp", From: "unnamed_defaults_1", AdvCheck: "tcp-check",
		Balance: &models.Balance{Algorithm: &rr},
	}})
	u, _ := url.Parse(api.URL)
	hc, err := dataplane.NewHTTPClient("", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return api, dataplane.New(u, auth, hc)
}

// syncOnce reads, plans and applies once.
func syncOnce(t *testing.T, c *dataplane.Client, w model.Backend) (plan.Plan, plan.Applied) {
	t.Helper()
	ctx := context.Background()
	cur, err := c.Read(ctx, "be")
	if err != nil {
		t.Fatal(err)
	}
	p := plan.CalculateWith(cur, w, c.Policy())
	a, err := c.Apply(ctx, p)
	if err != nil {
		t.Fatalf("apply %+v: %v", p, err)
	}
	return p, a
}

func TestFirstSyncThenIdempotent(t *testing.T) {
	api, c := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	w := want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Drain), srv("node-c", "127.0.1.3", model.Maint))
	_, a := syncOnce(t, c, w)
	if !a.Reload || api.Reloads() != 1 {
		t.Errorf("first sync: reload=%v reloads=%d, want one reload (a transaction)", a.Reload, api.Reloads())
	}
	got := api.Servers("be")
	if len(got) != 3 {
		t.Fatalf("servers = %+v", got)
	}
	a0 := got[0]
	if a0.Name != "node-a" || a0.Address != "127.0.1.1" || *a0.Port != 30080 || *a0.Weight != 1 || a0.Check != "enabled" ||
		*a0.Inter != 2000 || *a0.Rise != 2 || *a0.Fall != 3 || a0.Maintenance == "enabled" {
		t.Errorf("node-a = %+v", a0)
	}
	if *got[1].Weight != 0 || got[1].Maintenance == "enabled" {
		t.Errorf("drained node-b = weight %d maint %q, want weight 0 in service", *got[1].Weight, got[1].Maintenance)
	}
	if got[2].Maintenance != "enabled" {
		t.Errorf("node-c maintenance = %q", got[2].Maintenance)
	}

	version, writes := api.Version(), api.Writes()
	p, a := syncOnce(t, c, w)
	if p.HasChanges() || a.Writes != 0 || api.Version() != version || api.Writes() != writes {
		t.Errorf("second sync changed something: plan %+v, version %d -> %d", p, version, api.Version())
	}
}

func TestChurnWithoutReload(t *testing.T) {
	api, c := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	syncOnce(t, c, want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready), srv("node-c", "127.0.1.3", model.Ready)))
	reloads := api.Reloads()

	heavy := srv("node-c", "127.0.1.3", model.Ready)
	heavy.Weight = 4
	p, a := syncOnce(t, c, want(srv("node-a", "127.0.1.9", model.Ready), srv("node-b", "127.0.1.2", model.Drain), heavy))
	if got := len(p.Changes); got != 3 || a.Writes != 3 {
		t.Fatalf("changes %d writes %d, want 3 and 3", got, a.Writes)
	}
	if a.Reload || api.Reloads() != reloads {
		t.Errorf("address move, drain and weight reloaded HAProxy (%d reloads)", api.Reloads()-reloads)
	}
	_, a = syncOnce(t, c, want(srv("node-a", "127.0.1.9", model.Ready), srv("node-b", "127.0.1.2", model.Ready), srv("node-c", "127.0.1.3", model.Maint)))
	if a.Reload || api.Reloads() != reloads {
		t.Errorf("undrain and maint reloaded HAProxy")
	}
	s := api.Servers("be")
	if s[0].Address != "127.0.1.9" || *s[1].Weight != 1 || s[2].Maintenance != "enabled" {
		t.Errorf("servers = %+v", s)
	}
}

func TestDeleteParksFirstThenOneTransaction(t *testing.T) {
	api, c := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	syncOnce(t, c, want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready), srv("node-c", "127.0.1.3", model.Ready)))
	reloads, n := api.Reloads(), len(api.Requests())

	_, a := syncOnce(t, c, want(srv("node-a", "127.0.1.1", model.Ready)))
	if !a.Reload || api.Reloads() != reloads+1 {
		t.Errorf("two deletes: %d reloads, want 1", api.Reloads()-reloads)
	}
	if got := api.Servers("be"); len(got) != 1 || got[0].Name != "node-a" {
		t.Errorf("servers = %+v", got)
	}
	// Each deleted server is put in maintenance (runtime) before the transaction.
	var order []string
	for _, r := range api.Requests()[n:] {
		if r.Method != http.MethodGet {
			order = append(order, r.Method+" "+r.Path[strings.LastIndex(r.Path, "/")+1:])
		}
	}
	wantOrder := []string{"PUT node-b", "PUT node-c", "POST transactions", "DELETE node-b", "DELETE node-c"}
	if len(order) < len(wantOrder) || strings.Join(order[:5], ",") != strings.Join(wantOrder, ",") {
		t.Errorf("write order = %v, want %v then commit", order, wantOrder)
	}
	if api.OpenTransactions() != 0 {
		t.Errorf("%d transactions left", api.OpenTransactions())
	}
}

func TestSettingsChangeIsOneReloadAndKeepsOtherFields(t *testing.T) {
	api, c := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	syncOnce(t, c, want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready)))
	reloads := api.Reloads()

	w := want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready))
	w.Settings.Balance = "leastconn"
	for i := range w.Servers {
		w.Servers[i].Check.SendProxyV2 = true
		w.Servers[i].Check.Inter = time.Second
	}
	_, a := syncOnce(t, c, w)
	if api.Reloads() != reloads+1 || !a.Reload {
		t.Errorf("balance + check change on 2 servers: %d reloads, want exactly 1", api.Reloads()-reloads)
	}
	be := api.Backend("be")
	if *be.Balance.Algorithm != "leastconn" || be.Mode != "tcp" || be.From != "unnamed_defaults_1" || be.AdvCheck != "tcp-check" {
		t.Errorf("backend = %+v", be.BackendBase)
	}
	for _, s := range api.Servers("be") {
		if s.SendProxyV2 != "enabled" || s.CheckSendProxy != "enabled" || *s.Inter != 1000 {
			t.Errorf("server %s: send-proxy-v2 %q check-send-proxy %q inter %d", s.Name, s.SendProxyV2, s.CheckSendProxy, *s.Inter)
		}
	}
}

func TestUnmanagedServerFieldsAreKept(t *testing.T) {
	api, c := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	syncOnce(t, c, want(srv("node-a", "127.0.1.1", model.Ready)))
	// An operator adds "ssl" by hand (a reload, as the real API would do).
	ctx := context.Background()
	cur, _ := c.Read(ctx, "be")
	var s models.Server
	if err := json.Unmarshal(mustJSON(t, cur.Servers[0].Source), &s); err != nil {
		t.Fatal(err)
	}
	s.Ssl = "enabled"
	api.AddBackend(api.Backend("be"), s)

	_, a := syncOnce(t, c, want(srv("node-a", "127.0.1.7", model.Ready)))
	if a.Reload {
		t.Error("address move reloaded")
	}
	if got := api.Servers("be")[0]; got.Ssl != "enabled" || got.Address != "127.0.1.7" {
		t.Errorf("server = ssl %q address %q", got.Ssl, got.Address)
	}
}

// mustJSON returns the JSON a driver kept as a server's Source.
func mustJSON(t *testing.T, source any) []byte {
	t.Helper()
	b, err := json.Marshal(source)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConflictIsTemporary(t *testing.T) {
	api, c := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	ctx := context.Background()
	syncOnce(t, c, want(srv("node-a", "127.0.1.1", model.Ready)))
	cur, err := c.Read(ctx, "be")
	if err != nil {
		t.Fatal(err)
	}
	api.BumpVersion() // another writer got there first
	before := api.Servers("be")
	_, err = c.Apply(ctx, plan.Calculate(cur, want(srv("node-a", "127.0.1.2", model.Ready))))
	var apiErr *dataplane.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict || !apiErr.Conflict() || apiErr.Class() != failure.Temporary {
		t.Fatalf("err = %v, want a temporary 409 conflict", err)
	}
	if got := api.Servers("be"); got[0].Address != before[0].Address {
		t.Error("a conflicting write changed the server")
	}
	// Also inside a transaction (an add): the transaction is refused up front.
	_, err = c.Apply(ctx, plan.Calculate(cur, want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready))))
	if !errors.As(err, &apiErr) || !apiErr.Conflict() {
		t.Fatalf("err = %v, want a conflict", err)
	}
	if api.OpenTransactions() != 0 {
		t.Errorf("%d transactions left", api.OpenTransactions())
	}
}

func TestFailedCommitDeletesTransaction(t *testing.T) {
	api, c := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	api.SetCheck(func(dataplanetest.Config) error { return errors.New("[ALERT] config: invalid server") })
	ctx := context.Background()
	cur, err := c.Read(ctx, "be")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Apply(ctx, plan.Calculate(cur, want(srv("node-a", "127.0.1.1", model.Ready))))
	var apiErr *dataplane.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || apiErr.Class() == failure.Temporary {
		t.Fatalf("err = %v, want a permanent 400", err)
	}
	if !strings.Contains(err.Error(), "invalid server") {
		t.Errorf("error %q lacks the API's message", err)
	}
	if api.OpenTransactions() != 0 {
		t.Errorf("%d transactions left after a failed commit", api.OpenTransactions())
	}
	if len(api.Servers("be")) != 0 || api.Reloads() != 0 {
		t.Error("a failed commit changed the configuration")
	}
}

func TestOutdatedTransactionIsTemporary(t *testing.T) {
	api, c := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	ctx := context.Background()
	cur, _ := c.Read(ctx, "be")
	// Someone commits another transaction while ours is open: ours is outdated.
	api.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/transactions/") {
			api.Intercept(nil)
			if err := startAndCommit(t, api.URL); err != nil {
				t.Error(err)
			}
		}
		return false
	})
	_, err := c.Apply(ctx, plan.Calculate(cur, want(srv("node-a", "127.0.1.1", model.Ready))))
	var apiErr *dataplane.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotAcceptable || apiErr.Class() != failure.Temporary {
		t.Fatalf("err = %v, want a temporary 406", err)
	}
	if api.OpenTransactions() != 0 {
		t.Errorf("%d transactions left after an outdated commit", api.OpenTransactions())
	}
}

// TestWriteIntoOutdatedTransactionIsTemporary: another writer commits
// between our transaction's start and its first write. The real API
// answers that write 400 "transaction does not exist" (the conformance
// table): a lost race, retried, not a permanent error.
func TestWriteIntoOutdatedTransactionIsTemporary(t *testing.T) {
	api, c := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	ctx := context.Background()
	cur, _ := c.Read(ctx, "be")
	api.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Query().Get("transaction_id") != "" {
			api.Intercept(nil)
			if err := startAndCommit(t, api.URL); err != nil {
				t.Error(err)
			}
		}
		return false
	})
	_, err := c.Apply(ctx, plan.Calculate(cur, want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready))))
	var apiErr *dataplane.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || apiErr.Class() != failure.Temporary {
		t.Fatalf("err = %v, want a temporary 400 (transaction does not exist)", err)
	}
	if api.OpenTransactions() != 0 {
		t.Errorf("%d transactions left after a write into an outdated one", api.OpenTransactions())
	}
}

// startAndCommit commits an empty transaction as another client would.
func startAndCommit(t *testing.T, base string) error {
	v := getVersion(t, base)
	req, _ := http.NewRequest(http.MethodPost, base+"/v3/services/haproxy/transactions?version="+v, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	var tx models.Transaction
	decode(t, resp, &tx)
	req, _ = http.NewRequest(http.MethodPut, base+"/v3/services/haproxy/transactions/"+tx.ID, nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("other commit: %d", resp.StatusCode)
	}
	return nil
}

func TestAuthHeaders(t *testing.T) {
	t.Run("basic", func(t *testing.T) {
		api, c := setup(t, dataplanetest.Options{Username: "admin", Password: "pw"}, dataplane.Auth{Username: "admin", Password: "pw"})
		if _, err := c.Read(context.Background(), "be"); err != nil {
			t.Fatal(err)
		}
		if r := api.Requests()[0]; r.Auth != "Basic YWRtaW46cHc=" {
			t.Errorf("Authorization = %q", r.Auth)
		}
	})
	t.Run("bearer", func(t *testing.T) {
		api, c := setup(t, dataplanetest.Options{Token: "tkn"}, dataplane.Auth{Token: "tkn"})
		if _, err := c.Read(context.Background(), "be"); err != nil {
			t.Fatal(err)
		}
		if r := api.Requests()[0]; r.Auth != "Bearer tkn" {
			t.Errorf("Authorization = %q", r.Auth)
		}
	})
	t.Run("wrong password fails fast", func(t *testing.T) {
		_, c := setup(t, dataplanetest.Options{Username: "admin", Password: "pw"}, dataplane.Auth{Username: "admin", Password: "nope"})
		_, err := c.Read(context.Background(), "be")
		var apiErr *dataplane.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized || apiErr.Class() == failure.Temporary {
			t.Fatalf("err = %v, want a permanent 401", err)
		}
		if strings.Contains(err.Error(), "nope") {
			t.Error("error shows the password")
		}
	})
}

func TestNameHidesCredentials(t *testing.T) {
	u, _ := url.Parse("https://admin:secret@haproxy:5555/")
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient)
	if c.Name() != "https://haproxy:5555" {
		t.Errorf("Name() = %q", c.Name())
	}
}

func TestMissingBackendIsPermanent(t *testing.T) {
	_, c := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	_, err := c.Read(context.Background(), "nope")
	var apiErr *dataplane.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound || apiErr.Class() == failure.Temporary {
		t.Fatalf("err = %v, want a permanent 404", err)
	}
}

// TestNetworkErrorClasses: nothing listening is Unreachable (not retried
// within the reconcile: it fails in milliseconds); a connection that drops
// before the answer is Temporary.
func TestNetworkErrorClasses(t *testing.T) {
	dropping := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close()
	}))
	defer dropping.Close()
	for _, tt := range []struct {
		url  string
		want failure.Class
	}{{"http://127.0.0.1:1", failure.Unreachable}, {dropping.URL, failure.Temporary}} {
		u, _ := url.Parse(tt.url)
		c := dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: time.Second})
		_, err := c.Read(context.Background(), "be")
		if got := failure.Of(err); got != tt.want {
			t.Errorf("%s: err = %v, class %q, want %q", tt.url, err, got, tt.want)
		}
	}
}

func TestHTTPSWithCAFile(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{TLS: true}, dataplane.Auth{})
	u, _ := url.Parse(api.URL)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, api.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	hc, err := dataplane.NewHTTPClient(ca, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dataplane.New(u, dataplane.Auth{}, hc).Read(context.Background(), "be"); err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	plain, _ := dataplane.NewHTTPClient("", 5*time.Second)
	if _, err := dataplane.New(u, dataplane.Auth{}, plain).Read(context.Background(), "be"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: err = %v, want a certificate error", err)
	} else if failure.Retryable(err) {
		t.Errorf("certificate error %v is retried", err)
	}
	if err := os.WriteFile(ca, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := dataplane.NewHTTPClient(ca, time.Second); err == nil {
		t.Error("a CA file without PEM was accepted")
	}
}

// healthLog is the runtime socket beside the API: it records Gate calls
// together with the API's requests, so the order of POST, gate and PUT can be
// checked, and shows gated servers' checks running, passed once passed is set.
// Like a running HAProxy, it holds the state the socket set (gated: drain)
// until the API applies a versioned PUT of that server; servers its Apply
// added exist before haproxy.cfg has them.
type healthLog struct {
	api     *dataplanetest.Server
	calls   []string
	at      []int // number of API requests seen at each call
	passed  bool
	dead    map[string]bool // servers whose check never passes
	fail    int             // Gate calls to fail first
	applied []plan.Plan
	// appliedAt: the number of API requests seen at each Apply
	appliedAt []int
	running   map[string]runningServer // set through the socket
	// lazy: like a real HAProxy whose API reloads later (reload_delay),
	// the running HAProxy has a configured server only once reload ran
	// (loaded), or once the socket added it.
	lazy   bool
	loaded map[string]bool
	// started: servers whose check StartCheck started (left in maintenance)
	started []string
	// added: servers its Apply added (model.Runtime.Ours), until a reload
	added map[string]bool
	// refuse: servers whose changes its Apply (and ShutdownSessions)
	// refuses, as HAProxy refuses one server's command
	refuse map[string]bool
	// sessions and since: what the socket shows of each server's sessions
	// and of the time since its last state change; shut and shutAt record
	// ShutdownSessions calls (drain_api_test.go)
	sessions map[string]int
	since    time.Duration
	shut     []string
	shutAt   []int
}

// reload loads haproxy.cfg as the running HAProxy: every configured server,
// in its configured state, with its check running unless it is parked;
// what the socket did is forgotten.
func (h *healthLog) reload() {
	h.loaded, h.added = map[string]bool{}, nil
	h.running, h.calls = map[string]runningServer{}, nil
	at := len(h.api.Requests())
	for _, s := range h.api.Servers("be") {
		h.loaded[s.Name] = true
		h.running[s.Name] = runningServer{model.Server{Name: s.Name, Address: s.Address, State: cfgState(s)}, at}
	}
}

// cfgState is the state haproxy.cfg holds s in.
func cfgState(s models.Server) model.State {
	switch {
	case s.Maintenance == "enabled":
		return model.Maint
	case s.Weight != nil && *s.Weight == 0:
		return model.Drain
	}
	return model.Ready
}

type runningServer struct {
	model.Server
	at int // number of API requests seen when set
}

func (h *healthLog) Gate(_ context.Context, backend, server string) error {
	if h.fail > 0 {
		h.fail--
		return errors.New("runtime socket: connection refused")
	}
	h.calls = append(h.calls, backend+"/"+server)
	h.at = append(h.at, len(h.api.Requests()))
	h.set(model.Server{Name: server, State: model.Drain})
	return nil
}

func (h *healthLog) set(s model.Server) {
	if h.running == nil {
		h.running = map[string]runningServer{}
	}
	h.running[s.Name] = runningServer{s, len(h.api.Requests())}
}

// Apply applies adds and state changes as the runtime API driver would.
func (h *healthLog) Apply(_ context.Context, p plan.Plan) (plan.Applied, error) {
	h.applied, h.appliedAt = append(h.applied, p), append(h.appliedAt, len(h.api.Requests()))
	var out plan.Applied
	var refused plan.ServerErrors
	for _, ch := range p.Changes {
		if h.refuse[ch.Name] {
			refused = append(refused, plan.ServerError{Server: ch.Name, Error: "refused"})
			continue
		}
		if ch.Renew && !ch.Gate {
			h.started = append(h.started, p.Backend+"/"+ch.Name)
		}
		if ch.Action == plan.Delete {
			delete(h.running, ch.Name)
			out.Count(plan.RuntimeWrite)
			continue
		}
		if ch.Action == plan.Add {
			if h.added == nil {
				h.added = map[string]bool{}
			}
			h.added[ch.Name] = true
		}
		s := *ch.New
		if ch.Gate {
			h.calls = append(h.calls, p.Backend+"/"+ch.Name)
			s.State = model.Drain
		}
		h.set(s)
		out.Count(plan.RuntimeWrite)
	}
	if len(refused) > 0 {
		return out, refused
	}
	return out, nil
}

func (h *healthLog) ReadRuntime(_ context.Context, backend string) ([]model.Server, error) {
	var out []model.Server
	inCfg := map[string]bool{}
	reqs := h.api.Requests()
	for _, s := range h.api.Servers(backend) {
		if _, set := h.running[s.Name]; h.lazy && !h.loaded[s.Name] && !set {
			continue // not loaded yet
		}
		inCfg[s.Name] = true
		st := cfgState(s)
		if r, ok := h.running[s.Name]; ok && !slices.ContainsFunc(reqs[r.at:], func(q dataplanetest.Request) bool {
			return q.Method == http.MethodPut && strings.HasSuffix(q.Path, "/servers/"+s.Name) && strings.Contains(q.Query, "version=")
		}) {
			st = r.State
		}
		out = append(out, h.server(backend, s.Name, s.Address, st))
	}
	for name, r := range h.running {
		if !inCfg[name] && r.Address != "" {
			s := h.server(backend, name, r.Address, r.State)
			s.Runtime.Ours = h.added[name]
			out = append(out, s)
		}
	}
	return out, nil
}

func (h *healthLog) server(backend, name, addr string, st model.State) model.Server {
	passed := h.passed && !h.dead[name]
	running := slices.Contains(h.calls, backend+"/"+name) || slices.Contains(h.started, backend+"/"+name) || h.loaded[name] && st != model.Maint
	// The check and weight the runtime API driver reads for a server
	// haproxy.cfg does not hold: those it adds servers with.
	return model.Server{Name: name, Address: addr, Port: 30080, Weight: 1, Check: chk, State: st, Up: passed,
		Runtime: &model.Runtime{CheckRunning: running, CheckPassed: passed, Sessions: h.sessions[name], Since: h.since}}
}

func TestAddWithoutReloadGatedOnChecks(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	w := want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Drain), srv("node-c", "127.0.1.3", model.Maint))

	p, a := syncOnce(t, c, w)
	if a.Reload || api.Reloads() != 0 {
		t.Errorf("adds reloaded HAProxy (%d reloads)", api.Reloads())
	}
	// node-c is to stay in maintenance: gating would put it in drain; its
	// check is started all the same, so it can enter once it is ready.
	if strings.Join(hl.calls, ",") != "be/node-a,be/node-b" || fmt.Sprint(hl.started) != "[be/node-c]" {
		t.Errorf("gate calls: %v, checks started %v", hl.calls, hl.started)
	}
	if !reflect.DeepEqual(p.Waiting, []string{"node-a"}) {
		t.Errorf("waiting = %v, want node-a", p.Waiting)
	}
	// node-a: POST (in maint), then gate, and no PUT in service.
	reqs := api.Requests()
	if before := reqs[hl.at[0]-1]; before.Method != http.MethodPost || strings.Contains(reqs[hl.at[0]].Path, "node-a") {
		t.Errorf("order: %s %s, then %s %s", before.Method, before.Path, reqs[hl.at[0]].Method, reqs[hl.at[0]].Path)
	}
	persisted := func() map[string]models.Server {
		got := map[string]models.Server{}
		for _, s := range api.Servers("be") {
			got[s.Name] = s
		}
		return got
	}
	got := persisted()
	if got["node-a"].Maintenance != "enabled" || *got["node-b"].Weight != 0 || got["node-b"].Maintenance == "enabled" || got["node-c"].Maintenance != "enabled" {
		t.Errorf("persisted states: a %q, b weight %d %q, c %q", got["node-a"].Maintenance, *got["node-b"].Weight, got["node-b"].Maintenance, got["node-c"].Maintenance)
	}
	// Its check has not passed: nothing to do, still waiting.
	if p, a := syncOnce(t, c, w); p.HasChanges() || a.Writes != 0 || len(p.Waiting) != 1 {
		t.Errorf("sync before the check passed: %+v", p)
	}
	hl.passed = true
	if p, _ := syncOnce(t, c, w); !reflect.DeepEqual(p.Names(plan.Update), []string{"node-a"}) || p.Pending() {
		t.Errorf("sync after the check passed: %+v", p)
	}
	if persisted()["node-a"].Maintenance == "enabled" || api.Reloads() != 0 {
		t.Errorf("node-a not in service, or reloads %d", api.Reloads())
	}
	if p, a := syncOnce(t, c, w); p.HasChanges() || a.Writes != 0 {
		t.Errorf("last sync: %+v", p)
	}
}

// TestGatedServerRemovedIsParkedOnTheSocket: a server gated in the running
// HAProxy (drain) and parked in haproxy.cfg is no longer wanted. Parking it is
// a change haproxy.cfg already holds, so it goes through the socket, as a
// park: the socket must not delete it (the transaction does, in haproxy.cfg).
func TestGatedServerRemovedIsParkedOnTheSocket(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	syncOnce(t, c, want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready)))

	p, _ := syncOnce(t, c, want(srv("node-a", "127.0.1.1", model.Ready)))
	if !reflect.DeepEqual(p.Names(plan.Delete), []string{"node-b"}) || len(hl.applied) != 1 {
		t.Fatalf("plan %+v, socket plans %+v", p, hl.applied)
	}
	for _, ch := range hl.applied[0].Changes {
		if ch.Name != "node-b" || ch.Action == plan.Delete || ch.New.State != model.Maint {
			t.Errorf("socket got %s %s (state %s), want node-b parked", ch.Action, ch.Name, ch.New.State)
		}
	}
	if s := api.Servers("be"); len(s) != 1 || s[0].Name != "node-a" {
		t.Errorf("haproxy.cfg: %+v, want node-a alone", s)
	}
}

// TestFailureBetweenAddAndGate: the POST landed, the gate on the socket
// failed. The server stays in maintenance; the retry gates it and does not
// put it in service until its check passed.
func TestFailureBetweenAddAndGate(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api, fail: 1}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	w := want(srv("node-a", "127.0.1.1", model.Ready))
	cur, err := c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(context.Background(), plan.CalculateWith(cur, w, c.Policy())); err == nil {
		t.Fatal("a failed gate was not reported")
	}
	if s := api.Servers("be"); len(s) != 1 || s[0].Maintenance != "enabled" {
		t.Fatalf("after the failed gate: %+v", s)
	}
	p, _ := syncOnce(t, c, w) // the retry
	if len(hl.calls) != 1 || !reflect.DeepEqual(p.Waiting, []string{"node-a"}) || api.Servers("be")[0].Maintenance != "enabled" {
		t.Errorf("retry: gate calls %v, plan %+v, server %q", hl.calls, p, api.Servers("be")[0].Maintenance)
	}
	if p, _ := syncOnce(t, c, w); p.HasChanges() || api.Servers("be")[0].Maintenance != "enabled" {
		t.Errorf("in service before its check passed: %+v", p)
	}
}

func TestStaticAlgorithmIsRefused(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient)
	if _, err := c.Read(context.Background(), "be"); err != nil {
		t.Fatal(err)
	}
	api.SetBalance("be", "static-rr")
	_, err := c.Read(context.Background(), "be")
	var be *failure.BackendError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "static-rr") {
		t.Fatalf("err = %v, want a BackendError naming static-rr", err)
	}
}

// TestAddsThatReloadGoThroughTheSocket: the API answers server adds with a
// reload (a default_server line; or dataplaneapi before 3.3.5, which cannot
// read HAProxy 3.2+'s version), which runs later (reload_delay). The first
// add's 202 is reported, the server is added gated through the socket at
// once instead of waiting for the reload, and the other adds of the plan,
// and of the next, go through the socket alone. Once their checks passed
// they are put in service through the socket and written in service by one
// transaction.
func TestAddsThatReloadGoThroughTheSocket(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{DefaultsDefaultServer: true}, dataplane.Auth{})
	hl := &healthLog{api: api, lazy: true}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	w := want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready))

	p, a := syncOnce(t, c, w)
	if a.UnexpectedReloads != 1 || !strings.Contains(a.UnexpectedReason, "default-server") {
		t.Errorf("unexpected reloads %d (%q), want the first add's", a.UnexpectedReloads, a.UnexpectedReason)
	}
	posts := 0
	for _, r := range api.Requests() {
		if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/servers") && strings.Contains(r.Query, "version=") {
			posts++
		}
	}
	if posts != 1 || len(hl.applied) != 2 || fmt.Sprint(hl.calls) != "[be/node-a be/node-b]" {
		t.Errorf("%d versioned adds, runtime plans %d, gated %v; want one add through the API, both on the socket", posts, len(hl.applied), hl.calls)
	}
	if !reflect.DeepEqual(p.Waiting, []string{"node-a", "node-b"}) || api.ReloadsRun() != 1 {
		t.Errorf("waiting %v, reloads run %d", p.Waiting, api.ReloadsRun())
	}
	if in, all := persisted(api); in != 0 || all != 1 {
		t.Errorf("haproxy.cfg: %d servers, %d in service; want node-a, parked (node-b is written once checked)", all, in)
	}
	if p, a := syncOnce(t, c, w); p.HasChanges() || a.Writes != 0 || len(p.Loading) != 0 {
		t.Errorf("sync before the checks passed: %+v", p)
	}
	hl.passed = true
	if p, a := syncOnce(t, c, w); len(p.Names(plan.Update)) != 2 || a.UnexpectedReloads != 0 || p.Pending() {
		t.Errorf("sync after the checks passed: %+v, %+v", p, a)
	}
	if in, _ := persisted(api); in != 2 {
		t.Errorf("%d servers written in service, want 2", in)
	}
	// Remembered: the next add goes through the socket without asking the
	// API to add it first.
	before := len(api.Requests())
	syncOnce(t, c, want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready), srv("node-c", "127.0.1.3", model.Ready)))
	for _, r := range api.Requests()[before:] {
		if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/servers") && strings.Contains(r.Query, "version=") {
			t.Errorf("%s %s?%s: an add through the API, which reloads", r.Method, r.Path, r.Query)
		}
	}
	if !slices.Contains(hl.calls, "be/node-c") {
		t.Errorf("node-c not gated on the socket: %v", hl.calls)
	}
}

// TestServerNotRunningYetWaitsParked: haproxy.cfg holds a server (written in
// service) that the running HAProxy does not show: the API's reload that
// loads it has not run, or failed. Before, such a server read as one whose
// checks cannot be seen and was left, or written, in service, so the reload
// loaded it UP with no check run. Now it is written parked (loading); when
// haproxy.cfg holds nothing for it but what this service writes, it is
// added through the socket at once, gated, and enters service once its
// check passed, reload or not. One with another keyword (here maxconn, which
// an add through the socket would lose) waits with nothing sent to the
// socket until the reload loaded it; then it is gated.
func TestServerNotRunningYetWaitsParked(t *testing.T) {
	for _, tt := range []struct {
		name    string
		maxconn *int64
	}{{"only what the service writes", nil}, {"another keyword", ptr(int64(100))}} {
		t.Run(tt.name, func(t *testing.T) {
			api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
			hl := &healthLog{api: api, lazy: true}
			u, _ := url.Parse(api.URL)
			c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
			port, weight := int64(30080), int64(1)
			api.AddBackend(api.Backend("be"), models.Server{Name: "node-a", Address: "127.0.1.1", Port: &port,
				ServerParams: models.ServerParams{Weight: &weight, Check: "enabled", Inter: ptr(int64(2000)), Rise: ptr(int64(2)), Fall: ptr(int64(3)), Maintenance: "disabled", Maxconn: tt.maxconn}})
			w := want(srv("node-a", "127.0.1.1", model.Ready))

			p, _ := syncOnce(t, c, w)
			if !reflect.DeepEqual(p.Loading, []string{"node-a"}) || !reflect.DeepEqual(p.Waiting, []string{"node-a"}) {
				t.Fatalf("plan %+v: want node-a waiting, loading", p)
			}
			if in, all := persisted(api); in != 0 || all != 1 {
				t.Errorf("haproxy.cfg %d/%d in service, want it parked", in, all)
			}
			if tt.maxconn == nil {
				if fmt.Sprint(hl.calls) != "[be/node-a]" || len(hl.applied) != 1 || hl.applied[0].Changes[0].Action != plan.Add {
					t.Fatalf("socket: gated %v, plans %+v; want it added there, gated", hl.calls, hl.applied)
				}
			} else {
				if len(hl.calls) != 0 || len(hl.applied) != 0 {
					t.Errorf("socket calls %v %d; want nothing on the socket", hl.calls, len(hl.applied))
				}
				if p, a := syncOnce(t, c, w); p.HasChanges() || a.Writes != 0 || len(p.Loading) != 1 {
					t.Errorf("before the reload: %+v", p)
				}
				hl.reload()
				if p, _ := syncOnce(t, c, w); len(p.Loading) != 0 || fmt.Sprint(hl.calls) != "[be/node-a]" || !reflect.DeepEqual(p.Waiting, []string{"node-a"}) {
					t.Errorf("after the reload: %+v, gated %v; want it gated", p, hl.calls)
				}
			}
			if p, a := syncOnce(t, c, w); p.HasChanges() || a.Writes != 0 || len(p.Loading) != 0 || len(p.Waiting) != 1 {
				t.Errorf("gated, before its check passed: %+v", p)
			}
			hl.passed = true
			if p, _ := syncOnce(t, c, w); !reflect.DeepEqual(p.Names(plan.Update), []string{"node-a"}) || p.Pending() {
				t.Errorf("after its check passed: %+v", p)
			}
			if in, _ := persisted(api); in != 1 {
				t.Errorf("haproxy.cfg holds %d in service, want node-a", in)
			}
		})
	}
}

// TestLoadingServerRefusedBySocket: the socket refuses to add a loading
// server (a reload loaded it between the read and the add: "already
// exists"). That is the one server's failure: the plan's other changes go.
func TestLoadingServerRefusedBySocket(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api, lazy: true, refuse: map[string]bool{"node-a": true}}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	port, weight := int64(30080), int64(1)
	params := models.ServerParams{Weight: &weight, Check: "enabled", Inter: ptr(int64(2000)), Rise: ptr(int64(2)), Fall: ptr(int64(3)), Maintenance: "disabled"}
	nodeC := models.Server{Name: "node-c", Address: "127.0.1.3", Port: &port, ServerParams: params}
	api.AddBackend(api.Backend("be"), nodeC)
	hl.reload() // node-c runs, in service
	// node-a is written in service and not running: parked by a versioned
	// PUT before the socket is asked to add it.
	api.AddBackend(api.Backend("be"), nodeC, models.Server{Name: "node-a", Address: "127.0.1.1", Port: &port, ServerParams: params})
	heavier := srv("node-c", "127.0.1.3", model.Ready)
	heavier.Weight = 2
	w := want(srv("node-a", "127.0.1.1", model.Ready), heavier)
	cur, err := c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Apply(context.Background(), plan.CalculateWith(cur, w, c.Policy()))
	var refused plan.ServerErrors
	if !errors.As(err, &refused) || len(refused) != 1 || refused[0].Server != "node-a" {
		t.Fatalf("apply: %v, want node-a's refusal alone", err)
	}
	var weight2 bool
	for _, s := range api.Servers("be") {
		weight2 = weight2 || s.Name == "node-c" && s.Weight != nil && *s.Weight == 2
	}
	if !weight2 {
		t.Errorf("node-c's weight change did not go after node-a's refusal: %+v", api.Servers("be"))
	}
	if in, _ := persisted(api); in != 1 {
		t.Errorf("haproxy.cfg holds %d in service, want node-c alone (node-a parked)", in)
	}
}

func ptr[T any](v T) *T { return &v }

// TestBigBurstIsWrittenOnlyOnceChecked: more than MaxRuntimeAdds new
// servers are added through the socket in one plan, gated, and nothing is
// written: no versioned write or transaction per server on the way in (on
// the real API a transaction costs ~7 ms a server: 200 took 1.8 s before
// the next reconcile could put any in service), and a reload before they
// are written never loads a server no check passed for. Once their checks
// pass, the socket puts them in service, then one transaction writes them
// (one reload); the dead one stays out of haproxy.cfg, gated.
func TestBigBurstIsWrittenOnlyOnceChecked(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api, dead: map[string]bool{"node-03": true}}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	w := burst(dataplane.MaxRuntimeAdds + 5)
	n := len(w.Servers)

	p, a := syncOnce(t, c, w)
	if api.Reloads() != 0 || a.Reload || len(hl.applied) != 1 || len(hl.applied[0].Names(plan.Add)) != n {
		t.Fatalf("%d adds: %d reloads, runtime plans %d; want all added at runtime, no reload", n, api.Reloads(), len(hl.applied))
	}
	for _, r := range api.Requests() {
		if r.Method != http.MethodGet {
			t.Fatalf("%s %s: a write before any check passed", r.Method, r.Path)
		}
	}
	if len(p.Waiting) != n || len(hl.calls) != n {
		t.Errorf("waiting %v, gated %v", p.Waiting, hl.calls)
	}
	if p, a := syncOnce(t, c, w); p.HasChanges() || a.Writes != 0 || len(p.Waiting) != n {
		t.Errorf("sync before the checks passed: %+v", p)
	}
	hl.passed = true
	before := len(api.Requests())
	p, _ = syncOnce(t, c, w)
	if len(p.Names(plan.Update)) != n-1 || len(hl.applied) != 2 || len(hl.applied[1].Changes) != n-1 {
		t.Fatalf("after the checks passed: plan %+v, runtime plans %d", p, len(hl.applied))
	}
	for i, r := range api.Requests()[before:] {
		if strings.Contains(r.Path, "/servers") && strings.Contains(r.Query, "version=") {
			t.Errorf("%s %s?%s: one versioned write per server, not one transaction", r.Method, r.Path, r.Query)
		}
		if r.Method != http.MethodGet && before+i < hl.appliedAt[1] {
			t.Errorf("%s %s before the socket put them in service: traffic waited for the write", r.Method, r.Path)
		}
	}
	if api.Reloads() != 1 {
		t.Errorf("writing the checked servers: %d reloads, want one transaction", api.Reloads())
	}
	if in, all := persisted(api); in != n-1 || all != n-1 {
		t.Errorf("haproxy.cfg: %d servers, %d in service; want all but the dead one, in service", all, in)
	}
	if p, a := syncOnce(t, c, w); p.HasChanges() || a.Writes != 0 || !reflect.DeepEqual(p.Waiting, []string{"node-03"}) {
		t.Errorf("last sync: %+v", p)
	}
}

// TestManyServersLeaveThroughTheSocket: 27 of 30 servers leave at once (a
// node pool drained). The socket takes them out of traffic in one round
// and one transaction persists what haproxy.cfg must learn, instead of a
// versioned PUT each (~40 ms apiece on the real API: 200 nodes took 8 s).
// Parked (deletions batched) they are written parked; deleted, they are
// only parked on the socket, as the transaction deletes them.
func TestManyServersLeaveThroughTheSocket(t *testing.T) {
	for _, batch := range []int{0, 100} {
		t.Run(fmt.Sprint("delete batch ", batch), func(t *testing.T) {
			api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
			hl := &healthLog{api: api, passed: true}
			u, _ := url.Parse(api.URL)
			c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl), dataplane.WithDeleteBatch(batch))
			all := burst(30)
			syncOnce(t, c, all)
			syncOnce(t, c, all)
			if in, n := persisted(api); in != 30 || n != 30 {
				t.Fatalf("set-up: %d of %d in service", in, n)
			}
			before, plans := len(api.Requests()), len(hl.applied)
			p, _ := syncOnce(t, c, want(all.Servers[:3]...))
			for _, r := range api.Requests()[before:] {
				if strings.Contains(r.Path, "/servers/") && strings.Contains(r.Query, "version=") {
					t.Fatalf("%s %s?%s: a versioned write per leaving server", r.Method, r.Path, r.Query)
				}
			}
			if len(hl.applied) != plans+1 || len(hl.applied[plans].Changes) != 27 {
				t.Fatalf("socket plans %d, want one more with 27 parks", len(hl.applied)-plans)
			}
			for _, ch := range hl.applied[plans].Changes {
				if ch.New.State != model.Maint {
					t.Errorf("%s on the socket: %s to %s, want parked", ch.Name, ch.Action, ch.New.State)
				}
			}
			in, n := persisted(api)
			switch {
			case batch == 0 && (len(p.Names(plan.Delete)) != 27 || n != 3):
				t.Errorf("deleted: plan %v, haproxy.cfg holds %d servers; want 3", p.Names(plan.Delete), n)
			case batch > 0 && (len(p.Names(plan.Maint)) != 27 || in != 3 || n != 30):
				t.Errorf("parked: plan %v, haproxy.cfg %d of %d in service; want 3 of 30", p.Names(plan.Maint), in, n)
			}
		})
	}
}

// TestReloadBeforeTheBurstIsWritten: more than MaxRuntimeAdds burst
// servers, added through the socket and not written yet, passed their
// checks; the plan puts them in service and takes out the three servers
// they replace. A reload between the read and the apply (the API's
// reload_delay after an earlier commit) dropped them: nothing is put in
// service or written, the error is a conflict, and the retry adds them
// again, gated, while the old servers keep their traffic. A reload after
// the socket put them in service and before the commit loads haproxy.cfg
// as it was: the old servers are back in service with it, and stay there
// until the new ones are checked again in the reloaded HAProxy: the backend
// is never without a server in service.
func TestReloadBeforeTheBurstIsWritten(t *testing.T) {
	// Deletions batched as shipped (HAPROXY_DELETE_BATCH=10), or not: the
	// old servers are parked in haproxy.cfg either way (a deletion beside
	// entries is deferred), the reload loads them in service again, and in
	// service and parked there, they are written back.
	for _, batch := range []int{10, 0} {
		t.Run(fmt.Sprint("delete batch ", batch), func(t *testing.T) { reloadBeforeTheBurstIsWritten(t, batch) })
	}
}

// replacingBurst sets up three old servers in service and a burst of
// more than MaxRuntimeAdds that replaces them, added through the socket
// and waiting for checks that have not passed yet (the old ones kept:
// make-before-break).
func replacingBurst(t *testing.T, batch int) (*dataplanetest.Server, *healthLog, *dataplane.Client, model.Backend) {
	t.Helper()
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api, passed: true}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl), dataplane.WithDeleteBatch(batch))
	old := want(srv("old-0", "127.0.2.1", model.Ready), srv("old-1", "127.0.2.2", model.Ready), srv("old-2", "127.0.2.3", model.Ready))
	syncOnce(t, c, old)
	syncOnce(t, c, old)
	w := burst(dataplane.MaxRuntimeAdds + 5)
	hl.dead = map[string]bool{}
	for _, s := range w.Servers {
		hl.dead[s.Name] = true
	}
	if p, _ := syncOnce(t, c, w); len(p.Waiting) != len(w.Servers) || len(p.HandingOver) != 3 {
		t.Fatalf("set-up: %+v", p)
	}
	return api, hl, c, w
}

func reloadBeforeTheBurstIsWritten(t *testing.T, batch int) {
	api, hl, c, w := replacingBurst(t, batch)
	inService := func() (names []string) {
		rs, _ := hl.ReadRuntime(context.Background(), "be")
		for _, s := range rs {
			if s.State == model.Ready && s.Up {
				names = append(names, s.Name)
			}
		}
		return names
	}
	hl.dead = nil
	plan1 := func() plan.Plan {
		cur, err := c.Read(context.Background(), "be")
		if err != nil {
			t.Fatal(err)
		}
		return plan.CalculateWith(cur, w, c.Policy())
	}

	p := plan1()
	hl.reload() // what haproxy.cfg holds: the old servers alone
	before := len(api.Requests())
	if _, err := c.Apply(context.Background(), p); failure.Of(err) != failure.Temporary || !strings.Contains(err.Error(), "no longer in the running HAProxy") {
		t.Fatalf("apply after a reload: %v, want a conflict", err)
	}
	for _, r := range api.Requests()[before:] {
		if r.Method != http.MethodGet {
			t.Errorf("%s %s: a write after the reload", r.Method, r.Path)
		}
	}
	if p, _ := syncOnce(t, c, w); len(p.Waiting) != len(w.Servers) || len(p.Names(plan.Add)) != len(w.Servers) {
		t.Errorf("retry: waiting %v, adds %v; want all added again, gated", p.Waiting, p.Names(plan.Add))
	}
	if got := inService(); len(got) != 3 {
		t.Fatalf("in service after the retry: %v, want the old servers", got)
	}

	// From here the running HAProxy loads haproxy.cfg only at a reload.
	hl.lazy = true
	p = plan1()
	api.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/transactions/") {
			hl.reload()
		}
		return false
	})
	applied, err := c.Apply(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	api.Intercept(nil)
	if want := map[int]string{0: "[old-0 old-1 old-2]", 10: "[]"}[batch]; fmt.Sprint(applied.Deferred) != want {
		t.Errorf("deferred %v, want %s: deleted beside entries, written parked", applied.Deferred, want)
	}
	if got := inService(); len(got) != 3 {
		t.Fatalf("in service after the reload: %v, want the old servers back", got)
	}
	for i := 0; i < 6 && len(inService()) != len(w.Servers); i++ {
		p, _ := syncOnce(t, c, w)
		if got := inService(); len(got) == 0 {
			t.Fatalf("sync %d emptied the backend: %+v", i, p)
		}
		if len(p.Loading) > 0 {
			hl.reload() // the one the commit asked for, which loads them parked
		}
	}
	if got := inService(); len(got) != len(w.Servers) || slices.ContainsFunc(got, func(n string) bool { return strings.HasPrefix(n, "old-") }) {
		t.Errorf("in the end in service: %v, want the burst alone", got)
	}
	wantAll := len(w.Servers) + 3 // the old ones parked, deleted with a batch
	if batch == 0 {
		syncOnce(t, c, w) // what the follow-up does for the deferred deletions
		wantAll = len(w.Servers)
	}
	if in, all := persisted(api); in != len(w.Servers) || all != wantAll {
		t.Errorf("haproxy.cfg: %d servers, %d in service; want %d, the burst in service", all, in, wantAll)
	}
}

// TestLeavingServersWaitForAnEntry: a plan puts 25 checked burst servers
// in service and takes out the three old ones they replace; the running
// HAProxy refuses every entry (a reload came between: their names are
// gone). The old servers are then neither taken out nor written out, and
// are reported as not done (parked or deleted: the result must not list
// them): the backend keeps them in service, and the next reconcile starts
// again.
func TestLeavingServersWaitForAnEntry(t *testing.T) {
	for _, batch := range []int{10, 0} {
		t.Run(fmt.Sprint("delete batch ", batch), func(t *testing.T) { leavingServersWaitForAnEntry(t, batch) })
	}
}

func leavingServersWaitForAnEntry(t *testing.T, batch int) {
	api, hl, c, w := replacingBurst(t, batch)
	hl.dead, hl.refuse = nil, map[string]bool{}
	for _, s := range w.Servers {
		hl.refuse[s.Name] = true
	}
	cur, err := c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	p := plan.CalculateWith(cur, w, c.Policy())
	if len(p.Names(plan.Maint))+len(p.Names(plan.Delete)) != 3 {
		t.Fatalf("plan %+v: want the old servers parked or deleted", p)
	}
	applied, err := c.Apply(context.Background(), p)
	var refused plan.ServerErrors
	if !errors.As(err, &refused) || len(refused) != len(w.Servers)+3 || len(applied.Deferred) != 0 {
		t.Fatalf("apply: %v, deferred %v; want the entries refused and the old servers reported not done", err, applied.Deferred)
	}
	for _, f := range refused {
		if strings.HasPrefix(f.Server, "old-") && !strings.Contains(f.Error, "kept as it was") {
			t.Errorf("%s: %s", f.Server, f.Error)
		}
	}
	rs, _ := hl.ReadRuntime(context.Background(), "be")
	for _, s := range rs {
		if strings.HasPrefix(s.Name, "old-") && s.State != model.Ready {
			t.Errorf("%s taken out (%s) though no server entered", s.Name, s.State)
		}
	}
	if in, all := persisted(api); in != 3 || all != 3 {
		t.Errorf("haproxy.cfg: %d servers, %d in service; want the old ones alone, in service", all, in)
	}
}

// TestServersOthersAddedAreLeftAlone: the running HAProxy holds a server
// haproxy.cfg lacks that this service did not add (a server-template's
// slot, which the API lists apart, or one added by hand): Read does not
// list it, and no plan touches it.
func TestServersOthersAddedAreLeftAlone(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api, passed: true}
	hl.set(model.Server{Name: "srv1", Address: "127.0.3.1", State: model.Ready})
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	w := want(srv("node-a", "127.0.1.1", model.Ready))
	for range 3 {
		p, _ := syncOnce(t, c, w)
		for _, ch := range p.Changes {
			if ch.Name == "srv1" {
				t.Errorf("a plan changes srv1: %s", ch.Action)
			}
		}
	}
	cur, err := c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.Servers) != 1 || cur.Servers[0].Name != "node-a" {
		t.Errorf("read %+v, want node-a alone", cur.Servers)
	}
	if r := hl.running["srv1"]; r.State != model.Ready {
		t.Errorf("srv1 is %s, want left in service", r.State)
	}
	// Wanted under that name in a burst: refused, named, not changed.
	w = burst(dataplane.MaxRuntimeAdds + 5)
	hl.set(model.Server{Name: "node-05", Address: "127.0.3.5", State: model.Ready})
	cur, err = c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Apply(context.Background(), plan.CalculateWith(cur, w, c.Policy()))
	var refused plan.ServerErrors
	if !errors.As(err, &refused) || len(refused) != 1 || refused[0].Server != "node-05" {
		t.Errorf("apply: %v, want node-05 named as someone else's", err)
	}
	if r := hl.running["node-05"]; r.Address != "127.0.3.5" || r.State != model.Ready {
		t.Errorf("node-05 runs %+v, want left as it was", r.Server)
	}
}

// TestLeavingServersWhoseTransactionFailed: the socket took 27 servers
// out of traffic, then the transaction that was to persist them failed. The
// retry finds haproxy.cfg holding them in service while the running HAProxy
// does not, and writes them out again: a reload must not bring them back.
func TestLeavingServersWhoseTransactionFailed(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api, passed: true}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl), dataplane.WithDeleteBatch(100))
	all := burst(30)
	syncOnce(t, c, all)
	syncOnce(t, c, all)
	w := want(all.Servers[:3]...)
	cur, err := c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	api.InjectFault(dataplanetest.Fault{PathPrefix: "/v3/services/haproxy/transactions/", Writes: true, Status: http.StatusInternalServerError, Times: 1})
	if _, err := c.Apply(context.Background(), plan.CalculateWith(cur, w, c.Policy())); failure.Of(err) != failure.Temporary {
		t.Fatalf("apply: %v, want the conflict", err)
	}
	if in, _ := persisted(api); in != 30 {
		t.Fatalf("set-up: haproxy.cfg holds %d in service, want all 30 (the transaction failed)", in)
	}
	if p, _ := syncOnce(t, c, w); len(p.Names(plan.Maint)) != 27 {
		t.Errorf("retry: %v, want the 27 written out again", p.Names(plan.Maint))
	}
	if in, n := persisted(api); in != 3 || n != 30 {
		t.Errorf("after the retry haproxy.cfg holds %d of %d in service, want 3", in, n)
	}
}

// TestEntriesWhoseCommitFailed: the socket put more than MaxRuntimeAdds
// servers in service, then the transaction that was to write them failed:
// haproxy.cfg lacks them (a burst) or parks them (servers back from
// maintenance), and a reload would take them out. The retry finds them in
// service and not written (model.Runtime.Unwritten), sends nothing to the
// socket again, and writes them in service.
func TestEntriesWhoseCommitFailed(t *testing.T) {
	txFault := dataplanetest.Fault{PathPrefix: "/v3/services/haproxy/transactions/", Writes: true, Status: http.StatusInternalServerError, Times: 1}
	for _, tt := range []struct {
		name  string
		setUp func(*testing.T, *dataplane.Client, *healthLog, model.Backend)
		// failing: a server whose check fails once the socket put it in
		// service: its running check rules it, and it holds up no write
		failing string
	}{
		{"a burst", func(t *testing.T, c *dataplane.Client, hl *healthLog, w model.Backend) {
			syncOnce(t, c, w)
		}, ""},
		{"a burst, one of them failing its check since", func(t *testing.T, c *dataplane.Client, hl *healthLog, w model.Backend) {
			syncOnce(t, c, w)
		}, "node-00"},
		{"back from maintenance", func(t *testing.T, c *dataplane.Client, hl *healthLog, w model.Backend) {
			hl.passed = true
			syncOnce(t, c, w)
			syncOnce(t, c, w)
			parked := want()
			for _, s := range w.Servers {
				s.State = model.Maint
				parked.Servers = append(parked.Servers, s)
			}
			syncOnce(t, c, parked)
			hl.passed = false
			syncOnce(t, c, w)
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
			hl := &healthLog{api: api}
			u, _ := url.Parse(api.URL)
			c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
			w := burst(dataplane.MaxRuntimeAdds + 5)
			tt.setUp(t, c, hl, w)
			if in, _ := persisted(api); in != 0 {
				t.Fatalf("set-up: haproxy.cfg holds %d in service", in)
			}
			hl.passed = true
			api.InjectFault(txFault)
			cur, err := c.Read(context.Background(), "be")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Apply(context.Background(), plan.CalculateWith(cur, w, c.Policy())); err == nil {
				t.Fatal("the failed commit was not reported")
			}
			if in, _ := persisted(api); in != 0 {
				t.Fatalf("haproxy.cfg holds %d in service after the failed commit", in)
			}
			if tt.failing != "" {
				hl.dead = map[string]bool{tt.failing: true}
			}
			socket := len(hl.applied)
			p, _ := syncOnce(t, c, w)
			if len(p.Names(plan.Update)) != len(w.Servers) {
				t.Errorf("retry: %+v, want every server written again", p)
			}
			for _, rp := range hl.applied[socket:] {
				for _, ch := range rp.Changes {
					if ch.Action == plan.Add || ch.Gate {
						t.Errorf("retry sent %s gate=%v %s to the socket; it serves already", ch.Action, ch.Gate, ch.Name)
					}
				}
			}
			if in, all := persisted(api); in != len(w.Servers) || all != len(w.Servers) {
				t.Errorf("haproxy.cfg: %d servers, %d in service; want all, in service", all, in)
			}
			if p, a := syncOnce(t, c, w); p.HasChanges() || a.Writes != 0 {
				t.Errorf("last sync: %+v", p)
			}
		})
	}
}

func burst(n int) model.Backend {
	var servers []model.Server
	for i := range n {
		servers = append(servers, srv(fmt.Sprintf("node-%02d", i), fmt.Sprintf("127.0.1.%d", i+1), model.Ready))
	}
	return want(servers...)
}

// persisted counts the servers of "be" in haproxy.cfg and those written in
// service: what the reload a commit causes will load.
func persisted(api *dataplanetest.Server) (in, all int) {
	for _, s := range api.Servers("be") {
		all++
		if s.Maintenance != "enabled" && s.Weight != nil && *s.Weight > 0 {
			in++
		}
	}
	return in, all
}

// TestPathsAreEscapedOnce: a backend or server name with a character that
// needs escaping reaches the API escaped once ("be x" as "be%20x").
func TestPathsAreEscapedOnce(t *testing.T) {
	var got []string
	var mu stdsync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.EscapedPath())
		mu.Unlock()
		w.Header().Set("Configuration-Version", "1")
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/servers") {
			_, _ = w.Write([]byte(`[]`))
			return
		}
		_, _ = w.Write([]byte(`{"name":"be x"}`))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL + "/base%2Fpath")
	c := dataplane.New(u, dataplane.Auth{}, srv.Client())
	if _, err := c.Read(context.Background(), "be x"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadUp(context.Background(), "be x"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/base%2Fpath/v3/services/haproxy/configuration/backends/be%20x",
		"/base%2Fpath/v3/services/haproxy/configuration/backends/be%20x/servers",
		"/base%2Fpath/v3/services/haproxy/runtime/backends/be%20x/servers",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("paths %q, want %q", got, want)
	}
}

// TestARefusedServerChangeDoesNotStopTheOthers: the API refuses one server's
// write (422: its address breaks the schema); the next server's write still
// goes, and the error names the refused server and is not temporary.
func TestARefusedServerChangeDoesNotStopTheOthers(t *testing.T) {
	api, c := setup(t, dataplanetest.Options{AllowViolations: true}, dataplane.Auth{})
	ctx := context.Background()
	cur, _ := c.Read(ctx, "be")
	if _, err := c.Apply(ctx, plan.Calculate(cur, want(srv("a", "10.0.0.1", model.Ready), srv("b", "10.0.0.2", model.Ready)))); err != nil {
		t.Fatal(err)
	}
	cur, _ = c.Read(ctx, "be")
	bad, drained := srv("a", "10.0.0.1 backup", model.Ready), srv("b", "10.0.0.2", model.Maint)
	p := plan.Calculate(cur, want(bad, drained))
	_, err := c.Apply(ctx, p)
	var failed plan.ServerErrors
	if !errors.As(err, &failed) || len(failed) != 1 || failed[0].Server != "a" {
		t.Fatalf("err = %v", err)
	}
	var apiErr *dataplane.APIError
	if !errors.As(err, &apiErr) || apiErr.Class() == failure.Temporary {
		t.Errorf("err = %v, want a permanent API error inside", err)
	}
	if st := api.States("be"); st["10.0.0.2"] != "maint" || st["10.0.0.1"] != "ready" {
		t.Errorf("states %v", st)
	}
}

// TestShippedCheckIsWrittenAndReadBack: the shipped check timing (fast
// checks while DOWN or changing, connections observed) goes into
// haproxy.cfg on every server, is read back equal (the next sync changes
// nothing), and a server written before it, without them, is rewritten once.
func TestShippedCheckIsWrittenAndReadBack(t *testing.T) {
	api, c := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	shipped := model.Check{Inter: 5 * time.Second, FastInter: 100 * time.Millisecond, DownInter: 200 * time.Millisecond,
		Rise: 2, Fall: 2, OnError: "sudden-death"}
	older := srv("node-a", "127.0.1.1", model.Ready)
	syncOnce(t, c, want(older)) // written with the older check: no fastinter, downinter, observe
	a, b := older, srv("node-b", "127.0.1.2", model.Ready)
	a.Check, b.Check = shipped, shipped
	p, _ := syncOnce(t, c, want(a, b))
	if !reflect.DeepEqual(p.Names(plan.Update), []string{"node-a"}) || !reflect.DeepEqual(p.Names(plan.Add), []string{"node-b"}) {
		t.Fatalf("plan %+v, want node-a rewritten, node-b added", p)
	}
	for _, s := range api.Servers("be") {
		if s.Fastinter == nil || *s.Fastinter != 100 || s.Downinter == nil || *s.Downinter != 200 ||
			s.Observe != "layer4" || s.ErrorLimit != 1 || s.OnError != "sudden-death" {
			t.Errorf("server %s in haproxy.cfg: fastinter %v downinter %v observe %q error-limit %d on-error %q",
				s.Name, s.Fastinter, s.Downinter, s.Observe, s.ErrorLimit, s.OnError)
		}
	}
	if p, _ := syncOnce(t, c, want(a, b)); p.HasChanges() {
		t.Errorf("second sync changes %+v", p.Changes)
	}
}

// TestHealthPortCheckIsWrittenAndReadBack: servers checked on kube-proxy's
// health port get health_check_port, the backend an HTTP check of
// /healthz (one reload, the spec-validated fields), both read back equal;
// and going back to the servers' own port and tcp-check undoes both.
func TestHealthPortCheckIsWrittenAndReadBack(t *testing.T) {
	api, c := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	plain := want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready))
	syncOnce(t, c, plain)
	reloads := api.Reloads()
	w := want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready))
	w.Settings = model.Settings{Balance: "roundrobin", HTTPCheck: "/healthz"}
	for i := range w.Servers {
		w.Servers[i].Check.Port = 32001
	}
	if _, a := syncOnce(t, c, w); !a.Reload || api.Reloads() != reloads+1 {
		t.Errorf("%d reloads, want 1 (backend and servers in one transaction)", api.Reloads()-reloads)
	}
	be := api.Backend("be")
	if be.AdvCheck != "httpchk" || be.HttpchkParams == nil || be.HttpchkParams.Method != "GET" || be.HttpchkParams.URI != "/healthz" {
		t.Errorf("backend check %q %+v", be.AdvCheck, be.HttpchkParams)
	}
	for _, s := range api.Servers("be") {
		if s.HealthCheckPort == nil || *s.HealthCheckPort != 32001 {
			t.Errorf("server %s: health_check_port %v", s.Name, s.HealthCheckPort)
		}
	}
	if p, _ := syncOnce(t, c, w); p.HasChanges() {
		t.Errorf("second sync changes %+v %+v", p.Settings, p.Changes)
	}
	syncOnce(t, c, plain)
	be = api.Backend("be")
	if be.AdvCheck != "tcp-check" || be.HttpchkParams != nil {
		t.Errorf("back to tcp-check: %q %+v", be.AdvCheck, be.HttpchkParams)
	}
	for _, s := range api.Servers("be") {
		if s.HealthCheckPort != nil {
			t.Errorf("server %s still checks port %d", s.Name, *s.HealthCheckPort)
		}
	}
}
