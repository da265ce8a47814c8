package dataplane

import (
	"encoding/json"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// routes is how each change of a plan reaches HAProxy: route decides it,
// with no I/O; Apply carries it out, in the order of the fields.
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
	// onSocket are changes haproxy.cfg holds already: only the running
	// HAProxy differs, and a PUT would change nothing.
	onSocket []plan.Change
	// burst says the new servers among structural go through the socket
	// first (pipelined, gated), then the transaction writes them.
	burst bool
	// structural go into one transaction: one commit, one reload.
	structural []plan.Change
	// afterCommit go through the socket once the transaction committed:
	// a burst's servers put in service, which it writes in service, then
	// the servers the plan takes out of traffic on the socket.
	afterCommit []plan.Change
}

// route decides how each change of p reaches HAProxy; socket says whether
// the instance's runtime socket is there (WithRuntime), addsReload whether
// the API answers server adds with a reload (then every add is a burst).
func route(p plan.Plan, socket, addsReload bool) routes {
	var r routes
	adds := len(p.Names(plan.Add))
	r.burst = socket && (adds > MaxRuntimeAdds || addsReload && adds > 0)
	leaving := 0
	for _, ch := range p.Changes {
		if leaves(ch) {
			leaving++
		}
	}
	// Many servers leaving traffic at once (a node pool drained, a
	// rollout's old pods terminating): the socket takes them out in
	// milliseconds, one transaction persists them, where a versioned PUT
	// each would take ~40 ms apiece on the real API (200 nodes: 8 s).
	bulk := socket && leaving > MaxRuntimeAdds
	var entries []plan.Change // servers put in service that haproxy.cfg parks
	for _, ch := range p.Changes {
		var write *model.Server // what the running HAProxy must become
		switch {
		case ch.Action == plan.Delete:
			r.structural = append(r.structural, ch)
			if ch.Old.State != model.Maint && !loading(ch.Old) {
				parked := *ch.Old
				parked.State = model.Maint
				write = &parked
			}
		case ch.Action == plan.Add && socket && !r.burst:
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
	// A burst's servers whose check passed: more than MaxRuntimeAdds are
	// written by the transaction, then put in service through the socket,
	// rather than one versioned write each. The burst's own commit asked a
	// reload moments ago: the API runs both as one.
	// Entries go first, so that a plan that puts replacements in service
	// and takes the servers they replace out (make-before-break) never
	// leaves the backend with none: the leaving ones follow them onto the
	// socket.
	if len(entries) > MaxRuntimeAdds {
		r.structural = append(r.structural, entries...)
		r.afterCommit = entries
		var stay []plan.Change
		for _, ch := range r.onSocket {
			if ch.New.State != model.Ready {
				r.afterCommit = append(r.afterCommit, ch)
			} else {
				stay = append(stay, ch)
			}
		}
		r.onSocket = stay
		// Servers leaving by a PUT each would leave before the entries:
		// they follow them onto the socket, and the transaction writes them.
		var puts []plan.Change
		for _, ch := range r.puts {
			if leaves(ch) {
				r.afterCommit = append(r.afterCommit, ch)
				r.structural = append(r.structural, ch)
			} else {
				puts = append(puts, ch)
			}
		}
		r.puts = puts
	} else {
		r.puts = append(entries, r.puts...)
	}
	return r
}

// leaves reports whether ch takes a server that HAProxy runs out of
// traffic (drain or maintenance) and changes nothing but that, its weight
// and address: a change the socket can make alone.
func leaves(ch plan.Change) bool {
	return (ch.Action == plan.Maint || ch.Action == plan.Drain) && !ch.Gate && ch.Old != nil &&
		!loading(ch.Old) && ch.Old.Check == ch.New.Check
}

// persistsEntry reports whether writing srv puts in service a server
// haproxy.cfg, as read (source), holds in maintenance: a burst's server
// whose check passed.
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
