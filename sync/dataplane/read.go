package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// Read returns the backend's settings and servers as of one configuration
// version, recorded in Revision.
func (c *Client) Read(ctx context.Context, backend string) (model.Backend, error) {
	var be models.Backend
	v1, err := c.do(ctx, http.MethodGet, "/configuration/backends/"+url.PathEscape(backend), nil, nil, &be)
	if err != nil {
		return model.Backend{}, fmt.Errorf("read backend %s: %w", backend, err)
	}
	// Servers are decoded field by field only where needed (serverOf); each
	// keeps its raw JSON so that a write can start from the whole model.
	var servers []json.RawMessage
	v2, err := c.do(ctx, http.MethodGet, "/configuration/backends/"+url.PathEscape(backend)+"/servers", nil, nil, &servers)
	if err != nil {
		return model.Backend{}, fmt.Errorf("read servers of %s: %w", backend, err)
	}
	if v1.version != v2.version {
		return model.Backend{}, &failure.ConflictError{Msg: fmt.Sprintf("read backend %s: configuration changed between reads (%d, %d)", backend, v1.version, v2.version)}
	}
	running := func() ([]model.Server, error) { return c.runtime.ReadRuntime(ctx, backend) }
	return c.assemble(ctx, backend, &be, servers, v2.version, running, nil)
}

// assemble is backend, be as read at version, its servers' raw JSON from
// haproxy.cfg, and (with the runtime socket) running, asked only when
// needed. defaults is nil for a read alone; for a bulk read (ReadAll) it
// keeps the defaults sections read for the next backend, and nothing a
// write relies on is stored (the servers hidden from the API, which a
// write's own Read stores: a bulk read may be older than a reconcile's).
func (c *Client) assemble(ctx context.Context, backend string, be *models.Backend, servers []json.RawMessage, version int64,
	running func() ([]model.Server, error), defaults map[string]*models.Defaults) (model.Backend, error) {
	if err := dynamicAlgorithm(be); err != nil {
		return model.Backend{}, err
	}
	out := model.Backend{Name: backend, Revision: version, Settings: settingsOf(be)}
	retry, inh, err := c.readSections(ctx, be, c.runtime != nil, defaults)
	if err != nil {
		return model.Backend{}, err
	}
	out.Retry = &retry
	out.Servers = make([]model.Server, 0, len(servers))
	for _, raw := range servers {
		s, err := serverOf(raw)
		if err != nil {
			return model.Backend{}, fmt.Errorf("read servers of %s: %w", backend, err)
		}
		out.Servers = append(out.Servers, s)
	}
	if c.runtime != nil {
		rs, err := running()
		if err != nil {
			return model.Backend{}, fmt.Errorf("read runtime state of %s: %w", backend, err)
		}
		// Asked of the API only for a server that could be added.
		var pendingKnown, pending bool
		settingsLoading := func() bool {
			if !pendingKnown {
				pending, pendingKnown = c.settingsLoading(ctx, backend), true
			}
			return pending
		}
		// Another writer's settings (serve beside the one-shot run, a
		// second replica) are in no memory of this process: a server
		// checked on a port of its own (kube-proxy's health port, whose
		// HTTP check is the backend's) waits for any reload pending
		// (seed 219952848, serve-soak, 3.4.0: the old tcp-check's "hc"
		// sent to kube-proxy, every Node out until the reload).
		var anyKnown, anyPending bool
		reloadPending := func() bool {
			if !anyKnown {
				p, err := c.reloadPending(ctx)
				anyPending, anyKnown = err != nil || p, true
			}
			return anyPending
		}
		seen := make(map[string]model.Server, len(rs))
		for _, r := range rs {
			seen[r.Name] = r
		}
		inCfg := make(map[string]bool, len(out.Servers))
		for i := range out.Servers {
			inCfg[out.Servers[i].Name] = true
			r, ok := seen[out.Servers[i].Name]
			if !ok {
				// Written and not running: the API applied its write by a
				// reload that has not run yet (reload_delay), and no check
				// of it ran. Not a server whose checks cannot be seen:
				// that would put it in service before the reload loads it.
				// The socket can add it only with what haproxy.cfg's
				// default-server gives it (inheritance), and not before
				// the backend's new settings run (settingsLoading).
				addable := onlyWritten(out.Servers[i].Source) && inh.inherit(out.Servers[i]).Carried && !settingsLoading() &&
					!(out.Servers[i].Check.Port != 0 && reloadPending())
				out.Servers[i].Runtime = &model.Runtime{Loading: true, Addable: addable}
				continue
			}
			// The running HAProxy's state and weight are what serve
			// traffic, and what a plan must change: they differ from
			// haproxy.cfg while a server is gated, or after a change
			// through the socket. Where haproxy.cfg holds a server more in
			// traffic than the running HAProxy does, a reload would load
			// it so (model.Runtime.Behind): the plan writes it again, or
			// brings the running HAProxy up to it. Reporting haproxy.cfg's
			// state instead left a server it had ready at weight 0 for
			// good, as no plan saw it out of traffic.
			cfg := out.Servers[i].State
			out.Servers[i].State, out.Servers[i].Weight = r.State, r.Weight
			if r.Runtime != nil && cfg.Rank() > r.State.Rank() {
				rt := *r.Runtime
				rt.Behind = true
				r.Runtime = &rt
			}
			if r.Runtime != nil && r.State == model.Ready && cfg != model.Ready {
				// In service through the socket, and the write that was
				// to follow failed: the plan writes it again.
				rt := *r.Runtime
				rt.Unwritten = true
				r.Runtime = &rt
			}
			out.Servers[i].Runtime, out.Servers[i].Up = r.Runtime, r.Up
			// Where it runs: a move haproxy.cfg holds and a reload is
			// still to apply is not made yet (move.go).
			out.Servers[i].Address, out.Servers[i].Port = runningAt(out.Servers[i], r)
		}
		// Servers the running HAProxy holds and haproxy.cfg does not: a
		// burst added through the socket, written once each enters
		// service (model.Runtime.Unpersisted). Only those this service
		// added: a server-template's slots (the API lists them apart) and
		// servers added by hand are not its to change.
		var hidden []string
		for _, r := range rs {
			if !inCfg[r.Name] && (r.Runtime == nil || !r.Runtime.Ours) {
				hidden = append(hidden, r.Name)
			}
			if inCfg[r.Name] || r.Runtime == nil || !r.Runtime.Ours {
				continue
			}
			rt := *r.Runtime
			rt.Unpersisted = true
			rt.Unwritten = r.State == model.Ready
			r.Runtime = &rt
			out.Servers = append(out.Servers, r)
		}
		if defaults == nil {
			c.hidden.Store(backend, hidden)
		}
	}
	return out, nil
}

