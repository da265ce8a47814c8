// Package runtimeapi drives one HAProxy through its runtime API socket
// (HAPROXY_RUNTIME_URL): the same plans as the Data Plane API driver, applied
// with "add server", "set server", "enable health" and "del server". Nothing
// is written to haproxy.cfg: after a reload the next reconcile restores the
// servers. A backend that declares slots in haproxy.cfg (slots.go) has them
// filled and freed instead, and keeps them across reloads.
//
// Replies are text, and HAProxy answers errors with a 200-less sentence, so
// every reply is matched against what success looks like for its command;
// anything else is an error carrying HAProxy's words.
//
// The runtime API cannot change a backend's balance algorithm nor the check
// timing of an existing server, so Read reports the configured ones: servers
// this driver adds get the configured checks; the rest is haproxy.cfg's job.
//
// Servers earn their traffic (plan.Policy.GateChecks): a server to gate is
// added, its check enabled, put in drain and its health forced down, each
// step only once the one before succeeded (Socket.Sequences), so it takes no
// new connection until it has passed rise checks, and a refused step leaves
// it out of service or untouched, never half-gated in service; Read reports check and session state (model.Runtime) so that a
// later reconcile puts it in service. A server to delete is parked in
// maintenance first; it is deleted once it has no sessions, by "wait
// srv-removable" then "del server" on 3.0+, and only by a later reconcile on
// older versions, where "del server" with live streams can crash HAProxy
// (haproxy#2298). Each server added gets an explicit unique id: without one,
// HAProxy searches for a free id on every add; one that another writer took
// meanwhile is replaced by a fresh one.
package runtimeapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
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

// New returns a driver for rawURL: unix:///path/admin.sock, tcp://host:port
// (in clear), or tls://host:port, which needs WithTLS. settings and check
// are what Read reports for what it cannot see.
func New(rawURL string, settings model.Settings, check model.Check, opts ...Option) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("runtime URL %q: %w", rawURL, err)
	}
	c := &Client{name: rawURL, settings: settings, check: check}
	switch {
	case u.Scheme == "unix" && u.Path != "":
		c.sock = Socket{Network: "unix", Address: u.Path}
	case (u.Scheme == "tcp" || u.Scheme == "tls") && u.Host != "":
		c.sock = Socket{Network: "tcp", Address: u.Host, ServerName: u.Hostname()}
	default:
		return nil, fmt.Errorf("runtime URL %q: want unix:///path, tls://host:port or tcp://host:port", rawURL)
	}
	if u.Scheme == "tls" {
		for _, o := range opts {
			o(&c.sock)
		}
		if c.sock.TLS == nil {
			return nil, fmt.Errorf("runtime URL %q: tls:// needs a CA, a client certificate and its key", rawURL)
		}
	}
	return c, nil
}

// Name identifies the target in results.
func (c *Client) Name() string { return c.name }

// Policy deletes unwanted servers once their sessions end ("del server"
// needs no reload) and gates servers on their checks. What it adds is bare:
// HAProxy applies no default-server line to "add server" (slots have them).
func (c *Client) Policy() plan.Policy {
	return plan.Policy{GateChecks: true, FixedSettings: true, BareAdds: true}
}

// Gate starts a server's health check and holds it out of service: drain
// (no new connections) with its health forced down, so that it goes UP only
// after rise passed checks. Each step runs only if the one before passed: a
// server whose check cannot be enabled (none configured) is left as it was.
func (c *Client) Gate(ctx context.Context, backend, server string) error {
	steps := gateSteps(backend + "/" + server)
	got, err := c.sock.Sequences(ctx, [][]Step{steps})
	if err != nil {
		return err
	}
	return stopped(steps, got[0])
}

