package handler_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/auth"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/trigger"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// countingRec counts reconciles; it can be told to panic.
type countingRec struct {
	runs  atomic.Int32
	panic bool
}

func (c *countingRec) Reconcile(ctx context.Context, dryRun bool) (reconcile.Result, error) {
	if c.panic {
		panic("boom")
	}
	c.runs.Add(1)
	return reconcile.Result{Status: reconcile.StatusUnchanged, Targets: []reconcile.TargetResult{}}, nil
}

func replay(t *testing.T, base, path, file string, extra ...string) (int, map[string]any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "events", file))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, base+path, rec.Body)
	req.Header = rec.Header
	req.ContentLength = rec.ContentLength
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("%s: answer is not JSON: %v", file, err)
	}
	return resp.StatusCode, body
}

// TestEveryRecordedEventOnEveryRoute: reconcile (200), ignore (202, no
// reconcile) or reject (400/415 with a JSON error) exactly as recorded.
func TestEveryRecordedEventOnEveryRoute(t *testing.T) {
	rec := &countingRec{}
	target := trigger.Target{Namespace: "ingress-nginx", Service: "ingress-nginx", NodeMode: true}
	srv := httptest.NewServer(handler.New(handler.Config{Reconciler: rec, Target: target, Auth: mustToken(t, "tok-0123456789abcdef")}))
	defer srv.Close()
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "events", "*.http"))
	if len(files) < 20 {
		t.Fatalf("only %d recorded events", len(files))
	}
	for _, path := range []string{"/", "/reconcile"} {
		for _, f := range files {
			name := filepath.Base(f)
			want := http.StatusOK
			switch {
			case name == "bad-content-type.http":
				want = http.StatusUnsupportedMediaType
			case strings.HasPrefix(name, "bad-"):
				want = http.StatusBadRequest
			case strings.Contains(name, "other") && !strings.Contains(name, "mixed"), name == "watch-bookmark.http":
				want = http.StatusAccepted
			}
			t.Run(path+name, func(t *testing.T) {
				before := rec.runs.Load()
				code, body := replay(t, srv.URL, path, name, "Authorization", "Bearer tok-0123456789abcdef")
				if code != want {
					t.Fatalf("status %d %v, want %d", code, body, want)
				}
				ran := rec.runs.Load() != before
				switch want {
				case http.StatusOK:
					if !ran || body["status"] != "unchanged" {
						t.Errorf("no reconcile: %v", body)
					}
				case http.StatusAccepted:
					if ran || body["status"] != "ignored" || body["reason"] == "" {
						t.Errorf("ignored event: ran=%v body %v", ran, body)
					}
				default:
					if ran || body["status"] != "error" || body["error"] == "" {
						t.Errorf("rejected event: ran=%v body %v", ran, body)
					}
				}
			})
			// Without the token every one of them is refused.
			if code, _ := replay(t, srv.URL, path, name); code != http.StatusUnauthorized {
				t.Errorf("%s%s without token: %d", path, name, code)
			}
		}
	}
}

func TestPanicBecomes500AndServingGoesOn(t *testing.T) {
	var logs bytes.Buffer
	rec := &countingRec{panic: true}
	srv := httptest.NewServer(handler.New(handler.Config{Reconciler: rec, Log: slog.New(slog.NewJSONHandler(&logs, nil))}))
	defer srv.Close()
	a := send(t, "GET", srv.URL+"/plan", "", "")
	if a.status != 500 || a.body["status"] != "error" {
		t.Fatalf("%d %v", a.status, a.body)
	}
	if !strings.Contains(logs.String(), "panic in handler") {
		t.Errorf("panic not logged: %s", logs.String())
	}
	if a := send(t, "GET", srv.URL+"/healthz", "", ""); a.status != 200 {
		t.Errorf("after a panic: healthz %d", a.status)
	}
}

func TestLogsNeverShowSecrets(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// The Data Plane URL carries a password, and the target is down so that
	// errors (with the URL) are logged and answered.
	u, _ := url.Parse("http://admin:dp-password-123@127.0.0.1:1")
	srv := stack(t, dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: time.Second}), "webhook-token-456", log)
	send(t, "POST", srv.URL+"/reconcile", "", "", "Authorization", "Bearer wrong-token-789")
	a := send(t, "POST", srv.URL+"/reconcile", "", "", "Authorization", "Bearer webhook-token-456")
	if a.status != http.StatusServiceUnavailable {
		t.Fatalf("%d", a.status)
	}
	if !strings.Contains(logs.String(), "reconcile failed") {
		t.Fatalf("nothing logged: %s", logs.String())
	}
	out := logs.String() + " " + jsonString(a.body)
	for _, secret := range []string{"dp-password-123", "webhook-token-456", "wrong-token-789"} {
		if strings.Contains(out, secret) {
			t.Errorf("%q appears in logs or answers: %s", secret, out)
		}
	}
}

func jsonString(v any) string { b, _ := json.Marshal(v); return string(b) }

func mustToken(t *testing.T, tok string) *auth.Token {
	t.Helper()
	a, err := auth.NewToken(tok)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
