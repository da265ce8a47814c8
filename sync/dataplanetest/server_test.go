package dataplanetest

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"
)

type call struct {
	method, path, body string
	status             int
}

func do(t *testing.T, s *Server, c call) []byte {
	t.Helper()
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req, _ := http.NewRequest(c.method, s.URL+"/v3/services/haproxy"+c.path, body)
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != c.status {
		t.Fatalf("%s %s: status %d, want %d (%s)", c.method, c.path, resp.StatusCode, c.status, b)
	}
	return b
}

func newServer(t *testing.T, defaultServer bool) *Server {
	s := New(t, Options{AllowViolations: true})
	rr := "roundrobin"
	be := models.Backend{BackendBase: models.BackendBase{Name: "be", Balance: &models.Balance{Algorithm: &rr}}}
	if defaultServer {
		be.DefaultServer = &models.DefaultServer{}
	}
	port := int64(80)
	s.AddBackend(be, models.Server{Name: "s1", Address: "127.0.0.1", Port: &port, ServerParams: models.ServerParams{Check: "enabled"}})
	return s
}

const servers = "/configuration/backends/be/servers"

func TestRejectsWhatTheRealAPIRejects(t *testing.T) {
	s := newServer(t, false)
	good := `{"name":"s2","address":"127.0.0.2","port":80}`
	do(t, s, call{"POST", servers, good, 400})                                          // neither version nor transaction
	do(t, s, call{"POST", servers + "?version=1&transaction_id=x", good, 400})          // both
	do(t, s, call{"POST", servers + "?version=7", good, 409})                           // stale version
	do(t, s, call{"POST", servers + "?version=1", `{"name":"a b","address":"x"}`, 422}) // name pattern
	do(t, s, call{"POST", servers + "?version=1", `{"name":"s2","address":"x","port":99999}`, 422})
	do(t, s, call{"POST", servers + "?version=1", `{"name":"s2","address":"x","check":"yes"}`, 422})
	do(t, s, call{"POST", servers + "?version=1", `{"name":"s2","address":"x","bogus":1}`, 422})
	do(t, s, call{"POST", servers + "?version=1", `{"address":"x"}`, 422}) // name required
	do(t, s, call{"POST", servers + "?version=1", `{"name":"s1","address":"127.0.0.9"}`, 409})
	do(t, s, call{"GET", "/configuration/backends/nope", "", 404})
	do(t, s, call{"GET", "/transactions?status=outdated", "", 422}) // the spec's enum has no outdated
	if len(s.Violations()) == 0 {
		t.Error("schema violations were not recorded")
	}
	if s.Version() != 1 || s.Reloads() != 0 || len(s.Servers("be")) != 1 {
		t.Errorf("rejected writes changed state: version %d reloads %d", s.Version(), s.Reloads())
	}
	b := do(t, s, call{"POST", servers + "?version=1", `{"name":"s1","address":"127.0.0.9"}`, 409})
	var e models.Error
	if json.Unmarshal(b, &e) != nil || e.Code == nil || *e.Code != 409 || !strings.Contains(*e.Message, "already exists") {
		t.Errorf("error body = %s", b)
	}
}

func TestReloadRules(t *testing.T) {
	s := newServer(t, false)
	// Runtime-safe server PUT: 200, no reload, version + 1.
	do(t, s, call{"PUT", servers + "/s1?version=1", `{"name":"s1","address":"127.0.0.5","port":81,"weight":0,"maintenance":"enabled","check":"enabled"}`, 200})
	if s.Reloads() != 0 || s.Version() != 2 {
		t.Fatalf("runtime PUT: reloads %d version %d", s.Reloads(), s.Version())
	}
	// Any other field: 202 and a reload.
	do(t, s, call{"PUT", servers + "/s1?version=2", `{"name":"s1","address":"127.0.0.5","port":81,"weight":0,"maintenance":"enabled","check":"enabled","inter":1000}`, 202})
	if s.Reloads() != 1 {
		t.Fatalf("inter PUT: reloads %d", s.Reloads())
	}
	// POST without default_server and dynamic balance: runtime add, 201.
	do(t, s, call{"POST", servers + "?version=3", `{"name":"s2","address":"127.0.0.2","port":80}`, 201})
	if s.Reloads() != 1 {
		t.Fatalf("runtime POST reloaded")
	}
	// DELETE always reloads.
	do(t, s, call{"DELETE", servers + "/s2?version=4", "", 202})
	if s.Reloads() != 2 {
		t.Fatalf("DELETE: reloads %d", s.Reloads())
	}
	// Transaction writes answer 202 and apply nothing until commit; commit reloads once.
	var tx models.Transaction
	_ = json.Unmarshal(do(t, s, call{"POST", "/transactions?version=5", "", 201}), &tx)
	do(t, s, call{"POST", servers + "?transaction_id=" + tx.ID, `{"name":"s3","address":"127.0.0.3","port":80}`, 202})
	do(t, s, call{"POST", servers + "?transaction_id=" + tx.ID, `{"name":"s4","address":"127.0.0.4","port":80}`, 202})
	if len(s.Servers("be")) != 1 || s.Version() != 5 {
		t.Fatal("transaction writes applied before commit")
	}
	do(t, s, call{"PUT", "/transactions/" + tx.ID, "", 202})
	if len(s.Servers("be")) != 3 || s.Reloads() != 3 || s.Version() != 6 || s.OpenTransactions() != 0 {
		t.Fatalf("after commit: %d servers, %d reloads, version %d", len(s.Servers("be")), s.Reloads(), s.Version())
	}
	// An empty commit reloads too.
	_ = json.Unmarshal(do(t, s, call{"POST", "/transactions?version=6", "", 201}), &tx)
	do(t, s, call{"PUT", "/transactions/" + tx.ID, "", 202})
	if s.Reloads() != 4 {
		t.Fatalf("empty commit: reloads %d", s.Reloads())
	}
	if v := s.Violations(); len(v) > 0 {
		t.Errorf("violations: %v", v)
	}
}

