package dataplane

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// steps decides, with no I/O, everything Apply does with a plan: which
// channel takes each server's change, in what order, and what must still
// hold when the step's turn comes. Apply only carries the steps out, in
// order (apply.go).
//
// Its inputs are the four things a decision depends on. Each change holds
// the desired server (New) and the one read (Old), which is the running
// HAProxy's state with its model.Runtime flags (Loading: haproxy.cfg holds it
// and the running HAProxy does not; Unpersisted: the reverse; Unwritten: in
// service on the socket, not in haproxy.cfg) and haproxy.cfg's entry as
// persisted (Old.Source). facts says whether the runtime socket is there
// and what the API reloads for.
//
// The table (steps_test.go enumerates it row by row; "≤20" is
// MaxRuntimeAdds):
//
//	change                                  running / haproxy.cfg / API            steps
//	new server, ≤20                         socket, adds at runtime                post (gate, or check parked if not ready; 202: socket add gated) if adds at runtime
//	new server, ≤20                         socket, API reloads for adds           burst (socket add, gated), then transaction (written parked) if taken
//	new servers, >20                        socket                                 burst, then transaction if taken
//	new server                              default-server keyword not carried     transaction (parked when gated)
//	new server                              no socket                              transaction
//	a server gated (back from maintenance)  parked, id known, only our keywords    gate (park PUT if needed, renew; else in place or move)
//	a server gated                          API reloads for adds, keywords carried gate (renew, else in place): the same
//	a move (new address), gated             running at the old address             gate (park PUT at new address, socket gate then move): never checked at the old address
//	  the same, in traffic                  running, not parked                    gate (socket park where it runs first: the PUT moves it before parking it)
//	a gated server                          loading (haproxy.cfg only), carried    gate (socket add, gated)
//	a gated server                          loading, keyword not carried           gate (parked in haproxy.cfg, left to the reload)
//	weight, drain, maintenance              haproxy.cfg differs                    put (202: the socket too, reported)
//	the same                                haproxy.cfg holds it already           socket
//	a backup server parked                  haproxy.cfg holds backup               put (its backup kept as read: no reload)
//	check settings changed                  any                                    transaction (the API reloads for them)
//	an add, the backend's settings changed  any                                    transaction (with the settings)
//	delete of a server in traffic           socket                                 socket (parked), then transaction (delete)
//	delete, no socket                       -                                      put (parked), then transaction
//	delete past the drain timeout           socket                                 shut if taken, then transaction if taken
//	>20 servers leaving traffic to write    socket                                 socket, then transaction
//	what the socket alone carries           no PUT puts a server in service        socket before the PUTs
//	≤20 entries haproxy.cfg parks           socket                                 put each
//	>20 entries, or one unpersisted         socket                                 socket if still checked, leaving ones socket if an entry entered, then transaction if taken
//	delete of a server in traffic beside    entries first                          transaction writes it parked, deferred if written
//	  such entries
//	gated, parked, deleted                  unpersisted (socket only)              socket
//
// Preconditions: a step whose precondition is refused is not run. "adds at
// runtime" is refused once the API answered an add with a reload: the rest
// of the plan is decided again knowing that (its adds become a burst, no
// renew). "still checked" (every entry still runs, with a passed check if
// not in service) is refused after a reload since the read: the apply stops
// with a conflict and the retry reads again. "an entry entered" is refused
// when the socket refused every entry: the leaving servers stay as they
// are, reported not done. "taken" and "written" are per server: a server a
// holding step's socket refused is not written (nor shut), and a deferred
// deletion is reported only for a server the transaction wrote parked.
func steps(p plan.Plan, f facts) []step {
	// A plan that changes the backend's settings adds its servers in their
	// transaction: added at once, a server checked on kube-proxy's health
	// port would run the backend's old check there (a TCP connect passes
	// it) until the settings' reload (history seed 1, nodes, Data Plane,
	// HAPROXY_BALANCE with the Service's healthCheckNodePort).
	// So does one whose settings an earlier write changed, while their
	// reload is pending (checksLoading; seed 219952848 on 3.4.0: the
	// reconcile after the settings' added Nodes through the socket, and
	// their tcp-check said "hc" to kube-proxy's HTTP port).
	socketAdds := p.Settings == nil && !f.checksLoading && !slices.ContainsFunc(p.Changes, func(ch plan.Change) bool {
		return ch.Action == plan.Add && f.uncarried[ch.Name]
	})
	r := route(p, f.socket, f.addsReload, socketAdds)
	var out []step
	for _, ch := range r.addGated {
		out = append(out, step{via: viaPost, pre: preAddsAtRuntime, changes: []plan.Change{ch}, how: postHow(ch), onReload: postOnReload(ch, f)})
	}
	for _, ch := range r.gated {
		h, orElse := gateHow(ch, f)
		out = append(out, step{via: viaGate, changes: []plan.Change{ch}, how: h, orElse: orElse, park: parks(ch), parkFirst: parksFirst(ch)})
	}
	// What the socket alone carries goes first unless a PUT puts a server
	// in service: servers leaving traffic that haproxy.cfg holds so
	// already then leave at once, not after up to 20 PUTs (~40 ms each on
	// the real API); beside an entry they follow it (make-before-break).
	socketFirst := len(r.onSocket) > 0 && !slices.ContainsFunc(r.puts, putsInService)
	if socketFirst {
		out = append(out, step{via: viaSocket, changes: r.onSocket})
	}
	for _, ch := range r.puts {
		out = append(out, step{via: viaPut, changes: []plan.Change{ch}, onReload: putOnReload(ch, f)})
	}
	if len(r.onSocket) > 0 && !socketFirst {
		out = append(out, step{via: viaSocket, changes: r.onSocket})
	}
	if len(r.burst) > 0 {
		out = append(out, step{via: viaBurst, changes: r.burst, holds: true})
	}
	if len(r.first) > 0 {
		entering := slices.DeleteFunc(slices.Clone(r.first), func(ch plan.Change) bool { return !putsInService(ch) })
		leaving := slices.DeleteFunc(slices.Clone(r.first), putsInService)
		if len(entering) > 0 {
			out = append(out, step{via: viaSocket, pre: preStillChecked, changes: entering, holds: true})
		}
		if len(leaving) > 0 {
			pre := precondition(preNone)
			if len(entering) > 0 {
				pre = preEntered
			}
			out = append(out, step{via: viaSocket, pre: pre, changes: leaving, holds: true})
		}
	}
	if names := toShut(r.structural, f.socket); len(names) > 0 {
		kill := slices.DeleteFunc(slices.Clone(r.structural), func(ch plan.Change) bool { return !slices.Contains(names, ch.Name) })
		out = append(out, step{via: viaShut, pre: preTaken, changes: kill, holds: true})
	}
	if len(r.structural) > 0 || p.Settings != nil {
		out = append(out, step{via: viaTransaction, pre: preTaken, changes: r.structural})
	}
	if len(r.deferred) > 0 {
		var deferred []plan.Change
		for _, n := range r.deferred {
			deferred = append(deferred, plan.Change{Action: plan.Delete, Name: n})
		}
		out = append(out, step{via: viaDeferred, pre: preWritten, changes: deferred})
	}
	return out
}

