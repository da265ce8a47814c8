// Package dataplanetest is a Data Plane API v3 server for tests. It keeps a
// configuration version, backends with their servers, and transactions, and
// follows the real API (haproxytech/dataplaneapi v3.3.0) where it matters here:
//
//   - every configuration write needs exactly one of ?version or
//     ?transaction_id (version 0 counts as none); a stale version answers
//     409 "version mismatch";
//   - a write with ?version is an implicit transaction: version + 1;
//   - a server PUT that changes only weight, address, port, maintenance,
//     agent-check/addr/send or health_check_port is applied at runtime: 200,
//     no reload; any other change answers 202 and reloads (backup among
//     them: HAProxy takes it only when a server is added);
//   - a server POST is added at runtime (201, no reload) only when neither the
//     backend nor the defaults section has a default_server (AddBackend,
//     AddDefaults, or Options.DefaultsDefaultServer); else 202, reload; a
//     forced one (force_reload) reloads either way (201);
//   - with Options.RuntimeFails, no server write is applied at runtime: 202,
//     reload (the real API's fallback when its runtime command fails);
//   - a server DELETE and a backend PUT always reload (202; a forced
//     DELETE 204);
//   - writes inside a transaction answer 202 and apply nothing until commit;
//     a write into an unknown, outdated or failed one answers 400
//     "transaction does not exist";
//     a commit always reloads (202, or 200 with force_reload), marks other
//     open transactions at or below its version outdated, and is refused with
//     406 for an outdated or failed transaction, 409 for a stale version, 400
//     when the configuration check fails (the transaction is then failed);
//   - at most 20 transactions in progress (then 429); none ever expires;
//   - the runtime server endpoints act on the mirrored HAProxy
//     (Options.RuntimeSocket), never on the configuration;
//   - reloads asked within reload_delay (5 s) of a scheduled one run as one
//     (Reloads counts the asks, ReloadsRun what HAProxy goes through).
//
// testdata/dataplaneapi holds what the real API did, recorded; the
// conformance test holds this server to it.
//
// Every request and every response is validated against the official spec
// shipped in client-native v6.3.0; a violation answers 422 like the real API
// and fails the test at cleanup.
package dataplanetest

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// Options configure a Server.
type Options struct {
	// Username and Password, when set, are required as Basic auth.
	Username, Password string
	// Token, when set, is accepted as a Bearer token (an auth proxy in front).
	Token string
	// DefaultsDefaultServer says the defaults section has a default_server,
	// which makes every server POST reload.
	DefaultsDefaultServer bool
	// RuntimeFails makes every server POST and every runtime-safe server
	// PUT (outside a transaction, changing something) answer 202 and reload
	// instead of being applied at runtime, as the real API does when its
	// runtime command fails, or when it cannot read HAProxy's version
	// (dataplaneapi v3.3.0 on HAProxy 3.2 and 3.4). Nothing is replayed on
	// RuntimeSocket: the running HAProxy gets the write at the reload.
	RuntimeFails bool
	// MaxTransactions is the limit of transactions in progress (20 if 0).
	MaxTransactions int
	// RuntimeSocket, when set, is the admin socket of a real HAProxy on which
	// the server replays what the real API applies at runtime (runtime adds
	// and runtime-safe server changes), so tests can check HAProxy's state.
	// Changes that would reload are not replayed.
	RuntimeSocket string
	// TLS serves https with a self-signed certificate (see CertPEM).
	TLS bool
	// ReloadDelay is the API's reload_delay: reloads asked within it of
	// the first one scheduled run as one (ReloadsRun). 5 s, the real
	// API's default, if 0.
	ReloadDelay time.Duration
	// AllowViolations keeps spec violations from failing the test, for tests
	// that send bad requests on purpose.
	AllowViolations bool
	// Reload, when set, is called for every reload HAProxy goes through
	// (ReloadsRun), when the real API runs it: a forced one before the
	// answer, a scheduled one ReloadDelay after it was first asked for. A
	// test that mirrors a real HAProxy reloads it there with ServerLines, so
	// what the API wrote is what HAProxy loads, as with the real API.
	Reload func()
	// OnWrite, when set, is told of every request other than a GET, as it
	// comes: refused when an injected fault answered it (InjectFault).
	OnWrite func(refused bool)
	// OnReloadAsked, when set, is told of every reload an answer asks
	// for, with what asked it: the operation (force_reload: "forced " and
	// the operation), or "commit" and the operations the transaction held,
	// space-separated. It is called with the server's lock held: it must
	// not call the server.
	OnReloadAsked func(why string)
}

