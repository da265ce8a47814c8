package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// demoCluster is the demo's cluster: three Nodes on loopback, nodePort 30080.
var demoCluster = filepath.Join("..", "..", "testdata", "demo", "cluster.yaml")

// TestSubcommandHelpExitsZero: --help and -h of every command print its
// usage on stdout and exit 0; serve has no --dry-run.
func TestSubcommandHelpExitsZero(t *testing.T) {
	for _, args := range []string{"serve --help", "reconcile --help", "reconcile -h", "wait-drained --help", "trigger --help"} {
		code, stdout, stderr := runCommand(t, args)
		name := strings.Fields(args)[0]
		if code != 0 || !strings.HasPrefix(stdout, "usage: haproxy-k8s-sync "+name) || stderr != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
		if name == "serve" && strings.Contains(stdout, "dry-run") {
			t.Errorf("serve shows a --dry-run it does not have: %s", stdout)
		}
	}
	code, _, stderr := runCommand(t, "serve --dry-run")
	if code != 2 || !strings.Contains(stderr, "-dry-run") || !strings.Contains(stderr, "usage: haproxy-k8s-sync serve") {
		t.Errorf("serve --dry-run: exit %d, stderr %q", code, stderr)
	}
}

// TestKubeContextIsAConfigurationError: a context the kubeconfig lacks is
// invalid configuration: exit 2 and one plain line naming the variable.
func TestKubeContextIsAConfigurationError(t *testing.T) {
	code, _, stderr := runCommand(t, "reconcile", "HAPROXY_DATAPLANE_URL=http://h:5555", "KUBECONFIG="+kubeconfig(t), "KUBE_CONTEXT=nope")
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if code != 2 || len(lines) != 1 || lines[0] != `configuration: KUBE_CONTEXT: "nope" is not a context of the kubeconfig (it has ["x"])` {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// TestDryRunFromManifestsNeedsNoHAProxy: a dry run from a dump plans
// against an empty backend when no HAProxy URL is set, and shows each
// server's address:port, state and weight; a Service the dump lacks is a
// permanent failure. Without --dry-run an HAProxy URL is still required.
func TestDryRunFromManifestsNeedsNoHAProxy(t *testing.T) {
	code, stdout, stderr := runCommand(t, "reconcile --dry-run --manifests "+demoCluster, "ALLOWED_SERVER_CIDRS=127.0.0.0/8", "HAPROXY_WEIGHT=endpoints")
	var res struct {
		Status  string
		Targets []struct {
			Target string
			Add    []string
			Plan   []json.RawMessage
		}
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil || res.Status != "planned" || len(res.Targets) != 1 {
		t.Fatalf("exit %d, stdout %s, stderr %s", code, stdout, stderr)
	}
	tr := res.Targets[0]
	if !strings.Contains(tr.Target, "no HAProxy URL set: planned against an empty backend") || strings.Join(tr.Add, ",") != "node-a,node-b,node-c" {
		t.Errorf("target %+v", tr)
	}
	plan := fmt.Sprintf("%s", tr.Plan)
	for _, want := range []string{
		`{"server":"node-a","action":"add","to":{"address":"127.0.1.1:30080","state":"ready","weight":2}}`,
		`{"server":"node-c","action":"add","to":{"address":"127.0.1.3:30080","state":"drain","weight":1}}`,
	} {
		if !strings.Contains(plan, want) {
			t.Errorf("plan %s lacks %s", plan, want)
		}
	}
	// The configured line says what this run does: no watch for a one-shot.
	if !strings.Contains(stderr, `"command":"reconcile","dryRun":true`) || !strings.Contains(stderr, "backends=ingress-nginx target=node") || strings.Contains(stderr, "watch") {
		t.Errorf("configured line: %s", stderr)
	}

	code, stdout, _ = runCommand(t, "reconcile --dry-run --manifests "+demoCluster, "INGRESS_SERVICE_NAME=nope")
	if code != 1 || !strings.Contains(stdout, `service not found","errorClass":"permanent"`) {
		t.Errorf("no such Service in the dump: exit %d, stdout %s", code, stdout)
	}
	code, _, stderr = runCommand(t, "reconcile --manifests "+demoCluster)
	if code != 2 || !strings.HasPrefix(stderr, "configuration: HAPROXY_DATAPLANE_URL: must be set") {
		t.Errorf("a real run without HAProxy: exit %d, stderr %q", code, stderr)
	}
}

// TestUnresolvableHAProxyFailsFast: a Data Plane URL whose host does not
// resolve (a placeholder such as http://haproxy:5555) fails in
// milliseconds, like a refused connection, with the cause; it is not
// retried for the whole RECONCILE_TIMEOUT.
func TestUnresolvableHAProxyFailsFast(t *testing.T) {
	if _, err := net.LookupHost("haproxy-k8s-sync.invalid"); err == nil || !strings.Contains(err.Error(), "no such host") {
		t.Skipf("this machine's resolver does not answer NXDOMAIN: %v", err)
	}
	start := time.Now()
	code, stdout, _ := runCommand(t, "reconcile --manifests "+demoCluster, "HAPROXY_DATAPLANE_URL=http://haproxy-k8s-sync.invalid:5555", "RECONCILE_TIMEOUT=20s")
	if code != 1 || time.Since(start) > 10*time.Second || !strings.Contains(stdout, "no such host") || !strings.Contains(stdout, `"errorClass":"unreachable"`) {
		t.Errorf("exit %d after %s, stdout %s", code, time.Since(start), stdout)
	}
}

// TestSIGTERMEndsTheRunningReconcile: SIGTERM while a reconcile hangs on a
// target that accepts and never answers, with a caller queued behind it:
// the process drains (the running reconcile may end by itself), a second
// signal ends the running reconcile, both callers get 503 "shutting down"
// (the queued one's reconcile never starts), and the process exits 0.
// Without the second signal the reconcile is ended at RECONCILE_TIMEOUT + 2s.
func TestSIGTERMEndsTheRunningReconcile(t *testing.T) {
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	cmd, base, stderr := startServe(t, "serve --manifests "+demoCluster, "/readyz", "HAPROXY_DATAPLANE_URL=http://"+hang.Addr().String(), "ALLOWED_SERVER_CIDRS=127.0.0.0/8",
		"RECONCILE_TIMEOUT=20s", "WEBHOOK_AUTH=none")
	type answer struct {
		code int
		body string
		at   time.Time
	}
	post := func(c chan<- answer) {
		resp, err := http.Post(base+"/reconcile", "", nil)
		if err != nil {
			c <- answer{code: -1, body: err.Error()}
			return
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		c <- answer{resp.StatusCode, b.String(), time.Now()}
	}
	running, queued := make(chan answer, 1), make(chan answer, 1)
	go post(running)
	time.Sleep(300 * time.Millisecond) // the first reconcile hangs on the target
	go post(queued)
	time.Sleep(300 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(500 * time.Millisecond)
	if cmd.ProcessState != nil || len(queued) > 0 || len(running) > 0 {
		t.Fatalf("did not drain: %v", cmd.ProcessState)
	}
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM) // end it now
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no exit 5s after the second signal\n%s", stderr.String())
	}
	for name, c := range map[string]chan answer{"running": running, "queued": queued} {
		if a := <-c; a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "shutting down") || a.at.Sub(start) > 3*time.Second {
			t.Errorf("%s caller: %d %s after %s", name, a.code, a.body, a.at.Sub(start))
		}
	}
}

// TestTriggerSaysWhatIsMissing: with no token and WEBHOOK_AUTH not none,
// trigger says so and sends nothing; a URL without a scheme is taken as
// http://; a failure's JSON answer is kept whole (up to 4 KiB), not cut at
// 200 bytes.
func TestTriggerSaysWhatIsMissing(t *testing.T) {
	var calls atomic.Int32
	cause := strings.Repeat("x", 1000) + " the cause at the end"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, `{"status":"error","error":%q}`, cause)
	}))
	defer srv.Close()
	code, _, stderr := runTrigger(t, srv.URL)
	if code != 2 || calls.Load() != 0 || !strings.Contains(stderr, "no webhook token: set WEBHOOK_TOKEN or WEBHOOK_TOKEN_FILE") {
		t.Errorf("no token: exit %d after %d calls, stderr %q", code, calls.Load(), stderr)
	}
	hostPort := strings.TrimPrefix(srv.URL, "http://")
	code, _, stderr = runTrigger(t, hostPort, "WEBHOOK_AUTH=none")
	if code != 1 || calls.Load() != 1 || !strings.Contains(stderr, "the cause at the end") {
		t.Errorf("%s without a scheme: exit %d after %d calls, stderr %q", hostPort, code, calls.Load(), stderr)
	}
	if _, err := os.Stat(os.DevNull); err != nil {
		t.Skip(err)
	}
}