// facts are what steps knows of the target beyond the plan.
type facts struct {
	// socket: the instance's runtime socket is there (WithRuntime).
	socket bool
	// addsReload: the API answered a server add with a reload lately (a
	// default-server line, or a version it cannot read; addsReloadFor).
	addsReload bool
	// uncarried names the servers whose haproxy.cfg entry would inherit a
	// default-server keyword "add server" cannot carry (inheritance): the
	// socket never adds them.
	uncarried map[string]bool
	// checksLoading: a reload is pending (or the API cannot say) while p
	// adds a server checked on a port of its own (kube-proxy's health
	// port): the backend's HTTP check written before it, by this process
	// or another (serve beside the one-shot run), may not run yet.
	checksLoading bool
}

// factsOf reads facts off the client and what p's servers inherit.
func (c *Client) factsOf(ctx context.Context, p plan.Plan, inh inheritance) facts {
	f := facts{socket: c.runtime != nil, addsReload: c.addsReload(), uncarried: map[string]bool{}}
	portAdd := false
	for _, ch := range p.Changes {
		if ch.New != nil && !inh.inherit(*ch.New).Carried {
			f.uncarried[ch.Name] = true
		}
		portAdd = portAdd || ch.Action == plan.Add && ch.New != nil && ch.New.Check.Port != 0
	}
	if f.socket && portAdd && p.Settings == nil {
		pending, err := c.reloadPending(ctx)
		f.checksLoading = err != nil || pending
	}
	return f
}