// Request is one request the server received.
type Request struct {
	Method string
	Path   string
	Query  string
	Auth   string
}

// Server is the test Data Plane API. Its methods are safe for concurrent use.
type Server struct {
	URL  string
	http *httptest.Server
	spec *spec
	opts Options
	// fellBack: the operation being answered found its runtime write
	// refused by HAProxy and asks a reload instead (OnReloadAsked says so).
	fellBack bool

	mu      sync.Mutex
	version int64
	cfg     Config
	fes     frontends // proxies.go
	// defaults holds the defaults sections by name; this service only
	// reads them, so they live outside Config and its transactions.
	defaults   map[string]models.Defaults
	txns       map[string]*txn
	txnSeq     int
	reloads    int
	reloadsRun int
	reloadAt   time.Time // when the scheduled reload runs; zero if none
	// reloadID names the scheduled reload, or the last one run, as the
	// real API does (date-index); lastReload is the last one's status.
	reloadID   string
	reloadRuns int
	lastReload *models.Reload
	forced     int // forced reloads asked by the request being handled
	writes     int
	requests   []Request
	// busy is the time spent answering requests, spec checks included:
	// the test API's own cost, which a benchmark tells apart from the
	// client's (Busy).
	busy       atomic.Int64
	violations []string
	intercept  func(w http.ResponseWriter, r *http.Request) bool
	fault      *faultState
	closing    chan struct{} // closed at the end of the test: hung requests end
	check      func(Config) error
	mirror     *mirror
	// down marks backend/server as operationally down (its check fails)
	// when no real HAProxy is mirrored; see SetDown.
	down map[string]bool
	// validated caches the verdict for identical responses: the spec check
	// of a 1 000-server list takes ~40 ms and its answer cannot change.
	validated sync.Map // [32]byte -> error (nil stored as noErr)
}

type noErr struct{}

type backendState struct {
	Backend models.Backend
	Servers []models.Server
}

// Config is the configuration the server holds: backends by name.
type Config map[string]*backendState

func (c Config) clone() Config {
	out := make(Config, len(c))
	for name, b := range c {
		cp := &backendState{Backend: b.Backend, Servers: make([]models.Server, len(b.Servers))}
		copy(cp.Servers, b.Servers)
		out[name] = cp
	}
	return out
}

type txn struct {
	id      string
	version int64
	status  string
	cfg     Config
	fes     frontends
	ops     []string // the operations it holds, in order (OnReloadAsked)
}

// New starts a server; it is closed, and its spec violations reported, when
// the test ends.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	sp, err := loadSpec()
	if err != nil {
		t.Fatalf("load Data Plane API spec: %v", err)
	}
	if opts.MaxTransactions == 0 {
		opts.MaxTransactions = 20
	}
	s := &Server{spec: sp, opts: opts, version: 1, cfg: Config{}, defaults: map[string]models.Defaults{}, txns: map[string]*txn{}, closing: make(chan struct{})}
	if opts.RuntimeSocket != "" {
		s.mirror = &mirror{sock: runtimeapi.Socket{Network: "unix", Address: opts.RuntimeSocket}}
	}
	if opts.TLS {
		s.http = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	} else {
		s.http = httptest.NewServer(http.HandlerFunc(s.serve))
	}
	s.URL = s.http.URL
	t.Cleanup(func() {
		close(s.closing)
		s.http.Close()
		if v := s.Violations(); len(v) > 0 && !opts.AllowViolations {
			t.Errorf("Data Plane API spec violations:\n%s", strings.Join(v, "\n"))
		}
	})
	return s
}

