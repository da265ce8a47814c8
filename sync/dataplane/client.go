// Package dataplane drives one HAProxy through the Data Plane API v3, using
// client-native's models for every body it sends and reads.
//
// route decides, with no I/O, how each change of a plan reaches HAProxy, by
// what the API does with each write (README: "How the Data Plane API driver
// applies changes"); Apply carries that out:
//   - runtime-safe changes (address, port, weight, maintenance; drain is
//     weight 0) are single PUTs with ?version=N: the API applies them through
//     the runtime socket and writes haproxy.cfg, with no reload;
//   - a server about to be deleted is first put in maintenance the same way,
//     so it leaves traffic at once;
//   - with the instance's runtime socket (WithRuntime), up to MaxRuntimeAdds
//     new servers are POSTed in maintenance (added at runtime, no reload) and
//     gated on their checks through the socket; a later reconcile puts them
//     in service once the socket shows the check passed;
//   - with the socket, a bigger burst of new servers is added through the
//     socket itself (pipelined, gated) and written to haproxy.cfg in
//     maintenance by the transaction below, so that its reload never loads
//     a server no check passed for; once their checks passed, a later
//     reconcile writes them in service (more than MaxRuntimeAdds in one
//     more transaction, whose reload the API runs with the first one's,
//     reload_delay; fewer by a PUT each) and puts them in service;
//   - a change haproxy.cfg already holds (the running HAProxy differs from
//     it, e.g. a server gated after such a burst) goes through the socket: a
//     PUT that changes nothing is not applied;
//   - everything else (new servers without a socket, deletions, check
//     parameters, backend settings) goes into one transaction: one commit,
//     one reload; with the socket, a server deleted past the drain timeout
//     (plan.Change.Kill) has its sessions shut through it first (toShut);
//   - every add through the socket carries what haproxy.cfg's
//     default-server lines give the server, which HAProxy never applies to
//     "add server" (inheritance, plan.Change.Inherit); when a line has a
//     keyword "add server" cannot carry, no server is added there: new
//     servers go into the transaction, parked, and the reload loads them.
//
// Every write carries the version the plan was computed from; a conflict is
// returned as a failure.Temporary error so the caller re-reads and re-plans. A
// transaction that is not committed is deleted, on a fresh context.
package dataplane

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

const apiPrefix = "/v3/services/haproxy"

// Auth holds the credentials: Basic auth, or a bearer token for an API behind
// an auth proxy.
type Auth struct {
	Username, Password string
	Token              string
}

// Client talks to one Data Plane API. It keeps no state between calls.
type Client struct {
	base        *url.URL
	name        string
	hc          *http.Client
	auth        Auth
	deleteBatch int
	runtime     Runtime
	// addsReloaded is when (Unix nanoseconds) the API last answered a
	// server add with a reload instead of adding it at runtime; see
	// addsReload.
	addsReloaded atomic.Int64
}

// addsReloadFor is how long the driver remembers that the API reloads on
// server adds: meanwhile, with the socket, every add goes through the
// socket first (a burst of one). Then it tries the API's way again, so a
// fixed haproxy.cfg or an upgraded API is noticed without a restart.
const addsReloadFor = 10 * time.Minute

// Why the API answers with a reload a write it applies at runtime, as
// dataplaneapi v3.3.0 decides it (handlers/server.go, runtime.go).
const (
	whyAddReloads = "the Data Plane API reloaded HAProxy to add a server instead of adding it at runtime: " +
		"haproxy.cfg has a default-server line in the backend or its defaults section, or the API cannot read " +
		"this HAProxy's version (client-native before v6.3.7, in dataplaneapi before 3.3.5, fails on some, and on those with '~'); " +
		"with the runtime socket, servers are added through it and written to haproxy.cfg once checked, so each reload costs no gate"
	whyChangeReloads = "the Data Plane API reloaded HAProxy for a server change it applies at runtime (weight, address, " +
		"maintenance): its runtime command failed; with the runtime socket, the change is applied through it too"
)

// addsReload reports whether the API answered a server add with a reload
// within addsReloadFor.
func (c *Client) addsReload() bool {
	at := c.addsReloaded.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < addsReloadFor
}

// unexpected records a write the API answered with a reload (202) where it
// applies such a write at runtime.
func unexpected(out *plan.Applied, why string) {
	out.UnexpectedReloads++
	if out.UnexpectedReason == "" {
		out.UnexpectedReason = why
	}
}