// TestWaitDrainedUnknownServer: a server no target has is an error (exit
// 1, the service's message) unless --missing-ok; a server seen and then
// gone is drained.
func TestWaitDrainedUnknownServer(t *testing.T) {
	var calls atomic.Int32
	var seen atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		q := r.URL.Query()
		switch {
		case q.Get("node") == "node-a" && !seen.Load():
			seen.Store(true)
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"waiting","targets":[{"target":"t","backend":"be","server":"node-a","state":"drain","sessions":1,"drained":false}]}`))
		case q.Get("missingOk") == "true":
			_, _ = w.Write([]byte(`{"status":"drained","targets":[{"target":"t","backend":"be","state":"absent","sessions":0,"drained":true}]}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"status":"error","error":"no target has a server for node \"nodee-a\": is the Node name right?"}`))
		}
	}))
	defer srv.Close()
	code, _, stderr := runCommand(t, "wait-drained --node nodee-a --timeout 10s "+srv.URL, "WEBHOOK_AUTH=none")
	if code != 1 || calls.Load() != 1 || !strings.Contains(stderr, "is the Node name right?") {
		t.Errorf("a typo: exit %d after %d calls, stderr %q", code, calls.Load(), stderr)
	}
	if code, stdout, stderr := runCommand(t, "wait-drained --node nodee-a --missing-ok --timeout 10s "+srv.URL, "WEBHOOK_AUTH=none"); code != 0 || !strings.Contains(stdout, "drained") {
		t.Errorf("--missing-ok: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, stderr := runCommand(t, "wait-drained --node node-a --timeout 10s "+srv.URL, "WEBHOOK_AUTH=none"); code != 0 || !strings.Contains(stdout, "drained") {
		t.Errorf("seen, then gone: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
