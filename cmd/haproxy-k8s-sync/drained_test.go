package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestWaitDrainedAsksUntilDrained: a "waiting" answer is asked again at
// once, a 429 after a backoff; the drained answer ends the command with 0.
func TestWaitDrainedAsksUntilDrained(t *testing.T) {
	var calls atomic.Int32
	var bad atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		wait, err := time.ParseDuration(q.Get("wait"))
		if r.Method != http.MethodGet || r.URL.Path != "/drained" || q.Get("node") != "node-a" || err != nil || wait <= 0 || wait > drainAsk ||
			r.Header.Get("Authorization") != "Bearer tok-0123456789abcdef" {
			bad.Store(r.Method + " " + r.URL.String() + " " + r.Header.Get("Authorization"))
		}
		switch calls.Add(1) {
		case 1, 2:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"waiting","targets":[{"target":"t","backend":"be","server":"node-a","state":"drain","sessions":1,"drained":false}]}`))
		case 3:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"status":"error","error":"too many callers"}`))
		default:
			_, _ = w.Write([]byte(`{"status":"drained","targets":[{"target":"t","backend":"be","server":"node-a","state":"drain","sessions":0,"drained":true}]}`))
		}
	}))
	defer srv.Close()
	code, stdout, stderr := runCommand(t, "wait-drained --node node-a --timeout 30s "+srv.URL, "WEBHOOK_TOKEN=tok-0123456789abcdef")
	if code != 0 || !strings.Contains(stdout, `"status":"drained"`) || calls.Load() != 4 {
		t.Errorf("exit %d after %d calls; stdout %q stderr %q", code, calls.Load(), stdout, stderr)
	}
	if v := bad.Load(); v != nil {
		t.Errorf("a request not as the route wants it: %v", v)
	}
}

// TestWaitDrainedShortTimeoutGetsTheAnswer: with a timeout of 20 s or less,
// the service, which answers once the wait it was asked for has passed (as
// handler's /drained does), still answers before the command gives up: the
// timeout message quotes it. Before, the command asked it to wait the whole
// timeout, cut its own request when the timeout passed and said "no answer".
func TestWaitDrainedShortTimeoutGetsTheAnswer(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		wait, err := time.ParseDuration(r.URL.Query().Get("wait"))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		time.Sleep(wait + 20*time.Millisecond) // the wait, then one last read of HAProxy
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"status":"waiting","targets":[{"target":"http://haproxy-a:5555","backend":"be","server":"node-a","state":"drain","sessions":2,"drained":false}]}`))
	}))
	defer srv.Close()
	start := time.Now()
	code, stdout, stderr := runCommand(t, "wait-drained --node node-a --timeout 1500ms "+srv.URL, "WEBHOOK_AUTH=none")
	if code != 1 || strings.Contains(stderr, "no answer") || !strings.Contains(stderr, "not drained after the timeout: http://haproxy-a:5555/be drain, 2 sessions") ||
		!strings.Contains(stdout, `"waiting"`) {
		t.Errorf("exit %d after %d calls; stdout %q stderr %q", code, calls.Load(), stdout, stderr)
	}
	if took := time.Since(start); took > 3*time.Second || calls.Load() > 6 {
		t.Errorf("took %s and %d calls for a 1.5s timeout", took, calls.Load())
	}
}

// TestWaitDrainedGivesUp: past its timeout the command exits 1 and says
// which target holds the server; a refusal (401) ends it at once.
func TestWaitDrainedGivesUp(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("Authorization") == "" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"status":"error","error":"missing bearer token"}`))
			return
		}
		time.Sleep(50 * time.Millisecond)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"status":"waiting","targets":[{"target":"http://haproxy-a:5555","backend":"be","server":"node-a","state":"drain","sessions":3,"drained":false}]}`))
	}))
	defer srv.Close()
	code, stdout, stderr := runCommand(t, "wait-drained --ip 127.0.0.9 --timeout 1s "+srv.URL, "WEBHOOK_TOKEN=tok-0123456789abcdef")
	if code != 1 || !strings.Contains(stderr, "not drained after the timeout: http://haproxy-a:5555/be drain, 3 sessions") || !strings.Contains(stdout, `"waiting"`) {
		t.Errorf("timeout: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	calls.Store(0)
	code, _, stderr = runCommand(t, "wait-drained --ip 127.0.0.9 --timeout 10s "+srv.URL, "WEBHOOK_AUTH=none")
	if code != 1 || calls.Load() != 1 || !strings.Contains(stderr, "401") {
		t.Errorf("refused: exit %d after %d calls, stderr %q", code, calls.Load(), stderr)
	}
	for _, args := range []string{"--timeout 1s " + srv.URL, "--node a --ip 127.0.0.1 " + srv.URL, "--node a", "--node a ftp://x"} {
		if code, _, _ := runCommand(t, "wait-drained "+args); code != 2 {
			t.Errorf("wait-drained %s: exit %d, want 2", args, code)
		}
	}
}

// TestCopyTo: the copy is this very executable, and it runs.
func TestCopyTo(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := runCommand(t, "copy-to "+dir); code != 0 {
		t.Fatalf("copy-to: exit %d, %s", code, stderr)
	}
	self, _ := os.ReadFile(os.Args[0])
	copied, err := os.ReadFile(filepath.Join(dir, "haproxy-k8s-sync"))
	if err != nil || !bytes.Equal(self, copied) {
		t.Fatalf("the copy differs from the executable (%v)", err)
	}
	if code, _, _ := runCommand(t, "copy-to "+filepath.Join(dir, "missing", "deeper")); code != 1 {
		t.Errorf("into a missing directory: exit %d, want 1", code)
	}
}
