package e2e

// The HTTP handler over the whole reconcile path and the spec-validating test
// Data Plane API: Data Plane API faults, several targets, several replicas.
// No Kubernetes API or HAProxy process is needed here; these sit with the
// end-to-end tests because they exercise the whole system.

import (
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"
	"github.com/sethvargo/go-retry"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// instance is one running copy of the service (a replica) over a test API.
func instance(t *testing.T, src reconcile.Source, apiURLs ...string) *httptest.Server {
	t.Helper()
	return instanceWith(t, src, time.Second, apiURLs...)
}

func instanceWith(t *testing.T, src reconcile.Source, timeout time.Duration, apiURLs ...string) *httptest.Server {
	t.Helper()
	var targets []reconcile.Driver
	for _, raw := range apiURLs {
		u, _ := url.Parse(raw)
		// A short per-request timeout, as in the service (a third of the
		// reconcile timeout): a hung request leaves room for retries.
		targets = append(targets, dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: 300 * time.Millisecond}))
	}
	rec := &reconcile.Reconciler{
		Source: src,
		Options: desired.Options{Mode: desired.PodMode, Backends: []desired.PortBackend{{Backend: "be"}},
			Settings: model.Settings{Balance: "roundrobin", TCPCheck: true}, Check: model.Check{Inter: time.Second, Rise: 1, Fall: 1}},
		Targets:      targets,
		Timeout:      timeout,
		GuardPercent: 100,
		Backoff: func() retry.Backoff {
			return retry.WithJitterPercent(50, retry.WithCappedDuration(80*time.Millisecond, retry.NewExponential(5*time.Millisecond)))
		},
	}
	srv := httptest.NewServer(handler.New(handler.Config{Reconciler: rec}))
	t.Cleanup(srv.Close)
	return srv
}

func backendAPI(t *testing.T) *dataplanetest.Server {
	t.Helper()
	api := dataplanetest.New(t, dataplanetest.Options{})
	rr := "roundrobin"
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "be", Mode: "tcp", Balance: &models.Balance{Algorithm: &rr}, AdvCheck: "tcp-check"}})
	return api
}

// TestFaultsNeverLoseHealthyServers: for each fault of the Data Plane API,
// a reconcile that needs every kind of write (runtime PUTs, a transaction
// with an add and a delete) answers 503 with Retry-After, leaves every
// server that was in traffic in HAProxy, and the first reconcile after
// recovery makes the state exact with no transaction left open.
func TestFaultsNeverLoseHealthyServers(t *testing.T) {
	const txPath = "/v3/services/haproxy/transactions"
	faults := []struct {
		name  string
		fault dataplanetest.Fault
		check error // a failing configuration check at commit instead
	}{
		{name: "API down (connections dropped)", fault: dataplanetest.Fault{Drop: true}},
		{name: "500", fault: dataplanetest.Fault{Status: 500}},
		{name: "502 from a proxy", fault: dataplanetest.Fault{Status: 502, Message: "<html>Bad Gateway</html>"}},
		{name: "503 while reloading", fault: dataplanetest.Fault{Status: 503, RetryAfter: "1"}},
		{name: "429", fault: dataplanetest.Fault{Status: 429, RetryAfter: "1"}},
		{name: "hanging answers", fault: dataplanetest.Fault{Hang: true}},
		{name: "409 storm on every write", fault: dataplanetest.Fault{Writes: true, Status: 409, Message: "version mismatch: another writer"}},
		{name: "writes dropped after the first", fault: dataplanetest.Fault{Writes: true, Skip: 1, Drop: true}},
		{name: "commit and its cleanup fail with 500", fault: dataplanetest.Fault{Writes: true, PathPrefix: txPath + "/", Status: 500}},
		{name: "commit hangs", fault: dataplanetest.Fault{Writes: true, PathPrefix: txPath + "/", Hang: true}},
		{name: "commit fails haproxy -c (400)", check: errors.New("[ALERT] parsing [/etc/haproxy/haproxy.cfg:42]: unknown keyword")},
	}
	for _, tt := range faults {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api := backendAPI(t)
			start := desiredtest.PodCluster("ns", "web", "10.244.0.1", "10.244.0.2", "10.244.0.3")
			src := desiredtest.NewLive(start)
			srv := instance(t, src, api.URL)
			if a := send(t, "POST", srv.URL+"/reconcile", "", ""); a.status != 200 {
				t.Fatalf("initial sync: %d %v", a.status, a.body)
			}
			before := api.States("be")

			// .2 drains (runtime PUT), .3 goes (park + delete in a
			// transaction), .4 comes (in the same transaction).
			src.Set(desiredtest.Terminating(desiredtest.PodCluster("ns", "web", "10.244.0.1", "10.244.0.2", "10.244.0.4"), "10.244.0.2"))
			if tt.check != nil {
				api.SetCheck(func(dataplanetest.Config) error { return tt.check })
			} else {
				api.InjectFault(tt.fault)
			}
			a := send(t, "POST", srv.URL+"/reconcile", "", "")
			if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" || a.body["status"] != "error" {
				t.Fatalf("during the fault: %d Retry-After=%q %v", a.status, a.header.Get("Retry-After"), a.body)
			}
			tr := a.body["targets"].([]any)[0].(map[string]any)
			if tr["error"] == "" {
				t.Errorf("target result has no error: %v", tr)
			}
			if tt.check == nil && api.FaultsHit() == 0 {
				t.Fatal("the fault never fired")
			}
			during := api.States("be")
			for addr := range before {
				if _, ok := during[addr]; !ok {
					t.Errorf("%s was deleted during the fault: %v", addr, during)
				}
			}
			if during["10.244.0.1"] != "ready" {
				t.Errorf("the untouched server left traffic: %v", during)
			}
			if tt.check != nil && api.OpenTransactions() != 0 {
				t.Errorf("%d transactions left after a failed commit", api.OpenTransactions())
			}

			api.ClearFault()
			api.SetCheck(nil)
			a = send(t, "POST", srv.URL+"/reconcile", "", "")
			if a.status != 200 {
				t.Fatalf("after recovery: %d %v", a.status, a.body)
			}
			want := map[string]string{"10.244.0.1": "ready", "10.244.0.2": "drain", "10.244.0.4": "ready"}
			if got := api.States("be"); !maps.Equal(got, want) {
				t.Errorf("after recovery: %v, want %v (%v)", got, want, a.body)
			}
			if n := api.OpenTransactions(); n != 0 {
				t.Errorf("%d transactions left open after recovery", n)
			}
		})
	}
}