// Busy is the time the server spent answering requests so far.
func (s *Server) Busy() time.Duration { return time.Duration(s.busy.Load()) }

// CertPEM returns the server's certificate in PEM, to use as a CA bundle.
func (s *Server) CertPEM() []byte {
	if s.http.Certificate() == nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.http.Certificate().Raw})
}

// AddBackend creates a backend with servers, as if read from haproxy.cfg.
// The defaults section it is from (From) is created empty unless
// AddDefaults made it: haproxy.cfg has every section a backend names.
func (s *Server) AddBackend(b models.Backend, servers ...models.Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A backend that inherits from a defaults section has no mode of its
	// own unless given one: the real API shows none (conformance table).
	if b.Mode == "" && b.From == "" {
		b.Mode = "http"
	}
	s.cfg[b.Name] = &backendState{Backend: b, Servers: append([]models.Server(nil), servers...)}
	if _, ok := s.defaults[b.From]; b.From != "" && !ok {
		s.defaults[b.From] = models.Defaults{DefaultsBase: models.DefaultsBase{Name: b.From}}
	}
}

// AddDefaults creates or replaces a defaults section, as if read from
// haproxy.cfg (GET .../configuration/defaults/{name} answers it).
func (s *Server) AddDefaults(d models.Defaults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.defaults[d.Name] = d
}

// SetBalance changes a backend's balance algorithm, as an operator editing
// haproxy.cfg would.
func (s *Server) SetBalance(backend, algorithm string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.cfg[backend]; ok {
		b.Backend.Balance = &models.Balance{Algorithm: &algorithm}
	}
}

// Servers returns the backend's servers in configuration order.
func (s *Server) Servers(backend string) []models.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.cfg[backend]; ok {
		return append([]models.Server(nil), b.Servers...)
	}
	return nil
}

// ServerLines renders backend's servers as haproxy.cfg lines, as the real
// API writes them, for a test that reloads a real HAProxy with them: the
// fields that decide traffic and checks (address, port, weight,
// maintenance as "disabled", check timing, observe, on-error, PROXY, backup).
func (s *Server) ServerLines(backend string) []string {
	var out []string
	for _, m := range s.Servers(backend) {
		l := "server " + m.Name + " " + serverKeywords(m)
		switch m.Maintenance {
		case "enabled":
			l += " disabled"
		case "disabled":
			l += " enabled" // the real API writes it (conformance table)
		}
		out = append(out, l)
	}
	return out
}

// States summarises a backend's servers as address → "ready", "drain"
// (weight 0) or "maint", the way tests compare them with the cluster.
func (s *Server) States(backend string) map[string]string {
	return s.states(backend, func(m models.Server) string { return m.Address })
}

// StatesByName is States keyed by server name: two instances (CLUSTER_NAME)
// each have a server at the same address.
func (s *Server) StatesByName(backend string) map[string]string {
	return s.states(backend, func(m models.Server) string { return m.Name })
}

func (s *Server) states(backend string, key func(models.Server) string) map[string]string {
	out := map[string]string{}
	for _, srv := range s.Servers(backend) {
		st := "ready"
		switch {
		case srv.Maintenance == "enabled":
			st = "maint"
		case srv.Weight != nil && *srv.Weight == 0:
			st = "drain"
		}
		out[key(srv)] = st
	}
	return out
}

// Backend returns the backend section.
func (s *Server) Backend(name string) models.Backend {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.cfg[name]; ok {
		return b.Backend
	}
	return models.Backend{}
}

// Version returns the configuration version.
func (s *Server) Version() int64 { s.mu.Lock(); defer s.mu.Unlock(); return s.version }

// Reloads returns how many reloads the API's answers asked for.
func (s *Server) Reloads() int { s.mu.Lock(); defer s.mu.Unlock(); return s.reloads }

// ReloadsRun returns how many reloads HAProxy goes through for them: like
// the real API, a reload asked while one is scheduled (within ReloadDelay
// of the first ask) joins it; a forced one runs at once.
func (s *Server) ReloadsRun() int { s.mu.Lock(); defer s.mu.Unlock(); return s.reloadsRun }

