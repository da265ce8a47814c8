package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// TestReconcileHAPairOneDown: the one-shot reconcile with both members of
// an HA pair in HAPROXY_RUNTIME_URL, the first one's admin socket dead (the
// file a crashed HAProxy left, nothing listening) or hung (it accepts and
// never answers, until RECONCILE_TIMEOUT). It does not stop at that
// member's error: the live member's new servers pass their check and are
// put in service (UP, neither gated nor in maintenance), traffic through its
// frontend reaches every node, and the run exits 1 naming the failed
// target, in its log and in the JSON result. The hung member holds nothing
// back: the live one serves long before its timeout ends the run.
func TestReconcileHAPairOneDown(t *testing.T) {
	if _, err := haproxytest.Binary(); err != nil {
		t.Skip(err)
	}
	for _, tt := range []struct {
		name  string
		down  func(t *testing.T) string // the failed member's HAPROXY_RUNTIME_URL
		class string
		hangs bool // until RECONCILE_TIMEOUT, which ends the run
	}{
		{"a dead socket", deadSocket, "unreachable", false},
		{"a hung socket", hungSocket, "temporary", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := haproxytest.Start(t, haproxytest.Backend{Name: "web", Lines: []string{"balance roundrobin", "option tcp-check", "option redispatch 1", "retries 3"}})
			down := tt.down(t)
			nodes := []string{"127.0.5.1", "127.0.5.2"}
			port := freePort(t)
			for i, addr := range nodes {
				haproxytest.Listen(t, fmt.Sprintf("node-%d", i), fmt.Sprintf("%s:%d", addr, port))
			}
			cluster := filepath.Join(t.TempDir(), "cluster.yaml")
			if err := os.WriteFile(cluster, []byte(threeNodes(port, freePort(t), nodes)), 0o600); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			served := watchInService(t, h, len(nodes))
			code, stdout, stderr := runCommand(t, "reconcile --manifests "+cluster, "TARGET_ADDRESS=node",
				"HAPROXY_RUNTIME_URL="+down+","+h.RuntimeURL(), "HAPROXY_BACKENDS=http=web", "RECONCILE_TIMEOUT=4s",
				"INGRESS_NAMESPACE=ingress-nginx", "INGRESS_SERVICE_NAME=ingress-nginx", "ALLOWED_SERVER_CIDRS=127.0.0.0/8", "LOG_LEVEL=info")
			ended := time.Since(start)
			t.Logf("exit %d after %s, live member in service after %s\nstdout %s\nstderr %s", code, ended, served(), stdout, stderr)

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
			named := down + " (" + tt.class + ")"
			if res.Status != "error" || !strings.Contains(res.Error, named) || res.ErrorClass != tt.class {
				t.Errorf("result status %q, error %q, class %q; want error naming %s", res.Status, res.Error, res.ErrorClass, named)
			}
			for _, tr := range res.Targets {
				switch tr.Target {
				case down:
					if tr.Error == "" || tr.ErrorClass != tt.class {
						t.Errorf("failed target: error %q, class %q", tr.Error, tr.ErrorClass)
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
			if in := served(); tt.hangs && (in == 0 || in > ended-time.Second) {
				t.Errorf("the live member served after %s, the run ended after %s: held back by the failed one", in, ended)
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
		})
	}
}

// deadSocket is the admin socket file a crashed HAProxy left: nothing
// listens on it.
func deadSocket(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "dead.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	return "unix://" + path
}

// hungSocket accepts connections and never answers, until the test ends.
func hungSocket(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return "tcp://" + ln.Addr().String()
}

// watchInService polls h until n servers of web are in service (UP,
// neither gated nor in maintenance); served returns how long after the
// call that was, or 0 if not yet. The polls end with the test.
func watchInService(t *testing.T, h *haproxytest.HAProxy, n int) (served func() time.Duration) {
	start := time.Now()
	var at atomic.Int64
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			reply, err := h.Command("show servers state web")
			if err != nil {
				continue
			}
			in := 0
			for _, s := range haproxytest.ParseServers(reply, "web") {
				if s.Up() && !s.Maint() && !s.Drain() {
					in++
				}
			}
			if in == n {
				at.Store(int64(time.Since(start)))
				return
			}
		}
	}()
	return func() time.Duration { return time.Duration(at.Load()) }
}