// Runtime is the runtime socket of the same HAProxy (HAPROXY_RUNTIME_URL
// beside the Data Plane URL). The Data Plane API neither starts the check of
// a server it adds at runtime nor shows check results or sessions; through
// the socket, servers earn their traffic (plan.Policy.GateChecks) and are
// deleted once their sessions end.
type Runtime interface {
	// Gate starts a server's check and holds it out of service, in
	// drain with its health forced down, until rise checks pass.
	Gate(ctx context.Context, backend, server string) error
	// ReadRuntime returns the backend's servers with their model.Runtime
	// and UP state.
	ReadRuntime(ctx context.Context, backend string) ([]model.Server, error)
	// Apply makes a plan true in the running HAProxy only (the runtime API
	// driver): a burst of adds, pipelined and gated, and changes haproxy.cfg
	// already holds.
	Apply(ctx context.Context, p plan.Plan) (plan.Applied, error)
	// ShutdownSessions shuts every session of a server, before the
	// transaction deletes it past the drain timeout (shutExpired). A
	// refusal for that server is a plan.ServerErrors.
	ShutdownSessions(ctx context.Context, backend, server string) error
}

// MaxRuntimeAdds is the most servers one reconcile adds through the API one
// by one. Each costs a versioned write, and the real API checks the whole
// configuration on each; a larger burst (an initial sync, a big scale-up)
// goes through the runtime socket and is persisted by one transaction (one
// reload), or, without a socket, by that transaction alone.
const MaxRuntimeAdds = 20

// WithRuntime adds servers without waiting for a reload and gates them on
// their checks: each is created in maintenance (the API adds it at runtime
// and writes haproxy.cfg), or, in a burst of more than MaxRuntimeAdds, added
// through rt and written by one transaction; it is gated through rt and put
// in service by a later reconcile once its check passed. Read takes each
// server's state from rt. Without it, new servers go through the transaction
// and enter service as HAProxy loads them, before any check ran.
func WithRuntime(rt Runtime) Option { return func(c *Client) { c.runtime = rt } }

// Option changes a Client.
type Option func(*Client)

// WithDeleteBatch parks unwanted servers in maintenance and deletes them n at
// a time: deleting through the Data Plane API always reloads HAProxy.
func WithDeleteBatch(n int) Option { return func(c *Client) { c.deleteBatch = n } }

// New returns a client for the API at base (e.g. http://haproxy:5555), sharing hc.
func New(base *url.URL, auth Auth, hc *http.Client, opts ...Option) *Client {
	u := *base
	u.User = nil // credentials come from Auth only, and never appear in Name
	u.Path = strings.TrimSuffix(u.Path, "/")
	c := &Client{base: &u, name: u.String(), hc: hc, auth: auth}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Policy batches deletions (see WithDeleteBatch) and, with a runtime
// socket, gates servers on their checks.
func (c *Client) Policy() plan.Policy {
	return plan.Policy{DeleteBatch: c.deleteBatch, GateChecks: c.runtime != nil}
}

// NewHTTPClient returns the one outbound client shared by all targets, trusting
// the CA bundle in caFile when it is not empty.
func NewHTTPClient(caFile string, timeout time.Duration) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 16
	// A target that does not answer a connect within 2 s (one lost SYN is
	// resent after 1 s) is down: fail its attempt rather than hold the
	// reconcile of the others.
	tr.DialContext = (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr, Timeout: timeout}, nil
}