// TestOneDeadTargetDoesNotHoldTheOther: with two HAProxy instances, one
// hanging on every request, the other converges while the first still
// hangs, and the answer (503, at the reconcile timeout) lists both.
func TestOneDeadTargetDoesNotHoldTheOther(t *testing.T) {
	good, dead := backendAPI(t), backendAPI(t)
	dead.InjectFault(dataplanetest.Fault{Hang: true})
	src := desiredtest.NewLive(desiredtest.PodCluster("ns", "web", "10.244.0.1", "10.244.0.2"))
	srv := instance(t, src, dead.URL, good.URL)

	done := make(chan answer, 1)
	go func() { done <- send(t, "POST", srv.URL+"/reconcile", "", "") }()
	want := map[string]string{"10.244.0.1": "ready", "10.244.0.2": "ready"}
	converged := false
	for !converged {
		select {
		case a := <-done:
			t.Fatalf("answered before the good target converged: %d %v", a.status, a.body)
		case <-time.After(5 * time.Millisecond):
			converged = maps.Equal(good.States("be"), want)
		}
	}
	if dead.FaultsHit() == 0 {
		t.Fatal("the dead target was never called")
	}
	a := <-done
	if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" {
		t.Fatalf("%d %v", a.status, a.body)
	}
	targets := a.body["targets"].([]any)
	if len(targets) != 2 {
		t.Fatalf("targets %v", targets)
	}
	var errs []string
	for _, x := range targets {
		tr := x.(map[string]any)
		errs = append(errs, tr["target"].(string)+"="+tr["error"].(string))
	}
	sort.Strings(errs)
	deadErr, goodErr := targets[0].(map[string]any)["error"].(string), targets[1].(map[string]any)["error"].(string)
	if deadErr == "" || goodErr != "" || !strings.Contains(deadErr, "attempts") {
		t.Errorf("target errors: %v", errs)
	}
}

// answer is an HTTP answer with its JSON body.
type answer struct {
	status int
	header http.Header
	body   map[string]any
}

// send sends one request; the answer must be JSON.
func send(t *testing.T, method, u, contentType, body string) answer {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header}
	if err := json.Unmarshal(b, &a.body); err != nil {
		t.Fatalf("%s %s: body is not JSON: %q", method, u, b)
	}
	return a
}
