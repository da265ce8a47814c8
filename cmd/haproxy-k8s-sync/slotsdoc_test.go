package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// debianReload are the ExecReload lines of Debian's haproxy.service, which
// the drop-in must list again after its own.
var debianReload = []string{"ExecReload=/usr/sbin/haproxy -Ws -f $CONFIG -c -q $EXTRAOPTS", "ExecReload=/bin/kill -USR2 $MAINPID"}

// slotResult is what the reconcile command says of one backend.
type slotResult struct {
	Targets []struct {
		Add      []string
		Update   []string
		Slots    map[string]int
		Overflow []string
		NoSlots  bool
		Error    string
	}
}

// TestDocumentedSlots runs the slot lines of docs/haproxy.md on a real
// HAProxy (paths and addresses replaced), syncs a Service of three Nodes
// into them with the reconcile command, then reloads HAProxy as the
// documented drop-in does, its command run exactly as written (its socket
// and directory replaced), under client load through the frontend: no
// request fails, every filled slot keeps its address, port and state, and
// the next reconcile has nothing to add. With fewer slots than Nodes, the
// rest is added with add server, and the result and a warning say so;
// without slots, that every server is added bare.
func TestDocumentedSlots(t *testing.T) {
	if _, err := haproxytest.Binary(); err != nil {
		t.Skip(err)
	}
	if _, err := exec.LookPath("socat"); err != nil {
		t.Skip("the documented drop-in needs socat (make deps installs it)")
	}
	secs := sections(docBlock(t, "<!-- slots: run by TestDocumentedSlots -->"))
	const state = "/var/lib/haproxy/server-state"
	if g := secs["global"]; len(g) != 1 || g[0] != "server-state-file "+state {
		t.Fatalf("the slots' global section is %q, want server-state-file %s", g, state)
	}
	backend := secs["backend ingress_http"]
	if len(backend) == 0 {
		t.Fatal("the slots block has no backend ingress_http")
	}
	dropIn := strings.Split(strings.TrimSpace(docBlock(t, "<!-- server-state drop-in: run by TestDocumentedSlots -->")), "\n")
	if len(dropIn) != 5 || dropIn[0] != "[Service]" || dropIn[1] != "ExecReload=" || dropIn[3] != debianReload[0] || dropIn[4] != debianReload[1] {
		t.Fatalf("the drop-in %q: want [Service], an emptied ExecReload, the dump, then Debian's two lines", dropIn)
	}
	dump, ok := strings.CutPrefix(dropIn[2], "ExecReload=")
	if !ok || !strings.Contains(dump, state) || !strings.Contains(dump, "/run/haproxy/admin.sock") {
		t.Fatalf("the dump line %q names neither the state file nor the admin socket", dropIn[2])
	}

	port := freePort(t)
	nodes := []string{"127.0.1.1", "127.0.1.2", "127.0.1.3"}
	for i, addr := range nodes {
		haproxytest.Listen(t, fmt.Sprintf("node-%d", i), fmt.Sprintf("%s:%d", addr, port))
	}
	cluster := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(cluster, []byte(threeNodes(port, freePort(t), nodes)), 0o600); err != nil {
		t.Fatal(err)
	}
	reconcile := func(t *testing.T, h *haproxytest.HAProxy) (slotResult, string) {
		t.Helper()
		code, stdout, stderr := runCommand(t, "reconcile --manifests "+cluster, "TARGET_ADDRESS=node", "HAPROXY_BACKENDS=http=ingress_http",
			"ALLOWED_SERVER_CIDRS=127.0.0.0/8", "LOG_LEVEL=warn", "HAPROXY_RUNTIME_URL="+h.RuntimeURL())
		var res slotResult
		if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil || len(res.Targets) != 1 {
			t.Fatalf("reconcile: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
		}
		return res, stderr
	}

	t.Run("reload with the drop-in", func(t *testing.T) {
		h := haproxytest.StartWith(t, haproxytest.Options{StateFile: true}, haproxytest.Backend{Name: "ingress_http", Lines: backend})
		if h.StateFile != filepath.Join(h.Dir, filepath.Base(state)) {
			t.Fatalf("state file %s", h.StateFile)
		}
		res, _ := reconcile(t, h)
		if tr := res.Targets[0]; tr.Slots["filled"] != 3 || tr.Slots["idle"] != 5 || len(tr.Overflow) != 0 || strings.Join(tr.Add, ",") != "k8s_1,k8s_2,k8s_3" {
			t.Fatalf("result %+v: want 3 slots filled, 5 idle", tr)
		}
		fe := h.Frontends["ingress_http"]
		before := h.Servers(t, "ingress_http")

		load := haproxytest.StartLoad(fe, 2)
		load.WaitSent(50)
		cmd := strings.NewReplacer("/run/haproxy/admin.sock", h.AdminSocket, "/var/lib/haproxy", h.Dir).Replace(dump)
		if out, err := exec.Command("/bin/sh", "-c", cmd).CombinedOutput(); err != nil {
			t.Fatalf("the drop-in's dump: %v: %s", err, out)
		}
		h.Reload(t) // the drop-in's last line: SIGUSR2 to the master
		load.WaitSent(300)
		load.Stop()
		t.Logf("%d requests through the frontend, %d failed, across a reload with the drop-in", load.Sent(), load.Failed())
		if load.Failed() != 0 {
			t.Errorf("%d of %d requests failed across the reload", load.Failed(), load.Sent())
		}
		b, err := os.ReadFile(h.StateFile)
		if err != nil || !strings.HasPrefix(string(b), "1\n") || !strings.HasSuffix(string(b), "\n") {
			t.Errorf("state file %q (%v): want the format version first and a newline last", b, err)
		}
		after := h.Servers(t, "ingress_http")
		for name, s := range before {
			if a := after[name]; a.Address != s.Address || a.Port != s.Port || a.Admin != s.Admin || a.Up() != s.Up() {
				t.Errorf("%s before the reload %+v, after %+v", name, s, a)
			}
		}
		if res, _ = reconcile(t, h); len(res.Targets[0].Add) != 0 || len(res.Targets[0].Update) != 0 {
			t.Errorf("the reconcile after the reload writes %+v", res.Targets[0])
		}
	})

	t.Run("fewer slots than Nodes", func(t *testing.T) {
		two := make([]string, len(backend))
		for i, l := range backend {
			two[i] = strings.Replace(l, " 1-8 ", " 1-2 ", 1)
		}
		h := haproxytest.StartWith(t, haproxytest.Options{StateFile: true}, haproxytest.Backend{Name: "ingress_http", Lines: two})
		res, stderr := reconcile(t, h)
		tr := res.Targets[0]
		if tr.Slots["filled"] != 2 || tr.Slots["idle"] != 0 || len(tr.Overflow) != 1 {
			t.Fatalf("result %+v: want 2 slots filled and one Node over", tr)
		}
		if !strings.Contains(stderr, "no free slot") {
			t.Errorf("no warning of the overflow:\n%s", stderr)
		}
		if _, ok := h.Servers(t, "ingress_http")[tr.Overflow[0]]; !ok {
			t.Errorf("%s was not added: %v", tr.Overflow[0], h.Servers(t, "ingress_http"))
		}
		if got := haproxytest.Spread(h.Frontends["ingress_http"], 30); got[""] != 0 || len(got) != 3 {
			t.Errorf("through the frontend: %v", got)
		}
	})

	t.Run("no slots", func(t *testing.T) {
		var plain []string
		for _, l := range backend {
			if !strings.HasPrefix(l, "server-template") {
				plain = append(plain, l)
			}
		}
		h := haproxytest.StartWith(t, haproxytest.Options{StateFile: true}, haproxytest.Backend{Name: "ingress_http", Lines: plain})
		res, stderr := reconcile(t, h)
		if tr := res.Targets[0]; !tr.NoSlots || tr.Slots != nil || len(tr.Add) != 3 {
			t.Errorf("result %+v: want noSlots and three servers added", tr)
		}
		if !strings.Contains(stderr, "backend has no slots") {
			t.Errorf("no warning that servers are added bare:\n%s", stderr)
		}
	})
}
