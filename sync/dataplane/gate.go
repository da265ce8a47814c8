package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// addThenGate adds a server without a reload and with a running check: POST
// in maintenance (201: added at runtime and written to haproxy.cfg), then
// gate it on the runtime socket. A gated server stays in maintenance in
// haproxy.cfg until a later reconcile sees its check passed; another is then
// PUT in its state (runtime-safe). If the API answers 202 (it reloads, e.g.
// because of a default_server), the server comes from the reload parked, and
// a later reconcile gates it.
func (c *Client) addThenGate(ctx context.Context, inh inheritance, backend string, st step, version int64, out *plan.Applied) (int64, error) {
	ch := st.changes[0]
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
		if st.onReload != reloadSocket {
			// (Parked, or a default-server keyword "add server" cannot
			// take: the reload loads it, parked.)
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
	if st.how == postParked {
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
		return version, fmt.Errorf("gate: %w", droppedByReload(err, backend, srv.Name))
	}
	out.Count(plan.RuntimeWrite)
	if st.how != postGateIn {
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

// gate holds an existing server out of service until its check passes, as
// its step says (gateHow): haproxy.cfg (and so the runtime) says
// maintenance, with the new address if it moves (park), then the runtime
// socket restarts its check in drain — in place, renewed, added (a server
// the running HAProxy lacks), or gated and then moved, since the API may
// have left the move to a reload (movesOnSocket): the check runs at the new
// address.
func (c *Client) gate(ctx context.Context, inh inheritance, backend string, st step, version int64, out *plan.Applied) (int64, error) {
	ch := st.changes[0]
	if st.parkFirst {
		// Out of traffic where it runs before the PUT moves it: the API
		// changes its address before its state (parksFirst).
		parked := *ch.Old
		parked.State = model.Maint
		rp := plan.Plan{Backend: backend, Changes: []plan.Change{{Action: plan.Maint, Name: ch.Name, Old: ch.Old, New: &parked}}}
		applied, err := c.runtime.Apply(ctx, rp)
		out.Add(applied)
		if err != nil {
			return version, fmt.Errorf("park %s/%s before its move: %w", backend, ch.Name, err)
		}
	}
	if st.park {
		parked := *ch.New
		parked.State = model.Maint
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
	held := *ch.New
	held.Backup = ch.Old.Backup // as haproxy.cfg holds it (serverModel kept it)
	h := st.how
	if h == gateRenew {
		// Deleted and added again through the socket, with its id, the
		// keywords haproxy.cfg holds and those its default-server gives
		// it: its first check comes at once, where leaving maintenance
		// keeps it on the steady inter (1.5 s shipped).
		rp := plan.Plan{Backend: backend, Changes: []plan.Change{{Action: ch.Action, Name: ch.Name, Old: ch.Old, New: &held, Gate: true, Renew: true}}}
		applied, err := c.socketApply(ctx, inh, rp)
		out.Add(applied)
		if !errors.As(err, new(plan.ServerErrors)) {
			return version, err
		}
		// Refused (HAProxy 3.3+ keeps a server with idle connections):
		// gated where it is, as any other returning server.
		h = st.orElse
	}
	switch h {
	case gateLeft:
		// A default-server keyword "add server" cannot take (read since
		// the plan): parked in haproxy.cfg, the reload loads it.
		return version, nil
	case gateAdd:
		// haproxy.cfg holds it (parked now) and the running HAProxy does
		// not: added there through the socket, gated, with what its
		// default-server gives it, rather than left to a reload that may
		// never come. The reload, when it comes, loads it parked, with
		// haproxy.cfg's id and check, and a later reconcile gates it again.
		rp := plan.Plan{Backend: backend, Changes: []plan.Change{{Action: plan.Add, Name: ch.Name, New: &held, Gate: true}}}
		applied, err := c.socketApply(ctx, inh, rp)
		out.Add(applied)
		return version, err
	case gateMove:
		// Gated, then moved, through the socket: the PUT's reload (if the
		// API answered with one) has not run, and the check must run at
		// the new address, not where the server runs now (move.go).
		rp := plan.Plan{Backend: backend, Changes: []plan.Change{{Action: plan.Drain, Name: ch.Name, Old: ch.Old, New: &held, Gate: true}}}
		applied, err := c.runtime.Apply(ctx, rp)
		out.Add(applied)
		return version, err
	}
	if err := c.runtime.Gate(ctx, backend, ch.Name); err != nil {
		return version, droppedByReload(err, backend, ch.Name)
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

// droppedByReload turns HAProxy's refusal of a gate of a server the API
// just added, or the read just saw, into a conflict, as after a reload
// (another Service's frontend, a reload by others): "No such server" from
// a new process that lacks it, "Proxy is disabled" from the old one,
// stopping, that answered the socket. The retry reads again and gates it
// where it runs now (added through the socket if haproxy.cfg holds it
// only). A backend configured "disabled" answers the same for good: its
// reconciles then retry until RECONCILE_TIMEOUT and fail temporary.
func droppedByReload(err error, backend, name string) error {
	var ce *runtimeapi.CommandError
	if !errors.As(err, &ce) {
		return err
	}
	switch {
	case strings.Contains(ce.Reply, "No such server"):
		return &failure.ConflictError{Msg: fmt.Sprintf("server %s/%s is not in the running HAProxy (reloaded since it was read or added?): %v", backend, name, err)}
	case strings.Contains(ce.Reply, "Proxy is disabled"):
		return &failure.ConflictError{Msg: fmt.Sprintf("backend %s answered disabled for %s (a stopping process after a reload?): %v", backend, name, err)}
	}
	return err
}
