// Package plan computes what must change in one HAProxy backend to make it
// equal to the desired one. It is a pure function of two values: no I/O, no
// context, so every scenario is a table row.
//
//	current \ desired   absent              present, same       present, differs
//	absent              -                   Add                 Add
//	present             Delete (*)          -                   Drain | Maint | Update
//
// (*) Safety: when the desired backend has no server at all (a Service with zero
// endpoints, or every endpoint skipped) nothing is deleted; every current server
// is put in maintenance instead, so an empty read can never wipe a backend.
// Under a Policy with DeleteBatch > 1, unwanted servers are parked in
// maintenance and deleted together once the batch is full, or once one of
// them has been parked past Policy.DrainTimeout (removals). Under a Policy
// with GuardPercent, a plan that would remove that share of the backend's
// servers or more only parks them, until a later reconcile finds them
// parked and every replacement UP (the mass-deletion guard). Under a Policy
// with MaxServers, adds beyond the cap are left out; parked servers are
// deleted to make room for them, guard or not.
//
// Under a Policy with GateChecks, a server takes traffic only once its health
// check has passed (model.Runtime): a new server, or one back from
// maintenance, is put in drain with its check restarted from zero
// (Change.Gate) and listed in Waiting; a later reconcile puts it in service
// once HAProxy shows the check passed. An unwanted server with sessions is
// parked and listed in Draining; it is deleted once they have ended (or once
// it has been parked for Policy.DrainTimeout).
package plan

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// Action is what happens to one server.
type Action string

// The actions, in the order a result lists them.
const (
	Add    Action = "add"
	Update Action = "update"
	Drain  Action = "drain"
	Maint  Action = "maint"
	Delete Action = "delete"
)

// Change is what happens to one server, with the old and new server side by side.
// Old is nil for Add; New is nil for Delete.
type Change struct {
	Action Action
	Name   string
	Old    *model.Server
	New    *model.Server
	// Gate asks the driver to keep the server out of service (New.State is
	// drain) with its health check running and restarted from zero, so
	// that it earns traffic by passing rise checks (Policy.GateChecks).
	Gate bool
	// Kill asks the driver to shut the sessions of a server to delete: it
	// has been parked for Policy.DrainTimeout and still has some.
	Kill bool
	// Renew tells the runtime API driver that a parked server may be
	// deleted and added again, with its id, so that its check starts
	// afresh: gated (Gate), its first check comes at once; kept in
	// maintenance, its check runs while it waits. The caller knows every
	// keyword the server has (the Data Plane API driver, from haproxy.cfg).
	Renew bool
	// Inherit are keywords the runtime API driver writes on the server's
	// "add server" line (an add, or a re-add), before the server's own:
	// what its haproxy.cfg entry inherits from default-server lines, which
	// HAProxy never applies to "add server". The Data Plane API driver
	// sets them; empty otherwise.
	Inherit []string
	// Slot: the server is a slot of haproxy.cfg (model.Runtime.Slot). The
	// runtime API driver fills it for an Add ("set server ... addr", then
	// the same steps as an added server) and parks it at the placeholder
	// address for a Delete; it never adds nor deletes it.
	Slot bool
}

// SettingsChange is a change of backend-level settings.
type SettingsChange struct {
	Old, New model.Settings
}

