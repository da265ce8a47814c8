// Command record-dataplaneapi records what a real Data Plane API does for
// the requests the Data Plane driver makes, into a conformance table that
// sync/dataplanetest's conformance test replays against the test API.
//
//	make record-dataplaneapi DATAPLANEAPI=/path/to/dataplaneapi HAPROXY=/path/to/haproxy
//
// Every case starts from a fresh haproxy.cfg with a fresh HAProxy (master-
// worker, a level-admin stats socket) and a fresh dataplaneapi reloading it
// through a script that sends SIGUSR2 to the master. It writes
// testdata/dataplaneapi/<dataplaneapi version>-haproxy-<version>.json.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// The API's users for the recording only (a private instance on loopback).
const user, password = "recorder", "recorder"

func main() {
	out := flag.String("out", "testdata/dataplaneapi", "directory the table is written to")
	delay := flag.Int("reload-delay", 1, "the API's reload_delay, seconds")
	only := flag.String("run", "", "record only the cases whose name contains this (a trial; nothing is written)")
	flag.Parse()
	if err := run(os.Getenv("DATAPLANEAPI"), os.Getenv("HAPROXY"), *out, *delay, *only); err != nil {
		slog.Error("record-dataplaneapi failed", "err", err)
		os.Exit(1)
	}
}

func run(api, hap, outDir string, delay int, only string) error {
	if api == "" || hap == "" {
		return errors.New("DATAPLANEAPI and HAPROXY must name the binaries (make record-dataplaneapi DATAPLANEAPI=... HAPROXY=...)")
	}
	apiVersion, err := version(api, `v\d+\.\d+\.\d+`, "-v")
	if err != nil {
		return fmt.Errorf("DATAPLANEAPI=%s: %w", api, err)
	}
	hapFull, err := version(hap, `\d+\.\d+\.\d+\S*`, "-v")
	if err != nil {
		return fmt.Errorf("HAPROXY=%s: %w", hap, err)
	}
	hapVersion := regexp.MustCompile(`^\d+\.\d+\.\d+`).FindString(hapFull)
	for _, l := range listenAll() {
		defer l.Close()
	}
	table := &dataplanetest.ConformanceTable{
		DataplaneAPI: apiVersion,
		HAProxy:      hapFull,
		Recorded:     time.Now().UTC().Format("2006-01-02"),
		Command:      "make record-dataplaneapi DATAPLANEAPI=<dataplaneapi " + apiVersion + "> HAPROXY=<haproxy " + hapVersion + ">",
		ReloadDelay:  delay,
		Notes: []string{
			"dataplaneapi reloads through reload_cmd, a script sending SIGUSR2 to the master; haproxy.cfg has a level-admin stats socket and no master_runtime",
			"servers' addresses have TCP listeners during the recording, so checks pass; state is read once any reload is over",
		},
		Setups: map[string]dataplanetest.Setup{},
	}
	for name, s := range setups {
		table.Setups[name] = s
	}
	for _, c := range append(cases, classCases...) {
		if only != "" && !strings.Contains(c.name, only) {
			continue
		}
		rec, err := record(api, hap, delay, table, c)
		if err != nil {
			return fmt.Errorf("case %s: %w", c.name, err)
		}
		slog.Info("recorded", "case", c.name, "reloaded", rec.Reloaded, "statuses", statuses(rec.Steps))
		table.Cases = append(table.Cases, rec)
	}
	b, err := json.MarshalIndent(table, "", "  ")
	if err != nil {
		return err
	}
	if only != "" {
		_, err = os.Stdout.Write(append(b, '\n'))
		return err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", outDir, err)
	}
	path := filepath.Join(outDir, apiVersion+"-haproxy-"+hapVersion+".json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	slog.Info("table written", "path", path, "cases", len(table.Cases))
	return nil
}

func statuses(steps []dataplanetest.Step) []int {
	var out []int
	for _, s := range steps {
		out = append(out, s.Status)
	}
	return out
}

// version runs bin with args and finds the version in what it prints.
func version(bin, pattern string, args ...string) (string, error) {
	b, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, b)
	}
	v := regexp.MustCompile(pattern).FindString(string(b))
	if v == "" {
		return "", fmt.Errorf("no version in %q", b)
	}
	return v, nil
}

// listenAll accepts TCP connections on every address the cases give a
// server, so that health checks pass and states do not depend on timing.
func listenAll() []net.Listener {
	var out []net.Listener
	for _, a := range dataplanetest.ConformanceAddrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			slog.Warn("cannot listen: checks on it fail", "addr", a, "err", err)
			continue
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
		out = append(out, l)
	}
	return out
}

// instance is one HAProxy and its dataplaneapi.
type instance struct {
	dir, url string
	hap, api *exec.Cmd
	admin    runtimeapi.Socket
	master   runtimeapi.Socket
	client   *http.Client
}

