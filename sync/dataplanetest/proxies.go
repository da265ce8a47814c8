package dataplanetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/haproxytech/client-native/v6/models"
)

// frontendState is one frontend section and its binds, in order.
type frontendState struct {
	Frontend models.Frontend // without Binds: they live in Binds
	Binds    []models.Bind
}

// frontends are the frontend sections by name. They live beside Config
// (the backends) and are copied into and out of transactions with it.
type frontends map[string]*frontendState

func (f frontends) clone() frontends {
	out := make(frontends, len(f))
	for name, fe := range f {
		out[name] = &frontendState{Frontend: fe.Frontend, Binds: slices.Clone(fe.Binds)}
	}
	return out
}

// check is what "haproxy -c" says of the frontends at commit, where it
// matters here: each default backend exists (conformance table: the real
// API answers 400 "validation error" and fails the transaction).
func (f frontends) check(cfg Config) error {
	for _, name := range sortedKeys(f) {
		if be := f[name].Frontend.DefaultBackend; be != "" {
			if _, ok := cfg[be]; !ok {
				return fmt.Errorf("proxy '%s': unable to find required default_backend: '%s'", name, be)
			}
		}
	}
	return nil
}

// proxyOps are the frontend, bind and backend-section operations: class
// Services' frontends and backends (sync/lb). Reads are false.
var proxyOps = map[string]bool{
	"getFrontends": false, "getFrontend": false, "createFrontend": true, "replaceFrontend": true, "deleteFrontend": true,
	"getAllBindFrontend": false, "getBindFrontend": false, "createBindFrontend": true, "replaceBindFrontend": true, "deleteBindFrontend": true,
	"getBackends": false, "createBackend": true, "deleteBackend": true,
}

// AddFrontend creates a frontend with binds, as if read from haproxy.cfg
// (an operator's own section).
func (s *Server) AddFrontend(f models.Frontend, binds ...models.Bind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fes == nil {
		s.fes = frontends{}
	}
	f.Binds = nil
	s.fes[f.Name] = &frontendState{Frontend: f, Binds: slices.Clone(binds)}
}

// Frontend returns a frontend section and its binds (ok false if none).
func (s *Server) Frontend(name string) (models.Frontend, []models.Bind, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fe, ok := s.fes[name]
	if !ok {
		return models.Frontend{}, nil, false
	}
	return fe.Frontend, slices.Clone(fe.Binds), true
}