// ShutdownSessions shuts every session of a server ("shutdown sessions
// server"), as Apply does before it deletes a server parked past the drain
// timeout (plan.Change.Kill): for the Data Plane API driver, whose
// transaction deletes that server. A refusal (no such server) is the
// server's: a plan.ServerErrors.
func (c *Client) ShutdownSessions(ctx context.Context, backend, server string) error {
	cmd := "shutdown sessions server " + backend + "/" + server
	reply, err := c.sock.Command(ctx, cmd)
	if err != nil {
		return err
	}
	if !empty(reply) {
		ce := &CommandError{Command: cmd, Reply: reply}
		return plan.ServerErrors{{Server: server, Error: ce.Error(), Err: ce}}
	}
	return nil
}

// gateSteps start srv's check, then, only once that worked, put it in drain
// and force its health down. Stopping after any step is harmless: a check
// that runs, a server drained.
func gateSteps(srv string) []Step {
	return []Step{
		{"enable health " + srv, empty},
		{"set server " + srv + " state drain", empty},
		{"set server " + srv + " health down", empty},
	}
}

// stopped is the CommandError of the step that stopped a sequence, or nil
// when every step passed.
func stopped(steps []Step, o Outcome) error {
	if o.Done >= len(steps) {
		return nil
	}
	return &CommandError{Command: steps[o.Done].Cmd, Reply: o.Answer}
}

// Version is an HAProxy version as "show info" gives it.
type Version struct{ Major, Minor, Patch int }

// AtLeast reports whether v is major.minor or newer.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

// ParseVersion reads "2.6.12-1+deb12u4" or "3.0.11-9e587df".
func ParseVersion(s string) (Version, error) {
	var v Version
	core, _, _ := strings.Cut(strings.TrimSpace(s), "-")
	parts := strings.Split(core, ".")
	if len(parts) < 2 {
		return v, fmt.Errorf("haproxy version %q", s)
	}
	nums := []*int{&v.Major, &v.Minor, &v.Patch}
	for i := 0; i < len(parts) && i < 3; i++ {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return v, fmt.Errorf("haproxy version %q", s)
		}
		*nums[i] = n
	}
	return v, nil
}

// Version asks HAProxy its version ("show info"). It is read each time it is
// needed: an upgrade restarts HAProxy under the same socket.
func (c *Client) Version(ctx context.Context) (Version, error) {
	reply, err := c.sock.Command(ctx, "show info")
	if err != nil {
		return Version{}, err
	}
	for _, line := range strings.Split(reply, "\n") {
		if v, ok := strings.CutPrefix(line, "Version:"); ok {
			return ParseVersion(v)
		}
	}
	return Version{}, &CommandError{Command: "show info", Reply: "no Version line"}
}

// CommandError is a command HAProxy refused; Reply is its answer.
type CommandError struct {
	Command string
	Reply   string
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("haproxy refused %q: %s", e.Command, strings.TrimSpace(e.Reply))
}

// Class is Permanent: HAProxy would refuse the same command again.
func (e *CommandError) Class() failure.Class { return failure.Permanent }

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

// Read lists the backend's servers with "show servers state", and their
// sessions and role with "show stat".
func (c *Client) Read(ctx context.Context, backend string) (model.Backend, error) {
	servers, err := c.ReadRuntime(ctx, backend)
	if err != nil {
		return model.Backend{}, err
	}
	servers, idle := splitIdle(servers)
	return model.Backend{Name: backend, Settings: c.settings, Servers: servers, IdleSlots: idle}, nil
}

// ReadRuntime returns the backend's servers as the runtime API shows them,
// each with its model.Runtime (checks judged against the configured rise),
// and the check this driver adds servers with: the socket shows only its
// port.
func (c *Client) ReadRuntime(ctx context.Context, backend string) ([]model.Server, error) {
	servers, err := c.serversState(ctx, backend)
	if err != nil || len(servers) == 0 {
		return servers, err
	}
	cmd := "show stat " + backend + " 4 -1"
	reply, err := c.sock.Command(ctx, cmd)
	if err != nil {
		return nil, err
	}
	stats, err := ParseStat(reply, backend)
	if err != nil {
		return nil, &CommandError{Command: cmd, Reply: err.Error()}
	}
	c.complete(servers, stats)
	return servers, nil
}