// Plan is the set of changes for one backend, sorted by server name.
type Plan struct {
	Backend string
	// Revision is the current backend's revision, passed through for the driver.
	Revision int64
	Settings *SettingsChange
	Changes  []Change
	// Guarded lists the servers the mass-deletion guard parked instead of
	// deleting, sorted; empty when the guard did not hold.
	Guarded []string
	// Capped lists desired servers not added because the backend would
	// exceed Policy.MaxServers, sorted.
	Capped []string
	// Waiting lists desired ready servers kept out of service until their
	// health check passes (Policy.GateChecks), sorted.
	Waiting []string
	// Loading lists the servers of Waiting that the running HAProxy does
	// not show yet (model.Runtime.Loading): they wait for a reload to load
	// them, parked, before their check can start. Sorted.
	Loading []string
	// Draining lists unwanted servers kept parked until their sessions end
	// (model.Runtime.Sessions), sorted.
	Draining []string
	// HandingOver lists servers kept as they are until the server that
	// replaces them (model.Server.Replaces) is in service, or until any
	// server is (make-before-break: see keepUntilReplaced), sorted.
	HandingOver []string

	// IdleSlots are the backend's idle slots (model.Backend.IdleSlots) this
	// plan does not fill and that are not parked, for the driver to park.
	IdleSlots []model.Server

	current []model.Server // the backend it was computed from, as given (keepUntilReplaced)
	owner   string         // Policy.Owner
}

// Pending reports whether a later reconcile has work that this one could
// not do yet: servers waiting for their check, or for their sessions to end.
func (p Plan) Pending() bool {
	return len(p.Waiting) > 0 || len(p.Draining) > 0 || len(p.HandingOver) > 0
}

// HasChanges reports whether applying the plan would change anything.
func (p Plan) HasChanges() bool {
	return p.Settings != nil || len(p.Changes) > 0 || len(p.IdleSlots) > 0
}

// Names returns the names of the servers with the given action, sorted.
func (p Plan) Names(a Action) []string {
	names := []string{}
	for _, c := range p.Changes {
		if c.Action == a {
			names = append(names, c.Name)
		}
	}
	return names
}

// Policy adapts the plan to what a driver's writes cost.
type Policy struct {
	// DeleteBatch, when above 1, parks servers no endpoint asks for in
	// maintenance (out of traffic at once, no reload) and deletes them all
	// together once DeleteBatch of them are parked, so that deletions, which
	// reload HAProxy through the Data Plane API, cost one reload per batch.
	// At most DeleteBatch-1 servers stay parked. A server parked past
	// DrainTimeout makes the batch due: it goes at once, and the other
	// parked servers with it (removals). 0 or 1 deletes at once.
	DeleteBatch int
	// GuardPercent, when above 0, is the mass-deletion guard: when the
	// servers no endpoint asks for are this percentage of the backend's
	// servers or more, they are parked in maintenance and none is deleted.
	// 100 holds only when every server would go; 0 turns the guard off.
	// Parking is undone by one runtime write; a deletion is not.
	//
	// The guard holds until a later reconcile finds those servers parked
	// and every desired server meant to serve (Ready) in the backend and UP
	// (model.Server.Up, read from HAProxy each time, so nothing is kept
	// between reconciles): only then are they deleted. A desired server in
	// drain or maintenance (a not-ready pod, a Node pinned) is not waited
	// for; with no desired server meant to serve, the guard holds. A shrink whose remaining servers are all
	// UP is thus confirmed by a second read of Kubernetes before anything
	// goes. When MaxServers leaves desired servers out, parked servers
	// make room for them whatever the guard says: they are out of traffic
	// already, and keeping them would keep the new servers out for good.
	GuardPercent int
	// MaxServers, when above 0, caps the servers of the backend: adds that
	// would pass it are left out (by name order) and listed in Capped.
	MaxServers int
	// GateChecks makes servers earn traffic: see the package doc. Only a
	// driver that reads model.Runtime sets it; servers it cannot see
	// (Runtime nil) enter service as before.
	GateChecks bool
	// FixedSettings says the driver cannot change backend settings (the
	// runtime API): they are left as configured, never planned.
	FixedSettings bool
	// BareAdds says the servers the driver adds get none of haproxy.cfg's
	// default-server keywords, and a reload drops them (the runtime API
	// alone): a backend without slots (AssignSlots) is said to be so.
	BareAdds bool
	// DrainTimeout, when above 0, is how long an unwanted server with
	// sessions stays parked before it is deleted anyway, its sessions shut
	// first (Change.Kill), whether or not the delete batch is full; 0
	// waits for its sessions to end.
	DrainTimeout time.Duration
	// Owner, when set, is the name prefix of this instance's servers
	// (CLUSTER_NAME and "-", model.Owns): the plan reads, changes, parks,
	// deletes and counts only those. Another cluster's servers and static
	// ones are left exactly as they are, and count for neither the guard's
	// share, the zero-endpoints rule nor MaxServers. Empty: every server
	// of the backend is this instance's.
	Owner string
	// Refused names the servers whose change HAProxy refused on the last
	// reconcile of this backend on this target (ServerErrors: trying
	// again is refused again). Such a server waits for nothing that will
	// come: make-before-break (keepUntilReplaced) does not keep a leaving
	// server in traffic for it, as for a replacement whose check has
	// failed for deadReplacement. Its change is planned again all the same.
	Refused []string
	// Leaving says the backend is no Service's any more, as the caller
	// read Kubernetes afresh for this reconcile (package fleet: no selected
	// Service names it). With no desired server, the zero-endpoints rule
	// would park its servers for good; leaving, they go to the end
	// (leaveStep): parked first and listed Guarded, then deleted by a
	// later reconcile (which confirms it) once their sessions ended or
	// DrainTimeout passed, whatever DeleteBatch.
	Leaving bool
	// LeftBefore says an earlier read of Kubernetes found the backend
	// Leaving too: only then are its parked servers deleted, so that one
	// read never deletes (leaveStep).
	LeftBefore bool
}

