package dataplane

import (
	"encoding/json"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// routes is how each change of a plan reaches HAProxy: route groups the
// changes, with no I/O, and steps (steps.go) turns the groups into steps, in
// the order of the fields.
type routes struct {
	// addGated are new servers POSTed in maintenance (added at runtime,
	// written to haproxy.cfg) and gated on the socket: at most
	// MaxRuntimeAdds, with the socket.
	addGated []plan.Change
	// gated are existing servers held out of service until their check
	// passes: parked in haproxy.cfg if they are not, then gated.
	gated []plan.Change
	// puts are runtime-safe changes haproxy.cfg must learn: one versioned
	// PUT each, which the API applies at runtime (no reload). A deleted
	// server's parking is one.
	puts []plan.Change
	// onSocket are changes haproxy.cfg holds already, or that only the
	// running HAProxy has the server for (model.Runtime.Unpersisted, not
	// entering service): a PUT would change nothing.
	onSocket []plan.Change
	// burst are new servers added through the socket alone, pipelined and
	// gated: more than MaxRuntimeAdds, or any while the API reloads for
	// adds. haproxy.cfg gets each once it enters service (first): no
	// versioned write or transaction waits on the way in, and a reload
	// before drops only servers out of service.
	burst []plan.Change
	// first go through the socket before the transaction writes them:
	// servers put in service (more than MaxRuntimeAdds that haproxy.cfg
	// parks, or any it does not hold yet), then the servers the plan takes
	// out of traffic beside them. On the real API the transaction costs
	// ~7 ms a server (200: ~1.5 s); traffic does not wait for it. A reload
	// before the commit loads haproxy.cfg as it was: the entries and the
	// leaving servers go back together, and the backend is never emptied.
	first []plan.Change
	// structural go into one transaction: one commit, one reload.
	structural []plan.Change
	// deferred are servers in service the plan deletes beside entries:
	// the transaction writes them parked, and a later reconcile deletes
	// them (plan.Applied.Deferred). A reload before the commit loads them
	// in service again, and only a server haproxy.cfg holds is read back
	// and kept until an entry is in service (make-before-break).
	deferred []string
}

// route decides how each change of p reaches HAProxy; socket says whether
// the instance's runtime socket is there (WithRuntime), addsReload whether
// the API answers server adds with a reload (then every add is a burst),
// socketAdds whether the socket may add p's new servers: it carries what
// haproxy.cfg's default-server gives them (inheritance). When it may not,
// new servers go into the transaction, parked when gated, and the reload
// loads them.
func route(p plan.Plan, socket, addsReload, socketAdds bool) routes {
	var r routes
	adds := len(p.Names(plan.Add))
	burst := socket && socketAdds && (adds > MaxRuntimeAdds || addsReload && adds > 0)
	// Many servers leaving traffic at once (a node pool drained, a
	// rollout's old pods terminating): the socket takes them out in
	// milliseconds, one transaction persists them, where a versioned PUT
	// each would take ~40 ms apiece on the real API (200 nodes: 8 s).
	// Only those haproxy.cfg must learn count: a change it holds already
	// goes through the socket alone either way, and a transaction of 20
	// or fewer server writes would be a reload the PUTs spare (soak seed
	// 971962119: a rezone back to where haproxy.cfg stood moved 27
	// servers, 18 of them needing a write, and reloaded).
	leaving := 0
	for _, ch := range p.Changes {
		if leaves(ch) && !unpersisted(ch.Old) && !configHolds(ch.Old.Source, *ch.New) {
			leaving++
		}
	}
	bulk := socket && leaving > MaxRuntimeAdds
	var entries []plan.Change // servers put in service that haproxy.cfg parks or lacks
	unwritten := false        // an entry haproxy.cfg lacks: only a transaction writes it
	for _, ch := range p.Changes {
		if socket && unpersisted(ch.Old) {
			if putsInService(ch) {
				entries, unwritten = append(entries, ch), true
			} else {
				r.onSocket = append(r.onSocket, ch)
			}
			continue
		}
		var write *model.Server // what the running HAProxy must become
		switch {
		case ch.Action == plan.Delete:
			r.structural = append(r.structural, ch)
			if ch.Old.State != model.Maint && !loading(ch.Old) {
				parked := *ch.Old
				parked.State = model.Maint
				write = &parked
			}
		case ch.Action == plan.Add && burst:
			r.burst = append(r.burst, ch)
		case ch.Action == plan.Add && socket && socketAdds:
			r.addGated = append(r.addGated, ch)
		case ch.Gate && ch.Action != plan.Add && socket:
			r.gated = append(r.gated, ch)
		case ch.Action != plan.Add && ch.Old.Check == ch.New.Check:
			write = ch.New
		default:
			r.structural = append(r.structural, ch)
		}
		if write == nil {
			continue
		}
		switch {
		case socket && (configHolds(ch.Old.Source, *write) || ch.Action == plan.Delete):
			// haproxy.cfg holds it already, or the transaction below
			// deletes it from haproxy.cfg: only the running HAProxy
			// needs it, at once.
			if ch.Action == plan.Delete {
				ch.Action = plan.Maint // the socket only parks it; the transaction deletes it
			}
			ch.New = write
			r.onSocket = append(r.onSocket, ch)
		case bulk && leaves(ch):
			ch.New = write
			r.onSocket = append(r.onSocket, ch)
			r.structural = append(r.structural, ch)
		case socket && persistsEntry(ch.Old.Source, *write):
			ch.New = write
			entries = append(entries, ch)
		default:
			ch.New = write
			r.puts = append(r.puts, ch)
		}
	}
	if !unwritten && len(entries) <= MaxRuntimeAdds {
		// A PUT each: the API applies it at runtime and writes it.
		r.puts = append(entries, r.puts...)
		return r
	}
	// Entries go first, so that a plan that puts replacements in service
	// and takes the servers they replace out (make-before-break) never
	// leaves the backend with none: the servers leaving through the socket
	// or by a PUT follow them there, and the transaction writes them all.
	r.first = entries
	for i, ch := range r.structural {
		if ch.Action == plan.Delete && ch.Old.State != model.Maint && !loading(ch.Old) {
			parked := *ch.Old
			parked.State = model.Maint
			r.structural[i] = plan.Change{Action: plan.Maint, Name: ch.Name, Old: ch.Old, New: &parked}
			r.deferred = append(r.deferred, ch.Name)
		}
	}
	for _, ch := range entries {
		if unpersisted(ch.Old) {
			ch = plan.Change{Action: plan.Add, Name: ch.Name, New: ch.New}
		}
		r.structural = append(r.structural, ch)
	}
	var stay []plan.Change
	for _, ch := range r.onSocket {
		if ch.New != nil && ch.New.State == model.Ready {
			stay = append(stay, ch)
		} else {
			r.first = append(r.first, ch)
		}
	}
	r.onSocket = stay
	var puts []plan.Change
	for _, ch := range r.puts {
		if leaves(ch) {
			r.first = append(r.first, ch)
			r.structural = append(r.structural, ch)
		} else {
			puts = append(puts, ch)
		}
	}
	r.puts = puts
	return r
}

// putsInService reports whether ch leaves its server in service (ready,
// not gated), whether or not it is in service now: unlike runtimeapi's
// enters, a server in service that haproxy.cfg parks or lacks
// (model.Runtime.Unwritten) is one too, as the transaction writes it.
func putsInService(ch plan.Change) bool {
	return ch.Action != plan.Delete && ch.New != nil && ch.New.State == model.Ready && !ch.Gate
}

// leaves reports whether ch takes a server that HAProxy runs out of
// traffic (drain or maintenance) and changes nothing but that, its weight
// and address: a change the socket can make alone.
func leaves(ch plan.Change) bool {
	return (ch.Action == plan.Maint || ch.Action == plan.Drain) && !ch.Gate && ch.Old != nil &&
		!loading(ch.Old) && ch.Old.Check == ch.New.Check
}

// persistsEntry reports whether writing srv puts in service a server
// haproxy.cfg, as read (source), holds in maintenance: one added parked
// (or parked before) and gated, whose check passed.
func persistsEntry(source any, srv model.Server) bool {
	raw, ok := source.(rawServer)
	if !ok || srv.State == model.Maint {
		return false
	}
	cfg, err := serverOf(json.RawMessage(raw))
	return err == nil && cfg.State == model.Maint
}

// configHolds reports whether haproxy.cfg, as read (source), already holds
// srv as far as traffic goes: then only the running HAProxy differs from it,
// and a PUT would change nothing (the API applies only what changes).
func configHolds(source any, srv model.Server) bool {
	raw, ok := source.(rawServer)
	if !ok {
		return false
	}
	cfg, err := serverOf(json.RawMessage(raw))
	return err == nil && cfg.SameTraffic(srv)
}
