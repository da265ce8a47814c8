package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// demoWorld is `make demo`'s HAProxy, running, with every port of the demo
// moved to a free one: read gives a file of testdata/demo with its ports
// moved, write puts one into dir (the demo's run directory).
type demoWorld struct {
	dir   string
	read  func(name string) string
	write func(name, s string) string
	// front maps the demo's frontend ports (18080, 18081, 18082) to theirs.
	front map[string]string
}

func startDemo(t *testing.T) demoWorld {
	t.Helper()
	bin, err := haproxytest.Binary()
	if err != nil {
		t.Skip(err)
	}
	w := demoWorld{dir: t.TempDir(), front: map[string]string{}}
	var pairs []string
	for _, p := range []string{"30080", "30081", "30082", "30083"} {
		pairs = append(pairs, p, strconv.Itoa(freePort(t)))
	}
	for _, p := range []string{"18080", "18081", "18082"} {
		w.front[p] = strconv.Itoa(freePort(t))
		pairs = append(pairs, "127.0.0.1:"+p, "127.0.0.1:"+w.front[p])
	}
	moved := strings.NewReplacer(append(pairs, "RUN_DIR", w.dir)...) // one pass: a port moved is not moved again
	w.read = func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "demo", name))
		if err != nil {
			t.Fatal(err)
		}
		return moved.Replace(string(b))
	}
	w.write = func(name, s string) string {
		p := filepath.Join(w.dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hp := exec.Command(bin, "-f", w.write("haproxy.cfg", w.read("haproxy.cfg")))
	if err := hp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hp.Process.Kill(); _ = hp.Wait() })
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(w.dir, "admin.sock")); err == nil {
			break
		}
		if i == 100 {
			t.Fatal("HAProxy did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return w
}

// TestDemoEditsWork runs `make demo`'s HAProxy and cluster (its ports moved
// to free ones) and the edits its hint invites: the first sync, then adding
// a spare Node and removing another's endpoint in one edit. Each run ends in
// seconds with exit 0, says at info what it waits for, and removes the
// Node's server in that one run.
func TestDemoEditsWork(t *testing.T) {
	w := startDemo(t)
	dir, read, write := w.dir, w.read, w.write
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

// TestDemoManyServices runs `make demo`'s second step (its ports moved):
// serve --manifests over the run directory in annotation mode fills be_web
// and be_api from services.yaml, with cluster.yaml's Nodes, refuses
// shop/web-canary, and follows the edits its hint invites by itself:
// shop/api's endpoint moved to node-a, shop/web's annotation removed (the
// canary then gets be_web).
func TestDemoManyServices(t *testing.T) {
	w := startDemo(t)
	w.write("cluster.yaml", w.read("cluster.yaml"))
	services := w.write("services.yaml", w.read("services.yaml"))
	logs := &lockedBuffer{}
	cmd := command(t, "serve --manifests "+w.dir, "SERVICE_SELECTION=annotation", "ANNOTATION_BACKENDS=be_*", "TARGET_ADDRESS=node",
		"HAPROXY_RUNTIME_URL=unix://"+filepath.Join(w.dir, "admin.sock"), "ALLOWED_SERVER_CIDRS=127.0.0.0/8",
		"WEBHOOK_TOKEN=demo-test-token-0123456789", "LOG_LEVEL=info", fmt.Sprintf("PORT=%d", freePort(t)))
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// answers are what three requests through the demo's frontend port get.
	answers := func(port string) string {
		var out []string
		for range 3 {
			resp, err := http.Get("http://127.0.0.1:" + w.front[port] + "/")
			if err != nil {
				return err.Error()
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			out = append(out, strings.TrimSpace(string(b)))
		}
		slices.Sort(out)
		return strings.Join(slices.Compact(out), ",")
	}
	until := func(what, port, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for got := answers(port); got != want; got = answers(port) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: :%s answers %q, want %q\n%s", what, port, got, want, logs.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	until("at start", "18081", "shop/web served by 127.0.1.1,shop/web served by 127.0.1.2")
	until("at start", "18082", "shop/api served by 127.0.1.3")
	if !strings.Contains(logs.String(), `"msg":"service refused","service":"shop/web-canary"`) {
		t.Errorf("the canary is not refused:\n%s", logs.String())
	}

	b, err := os.ReadFile(services)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(b), "  creationTimestamp: \"2026-01-01T00:00:00Z\"\n  annotations: {haproxy-k8s-sync.io/backends: be_web}\n", "  creationTimestamp: \"2026-01-01T00:00:00Z\"\n", 1)
	edited = strings.Replace(edited, "  nodeName: node-c\n  targetRef: {kind: Pod, namespace: shop, name: api-1}", "  nodeName: node-a\n  targetRef: {kind: Pod, namespace: shop, name: api-1}", 1)
	if strings.Count(edited, "be_web}") != 1 || !strings.Contains(edited, "nodeName: node-a\n  targetRef: {kind: Pod, namespace: shop, name: api-1}") {
		t.Fatal("the hint's edits did not apply: testdata/demo/services.yaml changed")
	}
	w.write("services.yaml", edited)
	until("shop/api moved", "18082", "shop/api served by 127.0.1.1")
	until("shop/web unannotated", "18081", "shop/web-canary served by 127.0.1.3")
}