// Calculate returns the plan that turns current into desired, deleting
// unwanted servers at once. Both backends' servers must have unique names;
// their order does not matter.
func Calculate(current, desired model.Backend) Plan {
	return CalculateWith(current, desired, Policy{})
}

// guardReplacements counts the desired servers the mass-deletion guard
// waits for, and how many of them the current backend shows UP: those meant
// to serve (Ready) that HAProxy holds, less those whose check has kept
// failing for deadReplacement (a pod on a node HAProxy cannot reach). One
// HAProxy refused or MAX_SERVERS left out is not there to wait for, nor is
// a dead one: waiting for either held the parked servers for ever, and
// every later removal of the backend with them.
func guardReplacements(have map[string]*model.Server, desired []model.Server) (replacements, up int) {
	for i := range desired {
		if desired[i].State != model.Ready {
			continue
		}
		cur, ok := have[desired[i].Name]
		if !ok || cur.Runtime != nil && cur.Runtime.CheckFailed && cur.Runtime.Since >= deadReplacement {
			continue
		}
		replacements++
		if cur.Up {
			up++
		}
	}
	return replacements, up
}

// CalculateWith is Calculate under a policy. Slots (AssignSlots) are
// filled and freed by name: desired must have been given their names.
func CalculateWith(current, desired model.Backend, pol Policy) Plan {
	p := calculateWith(current, desired, pol)
	p.markSlots(current.Owned(pol.Owner))
	return p
}