func start(apiBin, hapBin string, delay int, s dataplanetest.Setup) (*instance, error) {
	dir, err := os.MkdirTemp("", "record-dataplaneapi-")
	if err != nil {
		return nil, err
	}
	in := &instance{dir: dir, client: &http.Client{Timeout: 30 * time.Second},
		admin:  runtimeapi.Socket{Network: "unix", Address: filepath.Join(dir, "admin.sock")},
		master: runtimeapi.Socket{Network: "unix", Address: filepath.Join(dir, "master.sock")}}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	in.url = fmt.Sprintf("http://127.0.0.1:%d/v3", ports[1])
	if err := os.WriteFile(filepath.Join(dir, "haproxy.cfg"), []byte(configFor(s, in.admin.Address, ports[0])), 0o600); err != nil {
		return nil, err
	}
	script := fmt.Sprintf("#!/bin/sh\nkill -USR2 \"$(cat %s/haproxy.pid)\"\n", dir)
	if err := os.WriteFile(filepath.Join(dir, "reload.sh"), []byte(script), 0o700); err != nil {
		return nil, err
	}
	for _, d := range []string{"transactions", "backups", "maps", "ssl", "general", "spoe", "spoe-tx", "storage"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "dataplaneapi.yml"), []byte(apiConfig(dir, hapBin, ports[1], delay)), 0o600); err != nil {
		return nil, err
	}
	in.hap = exec.Command(hapBin, "-W", "-db", "-S", in.master.Address, "-p", filepath.Join(dir, "haproxy.pid"), "-f", filepath.Join(dir, "haproxy.cfg"))
	if in.hap.Stdout, err = os.Create(filepath.Join(dir, "haproxy.log")); err != nil {
		return nil, err
	}
	in.hap.Stderr = in.hap.Stdout
	if err := in.hap.Start(); err != nil {
		return nil, fmt.Errorf("start haproxy: %w", err)
	}
	if err := waitFor(func() error { _, err := in.admin.Command(context.Background(), "show info"); return err }); err != nil {
		in.stop()
		return nil, fmt.Errorf("haproxy did not start: %w: %s", err, readFile(filepath.Join(dir, "haproxy.log")))
	}
	in.api = exec.Command(apiBin, "-f", filepath.Join(dir, "dataplaneapi.yml"))
	if in.api.Stdout, err = os.Create(filepath.Join(dir, "dataplaneapi.out")); err != nil {
		return nil, err
	}
	in.api.Stderr = in.api.Stdout
	if err := in.api.Start(); err != nil {
		in.stop()
		return nil, fmt.Errorf("start dataplaneapi: %w", err)
	}
	if err := waitFor(func() error {
		st, _, _, err := in.do(http.MethodGet, "/info", nil)
		if err == nil && st != 200 {
			err = fmt.Errorf("status %d", st)
		}
		return err
	}); err != nil {
		in.stop()
		return nil, fmt.Errorf("dataplaneapi did not start: %w: %s", err, readFile(filepath.Join(dir, "dataplaneapi.out")))
	}
	return in, nil
}

func (in *instance) stop() {
	for _, c := range []*exec.Cmd{in.api, in.hap} {
		if c != nil && c.Process != nil {
			_ = c.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = c.Process.Kill()
				<-done
			}
		}
	}
	_ = os.RemoveAll(in.dir)
}

// do sends one request under /v3.
func (in *instance) do(method, path string, body []byte) (int, http.Header, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, in.url+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	req.SetBasicAuth(user, password)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := in.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

func (in *instance) reloads() (int, error) {
	reply, err := in.master.Command(context.Background(), "show proc")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(reply, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[1] == "master" {
			var n int
			_, err := fmt.Sscan(f[2], &n)
			return n, err
		}
	}
	return 0, fmt.Errorf("show proc: no master line in %q", reply)
}

func (in *instance) servers(backend string) (map[string]haproxytest.Server, error) {
	reply, err := in.admin.Command(context.Background(), "show servers state "+backend)
	if err != nil {
		return nil, err
	}
	return haproxytest.ParseServers(reply, backend), nil
}

func waitFor(f func() error) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func freePorts(n int) ([]int, error) {
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// configFor is the haproxy.cfg of a setup: the shape haproxytest writes
// (what the replay runs), with its defaults section named "base".
func configFor(s dataplanetest.Setup, admin string, front int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global\n    stats socket %s mode 600 level admin\n    stats timeout 1m\n", admin)
	b.WriteString("defaults base\n")
	for _, l := range s.DefaultsLines {
		fmt.Fprintf(&b, "    %s\n", l)
	}
	fmt.Fprintf(&b, "frontend fe_%s\n    bind 127.0.0.1:%d\n    default_backend %s\n", s.Backend, front, s.Backend)
	fmt.Fprintf(&b, "backend %s\n", s.Backend)
	for _, l := range append(append([]string{}, s.Lines...), s.Servers...) {
		fmt.Fprintf(&b, "    %s\n", l)
	}
	return b.String()
}

func apiConfig(dir, hapBin string, port, delay int) string {
	return fmt.Sprintf(`config_version: 2
name: recorder
dataplaneapi:
  host: 127.0.0.1
  port: %[3]d
  user:
  - name: %[5]s
    insecure: true
    password: %[6]s
  transaction:
    transaction_dir: %[1]s/transactions
    backups_dir: %[1]s/backups
  resources:
    maps_dir: %[1]s/maps
    ssl_certs_dir: %[1]s/ssl
    general_storage_dir: %[1]s/general
    spoe_dir: %[1]s/spoe
    spoe_transaction_dir: %[1]s/spoe-tx
    dataplane_storage_dir: %[1]s/storage
haproxy:
  config_file: %[1]s/haproxy.cfg
  haproxy_bin: %[2]s
  master_worker_mode: true
  reload:
    reload_delay: %[4]d
    reload_cmd: %[1]s/reload.sh
    restart_cmd: %[1]s/reload.sh
    reload_strategy: custom
log_targets:
- log_to: file
  log_file: %[1]s/dataplaneapi.log
  log_level: info
  log_types:
  - access
  - app
`, dir, hapBin, port, delay, user, password)
}
