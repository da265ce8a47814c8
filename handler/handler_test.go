package handler_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sethvargo/go-retry"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/auth"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile/reconciletest"
)

// stack is the handler over a real reconciler and drv.
func stack(t *testing.T, drv reconcile.Driver, token string, log ...*slog.Logger) *httptest.Server {
	t.Helper()
	rec := &reconcile.Reconciler{
		Source: &desiredtest.Source{In: desiredtest.PodCluster("ns", "web", "10.244.0.1")},
		Options: desired.Options{Mode: desired.PodMode, Backends: []desired.PortBackend{{Backend: "be"}},
			Settings: model.Settings{Balance: "roundrobin", TCPCheck: true}, Check: model.Check{Inter: time.Second, Rise: 1, Fall: 1}},
		Targets: []reconcile.Driver{drv},
		Timeout: 300 * time.Millisecond,
		Backoff: func() retry.Backoff { return retry.NewConstant(20 * time.Millisecond) },
	}
	cfg := handler.Config{Reconciler: rec}
	if token != "" {
		tok, err := auth.NewToken(token)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Auth = tok
	}
	if len(log) > 0 {
		rec.Log, cfg.Log = log[0], log[0]
	}
	srv := httptest.NewServer(handler.New(cfg))
	t.Cleanup(srv.Close)
	return srv
}

type answer struct {
	status int
	header http.Header
	body   map[string]any
}

func send(t *testing.T, method, u, contentType, body string, header ...string) answer {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
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

func TestReconcileAppliedThenUnchanged(t *testing.T) {
	d := &reconciletest.Driver{}
	srv := stack(t, d, "")
	a := send(t, "POST", srv.URL+"/reconcile", "", "")
	if a.status != 200 || a.body["status"] != "applied" || a.body["desired"] != 1.0 {
		t.Fatalf("first: %d %v", a.status, a.body)
	}
	tr := a.body["targets"].([]any)[0].(map[string]any)
	for _, k := range []string{"target", "backend", "add", "update", "drain", "maint", "delete", "reload", "attempts", "error"} {
		if _, ok := tr[k]; !ok {
			t.Errorf("target result lacks %q: %v", k, tr)
		}
	}
	if _, ok := a.body["durationMs"]; !ok {
		t.Error("no durationMs")
	}
	a = send(t, "POST", srv.URL+"/", "application/json", "{}")
	if a.status != 200 || a.body["status"] != "unchanged" {
		t.Fatalf("second: %d %v", a.status, a.body)
	}
	if len(d.Servers()) != 1 {
		t.Errorf("servers = %v", d.Servers())
	}
}

func TestDryRunAndPlan(t *testing.T) {
	d := &reconciletest.Driver{}
	srv := stack(t, d, "")
	for _, u := range []string{"/reconcile?dryRun=true"} {
		if a := send(t, "POST", srv.URL+u, "", ""); a.status != 200 || a.body["status"] != "planned" {
			t.Errorf("%s: %d %v", u, a.status, a.body)
		}
	}
	if a := send(t, "GET", srv.URL+"/plan", "", ""); a.status != 200 || a.body["status"] != "planned" {
		t.Errorf("/plan: %d %v", a.status, a.body)
	}
	if _, applies, _ := d.Counts(); applies != 0 {
		t.Error("dry run wrote")
	}
}

func TestDataplaneDownIs503WithRetryAfter(t *testing.T) {
	srv := stack(t, &reconciletest.Driver{ReadErr: &failure.NetworkError{Err: fmt.Errorf("dial tcp 127.0.0.1:1: %w", syscall.ECONNREFUSED)}}, "")
	a := send(t, "POST", srv.URL+"/reconcile", "", "")
	if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" {
		t.Fatalf("status %d Retry-After %q", a.status, a.header.Get("Retry-After"))
	}
	if a.body["status"] != "error" || a.body["error"] == "" {
		t.Errorf("body %v", a.body)
	}
	tr := a.body["targets"].([]any)[0].(map[string]any)
	// Refused: one attempt, not retried until the reconcile's deadline.
	if !strings.Contains(tr["error"].(string), "connection refused") || tr["attempts"].(float64) != 1 {
		t.Errorf("target %v", tr)
	}
}