func calculateWith(current, desired model.Backend, pol Policy) Plan {
	p := Plan{Backend: desired.Name, Revision: current.Revision, current: current.Servers, owner: pol.Owner}
	current = current.Owned(pol.Owner)
	if !pol.FixedSettings && desired.Settings.Balance != "" && current.Settings != desired.Settings {
		p.Settings = &SettingsChange{Old: current.Settings, New: desired.Settings}
	}

	have := make(map[string]*model.Server, len(current.Servers))
	for i := range current.Servers {
		have[current.Servers[i].Name] = &current.Servers[i]
	}
	want := make(map[string]bool, len(desired.Servers))
	for i := range desired.Servers {
		d := &desired.Servers[i]
		want[d.Name] = true
		old, ok := have[d.Name]
		if pol.GateChecks && d.State == model.Ready && ok && old.Runtime != nil && old.Runtime.Loading {
			p.load(old, d)
			continue
		}
		if pol.GateChecks && d.State == model.Ready && mustEarn(old, ok, d) {
			p.gate(old, d)
			continue
		}
		switch {
		case !ok:
			p.Changes = append(p.Changes, Change{Action: Add, Name: d.Name, New: d})
		case old.SameTraffic(*d) && (old.Runtime == nil || !old.Runtime.Unwritten) && !behind(old):
		case d.State == model.Drain && old.State != model.Drain:
			p.Changes = append(p.Changes, Change{Action: Drain, Name: d.Name, Old: old, New: d})
		case d.State == model.Maint && old.State != model.Maint:
			p.Changes = append(p.Changes, Change{Action: Maint, Name: d.Name, Old: old, New: d})
		default:
			p.Changes = append(p.Changes, Change{Action: Update, Name: d.Name, Old: old, New: d})
		}
	}

	handover := handingOver(have, desired.Servers, pol)
	for name := range handover {
		if !want[name] {
			p.HandingOver = append(p.HandingOver, name)
		}
	}
	var leaving []*model.Server
	for i := range current.Servers {
		if u := &current.Servers[i]; !want[u.Name] && !handover[u.Name] {
			leaving = append(leaving, u)
		}
	}
	unwanted := removals(leaving, pol.DeleteBatch, pol.DrainTimeout)
	// The guard's share counts the unwanted servers against those that
	// serve or will once UP: a replacement that is not UP yet does not
	// count, so the guard keeps holding on the next reconcile too, until
	// every replacement is UP. The replacements are the desired servers
	// meant to serve (Ready): one desired in drain or maintenance (a
	// terminating or not-ready pod, a Node pinned) takes no new traffic
	// and may never be UP, so it is neither counted nor waited for.
	replacements, upReplacements := guardReplacements(have, desired.Servers)
	// A share at or past the guard is parked first and deleted only once a
	// later reconcile, reading Kubernetes afresh, finds it parked and still
	// unwanted, and every replacement UP (at least one: with none meant to
	// serve, the parked servers stay parked).
	allParked := true
	for _, u := range unwanted {
		allParked = allParked && u.State == model.Maint && !behind(u.Server)
	}
	guarded := pol.GuardPercent > 0 && len(unwanted) > 0 &&
		len(unwanted)*100 >= pol.GuardPercent*(len(unwanted)+upReplacements) &&
		(replacements == 0 || upReplacements < replacements || !allParked)
	// The cap needs room when the adds do not fit beside every current
	// server: then parked servers (out of traffic, confirmed unwanted by
	// the reconcile that finds them parked) give way to the desired ones,
	// guard or not, or a backend at its cap whose servers are all renamed
	// would never take the new ones.
	adds := 0
	for i := range desired.Servers {
		if _, ok := have[desired.Servers[i].Name]; !ok {
			adds++
		}
	}
	needRoom := pol.MaxServers > 0 && adds > 0 && len(current.Servers)+adds > pol.MaxServers
	// Delete when allowed (some server is desired, the guard does not hold)
	// and the batch is due (removals).
	deleteNow := len(desired.Servers) > 0 && !guarded
	if pol.Leaving && len(desired.Servers) == 0 {
		for _, old := range unwanted {
			switch leaveStep(old, pol.LeftBefore) {
			case leaveConfirm:
				p.Guarded = append(p.Guarded, old.Name)
			case leavePark:
				p.Guarded = append(p.Guarded, old.Name)
				parked := *old.Server
				parked.State = model.Maint
				p.Changes = append(p.Changes, Change{Action: Maint, Name: old.Name, Old: old.Server, New: &parked})
			case leaveDelete:
				p.Changes = append(p.Changes, Change{Action: Delete, Name: old.Name, Old: old.Server, Kill: old.kill})
			case leaveDrain:
				p.Draining = append(p.Draining, old.Name)
			}
		}
		unwanted = nil
	}
	for _, old := range unwanted {
		makeRoom := needRoom && old.free && old.State == model.Maint
		if guarded && len(desired.Servers) > 0 && !makeRoom {
			p.Guarded = append(p.Guarded, old.Name)
		}
		if !old.free && len(desired.Servers) > 0 && !guarded {
			p.Draining = append(p.Draining, old.Name)
		}
		switch {
		case (deleteNow && old.due || makeRoom) && old.free:
			p.Changes = append(p.Changes, Change{Action: Delete, Name: old.Name, Old: old.Server, Kill: old.kill})
		case old.State != model.Maint || behind(old.Server):
			// Parked in the running HAProxy only: written parked too.
			parked := *old.Server
			parked.State = model.Maint
			p.Changes = append(p.Changes, Change{Action: Maint, Name: old.Name, Old: old.Server, New: &parked})
		}
	}

	sort.Slice(p.Changes, func(i, j int) bool { return p.Changes[i].Name < p.Changes[j].Name })
	sort.Strings(p.Guarded)
	sort.Strings(p.Waiting)
	sort.Strings(p.Loading)
	sort.Strings(p.Draining)
	sort.Strings(p.HandingOver)
	p.capAdds(len(current.Servers), pol.MaxServers, roomGivers(have, desired.Servers), pol.Refused)
	p.roomForRoles(desired, pol) // a role change at the cap: the old server gives its room
	if pol.GateChecks {
		// After the cap: a capped server waits for nothing, and at the cap
		// with every server renamed the old ones must make room first.
		p.keepUntilReplaced(desired, pol.Refused)
		sort.Strings(p.HandingOver)
	}
	return p
}

