package reconcile

import (
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// Transition is one change of a server's state the service applied.
type Transition struct {
	Target, Backend, Server string
	// From and To are ready, gated (held in drain until its health check
	// passes), drain or maint; From is "absent" for a new server, To is
	// "deleted" for a removed one.
	From, To string
	// Reason says why: endpoints, annotation, taint, cordon, label (the
	// Node's, see package desired), unwanted (no endpoint asks for it),
	// guard (parked by the mass-deletion guard), no-endpoints (the Service
	// has none: every server parked), awaiting-check (gated),
	// awaiting-reload (parked until the reload that loads it).
	Reason string
}

// Gated is the state of a server held out of traffic until its health
// check passes: in drain for HAProxy, but "drain" reads as "being taken
// out", so logs, server_transitions_total and servers{state} say gated.
const Gated = "gated"

// named is a transition as logs and metrics name it, one name per state: a
// server held in drain for its check (plan.gate) goes to gated, reason
// awaiting-check, and one parked awaiting the reload that loads it
// (plan.load) to maint, reason awaiting-reload; wasGated says the server
// left drain from the gate, so its exit reads from gated, as its entry did.
func named(t Transition, wasGated bool) Transition {
	switch {
	case t.Reason == "check" && t.To == string(model.Drain):
		t.To, t.Reason = Gated, "awaiting-check"
	case t.Reason == "check":
		t.Reason = "awaiting-reload"
	}
	if wasGated && t.From == string(model.Drain) {
		t.From = Gated
	}
	return t
}

// transitions logs, and reports to OnTransition, each state change of p that
// was applied (all but the failed ones).
func (r *Reconciler) transitions(target string, p plan.Plan, want model.Backend, failed plan.ServerErrors) {
	refused := refusedSet(failed)
	guarded := map[string]bool{}
	for _, g := range p.Guarded {
		guarded[g] = true
	}
	for _, ch := range p.Changes {
		if refused[ch.Name] {
			continue
		}
		t := Transition{Target: target, Backend: p.Backend, Server: ch.Name, From: "absent", To: "deleted"}
		if ch.Old != nil {
			t.From = string(ch.Old.State)
		}
		if ch.New != nil {
			t.To = string(ch.New.State)
		}
		if t.From == t.To {
			continue // an address, port or weight change: not a state transition
		}
		switch {
		case ch.New != nil && ch.New.Reason != "":
			t.Reason = ch.New.Reason
		case want.Excluded[ch.Name] != "":
			t.Reason = want.Excluded[ch.Name]
		case guarded[ch.Name]:
			t.Reason = "guard"
		case len(want.Servers) == 0:
			t.Reason = "no-endpoints"
		default:
			t.Reason = "unwanted"
		}
		// Which servers were gated is remembered from their entry: HAProxy
		// shows a gated server and a draining one alike, in drain.
		key := target + "\x00" + p.Backend + "\x00" + ch.Name
		_, wasGated := r.gated.Load(key)
		t = named(t, wasGated)
		if t.To == Gated {
			r.gated.Store(key, true)
		} else {
			r.gated.Delete(key)
		}
		r.log().Info("server transition", "server", t.Server, "backend", t.Backend, "target", t.Target,
			"from", t.From, "to", t.To, "reason", t.Reason)
		if r.OnTransition != nil {
			r.OnTransition(t)
		}
	}
}