// Name identifies the target in results and logs (its URL without credentials).
func (c *Client) Name() string { return c.name }

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
	if err := dynamicAlgorithm(&be); err != nil {
		return model.Backend{}, err
	}
	out := model.Backend{Name: backend, Revision: v2.version, Settings: settingsOf(&be)}
	retry, inh, err := c.readSections(ctx, &be, c.runtime != nil)
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
		rs, err := c.runtime.ReadRuntime(ctx, backend)
		if err != nil {
			return model.Backend{}, fmt.Errorf("read runtime state of %s: %w", backend, err)
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
				// default-server gives it (inheritance).
				addable := onlyWritten(out.Servers[i].Source) && inh.inherit(out.Servers[i]).Carried
				out.Servers[i].Runtime = &model.Runtime{Loading: true, Addable: addable}
				continue
			}
			// The running HAProxy's state is what serves traffic, and what
			// a plan must change: it differs from haproxy.cfg while a
			// server is gated, or after a change through the socket. But
			// where haproxy.cfg holds a server more in traffic than the
			// running HAProxy does (taken out through the socket, and the
			// transaction that was to persist it failed; or loaded parked
			// by a reload after it was written in service), haproxy.cfg's
			// state is reported: a reload would load it so, and the plan
			// must write it out again (and gate it, if it is to serve).
			cfg := out.Servers[i].State
			if cfg.Rank() <= r.State.Rank() {
				out.Servers[i].State = r.State
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
		for _, r := range rs {
			if inCfg[r.Name] || r.Runtime == nil || !r.Runtime.Ours {
				continue
			}
			rt := *r.Runtime
			rt.Unpersisted = true
			rt.Unwritten = r.State == model.Ready
			r.Runtime = &rt
			out.Servers = append(out.Servers, r)
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
func (c *Client) readSections(ctx context.Context, be *models.Backend, all bool) (model.RetryLines, inheritance, error) {
	s := backendRetry(be)
	inh := inheritance{sections: []*models.DefaultServer{be.DefaultServer}}
	seen := map[string]bool{}
	for from := be.From; from != "" && !seen[from] && (all || !s.complete()); {
		seen[from] = true
		var d models.Defaults
		if _, err := c.do(ctx, http.MethodGet, "/configuration/defaults/"+url.PathEscape(from), nil, nil, &d); err != nil {
			return model.RetryLines{}, inheritance{}, fmt.Errorf("read defaults section %s of backend %s: %w", from, be.Name, err)
		}
		s = s.inherit(defaultsRetry(&d))
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

// Apply makes the plan true in HAProxy, starting from the version it was
// computed at. On error some writes may have landed; the caller re-reads.
func (c *Client) Apply(ctx context.Context, p plan.Plan) (plan.Applied, error) {
	var out plan.Applied
	var failed plan.ServerErrors
	version := p.Revision
	serverPath := func(name string) string {
		return "/configuration/backends/" + url.PathEscape(p.Backend) + "/servers/" + url.PathEscape(name)
	}

	// What haproxy.cfg's default-server gives a server, which an add
	// through the socket must carry (inheritance); read only for a plan
	// that may add one there. A server whose keywords cannot be carried
	// is written and left to the reload: it never enters service
	// through the socket without them.
	var inh inheritance
	if c.runtime != nil && mayAddOnSocket(p) {
		var err error
		if inh, err = c.readInheritance(ctx, p.Backend); err != nil {
			return out, err
		}
	}
	r := route(p, c.runtime != nil, c.addsReload(), inh.carriesAdds(p))
	// each runs write for every change with the version the previous write
	// left; a change HAProxy refused for its one server does not stop the
	// others.
	each := func(verb string, chs []plan.Change, write func(plan.Change, int64) (int64, error)) error {
		for _, ch := range chs {
			v, err := write(ch, version)
			var refused plan.ServerErrors
			if errors.As(err, &refused) { // the socket refused it (a gate's add)
				failed = append(failed, refused...)
				version = v
				continue
			}
			if refusedOne(err, ch.Name, &failed) {
				continue
			}
			if err != nil {
				return fmt.Errorf("%s server %s/%s: %w", cmp.Or(verb, string(ch.Action)), p.Backend, ch.Name, err)
			}
			version = v
		}
		return nil
	}
	put := func(ch plan.Change, v int64) (int64, error) {
		body, err := serverModel(*ch.New, ch.Old.Source)
		if err != nil {
			return v, err
		}
		resp, err := c.versioned(ctx, http.MethodPut, serverPath(ch.Name), v, body, &out)
		if err != nil || resp.status != http.StatusAccepted || loading(ch.Old) {
			return resp.nextVersion(v), err
		}
		// A runtime-safe change the API reloads for: the running HAProxy
		// gets it through the socket now rather than at the reload.
		unexpected(&out, whyChangeReloads)
		if c.runtime != nil {
			if err := c.onRuntime(ctx, inh, plan.Plan{Backend: p.Backend, Changes: []plan.Change{ch}}, &out, &failed); err != nil {
				return resp.nextVersion(v), err
			}
		}
		return resp.nextVersion(v), nil
	}
	addThenGate := func(ch plan.Change, v int64) (int64, error) { return c.addThenGate(ctx, inh, p.Backend, ch, v, &out) }
	gate := func(ch plan.Change, v int64) (int64, error) { return c.gate(ctx, inh, p.Backend, ch, v, &out) }
	for i, ch := range r.addGated {
		if c.addsReload() {
			// The API reloads for adds: the rest go through the socket,
			// written to haproxy.cfg as each enters service.
			r.burst = append(r.burst, r.addGated[i:]...)
			break
		}
		if err := each("add", []plan.Change{ch}, addThenGate); err != nil {
			return out, err
		}
	}
	if err := each("gate", r.gated, gate); err != nil {
		return out, err
	}
	if err := each("", r.puts, put); err != nil {
		return out, err
	}
	if err := c.onRuntime(ctx, inh, plan.Plan{Backend: p.Backend, Changes: r.onSocket}, &out, &failed); err != nil {
		return out, err
	}
	structural := r.structural
	if len(r.burst) > 0 {
		before := len(failed)
		if err := c.addAtRuntime(ctx, inh, p.Backend, r.burst, &out, &failed); err != nil {
			return out, err
		}
		structural = without(structural, refusedNames(failed[before:]))
	}
	if len(r.first) > 0 {
		// Entries must still be there, and run a passed check if not in
		// service yet: a reload since the read (the API's reload_delay
		// after an earlier commit) loaded them parked, or dropped those
		// haproxy.cfg lacks, and "state ready" would put them UP with no
		// check run.
		if err := c.stillChecked(ctx, p.Backend, r.first); err != nil {
			return out, err
		}
		entering := slices.DeleteFunc(slices.Clone(r.first), func(ch plan.Change) bool { return !putsInService(ch) })
		leaving := slices.DeleteFunc(slices.Clone(r.first), putsInService)
		before := len(failed)
		if err := c.onRuntime(ctx, inh, plan.Plan{Backend: p.Backend, Changes: entering}, &out, &failed); err != nil {
			return out, err
		}
		if len(entering) > 0 && len(failed)-before == len(entering) {
			// None entered (the running HAProxy refused them all: a reload
			// came between): the servers they replace stay as they are.
			kept := map[string]bool{}
			for _, ch := range leaving {
				kept[ch.Name] = true
				// Reported as not done, so that the result does not list
				// it as changed; the retry plans it again.
				failed = append(failed, plan.ServerError{Server: ch.Name, Error: "kept as it was: the running HAProxy refused every server that was to enter service beside it"})
			}
			structural, leaving = without(structural, kept), nil
		}
		if err := c.onRuntime(ctx, inh, plan.Plan{Backend: p.Backend, Changes: leaving}, &out, &failed); err != nil {
			return out, err
		}
		// Written only as the running HAProxy took them: a server it
		// refused to put in service is not written in service.
		structural = without(structural, refusedNames(failed[before:]))
	}
	structural, err := c.shutExpired(ctx, p.Backend, structural, &out, &failed)
	if err != nil {
		return out, err
	}
	if len(structural) > 0 || p.Settings != nil {
		tx, err := c.transaction(ctx, version, p, structural, serverPath)
		out.Add(tx)
		if err != nil {
			return out, err
		}
		written := make(map[string]bool, len(structural))
		for _, ch := range structural {
			written[ch.Name] = true
		}
		for _, n := range r.deferred {
			if written[n] { // not held back, nor refused
				out.Deferred = append(out.Deferred, n)
			}
		}
	}
	if len(failed) > 0 {
		return out, failed
	}
	return out, nil
}

// onRuntime applies changes through the runtime socket; a change it refused
// for its one server is recorded in failed.
func (c *Client) onRuntime(ctx context.Context, inh inheritance, p plan.Plan, out *plan.Applied, failed *plan.ServerErrors) error {
	if len(p.Changes) == 0 {
		return nil
	}
	applied, err := c.socketApply(ctx, inh, p)
	out.Add(applied)
	var refused plan.ServerErrors
	if errors.As(err, &refused) {
		*failed = append(*failed, refused...)
		return nil
	}
	if err != nil {
		return fmt.Errorf("runtime changes to %s: %w", p.Backend, err)
	}
	return nil
}

// without returns changes without those of the servers in names.
func without(changes []plan.Change, names map[string]bool) []plan.Change {
	if len(names) == 0 {
		return changes
	}
	return slices.DeleteFunc(slices.Clone(changes), func(ch plan.Change) bool { return names[ch.Name] })
}

// refusedNames names the servers of refused.
func refusedNames(refused plan.ServerErrors) map[string]bool {
	names := map[string]bool{}
	for _, f := range refused {
		names[f.Server] = true
	}
	return names
}

// addAtRuntime adds a burst of new servers through the runtime socket,
// pipelined and gated (through the API each would be a versioned write
// checking the whole configuration); haproxy.cfg gets each once it enters
// service. The servers the socket refused are recorded in failed, and so is
// a server of the same name that someone else added. One this service
// added since the read is not added again, only moved (gated) if its
// address differs.
func (c *Client) addAtRuntime(ctx context.Context, inh inheritance, backend string, changes []plan.Change, out *plan.Applied, failed *plan.ServerErrors) error {
	running, err := c.runtime.ReadRuntime(ctx, backend)
	if err != nil {
		return fmt.Errorf("read runtime state of %s: %w", backend, err)
	}
	there := make(map[string]*model.Server, len(running))
	for i := range running {
		there[running[i].Name] = &running[i]
	}
	rp := plan.Plan{Backend: backend}
	for _, ch := range changes {
		old, ok := there[ch.Name]
		switch {
		case !ok:
			rp.Changes = append(rp.Changes, ch)
		case old.Runtime == nil || !old.Runtime.Ours:
			// A server of that name runs that haproxy.cfg lacks and this
			// service did not add (Read leaves it out): not its to change.
			*failed = append(*failed, plan.ServerError{Server: ch.Name, Error: "a server of this name runs in HAProxy, not in haproxy.cfg, added by someone else: left as it is"})
		case old.Address != ch.New.Address || old.Port != ch.New.Port:
			held := *ch.New
			held.State = model.Drain
			rp.Changes = append(rp.Changes, plan.Change{Action: plan.Drain, Name: ch.Name, Old: old, New: &held, Gate: true})
		}
	}
	return c.onRuntime(ctx, inh, rp, out, failed)
}

// refusedOne records err as one server's refused change when the API
// refused that change for good (400, 422, or 409 "already exists"): the
// plan's other, independent changes still go. Errors about the whole target
// (401, 403, 404, 5xx, version conflicts) are not one server's. It reports
// whether it recorded err.
func refusedOne(err error, server string, failed *plan.ServerErrors) bool {
	var apiErr *APIError
	if err == nil || !errors.As(err, &apiErr) || apiErr.Class() == failure.Temporary {
		return false
	}
	switch apiErr.Status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusConflict:
	default:
		return false
	}
	*failed = append(*failed, plan.ServerError{Server: server, Error: err.Error(), Err: err})
	return true
}

// versioned sends one write with ?version and counts it: 202 means the API
// reloads HAProxy; 200 and 201 mean it applied the change at runtime.
func (c *Client) versioned(ctx context.Context, method, path string, version int64, body any, out *plan.Applied) (response, error) {
	r, err := c.do(ctx, method, path, url.Values{"version": {itoa(version)}}, body, nil)
	if err != nil {
		return r, err
	}
	if r.status == http.StatusAccepted {
		out.Count(plan.ConfigWrite)
		out.Reload = true
	} else {
		out.Count(plan.RuntimeWrite)
	}
	return r, nil
}

// addThenGate adds a server without a reload and with a running check: POST
// in maintenance (201: added at runtime and written to haproxy.cfg), then
// gate it on the runtime socket. A gated server stays in maintenance in
// haproxy.cfg until a later reconcile sees its check passed; another is then
// PUT in its state (runtime-safe). If the API answers 202 (it reloads, e.g.
// because of a default_server), the server comes from the reload parked, and
// a later reconcile gates it.
func (c *Client) addThenGate(ctx context.Context, inh inheritance, backend string, ch plan.Change, version int64, out *plan.Applied) (int64, error) {
	srv := *ch.New
	parked := srv
	parked.State = model.Maint
	body, err := serverModel(parked, nil)
	if err != nil {
		return version, err
	}
	r, err := c.versioned(ctx, http.MethodPost, "/configuration/backends/"+url.PathEscape(backend)+"/servers", version, body, out)
	if err != nil {
		return version, err
	}
	version = r.nextVersion(version)
	if r.status == http.StatusAccepted {
		// Written parked, and loaded by a reload to come: meanwhile the
		// running HAProxy has it from the socket, gated, so that it need
		// not wait for the reload to earn its traffic. The reload loads
		// it parked, and a later reconcile gates it again.
		c.addsReloaded.Store(time.Now().UnixNano())
		unexpected(out, whyAddReloads)
		if srv.State == model.Maint || !inh.inherit(srv).Carried {
			// (Not carried: a default-server keyword "add server"
			// cannot take. The reload loads it, parked.)
			return version, nil
		}
		held := srv
		held.State = model.Drain
		rp := plan.Plan{Backend: backend, Changes: []plan.Change{{Action: plan.Add, Name: srv.Name, New: &held, Gate: true}}}
		applied, err := c.socketApply(ctx, inh, rp)
		out.Add(applied)
		if err != nil {
			return version, fmt.Errorf("add at runtime after the API's reload: %w", err)
		}
		return version, nil
	}
	if r.status != http.StatusCreated {
		return version, nil
	}
	if srv.State == model.Maint {
		// Left in maintenance (its endpoint not ready yet: a new pod),
		// its check runs all the same, as on the runtime API driver's
		// adds: once the endpoint is ready its check has passed, and it
		// enters service at once rather than a check later. The API adds
		// it "disabled", which pauses its check for as long as it is in
		// maintenance, so it is added again through the socket, in
		// maintenance, its check started (gating would put it in drain).
		return version, c.checkWhileParked(ctx, inh, backend, srv, out)
	}
	if err := c.runtime.Gate(ctx, backend, srv.Name); err != nil {
		return version, fmt.Errorf("gate: %w", err)
	}
	out.Count(plan.RuntimeWrite)
	if ch.Gate {
		return version, nil
	}
	path := "/configuration/backends/" + url.PathEscape(backend) + "/servers/" + url.PathEscape(srv.Name)
	inState, err := serverModel(srv, body)
	if err != nil {
		return version, err
	}
	r, err = c.versioned(ctx, http.MethodPut, path, version, inState, out)
	if err != nil {
		return version, err
	}
	return r.nextVersion(version), nil
}

// stillChecked makes sure that the servers changes put in service are
// still there, and those not in service yet with a passed check running,
// in the running HAProxy: the API's
// reload may have run since the plan was read (reload_delay after an
// earlier commit) and loaded them parked, with no check run in the new
// process, where "state ready" would put them UP at once; or dropped those
// haproxy.cfg did not hold yet. Then it is a conflict: the retry reads
// again and gates them there.
func (c *Client) stillChecked(ctx context.Context, backend string, changes []plan.Change) error {
	entries := map[string]bool{}
	for _, ch := range changes {
		if putsInService(ch) {
			entries[ch.Name] = true
		}
	}
	if len(entries) == 0 {
		return nil
	}
	running, err := c.runtime.ReadRuntime(ctx, backend)
	if err != nil {
		return fmt.Errorf("read runtime state of %s: %w", backend, err)
	}
	for _, s := range running {
		if !entries[s.Name] {
			continue
		}
		// In service already (the write that was to follow failed): its
		// running check rules it, passed or not; it need only be there.
		if s.State != model.Ready && (s.Runtime == nil || !s.Runtime.CheckRunning || !s.Runtime.CheckPassed) {
			return &failure.ConflictError{Msg: fmt.Sprintf("server %s/%s no longer runs a passed check (HAProxy reloaded since the read): not put in service", backend, s.Name)}
		}
		delete(entries, s.Name)
	}
	for name := range entries {
		return &failure.ConflictError{Msg: fmt.Sprintf("server %s/%s is no longer in the running HAProxy (reloaded since the read): not put in service", backend, name)}
	}
	return nil
}

// checkWhileParked adds srv, which the API just added in maintenance, again
// through the socket with its id, in maintenance with its check running
// (plan.Change.Renew). A server it cannot find is left as the API added it.
func (c *Client) checkWhileParked(ctx context.Context, inh inheritance, backend string, srv model.Server, out *plan.Applied) error {
	running, err := c.runtime.ReadRuntime(ctx, backend)
	if err != nil {
		return fmt.Errorf("read runtime state of %s: %w", backend, err)
	}
	for i := range running {
		if old := &running[i]; old.Name == srv.Name && old.Runtime != nil && old.State == model.Maint {
			parked := srv
			rp := plan.Plan{Backend: backend, Changes: []plan.Change{{Action: plan.Update, Name: srv.Name, Old: old, New: &parked, Renew: true}}}
			applied, err := c.socketApply(ctx, inh, rp)
			out.Add(applied)
			return err
		}
	}
	return nil
}

// loading reports whether haproxy.cfg holds s and the running HAProxy does
// not yet (model.Runtime.Loading): a write for it cannot be applied at
// runtime, and the API's reload is what it takes.
func loading(s *model.Server) bool {
	return s != nil && s.Runtime != nil && s.Runtime.Loading
}

// gate holds an existing server out of service until its check passes:
// haproxy.cfg (and so the runtime) says maintenance, with the new address if
// it moves, then the runtime socket restarts its check in drain — and, for
// a server that moves, then moves it itself, since the API may have left
// the move to a reload (movesOnSocket): the check runs at the new address.
func (c *Client) gate(ctx context.Context, inh inheritance, backend string, ch plan.Change, version int64, out *plan.Applied) (int64, error) {
	parked := *ch.New
	parked.State = model.Maint
	if ch.Old.State != model.Maint || ch.Old.Address != parked.Address || ch.Old.Port != parked.Port || ch.Old.Check != parked.Check {
		body, err := serverModel(parked, ch.Old.Source)
		if err != nil {
			return version, err
		}
		path := "/configuration/backends/" + url.PathEscape(backend) + "/servers/" + url.PathEscape(ch.Name)
		r, err := c.versioned(ctx, http.MethodPut, path, version, body, out)
		if err != nil {
			return version, err
		}
		version = r.nextVersion(version)
	}
	carried := inh.inherit(*ch.New).Carried
	if loading(ch.Old) {
		if !carried {
			// A default-server keyword "add server" cannot take (read
			// since the plan): parked in haproxy.cfg, the reload loads it.
			return version, nil
		}
		// haproxy.cfg holds it (parked now) and the running HAProxy does
		// not: added there through the socket, gated, with what its
		// default-server gives it, rather than left to a reload that may
		// never come. The reload, when it comes, loads it parked, with
		// haproxy.cfg's id and check, and a later reconcile gates it again.
		held := *ch.New
		held.Backup = ch.Old.Backup // as haproxy.cfg holds it (serverModel kept it)
		rp := plan.Plan{Backend: backend, Changes: []plan.Change{{Action: plan.Add, Name: ch.Name, New: &held, Gate: true}}}
		applied, err := c.socketApply(ctx, inh, rp)
		out.Add(applied)
		return version, err
	}
	if renewable(ch) && !c.addsReload() && carried {
		// Deleted and added again through the socket, with its id, the
		// keywords haproxy.cfg holds and those its default-server gives
		// it: its first check comes at once, where leaving maintenance
		// keeps it on the steady inter (1.5 s shipped).
		held := *ch.New
		held.Backup = ch.Old.Backup
		rp := plan.Plan{Backend: backend, Changes: []plan.Change{{Action: ch.Action, Name: ch.Name, Old: ch.Old, New: &held, Gate: true, Renew: true}}}
		applied, err := c.socketApply(ctx, inh, rp)
		out.Add(applied)
		if !errors.As(err, new(plan.ServerErrors)) {
			return version, err
		}
		// Refused (HAProxy 3.3+ keeps a server with idle connections):
		// gated where it is, as any other returning server.
	}
	if movesOnSocket(ch) {
		// Gated, then moved, through the socket: the PUT's reload (if the
		// API answered with one) has not run, and the check must run at
		// the new address, not where the server runs now (move.go).
		held := *ch.New
		held.Backup = ch.Old.Backup
		rp := plan.Plan{Backend: backend, Changes: []plan.Change{{Action: plan.Drain, Name: ch.Name, Old: ch.Old, New: &held, Gate: true}}}
		applied, err := c.runtime.Apply(ctx, rp)
		out.Add(applied)
		return version, err
	}
	if err := c.runtime.Gate(ctx, backend, ch.Name); err != nil {
		return version, err
	}
	out.Count(plan.RuntimeWrite)
	return version, nil
}

// renewable reports whether gated change ch may bring its server back from
// maintenance by deleting and adding it again through the socket
// (plan.Change.Renew): parked in the running HAProxy with no sessions, its
// id known, and haproxy.cfg holding nothing for it but what this service
// writes (an add through the socket would lose any other keyword).
func renewable(ch plan.Change) bool {
	o := ch.Old
	if o == nil || o.State != model.Maint || o.Runtime == nil || o.Runtime.Loading || o.Runtime.Sessions != 0 || o.Runtime.ID <= 0 {
		return false
	}
	return onlyWritten(o.Source)
}

// onlyWritten reports whether haproxy.cfg's entry of a server, as read
// (source), holds nothing but what this service writes: an add through the
// socket renders it whole (runtimeapi's add line).
func onlyWritten(source any) bool {
	raw, ok := source.(rawServer)
	if !ok {
		return false
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return false
	}
	for k, v := range fields {
		if !writtenFields[k] && string(v) != "null" && string(v) != `""` && string(v) != "0" && string(v) != "false" {
			return false
		}
	}
	return true
}

// writtenFields are the server fields serverModel writes, and the ones that
// name it: a server whose haproxy.cfg entry has no other is one an add
// through the socket renders whole (runtimeapi's add line).
var writtenFields = map[string]bool{
	"name": true, "address": true, "port": true, "weight": true, "maintenance": true, "check": true,
	"inter": true, "fastinter": true, "downinter": true, "rise": true, "fall": true,
	"observe": true, "error_limit": true, "on-error": true, "send-proxy-v2": true, "check-send-proxy": true,
	"health_check_port": true, "backup": true, "id": true,
}

// transaction writes the structural changes in one transaction and commits it.
func (c *Client) transaction(ctx context.Context, version int64, p plan.Plan, changes []plan.Change, serverPath func(string) string) (out plan.Applied, err error) {
	if err := c.sweepTransactions(ctx, version); err != nil {
		return out, err
	}
	var tx models.Transaction
	if _, err := c.do(ctx, http.MethodPost, "/transactions", url.Values{"version": {itoa(version)}}, nil, &tx); err != nil {
		return out, fmt.Errorf("start transaction: %w", err)
	}
	committed := false
	defer func() {
		if committed {
			return
		}
		// The request's context may be done; a transaction left open never
		// expires and counts against the API's limit, so clean up regardless.
		if derr := c.deleteTransaction(context.WithoutCancel(ctx), tx.ID); derr != nil {
			err = fmt.Errorf("%w (and delete transaction %s: %v)", err, tx.ID, derr)
		}
	}()
	in := url.Values{"transaction_id": {tx.ID}}
	defer func() {
		// A transaction that vanished was swept by another writer whose
		// commit outdated it: we lost a race, re-read and try again.
		var apiErr *APIError
		if err != nil && errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
			err = &failure.ConflictError{Msg: fmt.Sprintf("transaction %s is gone (another writer committed first): %v", tx.ID, err)}
		}
	}()

	if p.Settings != nil {
		bePath := "/configuration/backends/" + url.PathEscape(p.Backend)
		var be models.Backend
		if _, err := c.do(ctx, http.MethodGet, bePath, in, nil, &be); err != nil {
			return out, fmt.Errorf("read backend %s: %w", p.Backend, err)
		}
		applySettings(&be, p.Settings.New)
		if _, err := c.do(ctx, http.MethodPut, bePath, in, &be, nil); err != nil {
			return out, fmt.Errorf("update backend %s: %w", p.Backend, err)
		}
		out.Count(plan.TransactionWrite)
	}
	for _, ch := range changes {
		var err error
		switch ch.Action {
		case plan.Add:
			var body *models.Server
			loaded := *ch.New
			if ch.Gate {
				// Held until its check passes: written in maintenance, so
				// that the reload this commit asks for never loads a server
				// no check passed for (HAProxy loads every other server UP).
				loaded.State, loaded.Reason = model.Maint, ""
			}
			if body, err = serverModel(loaded, nil); err == nil {
				_, err = c.do(ctx, http.MethodPost, "/configuration/backends/"+url.PathEscape(p.Backend)+"/servers", in, body, nil)
			}
		case plan.Delete:
			_, err = c.do(ctx, http.MethodDelete, serverPath(ch.Name), in, nil, nil)
		default:
			var body *models.Server
			if body, err = serverModel(*ch.New, ch.Old.Source); err == nil {
				_, err = c.do(ctx, http.MethodPut, serverPath(ch.Name), in, body, nil)
			}
		}
		if err != nil {
			return out, fmt.Errorf("%s server %s/%s: %w", ch.Action, p.Backend, ch.Name, err)
		}
		out.Count(plan.TransactionWrite)
	}
	if _, err := c.do(ctx, http.MethodPut, "/transactions/"+url.PathEscape(tx.ID), nil, nil, nil); err != nil {
		return out, fmt.Errorf("commit transaction %s: %w", tx.ID, err)
	}
	committed = true
	out.Count(plan.TransactionWrite)
	out.Reload = true // a commit always reloads: 202 when scheduled, 200 when forced
	// The commit outdated every transaction started at or before our version,
	// leftovers included; clear them now. A failure here is left to the next
	// sweep: the change itself is committed.
	_ = c.sweepTransactions(ctx, version+1)
	return out, nil
}

// deleteTransaction deletes a transaction that will not be committed, trying
// again within one second: the API may be failing for a moment. It does not
// try harder, so that the answer is not held up: what it cannot delete, the
// next transaction's sweep does. Gone already (404) is fine: a commit whose
// answer was lost, or a sweep.
func (c *Client) deleteTransaction(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var err error
	for wait := 100 * time.Millisecond; ; wait *= 2 {
		_, err = c.do(ctx, http.MethodDelete, "/transactions/"+url.PathEscape(id), nil, nil, nil)
		var apiErr *APIError
		if err == nil || errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// sweepTransactions deletes transactions that can never be committed: those
// started before the current version (the commit would be refused) and
// those already failed or outdated. Such leftovers come from a writer that
// lost the API before it could clean up; they never expire and count against
// the API's limit on open transactions, so the next transaction clears them.
// Another writer's transaction at the current version is left alone.
func (c *Client) sweepTransactions(ctx context.Context, version int64) error {
	var list models.Transactions
	if _, err := c.do(ctx, http.MethodGet, "/transactions", nil, nil, &list); err != nil {
		return fmt.Errorf("list transactions: %w", err)
	}
	for _, t := range list {
		if t == nil || t.Status == "in_progress" && t.Version >= version {
			continue
		}
		if _, err := c.do(ctx, http.MethodDelete, "/transactions/"+url.PathEscape(t.ID), nil, nil, nil); err != nil {
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
				return fmt.Errorf("delete stale transaction %s: %w", t.ID, err)
			}
		}
	}
	return nil
}

type response struct {
	status  int
	version int64 // Configuration-Version header, 0 when absent
}

// nextVersion is the version after a successful write made at v.
func (r response) nextVersion(v int64) int64 {
	if r.version > v {
		return r.version
	}
	return v + 1
}

// do sends one request under /v3/services/haproxy and decodes a 2xx body into out.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) (response, error) {
	// path comes with its segments escaped (url.PathEscape); setting Path
	// alone would escape their '%' a second time.
	u := *c.base
	raw := c.base.EscapedPath() + apiPrefix + path
	unescaped, err := url.PathUnescape(raw)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	u.Path, u.RawPath = unescaped, raw
	u.RawQuery = q.Encode()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return response{}, fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return response{}, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	switch {
	case c.auth.Token != "":
		req.Header.Set("Authorization", "Bearer "+c.auth.Token)
	case c.auth.Username != "":
		req.SetBasicAuth(c.auth.Username, c.auth.Password)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return response{}, ctx.Err()
		}
		var certErr *tls.CertificateVerificationError
		if errors.As(err, &certErr) {
			return response{}, err // a wrong CA or name does not heal by retrying
		}
		return response{}, &failure.NetworkError{Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return response{}, &failure.NetworkError{Err: fmt.Errorf("read %s %s: %w", method, path, err)}
	}
	r := response{status: resp.StatusCode}
	r.version, _ = strconv.ParseInt(resp.Header.Get("Configuration-Version"), 10, 64)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return r, decodeError(method, path, resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return r, fmt.Errorf("decode %s %s: %w", method, path, err)
		}
	}
	return r, nil
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