// askReload counts a reload asked for, and the reloads it makes HAProxy go
// through; s.mu is held.
func (s *Server) askReload(force bool, why string) {
	if s.opts.OnReloadAsked != nil {
		if force {
			why = "forced " + why
		}
		s.opts.OnReloadAsked(why)
	}
	s.reloads++
	now := time.Now()
	switch {
	case force:
		s.reloadsRun++
		if now.Before(s.reloadAt) {
			// The real API's forced reload runs the scheduled one at once
			// (ReloadAgent.ForceReload): it is done, nothing in progress,
			// and its timer has nothing left to run.
			s.lastReload = &models.Reload{ID: s.reloadID, Status: models.ReloadStatusSucceeded, ReloadTimestamp: now.Unix()}
			s.reloadAt = time.Time{}
			s.reloadsRun-- // counted when scheduled; the forced one is it
		}
	case now.Before(s.reloadAt):
		// joins the scheduled reload
	default:
		s.reloadsRun++
		delay := cmp.Or(s.opts.ReloadDelay, 5*time.Second)
		s.reloadAt = now.Add(delay)
		s.reloadID = fmt.Sprintf("%s-%d", now.Format("2006-01-02"), s.reloadRuns)
		s.reloadRuns++
		id := s.reloadID
		time.AfterFunc(delay, func() {
			select {
			case <-s.closing:
				return
			default:
			}
			s.mu.Lock()
			consumed := s.lastReload != nil && s.lastReload.ID == id
			s.mu.Unlock()
			if consumed {
				return // a forced reload ran it
			}
			if s.opts.Reload != nil {
				s.opts.Reload()
			}
			s.mu.Lock()
			s.lastReload = &models.Reload{ID: id, Status: models.ReloadStatusSucceeded, ReloadTimestamp: time.Now().Unix()}
			s.mu.Unlock()
		})
	}
	if force {
		s.forced++
	}
}

// reloadList is what GET /services/haproxy/reloads answers, as dataplaneapi
// v3.3.0's reload agent does: the last reload run, and the scheduled one
// "in_progress" until it has run (its Reload callback returned); s.mu is
// held.
func (s *Server) reloadList() []models.Reload {
	out := []models.Reload{}
	if s.lastReload != nil {
		out = append(out, *s.lastReload)
	}
	if s.reloadID != "" && (s.lastReload == nil || s.lastReload.ID != s.reloadID) {
		out = append(out, models.Reload{ID: s.reloadID, Status: models.ReloadStatusInProgress})
	}
	return out
}

// Writes returns how many write requests (POST, PUT, DELETE) were answered 2xx.
func (s *Server) Writes() int { s.mu.Lock(); defer s.mu.Unlock(); return s.writes }

// Requests returns every request received, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// OpenTransactions returns how many transactions exist (in progress, failed
// or outdated): none should be left behind by a client.
func (s *Server) OpenTransactions() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.txns) }

// Violations returns the spec violations seen so far.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}

// Intercept installs f before every handler (after recording the request);
// when f returns true it has answered and nothing else happens. Used to
// inject faults: 5xx, 429, hanging answers, dropped connections.
func (s *Server) Intercept(f func(w http.ResponseWriter, r *http.Request) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.intercept = f
}

// SetCheck installs the configuration check run at commit in place of
// "haproxy -c": a non-nil error fails the commit with 400.
func (s *Server) SetCheck(f func(Config) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.check = f
}

// BumpVersion simulates another writer: the version moves on.
func (s *Server) BumpVersion() { s.mu.Lock(); defer s.mu.Unlock(); s.version++ }

type reply struct {
	status int
	header http.Header
	body   any
}

