// Package dataplane drives one HAProxy through the Data Plane API v3, using
// client-native's models for every body it sends and reads.
//
// steps decides, with no I/O, what Apply does with each server of a plan:
// its channel (socket, versioned POST or PUT, transaction, deferred) and the
// precondition the step needs, by what the API does with each write (README:
// "How the Data Plane API driver applies changes"); its doc comment is the
// table, which steps_test.go enumerates. Apply only carries the steps out, in
// order (apply.go). In short:
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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	// hidden are, by backend, the servers the last Read found running
	// that haproxy.cfg lacks and this service did not add (pending.go).
	hidden sync.Map
	// settingsWritten are the backends whose settings this process
	// committed (a settingsMark), until a Read finds the API's reload for
	// them done (settingsLoading).
	settingsWritten sync.Map
	settingsGen     atomic.Int64 // each commit's mark in settingsWritten
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

type response struct {
	status   int
	version  int64  // Configuration-Version header, 0 when absent
	reloadID string // Reload-ID header: the reload a 202 scheduled or joined
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
	r.reloadID = resp.Header.Get("Reload-ID")
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
