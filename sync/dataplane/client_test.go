package dataplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
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
