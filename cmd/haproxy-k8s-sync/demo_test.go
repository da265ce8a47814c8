package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// TestDemoEditsWork runs `make demo`'s HAProxy and cluster (its ports moved
// to free ones) and the edits its hint invites: the first sync, then adding
// a spare Node and removing another's endpoint in one edit. Each run ends in
// seconds with exit 0, says at info what it waits for, and removes the
// Node's server in that one run.
func TestDemoEditsWork(t *testing.T) {
	bin, err := haproxytest.Binary()
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	nodePort, front := strconv.Itoa(freePort(t)), strconv.Itoa(freePort(t))
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "demo", name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.ReplaceAll(string(b), "30080", nodePort)
	}
	cfg := strings.ReplaceAll(strings.ReplaceAll(read("haproxy.cfg"), "RUN_DIR", dir), "127.0.0.1:18080", "127.0.0.1:"+front)
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hp := exec.Command(bin, "-f", write("haproxy.cfg", cfg))
	if err := hp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hp.Process.Kill(); _ = hp.Wait() })
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(dir, "admin.sock")); err == nil {
			break
		}
		if i == 100 {
			t.Fatal("HAProxy did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	env := []string{"TARGET_ADDRESS=node", "HAPROXY_WEIGHT=endpoints", "HAPROXY_RUNTIME_URL=unix://" + filepath.Join(dir, "admin.sock"),
		"LOG_LEVEL=info", "ALLOWED_SERVER_CIDRS=127.0.0.0/8"}
	sync := func(cluster string) (add, del []string, stderr string) {
		t.Helper()
		start := time.Now()
		code, stdout, stderr := runCommand(t, "reconcile --manifests "+write("cluster.yaml", cluster), env...)
		var res struct {
			Status  string
			Targets []struct{ Add, Delete, Waiting, Draining []string }
		}
		if code != 0 || time.Since(start) > 15*time.Second || json.Unmarshal([]byte(stdout), &res) != nil || len(res.Targets) != 1 {
			t.Fatalf("exit %d after %s\nstdout %s\nstderr %s", code, time.Since(start), stdout, stderr)
		}
		tr := res.Targets[0]
		if len(tr.Waiting)+len(tr.Draining) > 0 {
			t.Errorf("servers still wait: %s", stdout)
		}
		return tr.Add, tr.Delete, stderr
	}
	cluster := read("cluster.yaml")
	add, del, stderr := sync(cluster)
	if fmt.Sprint(add, del) != "[node-a node-b node-c] [old-node]" {
		t.Errorf("first sync: add %v, delete %v", add, del)
	}
	if strings.Contains(stderr, `"servers parked, not deleted"`) || !strings.Contains(stderr, "parked for now") {
		t.Errorf("the guard's warning contradicts the deletion: %s", stderr)
	}

	// The hint's edits: add the spare node-d, remove node-b's endpoint.
	edited := strings.Replace(cluster, `- addresses: [10.244.2.10]
  conditions: {ready: true, serving: true, terminating: false}
  nodeName: node-b`, `- addresses: [10.244.4.10]
  conditions: {ready: true, serving: true, terminating: false}
  nodeName: node-d`, 1) + `---
apiVersion: v1
kind: Node
metadata: {name: node-d}
status:
  addresses: [{type: InternalIP, address: 127.0.1.4}]
`
	if !strings.Contains(edited, "nodeName: node-d") {
		t.Fatal("the edit did not apply: testdata/demo/cluster.yaml changed")
	}
	add, del, stderr = sync(edited)
	if fmt.Sprint(add, del) != "[node-d] [node-b]" {
		t.Errorf("edit: add %v, delete %v (a removed Node must go in one run)", add, del)
	}
	for _, says := range []string{"waiting for new servers to pass their health check", "waiting for removed servers' sessions to end"} {
		if !strings.Contains(stderr, says) {
			t.Errorf("the run does not say %q:\n%s", says, stderr)
		}
	}
}

// TestDemoKeepsAnEditedCluster: `make demo` gives the user a copy of the
// demo's cluster to edit (hack/demo-cluster.sh); a rerun keeps an edited
// copy and says so in one line, and refreshes one left as it was.
func TestDemoKeepsAnEditedCluster(t *testing.T) {
	script, src := filepath.Join("..", "..", "hack", "demo-cluster.sh"), filepath.Join("..", "..", "testdata", "demo", "cluster.yaml")
	dst := filepath.Join(t.TempDir(), "cluster.yaml")
	run := func() string {
		t.Helper()
		out, err := exec.Command("bash", script, src, dst).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", script, err, out)
		}
		return string(out)
	}
	orig, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if out := run(); out != "" {
		t.Errorf("first run says %q", out)
	}
	if got, _ := os.ReadFile(dst); string(got) != string(orig) {
		t.Fatal("first run: not a copy of the demo's cluster")
	}
	if out := run(); out != "" {
		t.Errorf("a rerun over an unedited copy says %q", out)
	}
	edited := string(orig) + "# the user's edit\n"
	if err := os.WriteFile(dst, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	out := run()
	if got, _ := os.ReadFile(dst); string(got) != edited {
		t.Error("a rerun overwrote the edited cluster")
	}
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, "keeping your edited "+dst) {
		t.Errorf("a rerun over an edited copy says %q", out)
	}
}
