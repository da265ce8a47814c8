package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
)

// runTrigger runs `trigger args` as the command and returns its exit code,
// stdout and stderr.
func runTrigger(t *testing.T, args string, env ...string) (int, string, string) {
	t.Helper()
	return runCommand(t, "trigger "+args, env...)
}

// runCommand runs the command line args and returns its exit code, stdout
// and stderr.
func runCommand(t *testing.T, args string, env ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := command(t, args, env...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

func TestTriggerRetriesUntilAnswered(t *testing.T) {
	var calls atomic.Int32
	var auth, body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		auth.Store(r.Header.Get("Authorization"))
		body.Store(string(b))
		if r.Method != http.MethodPost || r.URL.Path != "/reconcile" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		if calls.Add(1) <= 2 { // a restarting service, then a failed upstream
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{"status":"unchanged"}`))
	}))
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("a-token-from-a-file-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runTrigger(t, srv.URL+"/reconcile", "WEBHOOK_TOKEN_FILE="+tokenFile)
	if code != 0 || strings.TrimSpace(out) != `{"status":"unchanged"}` {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if calls.Load() != 3 {
		t.Errorf("%d calls, want 3", calls.Load())
	}
	if got := auth.Load(); got != "Bearer a-token-from-a-file-0123" {
		t.Errorf("Authorization %q", got)
	}
	if got := body.Load(); got != "" {
		t.Errorf("body %q, want empty", got)
	}
}

func TestTriggerFailsAtOnceOnAFinalAnswer(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"status":"error","error":"missing or wrong bearer token"}`))
	}))
	defer srv.Close()
	start := time.Now()
	code, _, errOut := runTrigger(t, srv.URL, "WEBHOOK_TOKEN=secret-token-never-printed")
	if code != 1 || calls.Load() != 1 || time.Since(start) > 5*time.Second {
		t.Fatalf("exit %d after %d calls", code, calls.Load())
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "401") || !strings.Contains(lines[0], "wrong bearer token") {
		t.Errorf("stderr %q", errOut)
	}
	if strings.Contains(errOut, "secret-token") {
		t.Errorf("the token was printed: %q", errOut)
	}
}

func TestTriggerGivesUpWithTheLastError(t *testing.T) {
	port := freePort(t) // nothing listens there
	code, _, errOut := runTrigger(t, fmt.Sprintf("--timeout 1500ms http://127.0.0.1:%d/reconcile", port), "WEBHOOK_AUTH=none")
	if code != 1 || !strings.Contains(errOut, "gave up after") || !strings.Contains(errOut, "connection refused") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestTriggerBadUsage(t *testing.T) {
	for _, args := range []string{"", "ftp://x/", "http://user:pw@host/reconcile", "http://a http://b"} {
		code, _, errOut := runTrigger(t, args)
		if code != 2 || strings.Contains(errOut, "pw@") {
			t.Errorf("trigger %q: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// TestServeNotReadyUntilWatching: with WATCH (the default) and an API server
// that cannot be reached, the process is live but not ready, and counts the
// watches' restarts.
func TestServeNotReadyUntilWatching(t *testing.T) {
	cmd, base, stderr := startServe(t, "serve", "/healthz", "HAPROXY_DATAPLANE_URL=http://127.0.0.1:1", "KUBECONFIG="+kubeconfig(t), "WEBHOOK_AUTH=none")
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("/readyz %d with no API server", resp.StatusCode)
		}
		time.Sleep(100 * time.Millisecond)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(m), `haproxy_k8s_sync_watch_restarts_total{kind="endpointslice"}`) {
		t.Errorf("no watch restarts counted:\n%s", m)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, stderr.String())
	}
}

// TestBoundedUnderLoad runs the service against a Kubernetes API and a Data
// Plane API that never answer, and sends 200 authorized POSTs and 200
// authorized /plan calls at once. The service's goroutines stay bounded
// (go_goroutines from its own /metrics), the callers beyond the waiting
// limits get 429 with Retry-After at once (within a second when measured on
// CI's 2 cores, race detector on; the assertion leaves room for a loaded
// machine but stays far below the waiters' 8 s), and the others 503 when
// the reconcile's deadline has passed.
func TestBoundedUnderLoad(t *testing.T) {
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hung.Close()
	defer hung.CloseClientConnections()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n", hung.URL)
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	const token = "load-test-token-0123456789"
	_, base, _ := startServe(t, "serve", "/readyz", "HAPROXY_DATAPLANE_URL="+hung.URL, "KUBECONFIG="+kc,
		"WATCH=false", "WEBHOOK_TOKEN="+token, "RECONCILE_TIMEOUT=6s", "LOG_LEVEL=error")

	goroutines := func() int {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Error(err)
			return -1
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
				var n int
				fmt.Sscan(v, &n)
				return n
			}
		}
		t.Error("no go_goroutines in /metrics")
		return -1
	}
	idle := goroutines()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1}, Timeout: 20 * time.Second}
	type answer struct {
		code       int
		retryAfter string
		took       time.Duration
	}
	const calls = 400
	answers := make(chan answer, calls)
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // sample the service's goroutines while the load lasts
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			if n := int64(goroutines()); n > peak.Load() {
				peak.Store(n)
			}
		}
	}()
	for i := range calls {
		method, path := http.MethodPost, "/reconcile"
		if i%2 == 1 {
			method, path = http.MethodGet, "/plan"
		}
		go func() {
			req, _ := http.NewRequest(method, base+path, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			start := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				answers <- answer{code: -1, took: time.Since(start)}
				return
			}
			resp.Body.Close()
			answers <- answer{resp.StatusCode, resp.Header.Get("Retry-After"), time.Since(start)}
		}()
	}
	counts := map[int]int{}
	var slowest429 time.Duration
	for range calls {
		a := <-answers
		counts[a.code]++
		switch a.code {
		case http.StatusTooManyRequests:
			slowest429 = max(slowest429, a.took)
			if a.retryAfter == "" {
				t.Error("429 without Retry-After")
			}
		case http.StatusServiceUnavailable:
			if a.retryAfter == "" {
				t.Error("503 without Retry-After")
			}
		default:
			t.Errorf("answer %d after %s", a.code, a.took)
		}
	}
	close(stop)
	<-sampled
	t.Logf("answers %v; goroutines idle %d, peak %d; slowest 429 %s", counts, idle, peak.Load(), slowest429)
	if counts[http.StatusServiceUnavailable] > handler.DefaultMaxWaiters+handler.DefaultMaxDryRuns {
		t.Errorf("%d callers waited, more than the limits allow", counts[http.StatusServiceUnavailable])
	}
	if peak.Load() > 150 {
		t.Errorf("the service ran %d goroutines under load", peak.Load())
	}
	if slowest429 > 3*time.Second {
		t.Errorf("the excess waited up to %s for its 429", slowest429)
	}
}