// Sections renders the frontends and backends whose names match as
// haproxy.cfg sections, as the real API writes them (the lines that decide
// traffic: mode, binds, default_backend, balance, check, retries, servers),
// for a test that reloads a real HAProxy with what the API holds.
func (s *Server) Sections(match func(name string) bool) string {
	s.mu.Lock()
	var b strings.Builder
	for _, name := range sortedKeys(s.fes) {
		if !match(name) {
			continue
		}
		fe := s.fes[name]
		fmt.Fprintf(&b, "frontend %s\n", name)
		line(&b, "description", fe.Frontend.Description)
		line(&b, "mode", fe.Frontend.Mode)
		for _, bd := range fe.Binds {
			addr := bd.Address
			if bd.Port != nil {
				addr += ":" + strconv.FormatInt(*bd.Port, 10)
			}
			fmt.Fprintf(&b, "    bind %s name %s\n", addr, bd.Name)
		}
		line(&b, "default_backend", fe.Frontend.DefaultBackend)
	}
	var bes []string
	for _, name := range sortedKeys(s.cfg) {
		if match(name) {
			bes = append(bes, name)
		}
	}
	s.mu.Unlock()
	for _, name := range bes {
		be := s.Backend(name)
		fmt.Fprintf(&b, "backend %s\n", name)
		line(&b, "description", be.Description)
		line(&b, "mode", be.Mode)
		for _, l := range backendLinesOf(be) {
			fmt.Fprintf(&b, "    %s\n", l)
		}
		if be.AdvCheck != "" {
			fmt.Fprintf(&b, "    option %s\n", be.AdvCheck)
		}
		for _, l := range s.ServerLines(name) {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	return b.String()
}

func line(b *strings.Builder, kw, v string) {
	if v != "" {
		fmt.Fprintf(b, "    %s %s\n", kw, v)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// backendLinesOf renders a backend's balance, redispatch and retries lines
// in haproxy.cfg's order.
func backendLinesOf(be models.Backend) []string {
	var out []string
	if be.Balance != nil && be.Balance.Algorithm != nil {
		out = append(out, "balance "+*be.Balance.Algorithm)
	}
	if r := be.Redispatch; r != nil && r.Enabled != nil {
		l := "option redispatch"
		if *r.Enabled == "disabled" {
			l = "no option redispatch"
		} else if r.Interval != nil {
			l += " " + strconv.FormatInt(*r.Interval, 10)
		}
		out = append(out, l)
	}
	if be.Retries != nil {
		out = append(out, "retries "+strconv.FormatInt(*be.Retries, 10))
	}
	return out
}

// proxyHandle runs a frontend, bind or backend-section operation, in the
// live configuration (?version) or a transaction, with the real API's
// version, reload and answer rules (handle's); s.mu is held.
func (s *Server) proxyHandle(op string, path map[string]string, get func(string) string, body []byte) reply {
	write := proxyOps[op]
	version := get("version")
	if version == "0" {
		version = ""
	}
	force := get("force_reload") == "true"
	cfg, tx, rep, ok := s.target(write, version, get("transaction_id"), force)
	if !ok {
		return rep
	}
	if s.fes == nil {
		s.fes = frontends{}
	}
	fes := s.fes
	if tx != nil {
		if tx.fes == nil {
			tx.fes = frontends{}
		}
		fes = tx.fes
	}
	if write && tx == nil {
		// An implicit transaction: checked like a commit before it applies.
		cfg, fes = cfg.clone(), fes.clone()
	}
	rep = proxyOp(op, cfg, fes, path, body, get("full_section") == "true")
	if !write || rep.status >= 300 {
		return rep
	}
	if tx != nil {
		tx.ops = append(tx.ops, op)
		rep.status = http.StatusAccepted // nothing applies before commit
		return rep
	}
	if err := fes.check(cfg); err != nil {
		return errReply(400, "validation error: %v", err)
	}
	s.cfg, s.fes = cfg, fes
	s.version++
	s.askReload(force, op)
	switch {
	case !force:
		rep.status = http.StatusAccepted
		rep.header = http.Header{"Reload-Id": {s.reloadID}}
	case strings.HasPrefix(op, "create"):
		rep.status = http.StatusCreated
	case strings.HasPrefix(op, "delete"):
		rep.status = http.StatusNoContent
	default:
		rep.status = http.StatusOK
	}
	return rep
}

// proxyOp applies one operation to cfg and fes. Writes answer 202 here;
// proxyHandle sets the status the real API gives.
func proxyOp(op string, cfg Config, fes frontends, path map[string]string, body []byte, full bool) reply {
	switch op {
	case "getBackends":
		list := []models.Backend{}
		for _, name := range sortedKeys(cfg) {
			be := cfg[name].Backend
			if full && len(cfg[name].Servers) > 0 {
				be.Servers = map[string]models.Server{}
				for _, srv := range cfg[name].Servers {
					be.Servers[srv.Name] = srv
				}
			}
			list = append(list, be)
		}
		return reply{status: 200, body: list}
	case "createBackend":
		var nb models.Backend
		if err := json.Unmarshal(body, &nb); err != nil {
			return errReply(400, "%v", err)
		}
		if _, ok := cfg[nb.Name]; ok {
			return errReply(409, "object already exists: Object %s already exists", nb.Name)
		}
		cfg[nb.Name] = &backendState{Backend: nb}
		return reply{status: 202, body: nb}
	case "deleteBackend":
		if _, ok := cfg[path["name"]]; !ok {
			return errReply(404, "missing object: Object %s does not exist", path["name"])
		}
		delete(cfg, path["name"])
		return reply{status: 202}
	case "getFrontends":
		list := []models.Frontend{}
		for _, name := range sortedKeys(fes) {
			list = append(list, fes[name].render(full))
		}
		return reply{status: 200, body: list}
	case "createFrontend":
		var nf models.Frontend
		if err := json.Unmarshal(body, &nf); err != nil {
			return errReply(400, "%v", err)
		}
		if _, ok := fes[nf.Name]; ok {
			return errReply(409, "object already exists: Object %s already exists", nf.Name)
		}
		binds := make([]models.Bind, 0, len(nf.Binds))
		for _, name := range sortedKeys(nf.Binds) {
			bd := nf.Binds[name]
			bd.Name = name
			binds = append(binds, bd)
		}
		nf.Binds = nil
		fes[nf.Name] = &frontendState{Frontend: nf, Binds: binds}
		return reply{status: 202, body: nf}
	}
	name := path["name"]
	if strings.Contains(op, "Bind") {
		name = path["parent_name"]
	}
	fe, ok := fes[name]
	switch {
	case ok:
	case strings.Contains(op, "Bind") && op == "getAllBindFrontend":
		return reply{status: 200, body: []models.Bind{}}
	case strings.Contains(op, "Bind"):
		return errReply(400, "missing parent: frontend %s does not exist", name)
	default:
		return errReply(404, "missing object: Object %s does not exist", name)
	}
	bind := func() int {
		return slices.IndexFunc(fe.Binds, func(b models.Bind) bool { return b.Name == path["name"] })
	}
	switch op {
	case "getFrontend":
		return reply{status: 200, body: fe.render(full)}
	case "replaceFrontend":
		var nf models.Frontend
		if err := json.Unmarshal(body, &nf); err != nil {
			return errReply(400, "%v", err)
		}
		nf.Name, nf.Binds = name, nil
		fe.Frontend = nf
		return reply{status: 202, body: nf}
	case "deleteFrontend":
		delete(fes, name)
		return reply{status: 202}
	case "getAllBindFrontend":
		return reply{status: 200, body: append([]models.Bind{}, fe.Binds...)}
	case "getBindFrontend":
		if i := bind(); i >= 0 {
			return reply{status: 200, body: fe.Binds[i]}
		}
		return errReply(404, "missing object: Object %s does not exist in frontend %s", path["name"], name)
	case "createBindFrontend":
		var nb models.Bind
		if err := json.Unmarshal(body, &nb); err != nil {
			return errReply(400, "%v", err)
		}
		if slices.ContainsFunc(fe.Binds, func(b models.Bind) bool { return b.Name == nb.Name }) {
			return errReply(409, "object already exists: Object %s already exists", nb.Name)
		}
		fe.Binds = append(fe.Binds, nb)
		return reply{status: 202, body: nb}
	case "replaceBindFrontend":
		i := bind()
		if i < 0 {
			return errReply(404, "missing object: Object %s does not exist in frontend %s", path["name"], name)
		}
		var nb models.Bind
		if err := json.Unmarshal(body, &nb); err != nil {
			return errReply(400, "%v", err)
		}
		nb.Name = path["name"]
		fe.Binds[i] = nb
		return reply{status: 202, body: nb}
	case "deleteBindFrontend":
		i := bind()
		if i < 0 {
			return errReply(404, "missing object: Object %s does not exist in frontend %s", path["name"], name)
		}
		fe.Binds = slices.Delete(fe.Binds, i, i+1)
		return reply{status: 202}
	}
	return errReply(501, "operation %s is not implemented by the test server", op)
}

// render is the frontend as the API answers it: with its binds by name
// when the full section is asked for.
func (f *frontendState) render(full bool) models.Frontend {
	out := f.Frontend
	if full && len(f.Binds) > 0 {
		out.Binds = map[string]models.Bind{}
		for _, b := range f.Binds {
			out.Binds[b.Name] = b
		}
	}
	return out
}