// handingOver names the current servers that desired ones replace
// (model.Server.Replaces: a zone role change, or roles turned on or off)
// and that stay as they are until their replacement is in service: HAProxy
// takes a server's role only when it is added, so the replacement is a new
// server, and parking the old one first would leave a hole, the whole
// backend's when every server changes role at once. Once this plan puts the
// replacement in service (its check passed, or a driver that cannot gate),
// the old one is an unwanted server like any other: parked in the same
// plan, then deleted.
func handingOver(have map[string]*model.Server, want []model.Server, pol Policy) map[string]bool {
	out := map[string]bool{}
	for i := range want {
		d := &want[i]
		if len(d.Replaces) == 0 || d.State != model.Ready {
			continue
		}
		cur := have[d.Name]
		inServiceAfter := !pol.GateChecks ||
			cur != nil && !mustEarn(cur, true, d) && (cur.Runtime == nil || cur.Runtime.CheckPassed)
		if inServiceAfter {
			continue
		}
		for _, r := range d.Replaces {
			// Only one that serves: one HAProxy has down or out of
			// traffic leaves no hole, and kept for a replacement whose
			// check never passes it would stay for good (seed 490652228
			// on 3.4.0: a backup for a gone pod).
			if old := have[r]; old != nil && old.State == model.Ready && (old.Runtime == nil || old.Up) {
				out[r] = true
			}
		}
	}
	return out
}

// behind reports whether haproxy.cfg holds s more in traffic than the
// running HAProxy does (model.Runtime.Behind).
func behind(s *model.Server) bool { return s.Runtime != nil && s.Runtime.Behind }

// mustEarn reports whether desired ready server d must pass its check
// before it takes traffic: it is new, or HAProxy shows it out of service
// without a passed check, or its address changes.
func mustEarn(old *model.Server, ok bool, d *model.Server) bool {
	switch {
	case !ok:
		return true
	case old.Runtime == nil:
		return false // the driver cannot see checks: nothing to gate on
	case old.Address != d.Address || old.Port != d.Port:
		return true
	case old.State == model.Ready:
		// In service: HAProxy's running check rules it. Without one
		// (a check never started), it must earn its place again.
		return !old.Runtime.CheckRunning
	default:
		return !old.Runtime.CheckRunning || !old.Runtime.CheckPassed
	}
}