// TestReconcileManifestsNodeLifecycle: offline, `reconcile --manifests` gives
// the Nodes of testdata/lifecycle the same states as the live cluster does
// (sync/e2e TestNodeLifecycle), here through the test Data Plane API.
func TestReconcileManifestsNodeLifecycle(t *testing.T) {
	api := dataplanetest.New(t, dataplanetest.Options{})
	rr := "roundrobin"
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "web", Mode: "tcp", AdvCheck: "tcp-check", Balance: &models.Balance{Algorithm: &rr}}})
	out, err := command(t, "reconcile --manifests ../../testdata/lifecycle/cluster.yaml", "HAPROXY_DATAPLANE_URL="+api.URL,
		"INGRESS_NAMESPACE=shop", "INGRESS_SERVICE_NAME=web", "CORDONED_NODES=drain", "ALLOWED_SERVER_CIDRS=192.0.2.0/24").Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := map[string]string{"192.0.2.1": "ready", "192.0.2.3": "drain", "192.0.2.4": "drain", "192.0.2.5": "maint", "192.0.2.6": "ready"}
	if got := api.States("web"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("states %v, want %v", got, want)
	}
	var res struct {
		Skipped []struct{ Endpoint, Reason string }
	}
	if json.Unmarshal(out, &res) != nil || len(res.Skipped) != 1 || res.Skipped[0].Reason != "invalid-annotation" || !strings.Contains(res.Skipped[0].Endpoint, "bad") {
		t.Errorf("result %s", out)
	}
}

// TestTriggerStopsOnAPermanentFailure: a 503 whose answer says the failure
// is permanent (a backend HAProxy cannot manage as configured) is not tried
// again until the timeout; a temporary one is.
func TestTriggerStopsOnAPermanentFailure(t *testing.T) {
	for _, tt := range []struct {
		class string
		calls int32
	}{{"permanent", 1}, {"temporary", 3}} {
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) >= 3 {
				_, _ = w.Write([]byte(`{"status":"unchanged"}`))
				return
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"status":"error","error":"haproxy target failed: 1 of 1","errorClass":%q}`, tt.class)
		}))
		code, _, errOut := runTrigger(t, "--timeout 20s "+srv.URL, "WEBHOOK_TOKEN=secret-token-0123456789")
		srv.Close()
		if calls.Load() != tt.calls || (code == 0) != (tt.class == "temporary") {
			t.Errorf("%s: exit %d after %d calls, want %d; stderr %q", tt.class, code, calls.Load(), tt.calls, errOut)
		}
	}
}