func TestBadRequests(t *testing.T) {
	d := &reconciletest.Driver{}
	srv := stack(t, d, "s3cret-0123456789")
	auth := []string{"Authorization", "Bearer s3cret-0123456789"}
	tests := []struct {
		name, method, path, ctype, body string
		header                          []string
		status                          int
	}{
		{"no token", "POST", "/reconcile", "", "", nil, 401},
		{"plan without a token", "GET", "/plan", "", "", nil, 401},
		{"dry run without a token", "POST", "/reconcile?dryRun=true", "", "", nil, 401},
		{"a huge bad watch type is not echoed", "POST", "/reconcile", "application/json", `{"type":"` + strings.Repeat("Z", 500_000) + `","object":{}}`, auth, 400},
		{"wrong token", "POST", "/reconcile", "", "", []string{"Authorization", "Bearer nope"}, 401},
		{"basic instead of bearer", "POST", "/", "", "", []string{"Authorization", "Basic czNjcmV0"}, 401},
		{"body over 1 MiB", "POST", "/reconcile", "application/json", `"` + strings.Repeat("x", handler.MaxBody) + `"`, auth, 413},
		{"unsupported content type", "POST", "/reconcile", "application/xml", "<a/>", auth, 415},
		{"malformed JSON", "POST", "/reconcile", "application/json", "{", auth, 400},
		{"wrong method", "DELETE", "/reconcile", "", "", auth, 405},
		{"GET on reconcile", "GET", "/reconcile", "", "", auth, 405},
		{"unknown route", "GET", "/nope", "", "", nil, 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := send(t, tt.method, srv.URL+tt.path, tt.ctype, tt.body, tt.header...)
			if a.status != tt.status || a.body["status"] != "error" || a.body["error"] == "" {
				t.Errorf("%d %v, want %d and a JSON error", a.status, a.body, tt.status)
			}
		})
	}
	if reads, applies, _ := d.Counts(); reads+applies != 0 {
		t.Error("a rejected request reached HAProxy")
	}
	if a := send(t, "POST", srv.URL+"/reconcile", "", "", auth...); a.status != 200 {
		t.Errorf("with token: %d %v", a.status, a.body)
	}
}

// TestErrorsQuoteLittle: no error answer quotes more than ~200 bytes of what
// was sent.
func TestErrorsQuoteLittle(t *testing.T) {
	srv := stack(t, &reconciletest.Driver{}, "s3cret-0123456789")
	auth := []string{"Authorization", "Bearer s3cret-0123456789"}
	huge := strings.Repeat("Z", 100_000)
	for name, req := range map[string][2]string{
		"watch type":   {"application/json", `{"type":"` + huge + `","object":{}}`},
		"content type": {"application/" + huge, "x"},
	} {
		a := send(t, "POST", srv.URL+"/reconcile", req[0], req[1], auth...)
		if msg, _ := a.body["error"].(string); a.status/100 != 4 || len(msg) > 400 {
			t.Errorf("%s: %d, error of %d bytes", name, a.status, len(msg))
		}
	}
}

// TestFormAndTextBodiesArePokes: curl -d '{}' sends a form content type, -F
// multipart, --data-binary with text/plain: each is a poke.
func TestFormAndTextBodiesArePokes(t *testing.T) {
	srv := stack(t, &reconciletest.Driver{}, "s3cret-0123456789")
	auth := []string{"Authorization", "Bearer s3cret-0123456789"}
	for ctype, body := range map[string]string{
		"application/x-www-form-urlencoded":      "{}",
		"multipart/form-data; boundary=XYZ":      "--XYZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nb\r\n--XYZ--\r\n",
		"text/plain; charset=utf-8":              "poke",
		"application/x-www-form-urlencoded; a=b": "not even a form",
	} {
		if a := send(t, "POST", srv.URL+"/reconcile", ctype, body, auth...); a.status != 200 || a.body["status"] == "error" {
			t.Errorf("%s: %d %v", ctype, a.status, a.body)
		}
	}
}

