// Package runtimeapi drives one HAProxy through its runtime API socket
// (HAPROXY_RUNTIME_URL): the same plans as the Data Plane API driver, applied
// with "add server", "set server", "enable health" and "del server". Nothing
// is written to haproxy.cfg: after a reload the next reconcile restores the
// servers.
//
// Replies are text, and HAProxy answers errors with a 200-less sentence, so
// every reply is matched against what success looks like for its command;
// anything else is an error carrying HAProxy's words.
//
// The runtime API cannot change a backend's balance algorithm nor the check
// timing of an existing server, so Read reports the configured ones: servers
// this driver adds get the configured checks; the rest is haproxy.cfg's job.
package runtimeapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// Client is the runtime API driver for one HAProxy.
type Client struct {
	sock     Socket
	name     string
	settings model.Settings
	check    model.Check
}

// New returns a driver for rawURL (unix:///path/admin.sock or tcp://host:port).
// settings and check are what Read reports for what it cannot see.
func New(rawURL string, settings model.Settings, check model.Check) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("runtime URL %q: %w", rawURL, err)
	}
	c := &Client{name: rawURL, settings: settings, check: check}
	switch {
	case u.Scheme == "unix" && u.Path != "":
		c.sock = Socket{Network: "unix", Address: u.Path}
	case u.Scheme == "tcp" && u.Host != "":
		c.sock = Socket{Network: "tcp", Address: u.Host}
	default:
		return nil, fmt.Errorf("runtime URL %q: want unix:///path or tcp://host:port", rawURL)
	}
	return c, nil
}

// Name identifies the target in results.
func (c *Client) Name() string { return c.name }

// EnableHealth starts the health check of a server, e.g. one the Data Plane
// API added at runtime (it never does this itself).
func (c *Client) EnableHealth(ctx context.Context, backend, server string) error {
	cmd := "enable health " + backend + "/" + server
	reply, err := c.sock.Command(ctx, cmd)
	if err != nil {
		return err
	}
	if !empty(reply) {
		return &CommandError{Command: cmd, Reply: reply}
	}
	return nil
}

// Policy deletes unwanted servers at once: "del server" needs no reload.
func (c *Client) Policy() plan.Policy { return plan.Policy{} }

// CommandError is a command HAProxy refused; Reply is its answer.
type CommandError struct {
	Command string
	Reply   string
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("haproxy refused %q: %s", e.Command, strings.TrimSpace(e.Reply))
}

// ErrServerBusy means "del server" was refused because the server still has
// connections; it stays in maintenance and a later reconcile deletes it.
var ErrServerBusy = errors.New("server still has connections: left in maintenance")

// Admin state bits of "show servers state" (HAProxy's SRV_ADMF_*).
const (
	admForcedMaint   = 0x01
	admInheritMaint  = 0x02
	admConfigMaint   = 0x04
	admForcedDrain   = 0x08
	admInheritDrain  = 0x10
	admResolverMaint = 0x20
	admHostnameMaint = 0x40
	// admConfigMaint only records that haproxy.cfg (or "add server ...
	// disabled") said "disabled"; it stays set after "set server state
	// ready" and is not maintenance by itself (HAProxy's SRV_ADMF_MAINT).
	admMaint = admForcedMaint | admInheritMaint | admResolverMaint | admHostnameMaint
	admDrain = admForcedDrain | admInheritDrain
)

// Read lists the backend's servers with "show servers state".
func (c *Client) Read(ctx context.Context, backend string) (model.Backend, error) {
	cmd := "show servers state " + backend
	reply, err := c.sock.Command(ctx, cmd)
	if err != nil {
		return model.Backend{}, err
	}
	servers, err := ParseServersState(reply, backend)
	if err != nil {
		return model.Backend{}, &CommandError{Command: cmd, Reply: err.Error()}
	}
	for i := range servers {
		servers[i].Check = c.check
	}
	return model.Backend{Name: backend, Settings: c.settings, Servers: servers}, nil
}

