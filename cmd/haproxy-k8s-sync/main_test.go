package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
)

// TestMain lets a test run this binary as the command itself.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv("HKS_TEST_MAIN_ARGS"); ok {
		os.Exit(run(strings.Fields(args)))
	}
	os.Exit(m.Run())
}

// command runs the command with args and a clean environment plus env.
func command(_ testing.TB, args string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append([]string{"HKS_TEST_MAIN_ARGS=" + args, "PATH=" + os.Getenv("PATH")}, env...)
	return cmd
}

// kubeconfig writes a kubeconfig for an API server that is not there.
func kubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVersion(t *testing.T) {
	out, err := command(t, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "haproxy-k8s-sync dev (commit ") || !strings.Contains(string(out), runtime.Version()) {
		t.Fatalf("%q %v", out, err)
	}
}

// TestHelpListsEveryVariable: help, -h and --help exit 0 and list every
// variable the configuration reads, with its default and meaning, from the
// configuration's own definition.
func TestHelpListsEveryVariable(t *testing.T) {
	for _, arg := range []string{"help", "-h", "--help"} {
		out, err := command(t, arg).Output()
		if err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
		ct := reflect.TypeOf(config.Config{})
		for i := range ct.NumField() {
			f := ct.Field(i)
			name := f.Tag.Get("envconfig")
			if name == "" {
				continue
			}
			if f.Tag.Get("desc") == "" {
				t.Errorf("%s has no desc tag", name)
			}
			line := ""
			for _, l := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(strings.TrimSpace(l), name+" ") {
					line = l
				}
			}
			if line == "" || !strings.Contains(line, f.Tag.Get("default")) || !strings.Contains(line, f.Tag.Get("desc")) {
				t.Errorf("%s: %s: line %q", arg, name, line)
			}
		}
	}
}

// TestKubeconfigIsAListAndLogFormatText: KUBECONFIG is a list like kubectl's
// (a missing file is skipped), and LOG_FORMAT=text writes text lines.
func TestKubeconfigIsAListAndLogFormatText(t *testing.T) {
	var stderr bytes.Buffer
	missing := filepath.Join(t.TempDir(), "nonexistent")
	cmd := command(t, "reconcile --dry-run", "HAPROXY_DATAPLANE_URL=http://127.0.0.1:1", "KUBECONFIG="+missing+":"+kubeconfig(t),
		"RECONCILE_TIMEOUT=1s", "LOG_FORMAT=text")
	cmd.Stderr = &stderr
	out, _ := cmd.Output()
	if !strings.Contains(string(out), `"status":"error"`) || strings.Contains(string(out), "nonexistent") {
		t.Errorf("stdout %s", out)
	}
	first := strings.SplitN(stderr.String(), "\n", 2)[0]
	if json.Valid([]byte(first)) || !strings.Contains(first, "level=") {
		t.Errorf("not a text log line: %q", first)
	}
	cmd = command(t, "reconcile --dry-run", "HAPROXY_DATAPLANE_URL=http://127.0.0.1:1", "KUBECONFIG="+missing+"-a:"+missing+"-b")
	cmd.Stderr = &stderr
	stderr.Reset()
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "KUBECONFIG") {
		t.Errorf("missing kubeconfigs: %v %s", err, stderr.String())
	}
}

func TestBadConfigurationFailsWithTheVariable(t *testing.T) {
	var stderr bytes.Buffer
	cmd := command(t, "serve", "HAPROXY_DATAPLANE_URL=http://h:5555", "TARGET_ADDRESS=vm")
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("err = %v", err)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "TARGET_ADDRESS") {
		t.Errorf("stderr = %q", stderr.String())
	}
}

// TestConfigurationWarnings: a misspelt variable is logged once as a
// warning naming the nearest one; when the configuration fails, the
// warnings come before the error (a misspelling may be its cause), as does
// the one about an admin socket in clear across the network.
func TestConfigurationWarnings(t *testing.T) {
	var stderr bytes.Buffer
	cmd := command(t, "reconcile --dry-run", "HAPROXY_DATAPLANE_URL=http://127.0.0.1:1", "HAPROXY_DATAPLANE_USERNAM=admin",
		"KUBECONFIG="+kubeconfig(t), "RECONCILE_TIMEOUT=1s")
	cmd.Stderr = &stderr
	_ = cmd.Run()
	const misspelt = "unknown variable HAPROXY_DATAPLANE_USERNAM; did you mean HAPROXY_DATAPLANE_USERNAME?"
	var warned int
	for _, l := range strings.Split(stderr.String(), "\n") {
		var line struct{ Level, Msg string }
		if json.Unmarshal([]byte(l), &line) == nil && line.Level == "WARN" && strings.Contains(line.Msg, misspelt) {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("warned %d times, want once: %s", warned, stderr.String())
	}

	stderr.Reset()
	cmd = command(t, "serve", "HAPROXY_RUNTIME_URL=tcp://haproxy-a:9999", "HAPROXY_DATAPLANE_URLS=http://haproxy-a:5555", "LOG_LEVEL=trace")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatal("LOG_LEVEL=trace accepted")
	}
	want := []string{
		"configuration: warning: unknown variable HAPROXY_DATAPLANE_URLS; did you mean HAPROXY_DATAPLANE_URL?",
		"configuration: warning: HAPROXY_RUNTIME_URL: tcp://haproxy-a:9999: admin socket in clear across the network; use tls:// (docs/drivers.md)",
		`configuration: LOG_LEVEL: "trace" is not debug, info, warn or error`,
	}
	if got := strings.Split(strings.TrimSpace(stderr.String()), "\n"); !slices.Equal(got, want) {
		t.Errorf("stderr:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestUnknownCommand(t *testing.T) {
	err := command(t, "frobnicate").Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("err = %v", err)
	}
}

func TestReconcileFailureExitsOneWithJSON(t *testing.T) {
	cmd := command(t, "reconcile --dry-run", "HAPROXY_DATAPLANE_URL=http://127.0.0.1:1", "KUBECONFIG="+kubeconfig(t), "RECONCILE_TIMEOUT=2s")
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("err = %v", err)
	}
	var res struct {
		Status, Error string
		Targets       []struct{ Error string }
	}
	// HAProxy is read first and never answers: the target's error says so.
	if json.Unmarshal(out, &res) != nil || res.Status != "error" || len(res.Targets) != 1 ||
		!strings.Contains(res.Targets[0].Error, "connection refused") {
		t.Errorf("stdout = %q", out)
	}
}