// TestUnauthenticatedBodiesAreNeverRead: a refused request is answered from
// its headers, while its body has not even arrived.
func TestUnauthenticatedBodiesAreNeverRead(t *testing.T) {
	srv := stack(t, &reconciletest.Driver{}, "s3cret-0123456789")
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A promised megabyte of body, of which nothing is sent.
	fmt.Fprintf(conn, "POST /reconcile HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong-token-0123456\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer while the body is missing: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("%d %v", resp.StatusCode, resp.Header)
	}
}

func TestProbesNeedNoToken(t *testing.T) {
	srv := stack(t, &reconciletest.Driver{}, "s3cret-0123456789")
	for _, p := range []string{"/healthz", "/readyz"} {
		if a := send(t, "GET", srv.URL+p, "", ""); a.status != 200 {
			t.Errorf("%s: %d", p, a.status)
		}
	}
}

func TestReadyzFollowsReadiness(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(handler.New(handler.Config{Ready: ready.Load}))
	defer srv.Close()
	if a := send(t, "GET", srv.URL+"/readyz", "", ""); a.status != 503 {
		t.Errorf("not ready: %d", a.status)
	}
	ready.Store(true)
	if a := send(t, "GET", srv.URL+"/readyz", "", ""); a.status != 200 {
		t.Errorf("ready: %d", a.status)
	}
}

// counting is a reconciler that counts runs and takes a little time.
type counting struct{ runs atomic.Int32 }

func (c *counting) Reconcile(ctx context.Context, dryRun bool) (reconcile.Result, error) {
	c.runs.Add(1)
	time.Sleep(200 * time.Millisecond)
	return reconcile.Result{Status: reconcile.StatusUnchanged, Targets: []reconcile.TargetResult{}}, nil
}

func TestConcurrentPostsShareReconciles(t *testing.T) {
	rec := &counting{}
	srv := httptest.NewServer(handler.New(handler.Config{Reconciler: rec, MaxWaiters: 100}))
	defer srv.Close()
	var wg sync.WaitGroup
	codes := make([]int, 100)
	start := make(chan struct{})
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := http.Post(srv.URL+"/reconcile", "", nil)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	close(start)
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Errorf("caller %d: %d", i, c)
		}
	}
	// The first caller starts a run; the others arrive while it runs and share
	// the next one; a straggler scheduled late may need a third.
	if n := rec.runs.Load(); n > 3 {
		t.Errorf("%d reconciles for 100 concurrent POSTs", n)
	}
}

func TestServerTimeoutsAreSet(t *testing.T) {
	s := handler.Server(":0", http.NotFoundHandler(), 30*time.Second)
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.IdleTimeout <= 0 || s.WriteTimeout <= 30*time.Second || s.MaxHeaderBytes <= 0 {
		t.Errorf("timeouts: %+v", s)
	}
}

// TestSlowClientIsCutOff: a client that never finishes its headers is
// disconnected after ReadHeaderTimeout instead of holding the connection.
func TestSlowClientIsCutOff(t *testing.T) {
	s := handler.Server("127.0.0.1:0", http.NotFoundHandler(), time.Second)
	s.ReadHeaderTimeout = 200 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("POST /reconcile HTTP/1.1\r\nHost: x\r\n")) // and never the end
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("connection not closed by the server: %v", err)
	}
}

// blocking is a reconciler that runs until its context ends (an upstream that
// never answers), counting runs by kind.
type blocking struct{ real, dry atomic.Int32 }

func (b *blocking) Reconcile(ctx context.Context, dryRun bool) (reconcile.Result, error) {
	if dryRun {
		b.dry.Add(1)
	} else {
		b.real.Add(1)
	}
	<-ctx.Done()
	return reconcile.Result{Status: reconcile.StatusError}, ctx.Err()
}

