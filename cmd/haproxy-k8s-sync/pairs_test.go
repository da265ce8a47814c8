package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// pairWorld is two real HAProxy, each with its test Data Plane API.
type pairWorld struct {
	h   [2]*haproxytest.HAProxy
	api [2]*dataplanetest.Server
}

func newPairWorld(t *testing.T) *pairWorld {
	t.Helper()
	var w pairWorld
	rr := "roundrobin"
	for i := range w.h {
		w.h[i] = haproxytest.Start(t, haproxytest.Backend{Name: "web", Lines: []string{"balance roundrobin", "option tcp-check"}})
		w.api[i] = dataplanetest.New(t, dataplanetest.Options{RuntimeSocket: w.h[i].AdminSocket})
		w.api[i].AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "web", Mode: "tcp", AdvCheck: "tcp-check", Balance: &models.Balance{Algorithm: &rr}}})
	}
	return &w
}

// manifests writes the Service web with pods at ips, for --manifests.
func writeManifests(t *testing.T, path string, ips ...string) {
	t.Helper()
	in := desiredtest.PodCluster("shop", "web", ips...)
	in.Service.APIVersion, in.Service.Kind = "v1", "Service"
	in.Slices[0].APIVersion, in.Slices[0].Kind = "discovery.k8s.io/v1", "EndpointSlice"
	var docs bytes.Buffer
	for _, o := range []any{in.Service, &in.Slices[0]} {
		j, _ := json.Marshal(o)
		docs.Write(j)
		docs.WriteString("\n")
	}
	if err := os.WriteFile(path, docs.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func pairEnv(manifests, dataplane, runtime string) []string {
	return []string{"HAPROXY_DATAPLANE_URL=" + dataplane, "HAPROXY_RUNTIME_URL=" + runtime, "TARGET_ADDRESS=pod",
		"INGRESS_NAMESPACE=shop", "INGRESS_SERVICE_NAME=web", "HAPROXY_BACKEND_NAME=web", "ALLOWED_SERVER_CIDRS=127.0.0.0/8",
		"WEBHOOK_AUTH=none", "WATCH=false", "RECONCILE_TIMEOUT=10s"}
}

// TestStartRefusesAMismatchedPair: runtime sockets listed in the other
// order than their Data Plane URLs: the command refuses to start, naming
// each pair, both URLs and what each reported, and writes nothing.
func TestStartRefusesAMismatchedPair(t *testing.T) {
	w := newPairWorld(t)
	manifests := filepath.Join(t.TempDir(), "cluster.json")
	writeManifests(t, manifests, "127.0.0.51")
	for _, cmd := range []string{"serve --manifests " + manifests, "reconcile --manifests " + manifests} {
		code, stderr := runWithin(t, 20*time.Second, cmd, pairEnv(manifests, w.api[0].URL+","+w.api[1].URL, w.h[1].RuntimeURL()+","+w.h[0].RuntimeURL())...)
		if code != 2 {
			t.Fatalf("%s: exit %d, want 2\n%s", cmd, code, stderr)
		}
		for i, j := range []int{1, 0} {
			pid := func(h *haproxytest.HAProxy) string {
				out, err := h.Command("show info")
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range strings.Split(out, "\n") {
					if p, ok := strings.CutPrefix(l, "Pid: "); ok {
						return p
					}
				}
				return "?"
			}
			want := fmt.Sprintf("configuration: HAPROXY_DATAPLANE_URL %s and HAPROXY_RUNTIME_URL %s (pair %d) reach different HAProxy (process ids differ): the Data Plane API reports pid %s,",
				w.api[i].URL, w.h[j].RuntimeURL(), i+1, pid(w.h[i]))
			if i == 1 {
				want = strings.TrimPrefix(want, "configuration: ")
			}
			if !strings.Contains(stderr, want) || !strings.Contains(stderr, "the runtime socket pid "+pid(w.h[j])+",") {
				t.Errorf("%s: stderr lacks %q for pair %d:\n%s", cmd, want, i+1, stderr)
			}
		}
		for i, api := range w.api {
			if api.Writes() != 0 {
				t.Errorf("%s: API %d got %d writes", cmd, i, api.Writes())
			}
		}
	}
	// The same URLs, paired right: no refusal.
	_, base, _ := startServe(t, "serve --manifests "+manifests, "/readyz", pairEnv(manifests, w.api[0].URL+","+w.api[1].URL, w.h[0].RuntimeURL()+","+w.h[1].RuntimeURL())...)
	if code, body := postReconcile(t, base+"/reconcile"); code != 200 {
		t.Fatalf("paired right: %d %s", code, body)
	}
}

// runWithin runs the command and returns its exit code and stderr; one
// still running after d (a serve that did not refuse) is killed: -1.
func runWithin(t *testing.T, d time.Duration, args string, env ...string) (int, string) {
	t.Helper()
	var stderr lockedBuffer
	cmd := command(t, args, env...)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode(), stderr.String()
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		return -1, stderr.String()
	}
}

func postReconcile(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestMismatchLaterStopsWrites: a target whose Data Plane API turns to
// another HAProxy while the service runs gets a permanent error (503), a
// metric at 1, one log line however many reconciles see it, and no write;
// the other target is written to. Paired right again, writes resume.
func TestMismatchLaterStopsWrites(t *testing.T) {
	w := newPairWorld(t)
	manifests := filepath.Join(t.TempDir(), "cluster.json")
	writeManifests(t, manifests, "127.0.0.51")
	logs := &lockedBuffer{}
	port := freePort(t)
	cmd := command(t, "serve --manifests "+manifests, append(pairEnv(manifests, w.api[0].URL+","+w.api[1].URL, w.h[0].RuntimeURL()+","+w.h[1].RuntimeURL()),
		fmt.Sprintf("PORT=%d", port))...)
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready: %s", logs.String())
		}
	}
	if code, body := postReconcile(t, base+"/reconcile"); code != 200 {
		t.Fatalf("paired right: %d %s", code, body)
	}
	metric := fmt.Sprintf("haproxy_k8s_sync_target_mismatched{target=%q} ", w.api[0].URL)
	if m := getBody(t, base+"/metrics"); !strings.Contains(m, metric+"0") {
		t.Errorf("metrics lack %s0", metric)
	}

	w.api[0].SetRuntimeSocket(w.h[1].AdminSocket) // the first API now reaches the second HAProxy
	writeManifests(t, manifests, "127.0.0.51", "127.0.0.52")
	before := w.api[0].Writes()
	code, body := postReconcile(t, base+"/reconcile")
	var res struct {
		Targets []struct{ Target, Error, ErrorClass string }
	}
	if code != 503 || json.Unmarshal([]byte(body), &res) != nil {
		t.Fatalf("mismatched: %d %s", code, body)
	}
	var failed int
	for _, tr := range res.Targets {
		if tr.Target == w.api[0].URL {
			failed++
			if tr.ErrorClass != "permanent" || !strings.Contains(tr.Error, "(pair 1) reach different HAProxy") {
				t.Errorf("target result %+v", tr)
			}
		} else if tr.Error != "" {
			t.Errorf("the other target failed: %+v", tr)
		}
	}
	if failed == 0 {
		t.Fatalf("no result for %s: %s", w.api[0].URL, body)
	}
	if code, _ := postReconcile(t, base+"/reconcile"); code != 503 {
		t.Errorf("still mismatched: %d", code)
	}
	if n := w.api[0].Writes() - before; n != 0 {
		t.Errorf("%d writes to the mismatched target", n)
	}
	if len(w.api[1].Servers("web")) != 2 {
		t.Errorf("the other target has %d servers, want 2", len(w.api[1].Servers("web")))
	}
	if m := getBody(t, base+"/metrics"); !strings.Contains(m, metric+"1") {
		t.Errorf("metrics lack %s1", metric)
	}
	if n := strings.Count(logs.String(), "reach different HAProxy: nothing is written"); n != 1 {
		t.Errorf("%d log lines for the mismatch, want 1:\n%s", n, logs.String())
	}

	w.api[0].SetRuntimeSocket(w.h[0].AdminSocket)
	code, body = postReconcile(t, base+"/reconcile")
	if code != 200 || len(w.api[0].Servers("web")) != 2 {
		t.Fatalf("paired right again: %d, %d servers: %s", code, len(w.api[0].Servers("web")), body)
	}
	if m := getBody(t, base+"/metrics"); !strings.Contains(m, metric+"0") {
		t.Errorf("metrics lack %s0 once resumed", metric)
	}
	if !strings.Contains(logs.String(), "writes resume") {
		t.Errorf("no log line for the end of the mismatch:\n%s", logs.String())
	}
}

// lockedBuffer is a process's output, read while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