func TestDefaultServerMakesAddsReload(t *testing.T) {
	s := newServer(t, true)
	do(t, s, call{"POST", servers + "?version=1", `{"name":"s2","address":"127.0.0.2","port":80}`, 202})
	if s.Reloads() != 1 {
		t.Errorf("reloads %d", s.Reloads())
	}
}

// TestRuntimeFailsMakesServerWritesReload: with Options.RuntimeFails, a
// runtime-safe PUT (a move) and a POST answer 202 and reload, as the real
// API does when its runtime command fails; a PUT that changes nothing is
// still 200 with no reload, and a transaction's writes are unchanged.
func TestRuntimeFailsMakesServerWritesReload(t *testing.T) {
	s := New(t, Options{AllowViolations: true, RuntimeFails: true})
	rr := "roundrobin"
	port := int64(80)
	s.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "be", Balance: &models.Balance{Algorithm: &rr}}},
		models.Server{Name: "s1", Address: "127.0.0.1", Port: &port, ServerParams: models.ServerParams{Check: "enabled"}})
	moved := `{"name":"s1","address":"127.0.0.5","port":80,"check":"enabled"}`
	do(t, s, call{"PUT", servers + "/s1?version=1", moved, 202})
	if s.Reloads() != 1 || s.Version() != 2 || s.Servers("be")[0].Address != "127.0.0.5" {
		t.Fatalf("move: reloads %d version %d servers %+v", s.Reloads(), s.Version(), s.Servers("be"))
	}
	do(t, s, call{"PUT", servers + "/s1?version=2", moved, 200})
	if s.Reloads() != 1 {
		t.Fatalf("a PUT that changes nothing reloaded")
	}
	do(t, s, call{"POST", servers + "?version=3", `{"name":"s2","address":"127.0.0.2","port":80}`, 202})
	if s.Reloads() != 2 {
		t.Fatalf("POST: reloads %d", s.Reloads())
	}
}

func TestTransactionLimitAndOutdated(t *testing.T) {
	s := newServer(t, false)
	var first, tx models.Transaction
	_ = json.Unmarshal(do(t, s, call{"POST", "/transactions?version=1", "", 201}), &first)
	for range 19 {
		do(t, s, call{"POST", "/transactions?version=1", "", 201})
	}
	do(t, s, call{"POST", "/transactions?version=1", "", 429})
	_ = json.Unmarshal(do(t, s, call{"GET", "/transactions/" + first.ID, "", 200}), &tx)
	if tx.Status != "in_progress" {
		t.Fatalf("status %q", tx.Status)
	}
	do(t, s, call{"PUT", "/transactions/" + first.ID, "", 202})
	// The other 19 were opened at the committed version: now outdated, 406 on commit.
	var all []models.Transaction
	_ = json.Unmarshal(do(t, s, call{"GET", "/transactions", "", 200}), &all)
	if len(all) != 19 {
		t.Fatalf("%d transactions listed", len(all))
	}
	do(t, s, call{"PUT", "/transactions/" + all[0].ID, "", 406})
	do(t, s, call{"DELETE", "/transactions/" + all[0].ID, "", 204})
	do(t, s, call{"DELETE", "/transactions/" + all[0].ID, "", 404})
	if s.OpenTransactions() != 18 {
		t.Errorf("open = %d", s.OpenTransactions())
	}
}

func TestFaultSkipTimesAndWrites(t *testing.T) {
	s := newServer(t, false)
	s.InjectFault(Fault{Writes: true, Skip: 1, Times: 2, Status: 503, RetryAfter: "2"})
	v := func() string {
		return string(do(t, s, call{method: "GET", path: "/configuration/version", status: 200}))
	}
	put := func(status int) {
		t.Helper()
		do(t, s, call{method: "PUT", path: servers + "/s1?version=" + strings.TrimSpace(v()),
			body: `{"name":"s1","address":"127.0.0.2","port":80,"check":"enabled"}`, status: status})
	}
	put(200) // skipped: handled normally, reads are never faulted
	put(503)
	put(503)
	put(200) // Times reached
	if s.FaultsHit() != 2 {
		t.Errorf("faults hit = %d, want 2", s.FaultsHit())
	}
	if s.Writes() != 2 {
		t.Errorf("writes = %d: a faulted request must change nothing", s.Writes())
	}
}