// channel is how a step reaches HAProxy.
type channel string

const (
	// viaPost: a versioned POST of the new server in maintenance (the API
	// adds it at runtime and writes haproxy.cfg), then the socket (how).
	viaPost channel = "post"
	// viaGate: a versioned PUT parks the server in haproxy.cfg (park), then
	// the socket holds it out of service until its check passes (how).
	viaGate channel = "gate"
	// viaPut: a versioned PUT, which the API applies at runtime.
	viaPut channel = "put"
	// viaSocket: the running HAProxy only (the runtime API driver).
	viaSocket channel = "socket"
	// viaBurst: adds through the socket alone, pipelined and gated; a name
	// this service added already is moved (gated) if its address differs.
	viaBurst channel = "burst"
	// viaShut: the socket shuts the sessions of servers the transaction
	// deletes past their drain timeout.
	viaShut channel = "shut"
	// viaTransaction: one transaction, one commit, one reload.
	viaTransaction channel = "transaction"
	// viaDeferred: deletions left to a later reconcile
	// (plan.Applied.Deferred).
	viaDeferred channel = "deferred"
)

// precondition is what must still hold when a step's turn comes (see steps).
type precondition string

const (
	preNone          precondition = ""
	preAddsAtRuntime precondition = "adds at runtime"
	preStillChecked  precondition = "still checked"
	preEntered       precondition = "an entry entered"
	preTaken         precondition = "taken"
	preWritten       precondition = "written"
)

// how is what the socket does within a post or gate step, or what a post
// or put does when the API answers it with a reload (202).
type how string

const (
	howNone how = ""
	// Gates.
	gateInPlace how = "in place"  // the socket restarts the check where the server runs
	gateMove    how = "move"      // the socket gates, then moves it: the check runs at the new address
	gateRenew   how = "renew"     // deleted and added again (its id, gated): its first check comes at once
	gateAdd     how = "add"       // loading: added through the socket, gated, with what it inherits
	gateLeft    how = "left"      // loading, a keyword not carried: parked in haproxy.cfg, the reload loads it
	postGate    how = "gate"      // after a 201: gated on the socket
	postGateIn  how = "gate, put" // after a 201: gated, then a PUT in its state (not a gated change)
	postParked  how = "check parked"
	// Answers with a reload (202).
	reloadSocket how = "socket" // the socket makes the change now (a post: adds it gated); reported
	reloadReport how = "report" // reported, nothing more: the reload applies it
)

// step is one thing Apply does.
type step struct {
	via     channel
	pre     precondition
	changes []plan.Change
	// how, orElse: the socket's part of a post or gate; orElse is what a
	// gate does when the socket refuses how (a renew HAProxy 3.3+ refuses
	// for a server with idle connections).
	how, orElse how
	// onReload: what a post or put does when the API reloads for it.
	onReload how
	// park: a gate's versioned PUT, writing the server parked (and at its
	// new address) where haproxy.cfg does not hold it so.
	park bool
	// parkFirst: before a gate's PUT moves a server in traffic, the socket
	// parks it where it runs (parksFirst).
	parkFirst bool
	// holds: a server this step's socket refuses is not written (nor shut)
	// by the steps that come after it with preTaken.
	holds bool
}