func errReply(status int, format string, args ...any) reply {
	return reply{status: status, body: map[string]any{"code": status, "message": fmt.Sprintf(format, args...)}}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	defer func(began time.Time) { s.busy.Add(int64(time.Since(began))) }(time.Now())
	s.mu.Lock()
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Auth: r.Header.Get("Authorization")})
	intercept := s.intercept
	s.mu.Unlock()
	refused := s.injectFault(w, r)
	if s.opts.OnWrite != nil && r.Method != http.MethodGet {
		s.opts.OnWrite(refused)
	}
	if refused {
		return
	}
	if intercept != nil && intercept(w, r) {
		return
	}
	if !s.authorized(r) {
		s.write(w, nil, errReply(http.StatusUnauthorized, "unauthenticated for invalid credentials"))
		return
	}
	in, err := s.spec.validateRequest(r)
	if in == nil {
		s.write(w, nil, errReply(http.StatusNotFound, "path not found: %s %s", r.Method, r.URL.Path))
		return
	}
	if err != nil {
		s.violation("request %s %s: %v", r.Method, r.URL.RequestURI(), err)
		rep := errReply(http.StatusUnprocessableEntity, "validation failure: %v", err)
		rep.body.(map[string]any)["code"] = 606
		s.write(w, nil, rep)
		return
	}
	var body []byte
	if r.Body != nil {
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(r.Body)
		body = buf.Bytes()
	}
	s.mu.Lock()
	rep := s.handle(in.Route.Operation.OperationID, in.PathParams, r.URL.Query(), body)
	if rep.status >= 200 && rep.status < 300 && r.Method != http.MethodGet {
		s.writes++
	}
	if rep.header == nil {
		rep.header = http.Header{}
	}
	rep.header.Set("Configuration-Version", strconv.FormatInt(s.version, 10))
	forced := s.forced
	s.forced = 0
	s.mu.Unlock()
	if forced > 0 && s.opts.Reload != nil {
		s.opts.Reload()
	}
	s.write(w, func(status int, h http.Header, b []byte) {
		key := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%s\x00%s", in.Route.Operation.OperationID, status, h.Get("Content-Type"), b)))
		if v, ok := s.validated.Load(key); ok {
			if err, bad := v.(error); bad {
				s.violation("response to %s %s (%d): %v", r.Method, r.URL.RequestURI(), status, err)
			}
			return
		}
		err := validateResponse(in, status, h, b)
		if err != nil {
			s.validated.Store(key, err)
			s.violation("response to %s %s (%d): %v", r.Method, r.URL.RequestURI(), status, err)
		} else {
			s.validated.Store(key, noErr{})
		}
	}, rep)
}