func TestFaultDropAndHang(t *testing.T) {
	s := newServer(t, false)
	s.InjectFault(Fault{Drop: true})
	if _, err := http.Get(s.URL + "/v3/services/haproxy/configuration/version"); err == nil {
		t.Error("dropped request got an answer")
	}
	s.InjectFault(Fault{Hang: true})
	c := &http.Client{Timeout: 50 * time.Millisecond}
	if _, err := c.Get(s.URL + "/v3/services/haproxy/configuration/version"); err == nil {
		t.Error("hung request got an answer")
	}
	s.ClearFault()
	do(t, s, call{method: "GET", path: "/configuration/version", status: 200})

	// A request held when the hang ends is let go, its connection closed
	// (the hung process went away), not held until its client gives up.
	s.InjectFault(Fault{Hang: true})
	errc := make(chan error, 1)
	go func() {
		// No timeout; a connection of its own (Go retries a GET that a
		// reused connection lost).
		c := &http.Client{Transport: &http.Transport{}}
		_, err := c.Get(s.URL + "/v3/services/haproxy/configuration/version")
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	s.ClearFault()
	select {
	case err := <-errc:
		if err == nil {
			t.Error("a request held by the hang got an answer")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a request held by the hang was never let go")
	}
}

// TestReloadsAskedTogetherRunOnce: like the real API's reload_delay, reloads
// asked while one is scheduled join it; one asked after it ran is another.
func TestReloadsAskedTogetherRunOnce(t *testing.T) {
	s := New(t, Options{ReloadDelay: 300 * time.Millisecond})
	rr := "roundrobin"
	s.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "be", Mode: "tcp", Balance: &models.Balance{Algorithm: &rr}}})
	s.mu.Lock()
	for range 3 {
		s.askReload(false, "test")
	}
	s.mu.Unlock()
	if s.Reloads() != 3 || s.ReloadsRun() != 1 {
		t.Errorf("asked %d, ran %d; want 3 and 1", s.Reloads(), s.ReloadsRun())
	}
	time.Sleep(350 * time.Millisecond)
	s.mu.Lock()
	s.askReload(false, "test")
	s.askReload(true, "test")
	s.mu.Unlock()
	// dataplaneapi v3.3.0's ForceReload runs the scheduled reload at once
	// (haproxy/reload_agent.go): one reload, not two, and none in progress.
	if s.ReloadsRun() != 2 {
		t.Errorf("ran %d; want 2 (the first batch, then the scheduled one run by the forced one)", s.ReloadsRun())
	}
	s.mu.Lock()
	list := s.reloadList()
	s.mu.Unlock()
	for _, r := range list {
		if r.Status == models.ReloadStatusInProgress {
			t.Errorf("reload %s still in progress after a forced reload ran it", r.ID)
		}
	}
}

// TestBackupIsAddedOnlyAndRendered: like the real API, a PUT that changes a
// server's backup keyword answers 202 and reloads (HAProxy takes it only
// when a server is added), one that keeps it with a runtime-safe change
// does not; haproxy.cfg's lines carry it.
func TestBackupIsAddedOnlyAndRendered(t *testing.T) {
	s := newServer(t, false)
	do(t, s, call{"POST", servers + "?version=1", `{"name":"s2_bk","address":"127.0.0.2","port":80,"check":"enabled","backup":"enabled"}`, 201})
	do(t, s, call{"PUT", servers + "/s2_bk?version=2", `{"name":"s2_bk","address":"127.0.0.2","port":80,"check":"enabled","backup":"enabled","maintenance":"enabled"}`, 200})
	if s.Reloads() != 0 {
		t.Fatalf("parking a backup server, backup kept: %d reloads", s.Reloads())
	}
	want := []string{"server s1 127.0.0.1:80 check", "server s2_bk 127.0.0.2:80 check backup disabled"}
	if got := s.ServerLines("be"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("server lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, body := range []string{
		`{"name":"s2_bk","address":"127.0.0.2","port":80,"check":"enabled","maintenance":"enabled"}`,                     // backup dropped
		`{"name":"s2_bk","address":"127.0.0.2","port":80,"check":"enabled","backup":"disabled","maintenance":"enabled"}`, // no-backup
	} {
		reloads := s.Reloads()
		do(t, s, call{"PUT", servers + "/s2_bk?version=" + strconv.FormatInt(s.Version(), 10), body, 202})
		if s.Reloads() != reloads+1 {
			t.Errorf("PUT %s: no reload", body)
		}
	}
	if got := s.ServerLines("be")[1]; got != "server s2_bk 127.0.0.2:80 check no-backup disabled" {
		t.Errorf("server line %q", got)
	}
}