// gate plans desired ready server d into drain with its check restarted,
// unless it waits there already with its check running.
func (p *Plan) gate(old *model.Server, d *model.Server) {
	p.Waiting = append(p.Waiting, d.Name)
	held := *d
	held.State = model.Drain
	held.Reason = "check" // held until its check passes
	switch {
	case old == nil:
		p.Changes = append(p.Changes, Change{Action: Add, Name: d.Name, New: &held, Gate: true})
	case !old.Runtime.CheckRunning || old.Runtime.CheckStale || old.Address != d.Address || old.Port != d.Port || old.Check != d.Check:
		// Its check is not running, its health is not the check's
		// (model.Runtime.CheckStale), or it moves or its check changes
		// (through the Data Plane API a reload, which would start it at
		// health rise, one passed check from service): restarted from
		// zero. (mustEarn gates only servers whose Runtime it can read.)
		p.Changes = append(p.Changes, Change{Action: Drain, Name: d.Name, Old: old, New: &held, Gate: true})
	}
}

// load plans desired ready server d, which haproxy.cfg holds and the
// running HAProxy does not show yet (model.Runtime.Loading), to be gated
// where the driver can add it (model.Runtime.Addable), else to wait for
// the reload that loads it: no check of it has run, and HAProxy loads a
// configured server UP unless it is in maintenance, so it is written
// parked if it is not; once loaded, a later reconcile gates it. Before,
// such a server read as one whose checks cannot be seen and was written in
// service, and the pending reload loaded it UP with no check ever run.
func (p *Plan) load(old, d *model.Server) {
	p.Waiting = append(p.Waiting, d.Name)
	p.Loading = append(p.Loading, d.Name)
	if old.Runtime.Addable {
		// Gated where the driver can add it to the running HAProxy: held
		// parked in haproxy.cfg, its check started now.
		held := *d
		held.State, held.Reason = model.Drain, "check"
		p.Changes = append(p.Changes, Change{Action: Drain, Name: d.Name, Old: old, New: &held, Gate: true})
		return
	}
	parked := *d
	parked.State, parked.Reason = model.Maint, "check"
	switch {
	case old.State != model.Maint:
		p.Changes = append(p.Changes, Change{Action: Maint, Name: d.Name, Old: old, New: &parked})
	case old.Address != d.Address || old.Port != d.Port || old.Check != d.Check:
		p.Changes = append(p.Changes, Change{Action: Update, Name: d.Name, Old: old, New: &parked})
	}
}

// Deferring returns the plan as it was applied when the driver left the
// deletions of deferred (plan.Applied.Deferred) for a later reconcile: those
// servers are parked in maintenance instead, and listed in Draining.
func (p Plan) Deferring(deferred []string) Plan {
	if len(deferred) == 0 {
		return p
	}
	changes := slices.Clone(p.Changes)
	for i, ch := range changes {
		if ch.Action == Delete && slices.Contains(deferred, ch.Name) {
			parked := *ch.Old
			parked.State = model.Maint
			changes[i] = Change{Action: Maint, Name: ch.Name, Old: ch.Old, New: &parked}
		}
	}
	p.Changes = changes
	p.Draining = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(p.Draining), deferred...))))
	return p
}