// complete gives servers read from "show servers state" what that does not
// show: the check this driver adds servers with (the socket shows only its
// port), and from "show stat" their sessions and role.
func (c *Client) complete(servers []model.Server, stats map[string]Stat) {
	for i := range servers {
		port := servers[i].Check.Port
		servers[i].Check = c.check
		servers[i].Check.Port = port
		st := stats[servers[i].Name]
		servers[i].Runtime.Sessions, servers[i].Backup = st.Sessions, st.Backup
	}
}

// serversState reads "show servers state" of backend. A backend the
// running HAProxy does not have (it answers "Can't find backend.", 2.6 as
// 3.x) is a failure.BackendError: permanent, and said as what to fix.
func (c *Client) serversState(ctx context.Context, backend string) ([]model.Server, error) {
	cmd := "show servers state " + backend
	reply, err := c.sock.Command(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(strings.TrimSpace(reply), "Can't find backend") {
		return nil, &failure.BackendError{Backend: backend, Reason: fmt.Sprintf(
			"the running HAProxy has no backend of that name (%q answered %q): HAPROXY_BACKEND_NAME or HAPROXY_BACKENDS must name a backend its haproxy.cfg declares and it has loaded", cmd, strings.TrimSpace(reply))}
	}
	servers, err := ParseServersState(reply, backend, c.check.Rise, c.check.Fall)
	if err != nil {
		return nil, &CommandError{Command: cmd, Reply: err.Error()}
	}
	return servers, nil
}

// ReadChecks reports, for each of the backend's servers, where its health
// check stands: none runs (in maintenance: parked at runtime, or perhaps
// loaded so by a reload where haproxy.cfg says "disabled"), passed
// (model.Runtime.CheckPassed) or pending, from one "show servers state":
// cheap enough to ask every few tens of milliseconds while servers wait
// (reconcile.CheckReader).
func (c *Client) ReadChecks(ctx context.Context, backend string) (map[string]model.CheckState, error) {
	servers, err := c.serversState(ctx, backend)
	if err != nil {
		return nil, err
	}
	out := make(map[string]model.CheckState, len(servers))
	for _, s := range servers {
		switch {
		case !s.Runtime.CheckRunning && s.Runtime.ConfigMaint:
			out[s.Name] = model.CheckLoadedParked
		case !s.Runtime.CheckRunning:
			out[s.Name] = model.CheckParked
		case s.Runtime.CheckPassed:
			out[s.Name] = model.CheckPassed
		default:
			out[s.Name] = model.CheckPending
		}
	}
	return out, nil
}

// Apply sends the plan's commands. Changes HAProxy refuses for one server
// do not stop the others (plan.ServerErrors); nor does a server HAProxy no
// longer has, or an add whose id other writers kept taking, which make the
// apply a failure.ConflictError (droppedSince, idTaken);
// a server whose deletion must
// wait for its sessions, or for a later reconcile on versions older than
// 3.0, stays parked and is listed in Applied.Deferred.
func (c *Client) Apply(ctx context.Context, p plan.Plan) (plan.Applied, error) {
	var out plan.Applied
	var failed plan.ServerErrors
	a := applier{backend: p.Backend, out: &out}
	a.send = func(ok func(string) bool, cmds ...string) error {
		reply, err := c.sock.Commands(ctx, cmds...)
		if err != nil {
			return err
		}
		return a.checkReply(ok, cmds, reply)
	}
	var err error
	if has(p, plan.Delete) || slices.ContainsFunc(p.Changes, reAdds) { // how to delete depends on the version
		if a.version, err = c.Version(ctx); err != nil {
			return out, fmt.Errorf("read haproxy version: %w", err)
		}
	}
	if has(p, plan.Add) {
		if a.nextID, err = c.nextID(ctx, p.Backend); err != nil {
			return out, err
		}
	}
	// refusedOne records a change HAProxy refused for its one server (the
	// others are independent and still go; retrying would not help) and
	// returns any other error, which ends the apply. A server HAProxy does
	// not know (droppedSince), an add whose id other writers kept taking
	// (idTaken), or an add of a name another writer added (nameTaken), is
	// no refusal: the others still go, and the apply ends in
	// a conflict, which the reconcile retries from a fresh read.
	var conflict error
	refusedOne := func(ch plan.Change, err error) error {
		var refused *CommandError
		var backendErr *failure.BackendError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &backendErr):
			return err
		case errors.As(err, &refused) && droppedSince(refused):
			if conflict == nil {
				conflict = &failure.ConflictError{Msg: fmt.Sprintf(
					"server %s/%s is not in the running HAProxy, or a stopping one answered (reloaded since it was read?): %v", p.Backend, ch.Name, err)}
			}
			return nil
		case idTaken(err): // still, after idRetries fresh ids: writers add there right now
			if conflict == nil {
				conflict = &failure.ConflictError{Msg: fmt.Sprintf(
					"add server %s/%s: its id taken %d times by other writers: %v", p.Backend, ch.Name, idRetries+1, err)}
			}
			return nil
		case unparkedSince(err): // another writer took it out of maintenance since the read
			if conflict == nil {
				conflict = &failure.ConflictError{Msg: fmt.Sprintf(
					"del server %s/%s: another writer took it out of maintenance since the read: %v", p.Backend, ch.Name, err)}
			}
			return nil
		case nameTaken(err): // another writer added it since the read
			if conflict == nil {
				conflict = &failure.ConflictError{Msg: fmt.Sprintf(
					"add server %s/%s: another writer added it since the read: %v", p.Backend, ch.Name, err)}
			}
			return nil
		case errors.As(err, &refused):
			failed = append(failed, plan.ServerError{Server: ch.Name, Error: err.Error(), Err: err})
			return nil
		default:
			return fmt.Errorf("%s server %s/%s: %w", ch.Action, p.Backend, ch.Name, err)
		}
	}
	var stepped, deletes, frees []plan.Change
	for _, ch := range p.Changes {
		if ch.Action == plan.Delete && ch.Slot {
			frees = append(frees, ch) // a slot is parked, never deleted
		} else if ch.Action == plan.Delete {
			deletes = append(deletes, ch)
		} else {
			stepped = append(stepped, ch)
		}
	}
	// Servers entering service go first, every step of theirs before any
	// other change's: a plan that puts a replacement in service and takes
	// the servers it replaces out (make-before-break) must not leave the
	// backend with none between the two (in one round of steps, an entry's
	// "state ready" may come after another's "state maint").
	entering := slices.DeleteFunc(slices.Clone(stepped), func(ch plan.Change) bool { return !enters(ch) })
	rest := slices.DeleteFunc(stepped, enters)
	for _, group := range [][]plan.Change{entering, rest} {
		for start := 0; start < len(group); start += sequenceChunk {
			chunk := group[start:min(start+sequenceChunk, len(group))]
			errs, err := c.sequences(ctx, &a, chunk)
			if err != nil {
				return out, fmt.Errorf("changes to %s: %w", p.Backend, err)
			}
			for i, ch := range chunk {
				if err := refusedOne(ch, errs[i]); err != nil {
					return out, err
				}
			}
		}
	}
	parked, errs, err := c.park(ctx, &a, frees, p.IdleSlots)
	if err != nil {
		return out, fmt.Errorf("park slots of %s: %w", p.Backend, err)
	}
	for i, ch := range parked {
		if err := refusedOne(ch, errs[i]); err != nil {
			return out, err
		}
	}
	for _, ch := range deletes {
		deferred, err := a.del(p.Backend+"/"+ch.Name, ch)
		if deferred {
			out.Deferred = append(out.Deferred, ch.Name)
		}
		if err := refusedOne(ch, err); err != nil {
			return out, err
		}
	}
	if conflict != nil {
		return out, conflict
	}
	if len(failed) > 0 {
		return out, failed
	}
	return out, nil
}

