package dataplane

import (
	"net/netip"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// A move is a server whose address changes (a StatefulSet pod recreated
// under its name at a new IP; a Node's new InternalIP). plan gates it: it
// must pass its check at the new address before it takes traffic there.
// gate writes it parked at the new address by a versioned PUT, which the
// API applies at runtime ("set server addr", 200) — or answers with a
// reload (202) when the same PUT changes a check setting, when its runtime
// command fails, or when it cannot read HAProxy's version. Then the running
// HAProxy keeps the server at its old address until the reload: gated
// there, its check passed at the old address, a later reconcile wrote it in
// service, and the reload loaded it UP at the new one, where no check had
// run (issue 43, defect 3). So the gate moves it itself, through the socket
// (movesOnSocket), and Read reports a server at the address it runs at
// (runningAt), so that a check passed elsewhere never counts for the
// address haproxy.cfg holds.

// movesOnSocket reports whether gated change ch must move its server
// through the socket, gate first and then "set server addr" (runtimeapi's
// gated update), rather than gate it where it runs: the running HAProxy
// holds it (not loading) at another address, port or check port than ch.New.
// Whatever the API did with the PUT before, the socket then makes the move
// true in the running HAProxy: a move the API applied already answers "no
// need to change the addr"; one it left to a reload is made now, and the
// reload loads the server parked (haproxy.cfg holds it in maintenance).
func movesOnSocket(ch plan.Change) bool {
	o, n := ch.Old, ch.New
	if o == nil || n == nil || loading(o) {
		return false
	}
	return o.Address != n.Address || o.Port != n.Port || o.Check.Port != n.Check.Port
}

// runningAt returns the address and port a server runs at, given
// haproxy.cfg's (cfg) and the running HAProxy's (running) view of it: the
// running one where both addresses are IPs and the running HAProxy has the
// server elsewhere — the API wrote a move that a reload is to apply, and the
// running check results are not the new address's. Otherwise haproxy.cfg's
// (a host name is resolved by HAProxy and cannot be compared).
func runningAt(cfg, running model.Server) (string, int) {
	c, err1 := netip.ParseAddr(cfg.Address)
	r, err2 := netip.ParseAddr(running.Address)
	if err1 != nil || err2 != nil || running.Port == 0 {
		return cfg.Address, cfg.Port
	}
	if c.Unmap() != r.Unmap() || cfg.Port != running.Port {
		return running.Address, running.Port
	}
	return cfg.Address, cfg.Port
}
