package dataplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// Apply makes the plan true in HAProxy, starting from the version it was
// computed at: steps decides what to do with each server, and Apply carries
// the steps out in order, each after its precondition. On error some writes
// may have landed; the caller re-reads.
func (c *Client) Apply(ctx context.Context, p plan.Plan) (plan.Applied, error) {
	if err := c.awaitPendingRemoval(ctx, p); err != nil {
		return plan.Applied{}, err
	}
	x := &executor{c: c, p: p, version: p.Revision, notTaken: map[string]bool{}}
	// What haproxy.cfg's default-server gives a server, which an add
	// through the socket must carry (inheritance); read only for a plan
	// that may add one there.
	if c.runtime != nil && mayAddOnSocket(p) {
		var err error
		if x.inh, err = c.readInheritance(ctx, p.Backend); err != nil {
			return x.out, err
		}
	}
	f := c.factsOf(ctx, p, x.inh)
	todo := steps(p, f)
	posted := map[string]bool{}
	for i := 0; i < len(todo); i++ {
		st := todo[i]
		if st.pre == preAddsAtRuntime && !f.addsReload && c.addsReload() {
			// The API answered an add with a reload (a default-server
			// line): what is left is decided again knowing it, its adds
			// going through the socket, written as each enters service.
			f.addsReload = true
			rest := p
			rest.Changes = slices.DeleteFunc(slices.Clone(p.Changes), func(ch plan.Change) bool { return posted[ch.Name] })
			todo = append(todo[:i:i], steps(rest, f)...)
			i--
			continue
		}
		if err := x.run(ctx, st); err != nil {
			return x.out, err
		}
		if st.via == viaPost {
			posted[st.changes[0].Name] = true
		}
	}
	if len(x.failed) > 0 {
		return x.out, x.failed
	}
	return x.out, nil
}

// executor carries out one plan's steps, threading the configuration
// version from one versioned write to the next.
type executor struct {
	c       *Client
	p       plan.Plan
	inh     inheritance
	version int64
	out     plan.Applied
	failed  plan.ServerErrors
	// notTaken are the servers a holding step's socket refused (preTaken).
	notTaken map[string]bool
	// written are the servers the transaction wrote (preWritten).
	written map[string]bool
	// entering, enteredNone: the last "still checked" step had servers,
	// and the socket refused them all (preEntered).
	entering, enteredNone bool
}

// run carries out one step, once its precondition holds.
func (x *executor) run(ctx context.Context, st step) error {
	c, backend := x.c, x.p.Backend
	changes := st.changes
	switch st.pre {
	case preStillChecked:
		// Entries must still be there, and run a passed check if not in
		// service yet: a reload since the read (the API's reload_delay
		// after an earlier commit) loaded them parked, or dropped those
		// haproxy.cfg lacks, and "state ready" would put them UP with no
		// check run.
		if err := c.stillChecked(ctx, backend, changes); err != nil {
			return err
		}
	case preEntered:
		if x.entering && x.enteredNone {
			// None entered (the running HAProxy refused them all: a reload
			// came between): the servers they replace stay as they are,
			// reported as not done, so that the result does not list them
			// as changed; the retry plans them again.
			for _, ch := range changes {
				x.notTaken[ch.Name] = true
				x.failed = append(x.failed, plan.ServerError{Server: ch.Name, Error: "kept as it was: the running HAProxy refused every server that was to enter service beside it"})
			}
			return nil
		}
	case preTaken:
		changes = without(changes, x.notTaken)
	case preWritten:
		changes = slices.DeleteFunc(slices.Clone(changes), func(ch plan.Change) bool { return !x.written[ch.Name] })
	}
	before := len(x.failed)
	defer func() {
		if st.holds {
			// Written only as the running HAProxy took them.
			maps.Copy(x.notTaken, refusedNames(x.failed[before:]))
		}
		if st.pre == preStillChecked {
			x.entering, x.enteredNone = len(changes) > 0, len(x.failed)-before == len(changes)
		}
	}()
	switch st.via {
	case viaPost:
		return x.each("add", changes, func(_ plan.Change, v int64) (int64, error) {
			return c.addThenGate(ctx, x.inh, backend, st, v, &x.out)
		})
	case viaGate:
		return x.each("gate", changes, func(_ plan.Change, v int64) (int64, error) {
			return c.gate(ctx, x.inh, backend, st, v, &x.out)
		})
	case viaPut:
		return x.each("", changes, func(_ plan.Change, v int64) (int64, error) { return x.put(ctx, st, v) })
	case viaSocket:
		return c.onRuntime(ctx, x.inh, plan.Plan{Backend: backend, Changes: changes}, &x.out, &x.failed)
	case viaBurst:
		return c.addAtRuntime(ctx, x.inh, backend, changes, &x.out, &x.failed)
	case viaShut:
		_, err := c.shutExpired(ctx, backend, changes, &x.out, &x.failed)
		return err
	case viaTransaction:
		if len(changes) == 0 && x.p.Settings == nil {
			return nil
		}
		tx, err := c.transaction(ctx, x.version, x.p, changes, x.serverPath)
		x.out.Add(tx)
		if err != nil {
			return err
		}
		x.written = make(map[string]bool, len(changes))
		for _, ch := range changes {
			x.written[ch.Name] = true
		}
	case viaDeferred:
		for _, ch := range changes {
			x.out.Deferred = append(x.out.Deferred, ch.Name)
		}
	}
	return nil
}

func (x *executor) serverPath(name string) string {
	return "/configuration/backends/" + url.PathEscape(x.p.Backend) + "/servers/" + url.PathEscape(name)
}

// each runs write for every change with the version the previous write
// left; a change HAProxy refused for its one server does not stop the
// others.
func (x *executor) each(verb string, chs []plan.Change, write func(plan.Change, int64) (int64, error)) error {
	for _, ch := range chs {
		v, err := write(ch, x.version)
		var refused plan.ServerErrors
		if errors.As(err, &refused) { // the socket refused it (a gate's add)
			x.failed = append(x.failed, refused...)
			x.version = v
			continue
		}
		if refusedOne(err, ch.Name, &x.failed) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%s server %s/%s: %w", cmp.Or(verb, string(ch.Action)), x.p.Backend, ch.Name, err)
		}
		x.version = v
	}
	return nil
}

// put is one versioned PUT of a runtime-safe change, and what its step says
// to do if the API reloads for it.
func (x *executor) put(ctx context.Context, st step, v int64) (int64, error) {
	ch := st.changes[0]
	body, err := serverModel(*ch.New, ch.Old.Source)
	if err != nil {
		return v, err
	}
	resp, err := x.c.versioned(ctx, http.MethodPut, x.serverPath(ch.Name), v, body, &x.out)
	if err != nil || resp.status != http.StatusAccepted || st.onReload == howNone {
		return resp.nextVersion(v), err
	}
	// A runtime-safe change the API reloads for: the running HAProxy
	// gets it through the socket now rather than at the reload.
	unexpected(&x.out, whyChangeReloads)
	if st.onReload == reloadSocket {
		if err := x.c.onRuntime(ctx, x.inh, plan.Plan{Backend: x.p.Backend, Changes: []plan.Change{ch}}, &x.out, &x.failed); err != nil {
			return resp.nextVersion(v), err
		}
	}
	return resp.nextVersion(v), nil
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
