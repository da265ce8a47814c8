package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// binary is the real haproxy-k8s-sync, built once per test run into bin/.
var binary struct {
	once sync.Once
	path string
	err  error
}

func serviceBinary(t testing.TB) string {
	t.Helper()
	binary.once.Do(func() {
		_, here, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(here), "..", "..")
		binary.path = filepath.Join(root, "bin", "e2e-haproxy-k8s-sync")
		// Built as `make build` builds the release, so that what the
		// benchmarks measure (start time, memory) is what ships.
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", binary.path, filepath.Join(root, "cmd", "haproxy-k8s-sync"))
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			binary.err = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

// kubeconfigVia writes a kubeconfig for the test API server reached at
// host:port (e.g. through a cutProxy).
func kubeconfigVia(t testing.TB, hostport string) string {
	t.Helper()
	c := clientcmdapi.NewConfig()
	c.Clusters["e2e"] = &clientcmdapi.Cluster{Server: "https://" + hostport, CertificateAuthorityData: cluster.cfg.CAData}
	c.AuthInfos["e2e"] = &clientcmdapi.AuthInfo{ClientCertificateData: cluster.cfg.CertData, ClientKeyData: cluster.cfg.KeyData, Token: cluster.cfg.BearerToken}
	c.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "e2e"}
	c.CurrentContext = "e2e"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*c, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// apiHostPort is the test API server's host:port.
func apiHostPort(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(cluster.cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	if u.Host == "" { // a bare host:port
		return cluster.cfg.Host
	}
	return u.Host
}

// service is the real haproxy-k8s-sync process running `serve`.
type service struct {
	cmd  *exec.Cmd
	base string
	logs *lockedBuffer
}

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

// startService runs `haproxy-k8s-sync serve` with env (and a free PORT) until
// the test ends, and waits for /healthz.
func startService(t testing.TB, env ...string) *service {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &service{base: fmt.Sprintf("http://127.0.0.1:%d", port), logs: &lockedBuffer{}}
	s.cmd = exec.Command(serviceBinary(t), "serve")
	s.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "PORT=" + strconv.Itoa(port), "ALLOWED_SERVER_CIDRS=" + allowedCIDRs}, env...)
	if !slices.ContainsFunc(env, func(v string) bool { return strings.HasPrefix(v, "WEBHOOK_") }) {
		s.cmd.Env = append(s.cmd.Env, "WEBHOOK_AUTH=none") // these tests send no POST
	}
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("service logs:\n%s", s.logs.String())
		}
	})
	s.wait(t, "/healthz", 10*time.Second)
	return s
}

// wait polls path until it answers 200.
func (s *service) wait(t testing.TB, path string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if resp, err := http.Get(s.base + path); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never 200 within %s; logs:\n%s", path, limit, s.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metric sums the samples of the metric family name whose labels contain
// every one of labels (e.g. `kind="node"`).
func (s *service) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q", line)
		}
		sum += v
	}
	return sum
}