// roomGivers lists the current servers that may give their room to a ready
// pod's server at MaxServers when nothing else would serve (capAdds): those
// of pods Kubernetes sends no traffic to (desired in maintenance or drain:
// not ready, terminating, pinned out) that are out of traffic already
// (parked or draining) and hold no session. Parked ones first, then
// draining ones, each in name order.
func roomGivers(have map[string]*model.Server, desired []model.Server) []*model.Server {
	var out []*model.Server
	for i := range desired {
		d := &desired[i]
		old, ok := have[d.Name]
		if !ok || d.State == model.Ready || old.State == model.Ready {
			continue
		}
		if free, kill := sessionsEnded(old, 0); free && !kill {
			out = append(out, old)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if a, b := out[i].State == model.Maint, out[j].State == model.Maint; a != b {
			return a
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// capAdds drops the adds that would take the backend past limit servers.
// Where that would leave nothing in service, any cluster's server, and no
// ready pod's server about to serve (its check pending, and not refused on
// the last reconcile: refused), the ready pods' adds that would be dropped take instead the
// room of givers (roomGivers), deleted by this plan: a backend at its cap
// full of servers that would not serve (pods not ready or terminating) left
// the ready pods without a server and nothing in service (the history
// checker, seed 126, runtime, short, MAX_SERVERS=8: 28 requests failed while
// three ready pods answered). Only then: a server of a pod that is not
// ready keeps its room otherwise, or a pod flapping at the cap would have
// its server deleted and added again each time (through the Data Plane API,
// a reload each). Make-before-break (keepUntilReplaced) then keeps what
// this plan takes out of traffic until a new server passes its check. The
// given server's pod gets its server back, through an add, once there is
// room.
func (p *Plan) capAdds(current, limit int, givers []*model.Server, refused []string) {
	if limit <= 0 {
		return
	}
	n := current
	for _, c := range p.Changes {
		switch c.Action {
		case Add:
			n++
		case Delete:
			n--
		}
	}
	if n <= limit {
		return
	}
	over := n - limit
	var given []Change // deletes of givers, each for a ready pod's add
	// Drop from the end of the name order, so the same servers stay in;
	// first the adds that would not serve (a not-ready or terminating
	// pod's), then those that would: a ready pod left out while a parked
	// one took the room was a backend with nothing in service (the history
	// checker, seed 158, MAX_SERVERS=6).
	for _, serving := range []bool{false, true} {
		var drop []int // from the end of the name order
		for i := len(p.Changes) - 1; i >= 0 && len(drop) < over; i-- {
			c := p.Changes[i]
			// A gated add is a ready pod's: it serves once its check passed.
			if c.Action == Add && (c.Gate || c.New != nil && c.New.State == model.Ready) == serving {
				drop = append(drop, i)
			}
		}
		over -= len(drop)
		if serving && len(drop) > 0 && len(givers) > 0 && !p.servesAfter(drop, refused) {
			// The first names of those a ready pod's add would lose take
			// the room of servers that would not serve, as far as they go.
			g := min(len(givers), len(drop))
			for k := range g {
				gv := givers[k]
				for j := range p.Changes {
					if p.Changes[j].Name == gv.Name {
						p.Changes[j].Action = "" // replaced by its delete
					}
				}
				given = append(given, Change{Action: Delete, Name: gv.Name, Old: gv})
			}
			drop = drop[:len(drop)-g]
		}
		for _, i := range drop {
			p.Capped = append(p.Capped, p.Changes[i].Name)
			p.Changes[i].Action = "" // marked for removal
		}
	}
	kept := p.Changes[:0]
	for _, c := range p.Changes {
		if c.Action != "" {
			kept = append(kept, c)
		}
	}
	p.Changes = append(kept, given...)
	sort.Slice(p.Changes, func(i, j int) bool { return p.Changes[i].Name < p.Changes[j].Name })
	sort.Strings(p.Capped)
	if len(p.Waiting) > 0 {
		p.Waiting = slices.DeleteFunc(p.Waiting, func(n string) bool { _, capped := slices.BinarySearch(p.Capped, n); return capped })
	}
}

// servesAfter reports whether, after this plan's changes less the adds at
// drop (indexes of Changes), some server of the backend, any cluster's, is
// in service and UP, or a ready pod's server waits for a check that may
// pass: not refused, not failing for deadReplacement.
func (p *Plan) servesAfter(drop []int, refused []string) bool {
	dropped := make(map[string]bool, len(drop))
	for _, i := range drop {
		dropped[p.Changes[i].Name] = true
	}
	changed := make(map[string]*Change, len(p.Changes))
	for i := range p.Changes {
		changed[p.Changes[i].Name] = &p.Changes[i]
	}
	failed := make(map[string]bool, len(refused))
	for _, n := range refused {
		failed[n] = true
	}
	for i := range p.current {
		s := &p.current[i]
		after := serving(s, false)
		if ch, ok := changed[s.Name]; ok && ch.Action != "" {
			after = ch.New != nil && ch.New.State == model.Ready && !ch.Gate && serving(ch.Old, true)
		}
		if after {
			return true
		}
		failed[s.Name] = failed[s.Name] || s.Runtime != nil && s.Runtime.CheckFailed && s.Runtime.Since >= deadReplacement
	}
	for _, n := range p.Waiting {
		if !dropped[n] && !failed[n] {
			return true
		}
	}
	return false
}

// WriteKind says how a write reached HAProxy.
type WriteKind string

// The kinds of writes, for metrics.
const (
	// RuntimeWrite was applied to the running HAProxy without a reload.
	RuntimeWrite WriteKind = "runtime"
	// ConfigWrite changed the configuration and reloaded HAProxy.
	ConfigWrite WriteKind = "config"
	// TransactionWrite is part of a transaction (commit included).
	TransactionWrite WriteKind = "transaction"
)

// Applied says what a driver did to apply a plan.
type Applied struct {
	// Writes is the number of write requests or commands sent.
	Writes int
	// ByKind splits Writes by kind.
	ByKind map[WriteKind]int
	// Reload says whether HAProxy was (or will be) reloaded.
	Reload bool
	// Deferred lists servers to delete that the driver left parked in
	// maintenance for a later reconcile (sessions remain, or the version
	// needs them parked first).
	Deferred []string
	// UnexpectedReloads counts writes HAProxy's API answered with a reload
	// where it applies such a write at runtime; UnexpectedReason says why
	// that happens, for the one log line (see package dataplane).
	UnexpectedReloads int
	UnexpectedReason  string
}

// Count records one write of the given kind.
func (a *Applied) Count(k WriteKind) {
	if a.ByKind == nil {
		a.ByKind = map[WriteKind]int{}
	}
	a.ByKind[k]++
	a.Writes++
}

// Add adds b's writes and reload to a.
func (a *Applied) Add(b Applied) {
	for k, n := range b.ByKind {
		for range n {
			a.Count(k)
		}
	}
	a.Reload = a.Reload || b.Reload
	a.Deferred = append(a.Deferred, b.Deferred...)
	a.UnexpectedReloads += b.UnexpectedReloads
	if a.UnexpectedReason == "" {
		a.UnexpectedReason = b.UnexpectedReason
	}
}

// ServerError is a change HAProxy refused for one server.
type ServerError struct {
	Server string `json:"server"`
	Error  string `json:"error"`
	// Err is the error itself, for errors.Is and errors.As.
	Err error `json:"-"`
}

// ServerErrors are changes HAProxy refused, each for one server, while the
// plan's other changes were applied. Trying again would be refused again, so
// it is not temporary: the next reconcile tries once more.
type ServerErrors []ServerError

// Unwrap returns the errors of each server, for errors.Is and errors.As.
func (e ServerErrors) Unwrap() []error {
	out := make([]error, 0, len(e))
	for _, se := range e {
		if se.Err != nil {
			out = append(out, se.Err)
		}
	}
	return out
}

func (e ServerErrors) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d server change(s) refused", len(e))
	for i, se := range e {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(e)-3)
			break
		}
		fmt.Fprintf(&b, "; %s: %s", se.Server, se.Error)
	}
	return b.String()
}