func (s *Server) violation(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

func (s *Server) write(w http.ResponseWriter, validate func(int, http.Header, []byte), rep reply) {
	var b []byte
	if rep.body != nil {
		b, _ = json.Marshal(rep.body)
	}
	h := w.Header()
	for k, v := range rep.header {
		h[k] = v
	}
	if b != nil {
		h.Set("Content-Type", "application/json")
	}
	if validate != nil {
		validate(rep.status, h, b)
	}
	w.WriteHeader(rep.status)
	_, _ = w.Write(b)
}

func (s *Server) authorized(r *http.Request) bool {
	if s.opts.Username == "" && s.opts.Token == "" {
		return true
	}
	if s.opts.Token != "" && r.Header.Get("Authorization") == "Bearer "+s.opts.Token {
		return true
	}
	u, p, ok := r.BasicAuth()
	return ok && s.opts.Username != "" && u == s.opts.Username && p == s.opts.Password
}

// handle runs one operation; s.mu is held, so writers are serialised like the
// real API's.
func (s *Server) handle(op string, path map[string]string, q map[string][]string, body []byte) reply {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	switch op {
	case "getHaproxyProcessInfo":
		return s.processInfo()
	case "getAllRuntimeServer":
		return s.runtimeServers(path["parent_name"])
	case "getRuntimeServer", "replaceRuntimeServer", "addRuntimeServer", "deleteRuntimeServer":
		return s.runtimeOp(op, path, body)
	case "getReloads":
		return reply{status: 200, body: s.reloadList()}
	case "getReload":
		for _, r := range s.reloadList() {
			if r.ID == path["id"] {
				return reply{status: 200, body: r}
			}
		}
		return errReply(404, "missing object: reload %s", path["id"])
	case "getInfo":
		return reply{status: 200, body: models.Info{API: &models.InfoAPI{Version: "v3.3.0 dataplanetest"}, System: &models.InfoSystem{}}}
	case "getConfigurationVersion":
		return reply{status: 200, body: s.version}
	case "startTransaction":
		return s.startTransaction(get("version"))
	case "getTransactions":
		list := []models.Transaction{}
		for _, t := range s.txns {
			if st := get("status"); st == "" || st == t.status {
				list = append(list, models.Transaction{ID: t.id, Version: t.version, Status: t.status})
			}
		}
		return reply{status: 200, body: list}
	case "getTransaction":
		t, ok := s.txns[path["id"]]
		if !ok {
			return errReply(404, "transaction does not exist: transaction %s does not exist", path["id"])
		}
		out := models.Transaction{ID: t.id, Version: t.version, Status: t.status}
		if t.status != "in_progress" {
			out.Version = 0 // the real API reads none from an outdated one (conformance table)
		}
		return reply{status: 200, body: out}
	case "deleteTransaction":
		if _, ok := s.txns[path["id"]]; !ok {
			return errReply(404, "transaction does not exist: transaction %s does not exist", path["id"])
		}
		delete(s.txns, path["id"])
		return reply{status: 204}
	case "commitTransaction":
		return s.commit(path["id"], get("force_reload") == "true")
	case "getDefaultsSection":
		d, ok := s.defaults[path["name"]]
		if !ok {
			return errReply(404, "defaults section %s does not exist", path["name"])
		}
		return reply{status: 200, body: d}
	}
	if _, ok := proxyOps[op]; ok {
		return s.proxyHandle(op, path, get, body)
	}

	// Configuration operations: read or write in the live config or a transaction.
	write := op != "getBackend" && op != "getAllServerBackend" && op != "getServerBackend"
	version := get("version")
	if version == "0" {
		version = "" // the real API takes version 0 for none (conformance table)
	}
	cfg, tx, rep, ok := s.target(write, version, get("transaction_id"), get("force_reload") == "true")
	if !ok {
		return rep
	}
	var reload bool
	s.fellBack = false
	rep, reload = s.configOp(op, cfg, path, body, tx == nil)
	if !write || rep.status >= 300 {
		return rep
	}
	if tx != nil {
		tx.ops = append(tx.ops, op)
		rep.status = http.StatusAccepted // nothing applies before commit
		return rep
	}
	s.version++
	if op == "createServerBackend" && get("force_reload") == "true" && !reload {
		// The real API reloads a forced add even when it added the server
		// at runtime (conformance table: 201, reloaded).
		reload = true
		rep.status = http.StatusCreated
	}
	if reload {
		why := op
		if s.fellBack {
			// HAProxy refused the runtime write: the reload is the API's
			// fallback, not what the write asked for.
			why = "fallback " + op
		}
		s.askReload(get("force_reload") == "true", why)
		if rep.status != http.StatusAccepted {
			rep.status = http.StatusAccepted
		}
		if get("force_reload") == "true" {
			rep.status = http.StatusOK
			switch op {
			case "createServerBackend":
				rep.status = http.StatusCreated
			case "deleteServerBackend":
				rep.status = http.StatusNoContent // conformance table
			}
		} else {
			rep.header = http.Header{"Reload-Id": {s.reloadID}}
		}
	}
	return rep
}

// target resolves where an operation works: the live config (version) or a
// transaction's copy. Reads may name a transaction or nothing.
func (s *Server) target(write bool, version, txID string, force bool) (Config, *txn, reply, bool) {
	if txID != "" && version != "" {
		return nil, nil, errReply(400, "both version and transaction specified, specify only one"), false
	}
	if txID != "" && force {
		return nil, nil, errReply(400, "Both force_reload and transaction specified, specify only one"), false
	}
	if txID != "" {
		// The real API looks for the transaction among those in progress:
		// an unknown, outdated or failed one "does not exist", 400
		// (conformance table).
		t, ok := s.txns[txID]
		if !ok || t.status != "in_progress" {
			return nil, nil, errReply(400, "transaction does not exist: transaction %s does not exist", txID), false
		}
		return t.cfg, t, reply{}, true
	}
	if !write {
		return s.cfg, nil, reply{}, true
	}
	if version == "" {
		return nil, nil, errReply(400, "version or transaction not specified: version or transaction not specified, specify only one"), false
	}
	v, _ := strconv.ParseInt(version, 10, 64)
	if v != s.version {
		return nil, nil, errReply(409, "version mismatch: version in configuration file is %d, given version is %d", s.version, v), false
	}
	return s.cfg, nil, reply{}, true
}

func (s *Server) startTransaction(version string) reply {
	v, _ := strconv.ParseInt(version, 10, 64)
	if v != s.version {
		return errReply(409, "version mismatch: %d != %d", v, s.version)
	}
	open := 0
	for _, t := range s.txns {
		if t.status == "in_progress" {
			open++
		}
	}
	if open >= s.opts.MaxTransactions {
		return errReply(429, "cannot start a new transaction, reached the maximum amount of %d active transactions available", s.opts.MaxTransactions)
	}
	s.txnSeq++
	id := fmt.Sprintf("00000000-0000-4000-8000-%012d", s.txnSeq)
	s.txns[id] = &txn{id: id, version: v, status: "in_progress", cfg: s.cfg.clone(), fes: s.fes.clone()}
	return reply{status: 201, body: models.Transaction{ID: id, Version: v, Status: "in_progress"}}
}

func (s *Server) commit(id string, force bool) reply {
	t, ok := s.txns[id]
	if !ok {
		return errReply(404, "transaction does not exist: transaction %s does not exist", id)
	}
	switch t.status {
	case "outdated":
		return errReply(406, "transaction %s is outdated and cannot be committed", id)
	case "failed":
		return errReply(406, "transaction %s failed and cannot be committed", id)
	}
	if t.version != s.version {
		return errReply(409, "version mismatch: transaction version %d, configuration version %d", t.version, s.version)
	}
	if err := t.fes.check(t.cfg); err != nil { // proxies.go
		t.status = "failed"
		return errReply(400, "validation error: %v", err)
	}
	if s.check != nil {
		if err := s.check(t.cfg); err != nil {
			t.status = "failed"
			return errReply(400, "configuration check failed: %v", err)
		}
	}
	s.cfg, s.fes = t.cfg, t.fes
	s.version++
	s.askReload(force, strings.TrimSpace("commit "+strings.Join(t.ops, " ")))
	delete(s.txns, id)
	for _, o := range s.txns {
		if o.status == "in_progress" && o.version <= t.version {
			o.status = "outdated"
		}
	}
	done := models.Transaction{ID: id, Version: t.version, Status: "success"}
	if force {
		return reply{status: 200, body: done}
	}
	return reply{status: 202, body: done, header: http.Header{"Reload-Id": {s.reloadID}}}
}

// runtimeFields are the server fields the real API changes through the
// runtime socket instead of reloading (dataplaneapi handlers/runtime.go).
var runtimeFields = map[string]bool{
	"Weight": true, "Address": true, "Port": true, "Maintenance": true,
	"AgentCheck": true, "AgentAddr": true, "AgentSend": true, "HealthCheckPort": true,
}

// dynamicBalance are the algorithms that allow adding servers at runtime.
var dynamicBalance = map[string]bool{"": true, "roundrobin": true, "leastconn": true, "first": true, "random": true}

// configOp runs a configuration operation on cfg and says whether, outside a
// transaction, it would reload HAProxy.
func (s *Server) configOp(op string, cfg Config, path map[string]string, body []byte, live bool) (reply, bool) {
	beName := path["parent_name"]
	if op == "getBackend" || op == "replaceBackend" {
		beName = path["name"]
	}
	be, ok := cfg[beName]
	// The real API's errors are client-native's "<kind>: <reason>"; a
	// server operation on a missing backend is a missing parent, 400, and
	// its list an empty one (conformance table).
	switch {
	case ok:
	case op == "getBackend" || op == "replaceBackend":
		return errReply(404, "missing object: Object %s does not exist", beName), false
	case op == "getAllServerBackend":
		return reply{status: 200, body: []models.Server{}}, false
	default:
		return errReply(400, "missing parent: backend %s does not exist", beName), false
	}
	find := func(name string) int {
		for i := range be.Servers {
			if be.Servers[i].Name == name {
				return i
			}
		}
		return -1
	}
	switch op {
	case "getBackend":
		return reply{status: 200, body: be.Backend}, false
	case "replaceBackend":
		var nb models.Backend
		if err := json.Unmarshal(body, &nb); err != nil {
			return errReply(400, "%v", err), false
		}
		nb.Name = beName
		be.Backend = nb
		return reply{status: 202, body: nb}, true
	case "getAllServerBackend":
		return reply{status: 200, body: append([]models.Server{}, be.Servers...)}, false
	case "getServerBackend":
		i := find(path["name"])
		if i < 0 {
			return errReply(404, "missing object: Object %s does not exist in backend %s", path["name"], beName), false
		}
		return reply{status: 200, body: be.Servers[i]}, false
	case "createServerBackend":
		var ns models.Server
		if err := json.Unmarshal(body, &ns); err != nil {
			return errReply(400, "%v", err), false
		}
		if find(ns.Name) >= 0 {
			return errReply(409, "object already exists: Object %s already exists", ns.Name), false
		}
		be.Servers = append(be.Servers, ns)
		algo := ""
		if be.Backend.Balance != nil && be.Backend.Balance.Algorithm != nil {
			algo = *be.Backend.Balance.Algorithm
		}
		// (Its defaults section's "from" is not followed: tests give one.)
		runtime := !s.opts.DefaultsDefaultServer && !s.opts.RuntimeFails && be.Backend.DefaultServer == nil &&
			s.defaults[be.Backend.From].DefaultServer == nil && dynamicBalance[algo]
		if runtime && live && s.mirror != nil {
			// Like the real API: a refused runtime add falls back to a reload.
			runtime = s.mirror.add(beName, ns) == nil
			s.fellBack = !runtime
		}
		if runtime {
			return reply{status: 201, body: ns}, false
		}
		return reply{status: 202, body: ns}, true
	case "replaceServerBackend":
		i := find(path["name"])
		if i < 0 {
			return errReply(404, "missing object: Object %s does not exist in backend %s", path["name"], beName), false
		}
		var ns models.Server
		if err := json.Unmarshal(body, &ns); err != nil {
			return errReply(400, "%v", err), false
		}
		ns.Name = path["name"]
		reload := false
		for _, f := range changedFields(reflect.ValueOf(ns), reflect.ValueOf(be.Servers[i])) {
			reload = reload || !runtimeFields[f] || s.opts.RuntimeFails
		}
		old := be.Servers[i]
		be.Servers[i] = ns
		if reload {
			return reply{status: 202, body: ns}, true
		}
		if live && s.mirror != nil {
			if err := s.mirror.update(beName, old, ns); err != nil {
				s.fellBack = true
				return reply{status: 202, body: ns}, true // the real API reloads when runtime fails
			}
		}
		return reply{status: 200, body: ns}, false
	case "deleteServerBackend":
		i := find(path["name"])
		if i < 0 {
			return errReply(404, "missing object: Object %s does not exist in backend %s", path["name"], beName), false
		}
		be.Servers = append(be.Servers[:i], be.Servers[i+1:]...)
		return reply{status: 202}, true
	}
	return errReply(501, "operation %s is not implemented by the test server", op), false
}

// changedFields lists the names of the leaf fields that differ between two
// values of the same struct type, descending into embedded structs the way
// dataplaneapi's compareObjects does.
func changedFields(a, b reflect.Value) []string {
	var out []string
	for i := range a.NumField() {
		name := a.Type().Field(i).Name
		fa, fb := a.Field(i), b.Field(i)
		if fa.Kind() == reflect.Struct {
			out = append(out, changedFields(fa, fb)...)
			continue
		}
		if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
			out = append(out, name)
		}
	}
	return out
}
