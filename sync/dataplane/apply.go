package dataplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

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
