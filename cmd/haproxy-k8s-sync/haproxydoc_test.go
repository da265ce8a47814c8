package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"
	"sigs.k8s.io/yaml"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// docBlock returns the fenced block that follows marker in docs/haproxy.md:
// the page's files are tested as written, not as a copy kept here.
func docBlock(t *testing.T, marker string) string {
	t.Helper()
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "haproxy.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(page), marker)
	if !ok {
		t.Fatalf("docs/haproxy.md has no %q", marker)
	}
	_, body, ok := strings.Cut(after, "```")
	if !ok {
		t.Fatalf("docs/haproxy.md: no fenced block after %q", marker)
	}
	_, body, _ = strings.Cut(body, "\n") // the fence's language
	body, _, ok = strings.Cut(body, "```")
	if !ok {
		t.Fatalf("docs/haproxy.md: the block after %q is not closed", marker)
	}
	return body
}

// sections splits a haproxy.cfg into its sections' lines, keyed by header
// ("global", "defaults base", "backend x"), comments dropped.
func sections(cfg string) map[string][]string {
	out := map[string][]string{}
	cur := ""
	for _, line := range strings.Split(cfg, "\n") {
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		if line[0] != ' ' && line[0] != '\t' {
			cur = strings.TrimSpace(line)
			out[cur] = []string{}
			continue
		}
		out[cur] = append(out[cur], strings.Join(strings.Fields(line), " "))
	}
	return out
}

