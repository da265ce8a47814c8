package dataplane

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
)

// Proxies is what one HAProxy holds of frontends and backends, as of one
// configuration version: every one of them, this service's or not, so that
// a caller can tell its own from an operator's and see which addresses are
// bound (package lb decides; this package only reads and writes).
type Proxies struct {
	Version   int64
	Frontends []Frontend
	Backends  []ProxyBackend
}

// Frontend is one frontend section.
type Frontend struct {
	Name, Description, DefaultBackend string
	Binds                             []Bind
}

// Bind is one bind line of a frontend. Port 0 is a bind without a port
// (a unix socket, a port range): it takes no address:port of interest.
type Bind struct {
	Name, Address string
	Port          int64
}

// ProxyBackend is one backend section and its servers as haproxy.cfg
// holds them.
type ProxyBackend struct {
	Name, Description string
	Servers           []ProxyServer
}

// ProxyServer is a server of a ProxyBackend: Maint when haproxy.cfg holds it
// in maintenance.
type ProxyServer struct {
	Name  string
	Maint bool
}

// Pair is one frontend bound on Address:Port with its default backend, both
// carrying Description (the mark ownership is read back from).
type Pair struct {
	Frontend, Backend, Description, Address string
	Port                                    int64
}

// ProxyWrite is what one transaction changes: one commit, one reload.
type ProxyWrite struct {
	// CreateBackends are backends to create, with the recommended lines
	// (ClassBackend).
	CreateBackends []Pair
	// CreateFrontends are frontends to create, each with its one bind.
	CreateFrontends []Pair
	// UpdateFrontends are frontends to bind on Pair's address and port
	// alone, with Pair's default backend and description.
	UpdateFrontends []Pair
	// DeleteFrontends and DeleteBackends are deleted (frontends first).
	DeleteFrontends, DeleteBackends []string
}

// Empty reports whether w changes nothing.
func (w ProxyWrite) Empty() bool {
	return len(w.CreateBackends)+len(w.CreateFrontends)+len(w.UpdateFrontends)+len(w.DeleteFrontends)+len(w.DeleteBackends) == 0
}

// bindName is the name of the one bind a Pair's frontend has.
const bindName = "vip"

// ReadProxies reads every frontend with its binds and every backend with
// its servers, in two requests (full_section), and refuses a read whose
// two answers come from different versions (a conflict: read again).
func (c *Client) ReadProxies(ctx context.Context) (Proxies, error) {
	full := url.Values{"full_section": {"true"}}
	var fes []models.Frontend
	r1, err := c.do(ctx, http.MethodGet, "/configuration/frontends", full, nil, &fes)
	if err != nil {
		return Proxies{}, fmt.Errorf("read frontends: %w", err)
	}
	var bes []models.Backend
	r2, err := c.do(ctx, http.MethodGet, "/configuration/backends", full, nil, &bes)
	if err != nil {
		return Proxies{}, fmt.Errorf("read backends: %w", err)
	}
	if r1.version != r2.version {
		return Proxies{}, &failure.ConflictError{Msg: fmt.Sprintf("read frontends and backends: configuration changed between reads (%d, %d)", r1.version, r2.version)}
	}
	out := Proxies{Version: r2.version}
	for _, f := range fes {
		fe := Frontend{Name: f.Name, Description: f.Description, DefaultBackend: f.DefaultBackend}
		for name, b := range f.Binds {
			bd := Bind{Name: name, Address: b.Address}
			if b.Port != nil && b.PortRangeEnd == nil {
				bd.Port = *b.Port
			}
			fe.Binds = append(fe.Binds, bd)
		}
		slices.SortFunc(fe.Binds, func(a, b Bind) int { return cmp.Compare(a.Name, b.Name) })
		out.Frontends = append(out.Frontends, fe)
	}
	for _, b := range bes {
		be := ProxyBackend{Name: b.Name, Description: b.Description}
		for name, s := range b.Servers {
			be.Servers = append(be.Servers, ProxyServer{Name: name, Maint: s.Maintenance == enabled})
		}
		slices.SortFunc(be.Servers, func(a, b ProxyServer) int { return cmp.Compare(a.Name, b.Name) })
		out.Backends = append(out.Backends, be)
	}
	return out, nil
}

// Sessions returns the current sessions of the backend's servers through
// the runtime socket (WithRuntime); known is false without one: the Data
// Plane API does not show sessions.
func (c *Client) Sessions(ctx context.Context, backend string) (sessions int, known bool, err error) {
	if c.runtime == nil {
		return 0, false, nil
	}
	rs, err := c.runtime.ReadRuntime(ctx, backend)
	if err != nil {
		return 0, false, fmt.Errorf("read runtime state of %s: %w", backend, err)
	}
	for _, s := range rs {
		if s.Runtime != nil {
			sessions += s.Runtime.Sessions
		}
	}
	return sessions, true, nil
}

// ClassBackend is the backend a Pair gets, with the lines docs/haproxy.md
// recommends: tcp mode (TLS passes through), balance roundrobin (servers
// can be added at runtime), option tcp-check (the check each server's
// "check" runs), option redispatch 1 and retries 3 (a connect to a dead
// node is retried on another server), and no default-server line (with
// one the API reloads for every server it adds).
func ClassBackend(p Pair) *models.Backend {
	rr := "roundrobin"
	retries := int64(3) // model.LineRetries
	one := int64(1)
	on := enabled
	return &models.Backend{BackendBase: models.BackendBase{
		Name: p.Backend, Description: p.Description, Mode: "tcp",
		Balance:    &models.Balance{Algorithm: &rr},
		AdvCheck:   "tcp-check",
		Redispatch: &models.Redispatch{Enabled: &on, Interval: &one},
		Retries:    &retries,
	}}
}

