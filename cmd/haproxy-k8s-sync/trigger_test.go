package main

import (
	"bytes"
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
)

// runTrigger runs `trigger args` as the command and returns its exit code,
// stdout and stderr.
func runTrigger(t *testing.T, args string, env ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := command(t, "trigger "+args, env...)
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
	code, _, errOut := runTrigger(t, fmt.Sprintf("--timeout 1500ms http://127.0.0.1:%d/reconcile", port))
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
	port := freePort(t)
	var stderr bytes.Buffer
	cmd := command(t, "serve", "HAPROXY_DATAPLANE_URL=http://127.0.0.1:1", "KUBECONFIG="+kubeconfig(t), fmt.Sprintf("PORT=%d", port))
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitReady(t, base+"/healthz", &stderr)
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
