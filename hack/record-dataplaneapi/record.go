package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
)

// record runs one case on a fresh instance.
func record(apiBin, hapBin string, delay int, table *dataplanetest.ConformanceTable, c caseDef) (dataplanetest.Case, error) {
	out := dataplanetest.Case{Name: c.name, Setup: c.setup, Differs: c.differs}
	setup, ok := table.Setups[c.setup]
	if !ok {
		return out, fmt.Errorf("no setup %q", c.setup)
	}
	in, err := start(apiBin, hapBin, delay, setup)
	if err != nil {
		return out, err
	}
	defer in.stop()
	if setup.ReadBackend == nil {
		// What the API reads from this haproxy.cfg, for the replay to load.
		for _, r := range []struct {
			path string
			dst  *json.RawMessage
		}{{"/defaults/base", &setup.ReadDefaults}, {"/backends/" + setup.Backend, &setup.ReadBackend}, {"/backends/" + setup.Backend + "/servers", &setup.ReadServers}} {
			st, _, b, err := in.do(http.MethodGet, cfgPath+r.path, nil)
			if err != nil || st != 200 {
				return out, fmt.Errorf("read %s: %d %v %s", r.path, st, err, b)
			}
			*r.dst = json.RawMessage(b)
		}
		table.Setups[c.setup] = setup
	}
	before, err := in.reloads()
	if err != nil {
		return out, err
	}
	var txns []string
	for i, s := range c.steps {
		body, err := s.bodyFrom(in)
		if err != nil {
			return out, fmt.Errorf("step %d body: %w", i, err)
		}
		path, err := fill(in, s.path, txns)
		if err != nil {
			return out, fmt.Errorf("step %d path: %w", i, err)
		}
		st, h, b, err := in.do(s.method, path, body)
		if err != nil {
			return out, fmt.Errorf("step %d %s %s: %w", i, s.method, path, err)
		}
		shape, code, msg := dataplanetest.Shape(b)
		rec := dataplanetest.Step{Method: s.method, Path: s.path, Body: body,
			Status: st, Shape: shape, Code: code, Message: msg, ReloadID: h.Get("Reload-ID") != ""}
		if s.keep {
			if rec.Read, err = dataplanetest.ReadBody(s.path, b); err != nil {
				return out, fmt.Errorf("step %d: %w", i, err)
			}
			if rec.Version, err = strconv.ParseInt(h.Get("Configuration-Version"), 10, 64); err != nil {
				return out, fmt.Errorf("step %d: Configuration-Version: %w", i, err)
			}
		}
		out.Steps = append(out.Steps, rec)
		if s.method == http.MethodPost && strings.HasPrefix(s.path, txnPath+"?") && st == 201 {
			var t struct{ ID string }
			if json.Unmarshal(b, &t) == nil && t.ID != "" {
				txns = append(txns, t.ID)
			}
		}
	}
	// Any reload the API scheduled runs within reload_delay (its ticker may
	// add one more); then the new worker must answer.
	last := time.Now()
	deadline := last.Add(time.Duration(2*delay)*time.Second + 1500*time.Millisecond)
	for time.Now().Before(deadline) {
		n, err := in.reloads()
		if err == nil && n > before && out.ReloadAfter == 0 {
			out.Reloaded = true
			out.ReloadAfter = math.Round(time.Since(last).Seconds()*10) / 10
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := waitFor(func() error { _, err := in.servers(setup.Backend); return err }); err != nil {
		return out, fmt.Errorf("haproxy after the case: %w", err)
	}
	cfg, err := os.ReadFile(filepath.Join(in.dir, "haproxy.cfg"))
	if err != nil {
		return out, err
	}
	out.Servers, out.BackendLines = backendLines(string(cfg), setup.Backend)
	if secs := dataplanetest.NormalizeSections(string(cfg)); len(secs) > 0 {
		out.Sections = secs
	}
	states, err := in.servers(setup.Backend)
	if err != nil {
		return out, err
	}
	out.State = map[string]*dataplanetest.ServerState{}
	for name, s := range states {
		out.State[name] = &dataplanetest.ServerState{Admin: s.Admin, Op: s.Op, Addr: s.Address, Port: s.Port, Weight: s.Weight, CheckRunning: s.CheckRunning()}
	}
	return out, nil
}

// backendLines reads a backend's server lines and compared lines from
// haproxy.cfg, normalised.
func backendLines(cfg, backend string) (servers, lines []string) {
	in := false
	for _, l := range strings.Split(cfg, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && !strings.HasPrefix(l, " ") && !strings.HasPrefix(l, "\t") {
			in = len(f) >= 2 && f[0] == "backend" && f[1] == backend
			continue
		}
		if !in || len(f) == 0 {
			continue
		}
		if f[0] == "server" {
			servers = append(servers, dataplanetest.NormalizeServerLine(l))
		} else if n := dataplanetest.NormalizeBackendLine(l); n != "" {
			lines = append(lines, n)
		}
	}
	sort.Strings(servers)
	return servers, lines
}

// fill puts the current version and the case's transactions into a path.
func fill(in *instance, path string, txns []string) (string, error) {
	if strings.Contains(path, "{version}") || strings.Contains(path, "{stale}") {
		st, _, b, err := in.do(http.MethodGet, cfgPath+"/version", nil)
		if err != nil || st != 200 {
			return "", fmt.Errorf("read version: %d %v", st, err)
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return "", fmt.Errorf("version %q: %w", b, err)
		}
		path = strings.ReplaceAll(path, "{version}", strconv.FormatInt(v, 10))
		path = strings.ReplaceAll(path, "{stale}", strconv.FormatInt(v-1, 10))
	}
	for i, id := range txns {
		path = strings.ReplaceAll(path, fmt.Sprintf("{txn%d}", i), id)
	}
	if strings.Contains(path, "{") {
		return "", fmt.Errorf("unfilled %s", path)
	}
	return path, nil
}

// bodyFrom builds the step's body: as given, or what the API answers for
// the object read, with the edits (a nil value drops the field) — the
// driver's read, modify, write.
func (s step) bodyFrom(in *instance) ([]byte, error) {
	if s.read == "" {
		if s.body == nil {
			return nil, nil
		}
		return json.Marshal(s.body)
	}
	st, _, b, err := in.do(http.MethodGet, cfgPath+s.read, nil)
	if err != nil || st != 200 {
		return nil, fmt.Errorf("read %s: %d %v %s", s.read, st, err, b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range s.edit {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	return json.Marshal(m)
}