// TestDocumentedHAProxyConfig runs the haproxy.cfg of docs/haproxy.md, only
// its paths and addresses replaced, as an HA pair of real HAProxy processes,
// and syncs a Service of three Nodes into both with the service's reconcile
// command, once through the admin sockets alone and once through a Data Plane
// API per HAProxy (the test API, replaying on the real HAProxy what the real
// one applies at runtime) with the sockets: every documented frontend then
// reaches every node, and the Data Plane driver finds no recommended line
// missing.
func TestDocumentedHAProxyConfig(t *testing.T) {
	bin, err := haproxytest.Binary()
	if err != nil {
		t.Skip(err)
	}
	if os.Geteuid() != 0 {
		t.Skip("the documented haproxy.cfg chroots and drops to user haproxy: run as root (CI does)")
	}
	doc := docBlock(t, "<!-- haproxy.cfg: run as written by TestDocumentedHAProxyConfig -->")

	secs := sections(doc)
	defaults := ""
	for name, lines := range secs {
		if strings.HasPrefix(name, "defaults") {
			defaults = strings.TrimSpace(strings.TrimPrefix(name, "defaults"))
		}
		for _, l := range lines {
			if strings.HasPrefix(l, "default-server") || strings.HasPrefix(l, "server") {
				t.Errorf("%s has %q: the service writes every server and its check settings", name, l)
			}
		}
	}
	if defaults == "" {
		t.Fatal("the documented haproxy.cfg has no named defaults section (the Data Plane API adds from <name>)")
	}
	for _, want := range []string{"master-worker", "stats socket /run/haproxy/admin.sock mode 660 level admin expose-fd listeners"} {
		if !slices.Contains(secs["global"], want) {
			t.Errorf("the global section lacks %q", want)
		}
	}
	backends := []string{"ingress_http", "ingress_https"}
	for _, b := range backends {
		if _, ok := secs["backend "+b]; !ok {
			t.Fatalf("the documented haproxy.cfg has no backend %s", b)
		}
	}

	// Three Nodes, each with a listener on both NodePorts.
	httpPort, httpsPort := freePort(t), freePort(t)
	nodes := []string{"127.0.1.1", "127.0.1.2", "127.0.1.3"}
	for i, addr := range nodes {
		haproxytest.Listen(t, fmt.Sprintf("node-%d-http", i), fmt.Sprintf("%s:%d", addr, httpPort))
		haproxytest.Listen(t, fmt.Sprintf("node-%d-https", i), fmt.Sprintf("%s:%d", addr, httpsPort))
	}
	cluster := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(cluster, []byte(threeNodes(httpPort, httpsPort, nodes)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"TARGET_ADDRESS=node", "HAPROXY_BACKENDS=http=ingress_http,https=ingress_https", "ALLOWED_SERVER_CIDRS=127.0.0.0/8", "LOG_LEVEL=warn"}

	for _, driver := range []string{"runtime API", "Data Plane API and socket"} {
		t.Run(driver, func(t *testing.T) {
			sockets, fronts := haproxyPair(t, bin, doc)
			var runtime, dataplane []string
			for _, sock := range sockets {
				runtime = append(runtime, "unix://"+sock)
				if driver == "runtime API" {
					continue
				}
				api := dataplanetest.New(t, dataplanetest.Options{RuntimeSocket: sock})
				d := apiSection(t, secs["defaults "+defaults])
				api.AddDefaults(models.Defaults{DefaultsBase: models.DefaultsBase{Name: defaults, Mode: d.Mode, Redispatch: d.Redispatch, Retries: d.Retries, RetryOn: d.RetryOn}})
				for _, b := range backends {
					be := apiSection(t, secs["backend "+b])
					be.Name, be.From, be.Mode = b, defaults, cmp.Or(be.Mode, d.Mode)
					api.AddBackend(models.Backend{BackendBase: be})
				}
				dataplane = append(dataplane, api.URL)
			}
			code, stdout, stderr := runCommand(t, "reconcile --manifests "+cluster, append(env,
				"HAPROXY_RUNTIME_URL="+strings.Join(runtime, ","), "HAPROXY_DATAPLANE_URL="+strings.Join(dataplane, ","))...)
			var res struct {
				Targets []struct {
					Backend             string
					MissingBackendLines []string
				}
			}
			if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil || len(res.Targets) != 4 {
				t.Fatalf("reconcile: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
			for _, tr := range res.Targets {
				if len(tr.MissingBackendLines) > 0 {
					t.Errorf("backend %s lacks the recommended lines %q", tr.Backend, tr.MissingBackendLines)
				}
			}
			for _, b := range backends {
				for i, fe := range fronts[b] {
					got := map[string]bool{}
					for name, n := range haproxytest.Spread(fe, 30) {
						if name == "" {
							t.Errorf("HAProxy %d, %s: %d connections failed", i, b, n)
						}
						got[name] = true
					}
					for n := range nodes {
						if want := fmt.Sprintf("node-%d-%s", n, strings.TrimPrefix(b, "ingress_")); !got[want] {
							t.Errorf("HAProxy %d: no connection through frontend %s reached %s (got %v)\nreconcile: %s", i, b, want, got, stdout)
						}
					}
				}
			}
		})
	}
}

// apiSection is what the Data Plane API reads from a section of the
// documented haproxy.cfg, for the test API to answer as the real one would:
// mode, balance, tcp-check and the retry lines.
func apiSection(t *testing.T, lines []string) models.BackendBase {
	t.Helper()
	var b models.BackendBase
	num := func(l, v string) int64 {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		return n
	}
	for _, l := range lines {
		f := strings.Fields(l)
		switch {
		case len(f) >= 2 && f[0] == "option" && f[1] == "redispatch":
			on := "enabled"
			b.Redispatch = &models.Redispatch{Enabled: &on}
			if len(f) == 3 {
				n := num(l, f[2])
				b.Redispatch.Interval = &n
			}
		case len(f) == 2 && f[0] == "option" && f[1] == "tcp-check":
			b.AdvCheck = "tcp-check"
		case len(f) == 2 && f[0] == "retries":
			n := num(l, f[1])
			b.Retries = &n
		case f[0] == "retry-on":
			b.RetryOn = strings.Join(f[1:], " ")
		case len(f) == 2 && f[0] == "mode":
			b.Mode = f[1]
		case len(f) == 2 && f[0] == "balance":
			b.Balance = &models.Balance{Algorithm: &f[1]}
		}
	}
	return b
}

// haproxyPair starts the documented haproxy.cfg twice, as an HA pair, and
// returns each one's admin socket and, by backend, its frontends.
func haproxyPair(t *testing.T, bin, doc string) (sockets []string, fronts map[string][]string) {
	t.Helper()
	fronts = map[string][]string{}
	for range 2 {
		dir := t.TempDir()
		chroot := filepath.Join(dir, "chroot")
		if err := os.Mkdir(chroot, 0o755); err != nil {
			t.Fatal(err)
		}
		fe80, fe443 := freePort(t), freePort(t)
		cfg := strings.NewReplacer(
			"/run/haproxy/", dir+"/",
			"/var/lib/haproxy", chroot,
			"*:80\n", fmt.Sprintf("127.0.0.1:%d\n", fe80),
			"*:443\n", fmt.Sprintf("127.0.0.1:%d\n", fe443),
		).Replace(doc)
		path := filepath.Join(dir, "haproxy.cfg")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		startHAProxy(t, bin, dir, path)
		sockets = append(sockets, filepath.Join(dir, "admin.sock"))
		fronts["ingress_http"] = append(fronts["ingress_http"], fmt.Sprintf("127.0.0.1:%d", fe80))
		fronts["ingress_https"] = append(fronts["ingress_https"], fmt.Sprintf("127.0.0.1:%d", fe443))
	}
	return sockets, fronts
}

// startHAProxy runs HAProxy on the documented file as Debian's unit does
// (foreground here, the master socket beside it) until the test ends, and
// waits until the master lists a worker.
func startHAProxy(t *testing.T, bin, dir, cfg string) {
	t.Helper()
	logs, err := os.Create(filepath.Join(dir, "haproxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	master := filepath.Join(dir, "master.sock")
	cmd := exec.Command(bin, "-db", "-f", cfg, "-p", filepath.Join(dir, "haproxy.pid"), "-S", master)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logs.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The master answers only in master-worker mode, which the
		// documented global section asks for.
		if reply, err := (runtimeapi.Socket{Network: "unix", Address: master}).Command(context.Background(), "show proc"); err == nil && regexp.MustCompile(`(?m)^\d+\s+worker`).MatchString(reply) {
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logs.Name())
			t.Fatalf("HAProxy did not start in master-worker mode on the documented haproxy.cfg:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// threeNodes is a Service with an http and an https NodePort, an endpoint
// on each of three Nodes, and the Nodes at addrs.
func threeNodes(httpPort, httpsPort int, addrs []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: v1
kind: Service
metadata: {name: ingress-nginx, namespace: ingress-nginx}
spec:
  type: NodePort
  ports:
  - {name: http, port: 80, targetPort: 80, nodePort: %d}
  - {name: https, port: 443, targetPort: 443, nodePort: %d}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ingress-nginx-a
  namespace: ingress-nginx
  labels: {kubernetes.io/service-name: ingress-nginx}
addressType: IPv4
ports:
- {name: http, port: 80, protocol: TCP}
- {name: https, port: 443, protocol: TCP}
endpoints:
`, httpPort, httpsPort)
	for i := range addrs {
		fmt.Fprintf(&b, "- addresses: [10.244.%d.10]\n  conditions: {ready: true, serving: true, terminating: false}\n  nodeName: node-%d\n", i+1, i)
	}
	for i, a := range addrs {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Node\nmetadata: {name: node-%d}\nstatus:\n  addresses: [{type: InternalIP, address: %s}]\n", i, a)
	}
	return b.String()
}

// TestDocumentedDataplaneAPIConfig parses the dataplaneapi.yml block of
// docs/haproxy.md and checks what the service and the page rely on: a
// listening address and port, a user with a hashed password, the
// haproxy.cfg path, the reload delay and commands, writable directories.
func TestDocumentedDataplaneAPIConfig(t *testing.T) {
	var c struct {
		ConfigVersion int `json:"config_version"`
		Dataplaneapi  struct {
			Host string `json:"host"`
			Port int    `json:"port"`
			User []struct {
				Name     string `json:"name"`
				Insecure *bool  `json:"insecure"`
				Password string `json:"password"`
			} `json:"user"`
			Transaction struct {
				TransactionDir string `json:"transaction_dir"`
			} `json:"transaction"`
		} `json:"dataplaneapi"`
		HAProxy struct {
			ConfigFile string `json:"config_file"`
			Bin        string `json:"haproxy_bin"`
			// MasterRuntime must stay unset: with it, dataplaneapi
			// v3.3.0's runtime server calls answer 404 on HAProxy 2.6.
			MasterRuntime *string `json:"master_runtime"`
			Reload        struct {
				Delay    *int   `json:"reload_delay"`
				Strategy string `json:"reload_strategy"`
				Reload   string `json:"reload_cmd"`
				Restart  string `json:"restart_cmd"`
			} `json:"reload"`
		} `json:"haproxy"`
	}
	doc := docBlock(t, "<!-- dataplaneapi.yml: parsed by TestDocumentedDataplaneAPIConfig -->")
	if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
		t.Fatalf("dataplaneapi.yml does not parse: %v", err)
	}
	d, h := c.Dataplaneapi, c.HAProxy
	switch {
	case c.ConfigVersion != 2:
		t.Errorf("config_version %d, want 2 (dataplaneapi v3)", c.ConfigVersion)
	case d.Host == "" || d.Port == 0:
		t.Errorf("host %q, port %d: both must be set (the port is random otherwise)", d.Host, d.Port)
	case len(d.User) == 0 || d.User[0].Name == "" || d.User[0].Insecure == nil || *d.User[0].Insecure || !strings.HasPrefix(d.User[0].Password, "$6$"):
		t.Errorf("users %+v: want one with insecure: false and a sha-512 crypt hash", d.User)
	case d.Transaction.TransactionDir == "":
		t.Error("no transaction_dir")
	case h.ConfigFile != "/etc/haproxy/haproxy.cfg" || h.Bin == "":
		t.Errorf("config_file %q, haproxy_bin %q", h.ConfigFile, h.Bin)
	case h.MasterRuntime != nil:
		t.Error("master_runtime is set: dataplaneapi's runtime server calls then fail on HAProxy 2.6")
	case h.Reload.Delay == nil || *h.Reload.Delay != 5:
		t.Errorf("reload_delay %v, want 5 (what docs/drivers.md says the service does not wait for)", h.Reload.Delay)
	case h.Reload.Strategy != "custom" || h.Reload.Reload == "" || h.Reload.Restart == "":
		t.Errorf("reload: strategy %q, reload_cmd %q, restart_cmd %q: custom needs both commands", h.Reload.Strategy, h.Reload.Reload, h.Reload.Restart)
	}
}