// ParseServersState reads the reply to "show servers state <backend>"
// (format version 1) into servers of that backend.
func ParseServersState(reply, backend string) ([]model.Server, error) {
	sc := bufio.NewScanner(strings.NewReader(reply))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	if !sc.Scan() || strings.TrimSpace(sc.Text()) != "1" {
		return nil, fmt.Errorf("unexpected reply: %.200s", reply)
	}
	var out []model.Server
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 19 {
			return nil, fmt.Errorf("short line: %.200s", line)
		}
		if f[1] != backend {
			continue
		}
		admin, err1 := strconv.ParseUint(f[6], 10, 32)
		weight, err2 := strconv.Atoi(f[7])
		port, err3 := strconv.Atoi(f[18])
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("bad line %.200s: %w", line, err)
		}
		// Field 5 is the operational state: 2 is running (UP).
		s := model.Server{Name: f[3], Address: f[4], Port: port, Weight: weight, State: model.Ready, Up: f[5] == "2"}
		switch {
		case admin&admMaint != 0:
			s.State = model.Maint
		case admin&admDrain != 0 || weight == 0:
			s.State = model.Drain
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// Apply sends the plan's commands. A server to delete is put in maintenance
// first; if HAProxy refuses to delete it because connections remain, the
// other changes still go through and ErrServerBusy is returned.
func (c *Client) Apply(ctx context.Context, p plan.Plan) (plan.Applied, error) {
	var out plan.Applied
	var busy []string
	var failed plan.ServerErrors
	send := func(cmd string, ok func(string) bool) error {
		reply, err := c.sock.Command(ctx, cmd)
		if err != nil {
			return err
		}
		if !ok(reply) {
			return &CommandError{Command: cmd, Reply: reply}
		}
		out.Count(plan.RuntimeWrite)
		return nil
	}
	for _, ch := range p.Changes {
		srv := p.Backend + "/" + ch.Name
		var err error
		switch ch.Action {
		case plan.Add:
			err = c.add(send, srv, *ch.New)
		case plan.Delete:
			err = c.del(send, srv, *ch.Old)
			if errors.Is(err, ErrServerBusy) {
				busy = append(busy, ch.Name)
				err = nil
			}
		default:
			err = update(send, srv, *ch.Old, *ch.New)
		}
		var refused *CommandError
		switch {
		case errors.As(err, &refused):
			// HAProxy refused this server's change: the others are
			// independent and still go; retrying would not help.
			failed = append(failed, plan.ServerError{Server: ch.Name, Error: err.Error(), Err: err})
		case err != nil:
			return out, fmt.Errorf("%s server %s: %w", ch.Action, srv, err)
		}
	}
	if len(failed) > 0 {
		return out, failed
	}
	if len(busy) > 0 {
		return out, fmt.Errorf("delete %s/%s: %w", p.Backend, strings.Join(busy, ","), ErrServerBusy)
	}
	return out, nil
}

type sender func(cmd string, ok func(string) bool) error

func empty(reply string) bool { return strings.TrimSpace(reply) == "" }

// add creates the server in maintenance (HAProxy's default for "add server"),
// starts its health check, then sets its state: a server added "enabled"
// would take traffic with no check running.
func (c *Client) add(send sender, srv string, s model.Server) error {
	cmd := fmt.Sprintf("add server %s %s weight %d check inter %dms rise %d fall %d",
		srv, net.JoinHostPort(s.Address, strconv.Itoa(s.Port)), s.Weight, s.Check.Inter.Milliseconds(), s.Check.Rise, s.Check.Fall)
	if s.Check.SendProxyV2 {
		cmd += " send-proxy-v2 check-send-proxy"
	}
	if err := send(cmd, func(r string) bool { return strings.TrimSpace(r) == "New server registered." }); err != nil {
		return err
	}
	if err := send("enable health "+srv, empty); err != nil {
		return err
	}
	return send("set server "+srv+" state "+stateWord(s.State), empty)
}

// update changes address, port, weight and state, each only if it differs.
func update(send sender, srv string, old, s model.Server) error {
	if old.Address != s.Address || old.Port != s.Port {
		cmd := fmt.Sprintf("set server %s addr %s port %d", srv, s.Address, s.Port)
		ok := func(r string) bool {
			return strings.HasPrefix(r, "IP changed from") || strings.HasPrefix(r, "no need to change the addr")
		}
		if err := send(cmd, ok); err != nil {
			return err
		}
	}
	if s.State == model.Ready && old.Weight != s.Weight {
		if err := send(fmt.Sprintf("set server %s weight %d", srv, s.Weight), empty); err != nil {
			return err
		}
	}
	if old.State != s.State {
		return send("set server "+srv+" state "+stateWord(s.State), empty)
	}
	return nil
}

func (c *Client) del(send sender, srv string, old model.Server) error {
	if old.State != model.Maint {
		if err := send("set server "+srv+" state maint", empty); err != nil {
			return err
		}
	}
	err := send("del server "+srv, func(r string) bool { return strings.TrimSpace(r) == "Server deleted." })
	var ce *CommandError
	if errors.As(err, &ce) && strings.Contains(ce.Reply, "still has connections") {
		return ErrServerBusy
	}
	return err
}

func stateWord(s model.State) string {
	switch s {
	case model.Drain:
		return "drain"
	case model.Maint:
		return "maint"
	default:
		return "ready"
	}
}