// droppedSince reports whether HAProxy refused a command because the server
// is not there: "No such server." to a server the read just saw, or this
// apply just added, means a reload (by another writer, or another Service's
// change through the Data Plane API) came in between and the new process
// lacks it; or another writer deleted it. Not the server's fault: the
// retry reads again and plans from there (a server back from haproxy.cfg
// parked is gated again, one gone is added again or no longer wanted).
// "add server" never answers it: its refusals stay the server's.
//
// "Proxy is disabled" is the old process's answer, stopping after a reload
// (the Data Plane API's own, seed 466823445 on 3.0.11): the same. A backend
// configured "disabled" answers it for good; its reconciles then retry
// until RECONCILE_TIMEOUT and fail temporary, as the Data Plane driver's
// gates do (dataplane.droppedByReload).
func droppedSince(ce *CommandError) bool {
	return strings.Contains(ce.Reply, "No such server") || strings.Contains(ce.Reply, "Proxy is disabled")
}

// Adds and updates go on one interactive connection in rounds of steps
// (Socket.Sequences), sequenceChunk changes at a time: a burst of adds costs
// a few round trips, not a connection per change.
const sequenceChunk = 500

// sequences runs each change's steps and returns, for each, the error that
// stopped it (nil when every step passed); the error it returns itself
// means the connection failed.
//
// An add refused because its id is used (idTaken: another writer, a second
// replica or another CLUSTER_NAME's instance on the same backend, added a
// server with the same next id since nextID read it) is sent again with
// the next id read afresh, up to idRetries times: HAProxy added nothing,
// and the add itself is fine. Its steps are an add's even for a re-add
// (reAdds), whose delete went already.
func (c *Client) sequences(ctx context.Context, a *applier, changes []plan.Change) ([]error, error) {
	seqs := make([][]Step, len(changes))
	for i, ch := range changes {
		srv := a.backend + "/" + ch.Name
		switch {
		case ch.Action == plan.Add && ch.Slot, refills(ch):
			seqs[i] = fillSteps(srv, ch)
		case ch.Action == plan.Add:
			seqs[i] = a.addSteps(srv, ch)
		case reAdds(ch):
			seqs[i] = a.reAddSteps(srv, ch)
		default:
			seqs[i] = updateSteps(srv, ch)
		}
	}
	errs, err := c.run(ctx, a, seqs)
	if err != nil {
		return nil, err
	}
	for range idRetries {
		var again []int
		for i := range changes {
			if idTaken(errs[i]) && !changes[i].Slot {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			break
		}
		next, err := c.nextID(ctx, a.backend)
		if err != nil {
			return nil, err
		}
		a.nextID = max(a.nextID, next)
		retry := make([][]Step, len(again))
		for j, i := range again {
			retry[j] = a.addSteps(a.backend+"/"+changes[i].Name, changes[i])
		}
		got, err := c.run(ctx, a, retry)
		if err != nil {
			return nil, err
		}
		for j, i := range again {
			errs[i] = got[j]
		}
	}
	for i, ch := range changes {
		if ch.Action == plan.Add {
			errs[i] = a.backendRefusal(errs[i])
		}
	}
	return errs, nil
}

// idRetries bounds how often one apply sends an add again after its id was
// taken (sequences): each retry reads the next id afresh, so only writers
// adding at that very moment again could take it once more.
const idRetries = 3

// run sends seqs (Socket.Sequences), counts the steps done, and returns the
// error that stopped each.
func (c *Client) run(ctx context.Context, a *applier, seqs [][]Step) ([]error, error) {
	got, err := c.sock.Sequences(ctx, seqs)
	for _, o := range got {
		for range o.Done {
			a.out.Count(plan.RuntimeWrite)
		}
	}
	if err != nil {
		return nil, err
	}
	errs := make([]error, len(seqs))
	for i := range seqs {
		errs[i] = stopped(seqs[i], got[i])
	}
	return errs, nil
}

// idTaken reports whether err is HAProxy's refusal of an "add server"
// because another server has its id: "'id' : custom id 16777216 already
// used at (null):0 ('server x')." (2.6.12; the same words to 3.5).
func idTaken(err error) bool {
	var ce *CommandError
	return errors.As(err, &ce) && strings.HasPrefix(ce.Command, "add server ") &&
		strings.Contains(ce.Reply, "custom id") && strings.Contains(ce.Reply, "already used")
}

// unparkedSince reports whether err is HAProxy's refusal of a "del server"
// because the server is not in maintenance: this apply parked it, or its
// read showed it parked, so another writer (a second replica, seed 132)
// put it back in service since. The retry reads again.
func unparkedSince(err error) bool {
	var ce *CommandError
	return errors.As(err, &ce) && strings.Contains(ce.Command, "del server ") &&
		strings.Contains(ce.Reply, "Only servers in maintenance mode can be deleted")
}

// nameTaken reports whether err is HAProxy's refusal of an "add server"
// whose name the backend has: the plan adds only servers its read did not
// show, so another writer (a second replica) added it since, or a reload
// loaded it from haproxy.cfg. Not the server's fault: the retry reads again
// and finds it (history checker, seed 4: two replicas adding the same pods).
func nameTaken(err error) bool {
	var ce *CommandError
	return errors.As(err, &ce) && strings.HasPrefix(ce.Command, "add server ") &&
		strings.Contains(ce.Reply, "Already exists a server with the same name")
}

func has(p plan.Plan, a plan.Action) bool {
	return slices.ContainsFunc(p.Changes, func(ch plan.Change) bool { return ch.Action == a })
}

// nextID returns the first server id above every id the backend uses, so
// that each add names its id (HAProxy otherwise searches for a free one).
// Another writer adding to the same backend at the same time reads the same
// one: the add HAProxy refuses for it is sent again (sequences).
func (c *Client) nextID(ctx context.Context, backend string) (int, error) {
	cmd := "show servers state " + backend
	reply, err := c.sock.Command(ctx, cmd)
	if err != nil {
		return 0, err
	}
	maxID := 0
	for _, line := range strings.Split(reply, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[1] != backend {
			continue
		}
		if id, err := strconv.Atoi(f[2]); err == nil && id > maxID {
			maxID = id
		}
	}
	return max(maxID+1, idBase), nil
}

type sender func(ok func(string) bool, cmds ...string) error

// applier sends one plan's changes to one HAProxy version.
type applier struct {
	send    sender
	backend string
	version Version
	nextID  int
	out     *plan.Applied
}

// checkReply checks the reply to one command line: a CommandError unless ok
// says it is success, in which case each command counts as a runtime write.
func (a *applier) checkReply(ok func(string) bool, cmds []string, reply string) error {
	if !ok(reply) {
		return &CommandError{Command: strings.Join(cmds, "; "), Reply: reply}
	}
	for range cmds {
		a.out.Count(plan.RuntimeWrite)
	}
	return nil
}

func empty(reply string) bool { return strings.TrimSpace(reply) == "" }

// lastWords returns the last non-blank line of a reply to several commands.
func lastWords(reply string) string {
	lines := strings.Split(strings.TrimSpace(reply), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// HAProxy's refusals of "add server" in a backend that cannot take runtime
// servers: up to 3.3, and from 3.4 (which also says it of a "mode log"
// backend).
var dynamicAlgoRefusals = []string{"Backend must use a dynamic load balancing", "Backend does not support dynamic servers"}

// addSteps create the server in maintenance (HAProxy's default for "add
// server") with the next explicit id, start its health check, then put it
// in drain with its health down (a gated server) or in its state. A server
// added "enabled", or set ready at once, would take traffic before any check
// passed. When the add is refused (the name exists already), nothing after
// it runs: the existing server is left alone.
func (a *applier) addSteps(srv string, ch plan.Change) []Step {
	a.nextID++
	return a.addStepsWithID(srv, ch, a.nextID-1)
}

// addStepsWithID are addSteps with the server's id given.
func (a *applier) addStepsWithID(srv string, ch plan.Change, id int) []Step {
	s := *ch.New
	// What haproxy.cfg's default-server would give it comes first: the
	// server's own keywords after it win, as in haproxy.cfg.
	inherit := ""
	if len(ch.Inherit) > 0 {
		inherit = " " + strings.Join(ch.Inherit, " ")
	}
	cmd := fmt.Sprintf("add server %s %s%s weight %d %s id %d",
		srv, net.JoinHostPort(s.Address, strconv.Itoa(s.Port)), inherit, s.Weight, checkKeywords(s.Check), id)
	if s.Check.SendProxyV2 {
		cmd += " send-proxy-v2"
	}
	if s.Check.ProxyOnCheck() {
		cmd += " check-send-proxy"
	}
	if s.Backup { // taken only here: no "set server" changes it (package desired)
		cmd += " backup"
	}
	steps := []Step{{cmd, addOK}}
	switch {
	case ch.Gate:
		steps = append(steps, gateSteps(srv)...)
	default:
		steps = append(steps, Step{"enable health " + srv, empty})
		if s.State != model.Maint {
			steps = append(steps, Step{"set server " + srv + " state " + stateWord(s.State), empty})
		}
	}
	return steps
}

// idBase is the lowest id this driver gives a server it adds: ids of
// haproxy.cfg's servers, given or not, stay below it in practice, so a
// server at or above it is one this driver added (reAdds).
const idBase = 1 << 24

// reAdds reports whether gated change ch comes back from maintenance by
// being deleted and added again rather than by leaving maintenance: HAProxy
// keeps a parked server's check timer on its steady inter (no CLI command
// wakes it: enable/disable health, addr, check-port, agent all tried on
// 2.6.12), so its first check would come up to inter later (1.5 s shipped),
// while a new server's comes downinter after "enable health" (200 ms). Only
// a server this driver added (an id it gives, from idBase), or one the
// caller vouches for (plan.Change.Renew), out of traffic with no sessions:
// one from haproxy.cfg, even with an "id", may carry keywords an add would
// lose, and
// deleting a server with streams can crash HAProxy before 2.6.17.
func reAdds(ch plan.Change) bool {
	if ch.Action == plan.Add || ch.Old == nil || ch.Old.State != model.Maint || ch.Old.Runtime == nil || ch.Old.Runtime.Sessions != 0 {
		return false
	}
	if ch.Renew { // the caller knows its keywords (plan.Change.Renew)
		return (ch.Gate || ch.New.State == model.Maint) && reAddID(ch) > 0
	}
	if !ch.Gate {
		return false
	}
	return ch.Old.Runtime.Ours
}

// reAddID is the id a server added again keeps.
func reAddID(ch plan.Change) int { return ch.Old.Runtime.ID }

// reAddSteps delete a parked server and add it again, gated, with its id
// (see reAdds). Should the add not follow, the server is absent and the next
// reconcile adds it; should the delete be refused, nothing changed.
func (a *applier) reAddSteps(srv string, ch plan.Change) []Step {
	var steps []Step
	if a.version.AtLeast(3, 0) {
		// Whatever it answers (done, or a timeout), the delete decides.
		steps = append(steps, Step{"wait 2000 srv-removable " + srv, func(string) bool { return true }})
	}
	steps = append(steps, Step{"del server " + srv, func(r string) bool { return lastWords(r) == "Server deleted." }})
	return append(steps, a.addStepsWithID(srv, ch, reAddID(ch))...)
}

// checkKeywords are the server keywords of check ck's timing and
// observation (send-proxy-v2 is written apart).
func checkKeywords(ck model.Check) string {
	var b strings.Builder
	fmt.Fprintf(&b, "check inter %dms", ck.Inter.Milliseconds())
	if ck.FastInter > 0 {
		fmt.Fprintf(&b, " fastinter %dms", ck.FastInter.Milliseconds())
	}
	if ck.DownInter > 0 {
		fmt.Fprintf(&b, " downinter %dms", ck.DownInter.Milliseconds())
	}
	fmt.Fprintf(&b, " rise %d fall %d", ck.Rise, ck.Fall)
	if ck.Port != 0 {
		fmt.Fprintf(&b, " port %d", ck.Port)
	}
	if ck.OnError != "" {
		b.WriteString(" observe layer4 error-limit 1 on-error " + ck.OnError)
	}
	return b.String()
}

func addOK(r string) bool { return strings.TrimSpace(r) == "New server registered." }

// backendRefusal turns HAProxy's refusal of runtime servers in this
// backend into a failure.BackendError.
func (a *applier) backendRefusal(err error) error {
	var ce *CommandError
	if errors.As(err, &ce) && slices.ContainsFunc(dynamicAlgoRefusals, func(r string) bool { return strings.Contains(ce.Reply, r) }) {
		return &failure.BackendError{Backend: a.backend, Reason: fmt.Sprintf(
			"cannot take runtime servers: %s (use a dynamic algorithm: roundrobin, leastconn, first, random, or a hash with hash-type consistent)",
			strings.SplitN(strings.TrimSpace(ce.Reply), "\n", 2)[0])}
	}
	return err
}

// updateSteps change address, port, weight and state, each only if it
// differs. A gated server has its check restarted in drain with its health
// down before it moves, so that it never takes traffic at an address no
// check passed at; should a later step fail, it is left out of service, and
// the next reconcile sees it where it is. A server leaving service leaves
// before it moves; one entering enters after.
func updateSteps(srv string, ch plan.Change) []Step {
	old, s := *ch.Old, *ch.New
	var steps []Step
	state := Step{"set server " + srv + " state " + stateWord(s.State), empty}
	switch {
	case ch.Gate:
		steps = gateSteps(srv)
	case old.State != s.State && s.State != model.Ready:
		steps = append(steps, state)
	}
	if old.Address != s.Address || old.Port != s.Port {
		steps = append(steps, Step{fmt.Sprintf("set server %s addr %s port %d", srv, s.Address, s.Port), func(r string) bool {
			// 3.0 says "port changed from" when only the port moves; a
			// server already there is "no need to change the addr" before
			// 3.0 and "nothing changed" since.
			return strings.HasPrefix(r, "IP changed from") || strings.HasPrefix(r, "port changed from") ||
				strings.HasPrefix(r, "no need to change the addr") || strings.HasPrefix(r, "nothing changed")
		}})
	}
	if old.Check.Port != s.Check.Port {
		port := s.Check.Port
		if port == 0 {
			port = s.Port // back to the server's own port
		}
		steps = append(steps, Step{fmt.Sprintf("set server %s check-port %d", srv, port), empty})
	}
	if s.State == model.Ready && old.Weight != s.Weight {
		steps = append(steps, Step{fmt.Sprintf("set server %s weight %d", srv, s.Weight), empty})
	}
	if !ch.Gate && old.State != s.State && s.State == model.Ready {
		steps = append(steps, state)
	}
	return steps
}

// del parks the server in maintenance and deletes it once HAProxy says it
// can: on 3.0+ after "wait srv-removable"; before 3.0 only if it was parked
// already (by an earlier reconcile that saw its sessions end), since "del
// server" racing a live stream can crash those versions. deferred reports a
// server left parked for a later reconcile.
func (a *applier) del(srv string, ch plan.Change) (deferred bool, err error) {
	old := *ch.Old
	if old.State != model.Maint {
		if err := a.send(empty, "set server "+srv+" state maint"); err != nil {
			return false, err
		}
	}
	safe := a.version.AtLeast(3, 0)
	if ch.Kill {
		if err := a.send(empty, "shutdown sessions server "+srv); err != nil {
			return false, err
		}
	}
	if !safe && (old.State != model.Maint || ch.Kill) {
		return true, nil
	}
	cmds := []string{"del server " + srv}
	if safe {
		cmds = []string{"wait 2000 srv-removable " + srv, "del server " + srv}
	}
	err = a.send(func(r string) bool { return lastWords(r) == "Server deleted." }, cmds...)
	var ce *CommandError
	if errors.As(err, &ce) && strings.Contains(ce.Reply, "still has connections") {
		return true, nil
	}
	return false, err
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

// enters reports whether ch puts a server in service without gating it.
func enters(ch plan.Change) bool {
	return !ch.Gate && ch.New != nil && ch.New.State == model.Ready && (ch.Old == nil || ch.Old.State != model.Ready)
}