// String renders a step as the table in steps_test.go reads it:
// "via(how, else orElse, 202: onReload, park) names [if pre]".
func (s step) String() string {
	var detail []string
	if s.parkFirst {
		detail = append(detail, "socket park")
	}
	if s.park {
		detail = append(detail, "park")
	}
	if s.how != howNone {
		detail = append(detail, string(s.how))
	}
	if s.orElse != howNone {
		detail = append(detail, "else "+string(s.orElse))
	}
	if s.onReload != howNone {
		detail = append(detail, "202: "+string(s.onReload))
	}
	var b strings.Builder
	b.WriteString(string(s.via))
	if len(detail) > 0 {
		fmt.Fprintf(&b, "(%s)", strings.Join(detail, ", "))
	}
	names := make([]string, 0, len(s.changes))
	for _, ch := range s.changes {
		names = append(names, ch.Name)
	}
	if len(names) > 3 {
		names = []string{fmt.Sprint(len(names))}
	}
	b.WriteString(" " + strings.Join(names, ","))
	if s.pre != preNone {
		b.WriteString(" [if " + string(s.pre) + "]")
	}
	return b.String()
}

// postHow is what follows a post the API applied at runtime (201).
func postHow(ch plan.Change) how {
	switch {
	case ch.New.State == model.Maint:
		// Its endpoint not ready yet: added again on the socket, parked,
		// so that its check runs meanwhile (the API adds it "disabled").
		return postParked
	case ch.Gate:
		return postGate
	default:
		return postGateIn
	}
}

// postOnReload is what follows a post the API answered with a reload: the
// running HAProxy gets the server through the socket, gated, unless it is
// to stay parked or a keyword it inherits cannot be carried there.
func postOnReload(ch plan.Change, f facts) how {
	if ch.New.State == model.Maint || f.uncarried[ch.Name] {
		return reloadReport
	}
	return reloadSocket
}

// putOnReload is what follows a put the API answered with a reload: none for
// a server haproxy.cfg holds and the running HAProxy does not (the reload is
// what it takes); else it is reported, and made through the socket at once.
func putOnReload(ch plan.Change, f facts) how {
	switch {
	case loading(ch.Old):
		return howNone
	case f.socket:
		return reloadSocket
	default:
		return reloadReport
	}
}

// parks reports whether a gate writes the server parked by a versioned PUT
// first: haproxy.cfg (as read) has it otherwise, elsewhere, or with other
// check settings.
func parks(ch plan.Change) bool {
	n := ch.New
	behind := ch.Old.Runtime != nil && ch.Old.Runtime.Behind // haproxy.cfg has it in traffic
	return ch.Old.State != model.Maint || behind || ch.Old.Address != n.Address || ch.Old.Port != n.Port || ch.Old.Check != n.Check
}

// parksFirst reports whether gated change ch moves a server the running
// HAProxy has in traffic (not parked, not loading): the API applies a PUT
// at runtime address first, maintenance next ("set server addr", then
// "state maint"), and in between the server takes clients at the new
// address, where no check ran. Parked on the socket first, it takes none.
func parksFirst(ch plan.Change) bool {
	return movesOnSocket(ch) && ch.Old.State != model.Maint
}

// gateHow is what the socket does with a gated existing server, and what it
// does if the socket refuses that.
func gateHow(ch plan.Change, f facts) (h, orElse how) {
	carried := !f.uncarried[ch.Name]
	if loading(ch.Old) {
		if !carried {
			return gateLeft, howNone
		}
		return gateAdd, howNone
	}
	where := gateInPlace
	if movesOnSocket(ch) {
		// The API may have left the move to a reload: the check must run
		// at the new address, not where the server runs now (move.go).
		where = gateMove
	}
	// Renewed whether or not the API reloads for adds (a default-server
	// line): the socket's add carries what the server inherits (carried),
	// and only a renew brings its first check forward. A reload (the API's
	// own, pending for an earlier write) loads a gated server parked with
	// its first check at its place in the worker's start-up spread, up to
	// a steady inter away; renewed, it comes downinter later.
	if renewable(ch) && carried {
		return gateRenew, where
	}
	return where, howNone
}
