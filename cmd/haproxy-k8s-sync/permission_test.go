package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// TestPermissionDeniedOnTheSocketIsSaidAtOnce: a real HAProxy's admin
// socket that the service's user may not open (mode 600, another owner)
// fails the reconcile at the first attempt, permanent, the error saying
// permission denied: not attempt after attempt until RECONCILE_TIMEOUT, as
// a temporary failure. As root (CI), the command runs as nobody, whom the
// socket's mode refuses; otherwise the socket's mode refuses the test's
// own user.
func TestPermissionDeniedOnTheSocketIsSaidAtOnce(t *testing.T) {
	if _, err := haproxytest.Binary(); err != nil {
		t.Skip(err)
	}
	h := haproxytest.Start(t, haproxytest.Backend{Name: "web", Lines: []string{"balance roundrobin", "option tcp-check"}})
	// A directory nobody may enter and read, for the command and its manifests.
	dir, err := os.MkdirTemp("", "hks-permission-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cluster := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cluster, []byte(threeNodes(freePort(t), freePort(t), []string{"127.0.5.1"})), 0o644); err != nil {
		t.Fatal(err)
	}
	mode := os.FileMode(0o600) // root's own: nobody is refused
	if os.Geteuid() != 0 {
		mode = 0 // the test's user is refused
	}
	for _, p := range []struct {
		path string
		mode os.FileMode
	}{{dir, 0o755}, {filepath.Dir(h.Dir), 0o755}, {h.Dir, 0o755}, {h.AdminSocket, mode}} {
		if err := os.Chmod(p.path, p.mode); err != nil {
			t.Fatal(err)
		}
	}
	cmd := command(t, "reconcile --manifests "+cluster, "HAPROXY_RUNTIME_URL="+h.RuntimeURL(), "TARGET_ADDRESS=node", "HAPROXY_BACKENDS=http=web",
		"INGRESS_NAMESPACE=ingress-nginx", "INGRESS_SERVICE_NAME=ingress-nginx", "ALLOWED_SERVER_CIDRS=127.0.0.0/8", "RECONCILE_TIMEOUT=10s")
	if os.Geteuid() == 0 {
		cmd.Path = copyExecutable(t, dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v after %s\nstdout %s\nstderr %s", err, took, stdout.String(), stderr.String())
	}
	var res struct {
		ErrorClass string
		Targets    []struct {
			Error, ErrorClass string
			Attempts          int
		}
	}
	if json.Unmarshal(stdout.Bytes(), &res) != nil || len(res.Targets) != 1 {
		t.Fatalf("stdout %s", stdout.String())
	}
	tr := res.Targets[0]
	t.Logf("after %s: %+v", took, tr)
	if tr.Attempts != 1 || tr.ErrorClass != "permanent" || res.ErrorClass != "permanent" || !strings.Contains(tr.Error, "permission denied") || took > 5*time.Second {
		t.Errorf("%d attempts in %s, class %q (result %q), error %q; want one attempt, permanent, permission denied", tr.Attempts, took, tr.ErrorClass, res.ErrorClass, tr.Error)
	}
}

// copyExecutable copies this test binary into dir, readable and executable
// by every user: the build cache's directories are root's alone.
func copyExecutable(t *testing.T, dir string) string {
	t.Helper()
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(dir, "haproxy-k8s-sync.test")
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}
