package dataplane

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// TestSteps is the table of steps' doc comment, one row per combination of
// desired change, running HAProxy, haproxy.cfg and what the API reloads
// for: what Apply does with each server, by which channel, on which
// precondition.
func TestSteps(t *testing.T) {
	socket := facts{socket: true}
	reloadsAdds := facts{socket: true, addsReload: true}
	noSocket := facts{}
	uncarried := func(names ...string) facts {
		f := facts{socket: true, uncarried: map[string]bool{}}
		for _, n := range names {
			f.uncarried[n] = true
		}
		return f
	}
	// A server parked in both, its id known: a gate renews it.
	parked := func(name string) *model.Server {
		s := server(name, model.Maint, model.Maint)
		s.Runtime = &model.Runtime{ID: 7}
		return s
	}
	gated := func(old *model.Server, mut func(*model.Server)) plan.Change {
		n := *server(old.Name, model.Drain, "")
		if mut != nil {
			mut(&n)
		}
		return plan.Change{Action: plan.Drain, Name: old.Name, Old: old, New: &n, Gate: true}
	}
	behindParked := func(name string) *model.Server {
		s := server(name, model.Maint, model.Ready)
		s.Runtime = &model.Runtime{ID: 7, Behind: true}
		return s
	}
	moved := func(s *model.Server) { s.Address = "192.0.2.9" }
	one := func(chs ...plan.Change) []plan.Change { return chs }
	notReady := plan.Change{Action: plan.Add, Name: "p", New: server("p", model.Maint, "")}
	weight := plan.Change{Action: plan.Update, Name: "w", Old: server("w", model.Ready, model.Ready),
		New: func() *model.Server { s := server("w", model.Ready, ""); s.Weight = 3; return s }()}
	backup := func() plan.Change {
		old, n := server("b", model.Ready, model.Ready), server("b", model.Maint, "")
		old.Backup, n.Backup = true, true
		return plan.Change{Action: plan.Maint, Name: "b", Old: old, New: n}
	}()
	slower := *server("c", model.Ready, "")
	slower.Check.Inter = 5 * time.Second
	loadingParked := func() *model.Server { s := loadingServer("l"); s.State = model.Maint; return s }
	expired := plan.Change{Action: plan.Delete, Name: "x", Old: server("x", model.Maint, model.Maint), Kill: true}
	inTraffic := plan.Change{Action: plan.Delete, Name: "x", Old: server("x", model.Ready, model.Ready)}

	for _, tt := range []struct {
		name     string
		changes  []plan.Change
		settings bool
		f        facts
		want     []string
	}{
		// New servers.
		{"new servers, a few, socket, the API adds at runtime: posted parked, then gated", adds(2), false, socket, []string{
			"post(gate, 202: socket) new-0 [if adds at runtime]", "post(gate, 202: socket) new-1 [if adds at runtime]"}},
		{"a new server not ready: posted, its check run while parked; a reload answer loads it parked", one(notReady), false, socket, []string{
			"post(check parked, 202: report) p [if adds at runtime]"}},
		{"new servers, the API reloads for adds (a default-server line): the socket alone", adds(2), false, reloadsAdds, []string{"burst new-0,new-1"}},
		{"new servers, a burst: the socket alone", adds(MaxRuntimeAdds + 1), false, socket, []string{"burst 21"}},
		{"new servers, one inherits a keyword add server cannot carry: the transaction, parked", adds(2), false, uncarried("new-0"), []string{"transaction new-0,new-1 [if taken]"}},
		{"new servers, no socket: the transaction", adds(2), false, noSocket, []string{"transaction new-0,new-1 [if taken]"}},

		// Gated existing servers.
		{"back from maintenance, only our keywords, id known: renewed, else gated in place", one(gated(parked("r"), nil)), false, socket, []string{
			"gate(renew, else in place) r"}},
		{"back from maintenance while the API reloads for adds (a default-server line it carries): renewed, else gated in place", one(gated(parked("r"), nil)), false, reloadsAdds, []string{
			"gate(renew, else in place) r"}},
		{"back from maintenance while the API reloads for adds, a keyword not carried: gated in place", one(gated(parked("r"), nil)), false, facts{socket: true, addsReload: true, uncarried: map[string]bool{"r": true}}, []string{
			"gate(in place) r"}},
		{"a parked server that moves while the API reloads for adds: renewed, else moved", one(gated(parked("m"), moved)), false, reloadsAdds, []string{"gate(park, renew, else move) m"}},
		{"back from maintenance, a keyword not carried: gated in place", one(gated(parked("r"), nil)), false, uncarried("r"), []string{"gate(in place) r"}},
		// Seed 456559019 (3.0.11): a reload loaded a server parked that an
		// entry had put in service in haproxy.cfg meanwhile (the running
		// HAProxy is behind it). Gated in place, its first check would wait
		// for its tick in the new worker's start-up spread, up to inter.
		{"parked by a reload, in service in haproxy.cfg (behind): parked by the PUT, renewed, else gated in place", one(gated(behindParked("r"), nil)), false, socket, []string{
			"gate(park, renew, else in place) r"}},
		{"a move (new address) the API may reload for: parked on the socket where it runs (the API moves before it parks), parked there, gated, then moved on the socket", one(gated(server("m", model.Ready, model.Ready), moved)), false, socket, []string{
			"gate(socket park, park, move) m"}},
		{"a draining server that moves: parked on the socket first the same", one(gated(server("m", model.Drain, model.Drain), moved)), false, socket, []string{
			"gate(socket park, park, move) m"}},
		{"a parked server that moves: renewed, else moved", one(gated(parked("m"), moved)), false, socket, []string{"gate(park, renew, else move) m"}},
		{"a backup server that moves: moved the same (backup kept as read)", one(gated(func() *model.Server {
			s := server("b", model.Ready, model.Ready)
			s.Backup = true
			return s
		}(), moved)), false, socket, []string{"gate(socket park, park, move) b"}},
		{"haproxy.cfg holds it, the running HAProxy not yet (loading): added on the socket, gated", one(gated(loadingParked(), nil)), false, socket, []string{"gate(add) l"}},
		{"loading, a keyword not carried: parked in haproxy.cfg, the reload loads it", one(gated(loadingParked(), nil)), false, uncarried("l"), []string{"gate(left) l"}},
		{"loading and in service in haproxy.cfg: parked by the PUT first", one(gated(loadingServer("l"), nil)), false, socket, []string{"gate(park, add) l"}},

		// Runtime-safe changes.
		{"a weight change haproxy.cfg does not hold: a PUT; if the API reloads, the socket too", one(weight), false, socket, []string{"put(202: socket) w"}},
		{"the same without a socket: a PUT, a reload reported", one(weight), false, noSocket, []string{"put(202: report) w"}},
		{"a backup server parked: a PUT (backup kept: no reload)", one(backup), false, socket, []string{"put(202: socket) b"}},
		{"a change of a server not running yet: a PUT, whose reload is the one it waits for", one(plan.Change{Action: plan.Maint, Name: "l", Old: loadingServer("l"), New: server("l", model.Maint, "")}), false, socket, []string{
			"put l"}},
		{"a drain haproxy.cfg holds already: the socket alone", one(plan.Change{Action: plan.Drain, Name: "d", Old: server("d", model.Ready, model.Drain), New: server("d", model.Drain, "")}), false, socket, []string{
			"socket d"}},
		{"check settings changed (the API reloads for them): the transaction", one(plan.Change{Action: plan.Update, Name: "c", Old: server("c", model.Ready, model.Ready), New: &slower}), false, socket, []string{
			"transaction c [if taken]"}},
		{"backend settings alone: the transaction", nil, true, socket, []string{"transaction  [if taken]"}},
		// History seed 1, nodes, Data Plane: an add at once runs the
		// backend's old check (a TCP connect to kube-proxy's health port).
		{"an add beside the backend's settings: in their transaction", one(notReady), true, socket, []string{"transaction p [if taken]"}},

		// Deletions.
		{"a delete of a server in traffic: parked on the socket, deleted by the transaction", one(inTraffic), false, socket, []string{"socket x", "transaction x [if taken]"}},
		{"the same without a socket: parked by a PUT", one(inTraffic), false, noSocket, []string{"put(202: report) x", "transaction x [if taken]"}},
		{"a delete past the drain timeout: sessions shut, then deleted, each if the socket took it", one(expired), false, socket, []string{"shut x [if taken]", "transaction x [if taken]"}},
		{"the same without a socket: deleted (sessions cannot be seen)", one(expired), false, noSocket, []string{"transaction x [if taken]"}},
		{"many leaving traffic: the socket at once, then the transaction", leavingChanges(MaxRuntimeAdds + 1), false, socket, []string{"socket 21", "transaction 21 [if taken]"}},
		{"many leaving traffic, haproxy.cfg holding all but 20: the held ones on the socket at once, a PUT each for the rest (no reload)", append(leavingChanges(MaxRuntimeAdds), heldLeaving(5)...), false, socket,
			append([]string{"socket 5"}, putsOf("out-", MaxRuntimeAdds)...)},
		{"one leaving that haproxy.cfg holds beside an entry: after the entry's PUT (make-before-break)", append(entries(1), heldLeaving(1)...), false, socket, []string{
			"put(202: socket) in-0", "socket held-0"}},

		// Entries (servers put in service that haproxy.cfg parks or lacks).
		{"a few entries haproxy.cfg parks: a PUT each", entries(2), false, socket, []string{"put(202: socket) in-0", "put(202: socket) in-1"}},
		{"many entries: the socket if still checked, then the transaction", entries(MaxRuntimeAdds + 1), false, socket, []string{
			"socket 21 [if still checked]", "transaction 21 [if taken]"}},
		{"an entry only the socket holds, beside a delete and a park: those follow it if it entered; the delete is deferred", one(
			plan.Change{Action: plan.Update, Name: "b", Old: socketOnly("b", model.Drain), New: server("b", model.Ready, "")},
			inTraffic,
			plan.Change{Action: plan.Maint, Name: "y", Old: server("y", model.Ready, model.Ready), New: server("y", model.Maint, "")}), false, socket, []string{
			"socket b [if still checked]", "socket x,y [if an entry entered]", "transaction x,b,y [if taken]", "deferred x [if written]"}},
		{"servers only the socket holds, gated, deleted, parked: the socket alone", one(
			plan.Change{Action: plan.Drain, Name: "g", Old: socketOnly("g", model.Drain), New: server("g", model.Drain, ""), Gate: true},
			plan.Change{Action: plan.Delete, Name: "x", Old: socketOnly("x", model.Maint)},
			plan.Change{Action: plan.Maint, Name: "y", Old: socketOnly("y", model.Drain), New: server("y", model.Maint, "")}), false, socket, []string{
			"socket g,x,y"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := plan.Plan{Backend: "be", Changes: tt.changes}
			if tt.settings {
				p.Settings = &plan.SettingsChange{}
			}
			var got []string
			for _, s := range steps(p, tt.f) {
				got = append(got, s.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("steps:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

// putsOf are the steps of n PUTs of servers prefix0.. in order.
func putsOf(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("put(202: socket) %s%d", prefix, i))
	}
	return out
}