// classFrontend is the frontend a Pair gets: tcp mode, its default backend.
func classFrontend(p Pair) *models.Frontend {
	return &models.Frontend{FrontendBase: models.FrontendBase{
		Name: p.Frontend, Description: p.Description, Mode: "tcp", DefaultBackend: p.Backend,
	}}
}

func classBind(p Pair) *models.Bind {
	port := p.Port
	return &models.Bind{Name: bindName, Address: p.Address, Port: &port}
}

// WriteProxies makes w true in one transaction started at version: one
// commit, one reload. A lost race (version mismatch, outdated transaction)
// is a failure.Temporary error: re-read, re-plan, try again. It returns the
// version after the commit.
func (c *Client) WriteProxies(ctx context.Context, version int64, w ProxyWrite) (next int64, err error) {
	if w.Empty() {
		return version, nil
	}
	err = c.inTransaction(ctx, version, func(in url.Values) error { return c.writeProxies(ctx, in, w) })
	if err != nil {
		return version, err
	}
	return version + 1, nil
}

// writeProxies writes w's sections into transaction in.
func (c *Client) writeProxies(ctx context.Context, in url.Values, w ProxyWrite) error {
	const cfg = "/configuration"
	for _, name := range w.DeleteFrontends {
		if _, err := c.do(ctx, http.MethodDelete, cfg+"/frontends/"+url.PathEscape(name), in, nil, nil); err != nil {
			return fmt.Errorf("delete frontend %s: %w", name, err)
		}
	}
	for _, name := range w.DeleteBackends {
		if _, err := c.do(ctx, http.MethodDelete, cfg+"/backends/"+url.PathEscape(name), in, nil, nil); err != nil {
			return fmt.Errorf("delete backend %s: %w", name, err)
		}
	}
	for _, p := range w.CreateBackends {
		if _, err := c.do(ctx, http.MethodPost, cfg+"/backends", in, ClassBackend(p), nil); err != nil {
			return fmt.Errorf("create backend %s: %w", p.Backend, err)
		}
	}
	for _, p := range w.CreateFrontends {
		if _, err := c.do(ctx, http.MethodPost, cfg+"/frontends", in, classFrontend(p), nil); err != nil {
			return fmt.Errorf("create frontend %s: %w", p.Frontend, err)
		}
		binds := cfg + "/frontends/" + url.PathEscape(p.Frontend) + "/binds"
		if _, err := c.do(ctx, http.MethodPost, binds, in, classBind(p), nil); err != nil {
			return fmt.Errorf("bind frontend %s on %s:%d: %w", p.Frontend, p.Address, p.Port, err)
		}
	}
	for _, p := range w.UpdateFrontends {
		if err := c.rebind(ctx, in, p); err != nil {
			return err
		}
	}
	return nil
}

// rebind makes frontend p.Frontend bind p.Address:p.Port alone, route to
// p.Backend and carry p.Description, inside transaction in: read, modify,
// write, so that what an operator added to the frontend stays.
func (c *Client) rebind(ctx context.Context, in url.Values, p Pair) error {
	fePath := "/configuration/frontends/" + url.PathEscape(p.Frontend)
	var fe models.Frontend
	if _, err := c.do(ctx, http.MethodGet, fePath, in, nil, &fe); err != nil {
		return fmt.Errorf("read frontend %s: %w", p.Frontend, err)
	}
	if fe.DefaultBackend != p.Backend || fe.Description != p.Description {
		fe.DefaultBackend, fe.Description = p.Backend, p.Description
		fe.Binds = nil // children are written through their own paths
		if _, err := c.do(ctx, http.MethodPut, fePath, in, &fe, nil); err != nil {
			return fmt.Errorf("update frontend %s: %w", p.Frontend, err)
		}
	}
	var binds []models.Bind
	if _, err := c.do(ctx, http.MethodGet, fePath+"/binds", in, nil, &binds); err != nil {
		return fmt.Errorf("read binds of %s: %w", p.Frontend, err)
	}
	found := false
	for _, b := range binds {
		if b.Name != bindName {
			if _, err := c.do(ctx, http.MethodDelete, fePath+"/binds/"+url.PathEscape(b.Name), in, nil, nil); err != nil {
				return fmt.Errorf("delete bind %s of %s: %w", b.Name, p.Frontend, err)
			}
			continue
		}
		found = true
		if b.Address == p.Address && b.Port != nil && *b.Port == p.Port && b.PortRangeEnd == nil {
			continue
		}
		b.Address, b.Port, b.PortRangeEnd = p.Address, &p.Port, nil
		if _, err := c.do(ctx, http.MethodPut, fePath+"/binds/"+url.PathEscape(b.Name), in, &b, nil); err != nil {
			return fmt.Errorf("bind frontend %s on %s:%d: %w", p.Frontend, p.Address, p.Port, err)
		}
	}
	if !found {
		if _, err := c.do(ctx, http.MethodPost, fePath+"/binds", in, classBind(p), nil); err != nil {
			return fmt.Errorf("bind frontend %s on %s:%d: %w", p.Frontend, p.Address, p.Port, err)
		}
	}
	return nil
}
