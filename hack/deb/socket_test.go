package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	osuser "os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// hostCluster is a Service as the environment file's defaults follow it
// (ports http and https, the backends' names), on two Nodes with
// documentation addresses: nothing answers there, and nothing needs to.
const hostCluster = `apiVersion: v1
kind: Service
metadata: {name: ingress-nginx, namespace: ingress-nginx}
spec:
  ports:
  - {name: http, port: 80, targetPort: 80, nodePort: 30080}
  - {name: https, port: 443, targetPort: 443, nodePort: 30443}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ingress-nginx-1
  namespace: ingress-nginx
  labels: {kubernetes.io/service-name: ingress-nginx}
addressType: IPv4
ports:
- {name: http, port: 80, protocol: TCP}
- {name: https, port: 443, protocol: TCP}
endpoints:
- {addresses: [10.244.1.5], conditions: {ready: true}, nodeName: node-a}
- {addresses: [10.244.2.5], conditions: {ready: true}, nodeName: node-b}
---
apiVersion: v1
kind: Node
metadata: {name: node-a}
status: {addresses: [{type: InternalIP, address: 192.0.2.1}]}
---
apiVersion: v1
kind: Node
metadata: {name: node-b}
status: {addresses: [{type: InternalIP, address: 192.0.2.2}]}
`

// TestServiceReachesTheSocketAsGroupHAProxy runs the unpacked package's
// binary as the unit runs it (serve, the environment file's variables and
// nothing else) as an unprivileged user whose only other group is haproxy,
// against a real HAProxy whose admin socket is declared with docs/
// install.md's stats socket line: the service fills the environment
// file's backends through it. The same user outside group haproxy is
// refused by the socket. Only the paths change: the socket's, the token's,
// and the Service read from a file instead of the Kubernetes API.
func TestServiceReachesTheSocketAsGroupHAProxy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs the service as another user: run as root (CI does)")
	}
	if _, err := haproxytest.Binary(); err != nil {
		t.Skip(err)
	}
	group, err := osuser.LookupGroup("haproxy")
	if err != nil {
		t.Skip("no group haproxy (Debian's haproxy package makes it)")
	}
	gid, _ := strconv.Atoi(group.Gid)
	pkg(t)

	// A directory everyone may enter, as /run/haproxy is.
	dir, err := os.MkdirTemp(workDir, "host")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "admin.sock")
	set, _ := envFile(t)
	line := strings.TrimSpace(block(t, installSection(t), "<!-- stats socket: run by TestServiceReachesTheSocketAsGroupHAProxy -->"))
	line = strings.Replace(line, strings.TrimPrefix(set["HAPROXY_RUNTIME_URL"], "unix://"), sock, 1)

	backend := func(name string) haproxytest.Backend {
		return haproxytest.Backend{Name: name, Lines: []string{"balance roundrobin", "option tcp-check"}}
	}
	h := haproxytest.Start(t, backend("ingress_http"), backend("ingress_https"))
	// A second global section: HAProxy adds its lines to the first's.
	h.SetSections(t, "global\n    "+line+"\n")
	h.Reload(t)
	var st syscall.Stat_t
	if err := syscall.Stat(sock, &st); err != nil {
		t.Fatalf("HAProxy made no socket with %q: %v\n%s", line, err, h.Logs())
	}
	if st.Mode&0o777 != 0o660 || int(st.Gid) != gid {
		t.Fatalf("%s: mode %o, group %d; want 660, haproxy (%d)", sock, st.Mode&0o777, st.Gid, gid)
	}

	manifests := filepath.Join(dir, "cluster.yaml")
	token := filepath.Join(dir, "webhook-token")
	for p, body := range map[string]string{manifests: hostCluster, token: "0123456789abcdef0123456789abcdef"} {
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	port := haproxytest.FreePort(t, "127.0.0.1")
	// What systemd gives the unit: the environment file, and HOME for the
	// user; the kubeconfig is not read (the Service comes from a file).
	env := []string{"HOME=/nonexistent"}
	for k, v := range set {
		switch k {
		case "HAPROXY_RUNTIME_URL":
			v = "unix://" + sock
		case "WEBHOOK_TOKEN_FILE":
			v = token
		case "PORT":
			v = strconv.Itoa(port)
		}
		env = append(env, k+"="+v)
	}
	bin := filepath.Join(built.root, binaryPath)
	nobody := func(groups ...uint32) *syscall.SysProcAttr {
		return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: groups}}
	}

	serve := exec.Command(bin, "serve", "--manifests", manifests)
	serve.Env = env
	serve.SysProcAttr = nobody(uint32(gid))
	var logs bytes.Buffer
	serve.Stdout, serve.Stderr = &logs, &logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	defer func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("serve did not stop cleanly on SIGTERM: %v\n%s", err, logs.String())
			}
		case <-time.After(10 * time.Second):
			_ = serve.Process.Kill()
			t.Errorf("serve did not stop on SIGTERM")
		}
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		plain, secure := h.Servers(t, "ingress_http"), h.Servers(t, "ingress_https")
		if len(plain) == 2 && len(secure) == 2 && plain["node-a"].Port == 30080 && secure["node-b"].Port == 30443 {
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("serve exited (%v):\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backends were not filled through the socket: %v %v\n%s", plain, secure, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := get(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", port)); code != http.StatusOK {
		t.Errorf("/readyz: %d", code)
	}

	// Outside group haproxy the socket refuses the same user.
	rec := exec.Command(bin, "reconcile", "--manifests", manifests)
	rec.Env = env
	rec.SysProcAttr = nobody()
	out, err := rec.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "permission denied") {
		t.Errorf("outside group haproxy: %v\n%s", err, out)
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