func TestServeReadyThenSIGTERM(t *testing.T) {
	cmd, _, stderr := startServe(t, "serve", "/readyz", "HAPROXY_DATAPLANE_URL=http://127.0.0.1:1", "KUBECONFIG="+kubeconfig(t),
		"WATCH=false", "HAPROXY_DATAPLANE_PASSWORD=pw-never-logged", "WEBHOOK_TOKEN=tok-never-logged-0123")
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v (%s)", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("no exit after SIGTERM")
	}
	logs := stderr.String()
	if strings.Contains(logs, "pw-never-logged") || strings.Contains(logs, "tok-never-logged") {
		t.Errorf("a secret was logged: %s", logs)
	}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("log line is not JSON: %q", line)
		}
	}
}

// TestSIGTERMFinishesInFlightReconcile: a reconcile running when SIGTERM
// arrives is answered before the process exits 0.
func TestSIGTERMFinishesInFlightReconcile(t *testing.T) {
	// A Kubernetes API that takes a second to answer (and then has no Service).
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Second)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
	}))
	defer slow.Close()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n", slow.URL)
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, base, stderr := startServe(t, "serve", "/readyz", "HAPROXY_DATAPLANE_URL=http://127.0.0.1:1", "KUBECONFIG="+kc, "RECONCILE_TIMEOUT=5s", "WATCH=false", "WEBHOOK_AUTH=none")

	answered := make(chan int, 1)
	go func() {
		resp, err := http.Post(base+"/reconcile", "", nil)
		if err != nil {
			answered <- -1
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	time.Sleep(300 * time.Millisecond) // the reconcile is now waiting on the slow API
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if code := <-answered; code != http.StatusServiceUnavailable {
		t.Errorf("in-flight request got %d, want its answer (503: no Service)", code)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit: %v\n%s", err, stderr.String())
	}
}

func freePort(t *testing.T) int {
	ln, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return portOf(ln)
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

func portOf(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

// startServe starts `haproxy-k8s-sync <args>` with env and PORT set to a
// free port, kills it when the test ends, and waits until path answers 200.
// It returns the process, its base URL and its logs.
func startServe(t *testing.T, args, path string, env ...string) (*exec.Cmd, string, *bytes.Buffer) {
	t.Helper()
	port := freePort(t)
	var stderr bytes.Buffer
	cmd := command(t, args, append(env, fmt.Sprintf("PORT=%d", port))...)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // tests that Wait do it themselves
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitReady(t, base+path, &stderr)
	return cmd, base, &stderr
}

func waitReady(t *testing.T, url string, logs *bytes.Buffer) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready: %s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var update = flag.Bool("update", false, "rewrite the golden files of TestGolden")

// TestGolden compares what the command prints with testdata/*.golden: help,
// an unknown command, and a bad variable (one line naming it). Run with
// -update after a deliberate change, and review the diff.
func TestGolden(t *testing.T) {
	for _, tt := range []struct {
		name, args string
		env        []string
		code       int
		stderr     bool
	}{
		{name: "help", args: "help"},
		{name: "unknown-command", args: "frobnicate", code: 2, stderr: true},
		{name: "bad-variable", args: "reconcile", env: []string{"HAPROXY_DATAPLANE_URL=http://h:5555", "HAPROXY_CHECK_RISE=zero"}, code: 2, stderr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := command(t, tt.args, tt.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			}
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %s)", code, tt.code, stderr.String())
			}
			got := stdout.Bytes()
			if tt.stderr {
				got = stderr.Bytes()
			}
			path := filepath.Join("testdata", tt.name+".golden")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run TestGolden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("output differs from %s:\ngot:\n%s\nwant:\n%s", path, got, want)
			}
		})
	}
}