// unpersisted reports whether the running HAProxy holds s and haproxy.cfg
// does not (model.Runtime.Unpersisted): only the socket can change it, and
// only a write of the whole server (a POST) persists it.
func unpersisted(s *model.Server) bool {
	return s != nil && s.Runtime != nil && s.Runtime.Unpersisted
}

// readSections reads what be inherits from its defaults sections ("from",
// which the API fills in also for a backend that follows an unnamed
// defaults section, and so on up the defaults' own "from"): the lines that
// retry a failed connection as HAProxy runs them, the backend's first, then
// for each line it leaves unset the nearest section's; and, with all, the
// default-server lines of every section (inheritance), which a server added
// through the socket must carry. Without all, a backend that sets every
// retry line costs no call.
func (c *Client) readSections(ctx context.Context, be *models.Backend, all bool, cache map[string]*models.Defaults) (model.RetryLines, inheritance, error) {
	s := backendRetry(be)
	inh := inheritance{sections: []*models.DefaultServer{be.DefaultServer}}
	seen := map[string]bool{}
	for from := be.From; from != "" && !seen[from] && (all || !s.complete()); {
		seen[from] = true
		d := cache[from]
		if d == nil {
			d = &models.Defaults{}
			if _, err := c.do(ctx, http.MethodGet, "/configuration/defaults/"+url.PathEscape(from), nil, nil, d); err != nil {
				return model.RetryLines{}, inheritance{}, fmt.Errorf("read defaults section %s of backend %s: %w", from, be.Name, err)
			}
			if cache != nil {
				cache[from] = d
			}
		}
		s = s.inherit(defaultsRetry(d))
		inh.sections = append(inh.sections, d.DefaultServer)
		from = d.From
	}
	return s.retryLines(), inh, nil
}

// dynamicAlgorithm refuses a backend whose balance algorithm cannot take
// servers at runtime: static-rr, and hashes with the default map-based
// hash-type (HAProxy refuses "add server" there; churn would need reloads).
func dynamicAlgorithm(be *models.Backend) error {
	if be.Balance == nil || be.Balance.Algorithm == nil {
		return nil // HAProxy's default: roundrobin (random from 3.3)
	}
	algo := *be.Balance.Algorithm
	switch algo {
	case "roundrobin", "leastconn", "first", "random":
		return nil
	case "static-rr":
	default: // source, uri, url_param, hdr, hash, rdp-cookie
		if be.HashType != nil && be.HashType.Method == "consistent" {
			return nil
		}
	}
	return &failure.BackendError{Backend: be.Name, Reason: fmt.Sprintf(
		"balance %s cannot take runtime servers: use roundrobin, leastconn, first, random, or hash-type consistent", algo)}
}

// ReadUp returns which of the backend's servers HAProxy sees UP, from the
// API's runtime view (GET .../runtime/backends/{b}/servers). It costs a call,
// so the reconciler asks only when the mass-deletion guard may hold.
func (c *Client) ReadUp(ctx context.Context, backend string) (map[string]bool, error) {
	var servers []models.RuntimeServer
	if _, err := c.do(ctx, http.MethodGet, "/runtime/backends/"+url.PathEscape(backend)+"/servers", nil, nil, &servers); err != nil {
		return nil, fmt.Errorf("read runtime servers of %s: %w", backend, err)
	}
	up := make(map[string]bool, len(servers))
	for _, s := range servers {
		up[s.Name] = s.OperationalState == "up"
	}
	return up, nil
}
