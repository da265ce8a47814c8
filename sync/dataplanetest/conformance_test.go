package dataplanetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// TestConformance replays every table in testdata/dataplaneapi (what the
// real dataplaneapi answered and did, recorded by make record-dataplaneapi)
// against the test API, which applies what it does to a real HAProxy (the
// one under test, not necessarily the table's version: answers, haproxy.cfg
// and server states do not depend on it here). Each case must get the same
// status, body shape and Reload-ID, reload HAProxy or not alike, and leave
// the same server and backend lines and the same server states; an aspect
// the table says differs, with why, is skipped for that case alone.
func TestConformance(t *testing.T) {
	paths, err := filepath.Glob("../../testdata/dataplaneapi/*.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no conformance table in testdata/dataplaneapi: %v", err)
	}
	listenConformanceAddrs(t)
	for _, p := range paths {
		table, err := LoadConformanceTable(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(filepath.Base(p), func(t *testing.T) {
			for _, c := range table.Cases {
				t.Run(c.Name, func(t *testing.T) {
					t.Parallel()
					replay(t, table, c)
				})
			}
		})
	}
}

var listeners sync.Once

// listenConformanceAddrs accepts connections on the cases' server
// addresses for the whole test binary, as the recording did.
func listenConformanceAddrs(t *testing.T) {
	listeners.Do(func() {
		for _, a := range ConformanceAddrs {
			l, err := net.Listen("tcp", a)
			if errors.Is(err, syscall.EADDRINUSE) {
				// Another replay or a recording listens there: a
				// listening socket completes the checks' handshakes.
				t.Logf("%s is listened on already: %v", a, err)
				continue
			}
			if err != nil {
				t.Fatalf("listen on %s (a conformance case's server): %v", a, err)
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
		}
	})
}

func replay(t *testing.T, table *ConformanceTable, c Case) {
	setup, ok := table.Setups[c.Setup]
	if !ok {
		t.Fatalf("case %q names no setup %q", c.Name, c.Setup)
	}
	skip := func(aspect string) bool {
		if why, ok := c.Differs[aspect]; ok {
			t.Logf("%s not compared: %s", aspect, why)
			return true
		}
		return false
	}
	h := haproxytest.Start(t, haproxytest.Backend{Name: setup.Backend, Lines: setup.Lines})
	var api *Server
	var reloadsDone atomic.Int32
	api = New(t, Options{RuntimeSocket: h.AdminSocket, ReloadDelay: 200 * time.Millisecond, Reload: func() {
		defer reloadsDone.Add(1)
		if err := h.TrySetSections(api.Sections(ClassSection)); err != nil {
			return
		}
		if err := h.TrySetServers(setup.Backend, api.ServerLines(setup.Backend)); err == nil {
			_ = h.TryReload()
		}
	}})
	load(t, api, setup)
	// The test API's rendering of what the real one read is haproxy.cfg.
	if got, want := normalizeAll(api.ServerLines(setup.Backend)), normalizeAll(setup.Servers); !slices.Equal(got, want) {
		t.Errorf("server lines of the setup as the test API writes them:\n got %q\nwant %q", got, want)
	}
	h.SetServers(t, setup.Backend, api.ServerLines(setup.Backend))
	h.Reload(t)
	before := h.Reloads(t)

	var txns []string
	for i, s := range c.Steps {
		path := fillPath(t, s.Path, api.Version(), txns)
		var body io.Reader
		if s.Body != nil {
			body = bytes.NewReader(s.Body)
		}
		req, err := http.NewRequest(s.Method, api.URL+"/v3"+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if s.Body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		shape, code, msg := Shape(b)
		what := fmt.Sprintf("step %d %s %s", i, s.Method, s.Path)
		if resp.StatusCode != s.Status && !skip("status") {
			t.Errorf("%s: status %d, the real API %d (%s)", what, resp.StatusCode, s.Status, b)
		}
		if (shape != s.Shape || code != s.Code || msg != s.Message) && !skip("body") {
			t.Errorf("%s: body %s code %d %q, the real API %s code %d %q", what, shape, code, msg, s.Shape, s.Code, s.Message)
		}
		if got := resp.Header.Get("Reload-ID") != ""; got != s.ReloadID && !skip("reload_id") {
			t.Errorf("%s: Reload-ID header %v, the real API %v", what, got, s.ReloadID)
		}
		if s.Read != nil && !skip("read") {
			compareRead(t, what, s, resp.Header, b)
		}
		if s.Method == http.MethodPost && strings.HasPrefix(s.Path, "/services/haproxy/transactions?") && resp.StatusCode == 201 {
			var tx models.Transaction
			_ = json.Unmarshal(b, &tx)
			txns = append(txns, tx.ID)
		}
	}
	// Wait for the reloads the test API asked for (it runs them 200 ms on).
	deadline := time.Now().Add(5 * time.Second)
	for int(reloadsDone.Load()) < api.ReloadsRun() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := h.Reloads(t) > before; got != c.Reloaded && !skip("reloaded") {
		t.Errorf("HAProxy reloaded: %v, with the real API %v", got, c.Reloaded)
	}
	if got := normalizeAll(api.ServerLines(setup.Backend)); !slices.Equal(got, c.Servers) && !skip("server_lines") {
		t.Errorf("server lines after:\n got %q\nwant %q", got, c.Servers)
	}
	if got := backendLinesOf(api.Backend(setup.Backend)); !slices.Equal(got, c.BackendLines) && !skip("backend_lines") {
		t.Errorf("backend lines after: got %q, want %q", got, c.BackendLines)
	}
	// What the API wrote of class sections is what the real one wrote.
	if got := NormalizeSections(api.Sections(ClassSection)); !slices.Equal(got, append([]string{}, c.Sections...)) && !skip("sections") {
		t.Errorf("class sections after:\n got %q\nwant %q", got, c.Sections)
	}
	if skip("state") {
		return
	}
	// A runtime add's state depends on HAProxy's version (the real API
	// sends "enabled" below 3.0 only): states are compared on the table's
	// major.minor alone.
	if running := runningVersion(t, h); running != majorMinor(table.HAProxy) {
		t.Logf("state not compared: recorded on HAProxy %s, replayed on %s", table.HAProxy, running)
		return
	}
	got := map[string]*ServerState{}
	for name, s := range h.Servers(t, setup.Backend) {
		got[name] = &ServerState{Admin: s.Admin, Op: s.Op, Addr: s.Address, Port: s.Port, Weight: s.Weight, CheckRunning: s.CheckRunning()}
	}
	if !reflect.DeepEqual(got, c.State) {
		t.Errorf("servers state after:\n got %s\nwant %s", dump(got), dump(c.State))
	}
}

// compareRead holds what the driver reads of an answer (ReadBody: where
// a backend's servers sit and the fields read of each) and its
// Configuration-Version equal to the real API's.
func compareRead(t *testing.T, what string, s Step, h http.Header, body []byte) {
	t.Helper()
	got, err := ReadBody(s.Path, body)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(s.Read, &w); err != nil {
		t.Fatalf("%s: the table's read: %v", what, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s: what the driver reads of the body:\n got %s\nwant %s", what, got, s.Read)
	}
	if v := h.Get("Configuration-Version"); v != strconv.FormatInt(s.Version, 10) {
		t.Errorf("%s: Configuration-Version %q, the real API %d", what, v, s.Version)
	}
}

// load gives the test API what the real API read from the setup.
func load(t *testing.T, api *Server, s Setup) {
	var d models.Defaults
	var be models.Backend
	var servers []models.Server
	for _, r := range []struct {
		raw json.RawMessage
		dst any
	}{{s.ReadDefaults, &d}, {s.ReadBackend, &be}, {s.ReadServers, &servers}} {
		if err := json.Unmarshal(r.raw, r.dst); err != nil {
			t.Fatalf("setup %s: decode what the real API read: %v", s.Backend, err)
		}
	}
	api.AddDefaults(d)
	api.AddBackend(be, servers...)
}

func fillPath(t *testing.T, path string, version int64, txns []string) string {
	path = strings.ReplaceAll(path, "{version}", strconv.FormatInt(version, 10))
	path = strings.ReplaceAll(path, "{stale}", strconv.FormatInt(version-1, 10))
	for i, id := range txns {
		path = strings.ReplaceAll(path, fmt.Sprintf("{txn%d}", i), id)
	}
	if strings.Contains(path, "{") {
		t.Fatalf("path %s: a placeholder is left (a transaction the test API did not start?)", path)
	}
	return path
}

func normalizeAll(lines []string) []string {
	out := []string{}
	for _, l := range lines {
		out = append(out, NormalizeServerLine(l))
	}
	slices.Sort(out)
	return out
}

// runningVersion is the major.minor of the HAProxy h runs.
func runningVersion(t *testing.T, h *haproxytest.HAProxy) string {
	info, err := h.Command("show info")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(l, "Version: "); ok {
			return majorMinor(v)
		}
	}
	t.Fatalf("show info: no version in %q", info)
	return ""
}

// majorMinor cuts "2.6.12-1+deb12u4" to "2.6".
func majorMinor(v string) string {
	f := strings.SplitN(v, ".", 3)
	if len(f) < 2 {
		return v
	}
	return f[0] + "." + f[1]
}

func dump(v any) string { b, _ := json.Marshal(v); return string(b) }
