package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/drained"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// TestWaitDrainedOnALiveConnection: the real service watches a real
// kube-apiserver and drives a real HAProxy. A client holds a connection to
// node a when a's endpoint starts terminating: the service drains a's
// server, and `haproxy-k8s-sync wait-drained --node a` (what a preStop hook
// runs) keeps waiting while that connection lives, and returns 0 once it
// ends, with every target's state in its answer. It never changes a
// server: b stays in service, a in drain.
func TestWaitDrainedOnALiveConnection(t *testing.T) {
	w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}})
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort
	ports := map[string]int32{"http": 8080}
	a, b := w.node("a", "127.0.12.1"), w.node("b", "127.0.12.2")
	haproxytest.ListenHold(t, a, fmt.Sprintf("127.0.12.1:%d", np))
	haproxytest.ListenHold(t, b, fmt.Sprintf("127.0.12.2:%d", np))
	w.slice("web-1", "web", ports, endpoint{ip: "10.244.12.1", node: a}, endpoint{ip: "10.244.12.2", node: b})

	const token = "tok-0123456789abcdef-drained"
	s := startService(t, "KUBECONFIG="+kubeconfigVia(t, apiHostPort(t)), "INGRESS_NAMESPACE="+w.ns, "INGRESS_SERVICE_NAME=web",
		"HAPROXY_BACKEND_NAME=be", "HAPROXY_RUNTIME_URL="+w.h.RuntimeURL(), "WEBHOOK_TOKEN="+token)
	state := func(name string) string {
		srv, ok := w.h.Servers(t, "be")[name]
		switch {
		case !ok:
			return "absent"
		case srv.Maint():
			return "maint"
		case srv.Drain():
			return "drain"
		case srv.Up():
			return "ready"
		}
		return "down"
	}
	until := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 20s; a %s, b %s", what, state(a), state(b))
			}
		}
	}
	until("both nodes in service", func() bool { return state(a) == "ready" && state(b) == "ready" })

	conn := connectTo(t, w.h.Frontends["be"], a)
	defer conn.Close()
	w.slice("web-1", "web", ports, endpoint{ip: "10.244.12.1", node: a, terminating: true}, endpoint{ip: "10.244.12.2", node: b})
	until("a drained", func() bool { return state(a) == "drain" })

	cmd := exec.Command(serviceBinary(t), "wait-drained", "--node", a, "--timeout", "60s", s.base)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "WEBHOOK_TOKEN=" + token}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// The route answers what the command sees: waiting, one session on a.
	req, _ := http.NewRequest(http.MethodGet, s.base+"/drained?node="+a, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ans drained.Answer
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || ans.Status != drained.StatusWaiting || len(ans.Targets) != 1 ||
		ans.Targets[0].State != "drain" || ans.Targets[0].Sessions != 1 || ans.Targets[0].Server != a {
		t.Fatalf("GET /drained with the connection open: %d %+v", resp.StatusCode, ans)
	}
	select {
	case err := <-exited:
		t.Fatalf("wait-drained returned while the connection lives: %v; %s %s", err, stdout.String(), stderr.String())
	case <-time.After(2 * time.Second):
	}

	conn.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("wait-drained: %v; stdout %s; stderr %s", err, stdout.String(), stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("wait-drained still waits after the connection ended; stderr %s", stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), &ans); err != nil || ans.Status != drained.StatusDrained ||
		len(ans.Targets) != 1 || ans.Targets[0].Sessions != 0 || !ans.Targets[0].Drained {
		t.Errorf("answer %s (%v)", stdout.String(), err)
	}
	if state(a) != "drain" || state(b) != "ready" {
		t.Errorf("after waiting: a %s, b %s; want drain and ready (waiting changes nothing)", state(a), state(b))
	}
}