// TestWorkPerCallerIsBounded: against an upstream that never answers, at
// most MaxWaiters callers wait for a reconcile and MaxDryRuns for a dry run
// (which share one run); the excess is answered 429 with Retry-After at
// once; the waiters get 503 when Wait is up.
func TestWorkPerCallerIsBounded(t *testing.T) {
	rec := &blocking{}
	wait := 1500 * time.Millisecond
	srv := httptest.NewServer(handler.New(handler.Config{Reconciler: rec, MaxWaiters: 10, MaxDryRuns: 5, Wait: wait}))
	defer srv.Close()
	type answer struct {
		code       int
		retryAfter string
		took       time.Duration
	}
	var mu sync.Mutex
	got := map[string][]answer{}
	var wg sync.WaitGroup
	for i := range 60 {
		method, path := "POST", "/reconcile"
		if i%2 == 1 {
			method, path = "GET", "/plan"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			req, _ := http.NewRequest(method, srv.URL+path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			got[path] = append(got[path], answer{resp.StatusCode, resp.Header.Get("Retry-After"), time.Since(start)})
			mu.Unlock()
		}()
	}
	wg.Wait()
	for path, limit := range map[string]int{"/reconcile": 10, "/plan": 5} {
		waited, refused := 0, 0
		for _, a := range got[path] {
			switch {
			case a.code == http.StatusTooManyRequests && a.retryAfter != "" && a.took < wait:
				refused++
			case a.code == http.StatusServiceUnavailable && a.retryAfter != "" && a.took >= wait && a.took < wait+time.Second:
				waited++
			default:
				t.Errorf("%s: %+v", path, a)
			}
		}
		if waited != limit || refused != 30-limit {
			t.Errorf("%s: %d waited, %d refused; want %d and %d", path, waited, refused, limit, 30-limit)
		}
	}
	if rec.dry.Load() != 1 {
		t.Errorf("%d dry runs for concurrent /plan calls, want 1 shared", rec.dry.Load())
	}
}

// runnerFunc is a reconcile.Runner.
type runnerFunc func(ctx context.Context, dryRun bool) (reconcile.Result, error)

func (f runnerFunc) Reconcile(ctx context.Context, dryRun bool) (reconcile.Result, error) {
	return f(ctx, dryRun)
}

// TestLateAnswerCarriesTheCause: a caller that arrives while a reconcile
// runs waits for it, then for its own; when its wait ends first, the 503
// says why the one before failed (each failed target's last error), not
// only "did not end in time".
func TestLateAnswerCarriesTheCause(t *testing.T) {
	var runs atomic.Int32
	release, hold := make(chan struct{}), make(chan struct{})
	defer close(hold)
	rec := runnerFunc(func(context.Context, bool) (reconcile.Result, error) {
		if runs.Add(1) == 1 {
			<-release
			return reconcile.Result{Status: reconcile.StatusError, Targets: []reconcile.TargetResult{{
				Target: "http://haproxy:5555", Backend: "ingress-nginx",
				Error: "context deadline exceeded after 20 attempts; last error: dial tcp 10.0.0.9:5555: i/o timeout"}}}, reconcile.ErrTargets
		}
		<-hold
		return reconcile.Result{}, nil
	})
	srv := httptest.NewServer(handler.New(handler.Config{Reconciler: rec, Wait: 300 * time.Millisecond}))
	defer srv.Close()
	go func() { _, _ = http.Post(srv.URL+"/reconcile", "", nil) }()
	for runs.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	go func() { time.Sleep(50 * time.Millisecond); close(release) }()
	a := send(t, http.MethodPost, srv.URL+"/reconcile", "", "")
	msg, _ := a.body["error"].(string)
	if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" || a.body["status"] != "error" ||
		!strings.HasPrefix(msg, "the reconcile did not end in time (waited 300ms)") ||
		!strings.Contains(msg, "http://haproxy:5555 backend ingress-nginx: context deadline exceeded after 20 attempts; last error: dial tcp 10.0.0.9:5555: i/o timeout") {
		t.Errorf("%d %v", a.status, a.body)
	}
}
