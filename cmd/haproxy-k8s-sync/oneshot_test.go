package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// TestReconcileHAPairOneDown: the one-shot reconcile with both members of
// an HA pair in HAPROXY_RUNTIME_URL, the first one's admin socket dead (the
// file a crashed HAProxy left, nothing listening). It does not stop at that
// error: the live member's new servers pass their check and are put in
// service (UP, neither gated nor in maintenance), traffic through its
// frontend reaches every node, and the run exits 1 naming the dead target,
// in its log and in the JSON result.
func TestReconcileHAPairOneDown(t *testing.T) {
	if _, err := haproxytest.Binary(); err != nil {
		t.Skip(err)
	}
	h := haproxytest.Start(t, haproxytest.Backend{Name: "web", Lines: []string{"balance roundrobin", "option tcp-check", "option redispatch 1", "retries 3"}})
	dir := t.TempDir()
	dead := filepath.Join(dir, "dead.sock")
	ln, err := net.Listen("unix", dead)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()

	nodes := []string{"127.0.5.1", "127.0.5.2"}
	port := freePort(t)
	for i, addr := range nodes {
		haproxytest.Listen(t, fmt.Sprintf("node-%d", i), fmt.Sprintf("%s:%d", addr, port))
	}
	cluster := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cluster, []byte(threeNodes(port, freePort(t), nodes)), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, stdout, stderr := runCommand(t, "reconcile --manifests "+cluster, "TARGET_ADDRESS=node",
		"HAPROXY_RUNTIME_URL=unix://"+dead+","+h.RuntimeURL(), "HAPROXY_BACKENDS=http=web",
		"INGRESS_NAMESPACE=ingress-nginx", "INGRESS_SERVICE_NAME=ingress-nginx", "ALLOWED_SERVER_CIDRS=127.0.0.0/8", "LOG_LEVEL=info")
	t.Logf("exit %d after %s\nstdout %s\nstderr %s", code, time.Since(start), stdout, stderr)

	var res struct {
		Status, Error, ErrorClass string
		Targets                   []struct {
			Target, Error, ErrorClass string
			Add, Waiting              []string
		}
	}
	if code != 1 || json.Unmarshal([]byte(stdout), &res) != nil || len(res.Targets) != 2 {
		t.Fatalf("exit %d, want 1 with a result for each target", code)
	}
	named := "unix://" + dead + " (unreachable)"
	if res.Status != "error" || !strings.Contains(res.Error, named) || res.ErrorClass != "unreachable" {
		t.Errorf("result status %q, error %q, class %q; want error naming %s", res.Status, res.Error, res.ErrorClass, named)
	}
	for _, tr := range res.Targets {
		switch tr.Target {
		case "unix://" + dead:
			if tr.Error == "" || tr.ErrorClass != "unreachable" {
				t.Errorf("dead target: error %q, class %q", tr.Error, tr.ErrorClass)
			}
		case h.RuntimeURL():
			if tr.Error != "" || len(tr.Waiting) > 0 || !slices.Equal(tr.Add, []string{"node-0", "node-1"}) {
				t.Errorf("live target: %+v, want node-0 and node-1 added, none waiting", tr)
			}
		default:
			t.Errorf("unexpected target %q", tr.Target)
		}
	}
	if !strings.Contains(stderr, `"level":"ERROR","msg":"reconcile failed on a target`) || !strings.Contains(stderr, named) {
		t.Errorf("no error line naming %s", named)
	}

	servers := h.Servers(t, "web")
	if len(servers) != 2 {
		t.Fatalf("live HAProxy has %d servers, want 2: %+v", len(servers), servers)
	}
	for name, s := range servers {
		if !s.Up() || s.Maint() || s.Drain() {
			t.Errorf("%s: up %v, maint %v, drain (gated) %v; want in service", name, s.Up(), s.Maint(), s.Drain())
		}
	}
	got := haproxytest.Spread(h.Frontends["web"], 20)
	if got[""] > 0 || got["node-0"] == 0 || got["node-1"] == 0 {
		t.Errorf("connections through the live frontend: %v; want both nodes, none failed", got)
	}
}
