package plan

import (
	"net"
	"slices"
	"sort"
	"strconv"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// SlotUse says how a backend's slots (model.Runtime.Slot) hold its desired
// servers once a plan is applied. Total 0: the backend has no slot, and
// every server is added with "add server".
type SlotUse struct {
	// Names maps each slot given to a desired server to that server's own
	// name (package desired's), for what is told outside HAProxy.
	Names map[string]string
	// Overflow lists the desired servers (own names) outside the slots:
	// added with "add server" when no slot was free, which a reload drops
	// and which gets none of haproxy.cfg's default-server keywords. Sorted.
	Overflow []string
	// MovingIn lists added servers (own names) whose check passed, on
	// their way into service, left where they are while a slot of their
	// role is idle: once they serve, a later reconcile moves them in
	// (make-before-break). One whose check has not passed is waiting
	// (plan.Plan.Waiting) already. Sorted.
	MovingIn []string
	// Filled and Idle count the slots that hold a desired server (or
	// its endpoint in the other role, handed over until its replacement
	// serves) and the rest; Total is their sum.
	Filled, Idle, Total int
}

// AssignSlots gives desired servers the names of the slots that hold them
// or will, so that the plan fills and frees slots instead of adding and
// deleting servers. current is the backend as read (with IdleSlots); only
// the servers and slots owner owns (model.Owns) are considered. Nothing is
// remembered between reconciles: which slot holds which endpoint is read
// back from HAProxy, by address and port.
//
//  1. A desired server at the address and port a filled slot holds (the
//     same role: backup or not, which HAProxy cannot change) takes that
//     slot's name.
//  2. One that exists under its own name (added with "add server", when no
//     slot was free) and is not Ready, or is gated on its way in, keeps
//     it: moving it would gate it again for nothing (it moves in once it
//     serves).
//  3. The others take idle slots of their role in the order the read gives
//     them (by id): first new Ready endpoints, then Ready ones added with
//     "add server" (they move in), then the rest, each by name. A slot
//     carries traffic only for a Ready endpoint, and a reload with the
//     state saved keeps only what is in a slot: given by arrival, the
//     slots stayed with terminating and not-ready endpoints while the
//     ready ones ran outside them (the history checker, seed 12, slots).
//  4. A Ready one still without a slot takes one from a not-Ready endpoint
//     whose slot is out of traffic with no session (roomGivers' rule:
//     parked first, then draining, by name); that endpoint is added with
//     "add server" instead, where a reload costs no traffic. A draining
//     slot with sessions keeps them.
//  5. What is left is added as before, or stays where it is, and is
//     listed in Overflow.
//
// A desired server that takes a slot while a server under its own name
// exists (an added one moving in) replaces it (model.Server.Replaces): the
// plan keeps the added server in traffic until the slot, gated, is in
// service, then removes it (make-before-break, handingOver).
//
// A filled slot no desired server takes is unwanted: the plan parks it
// and, once it has no sessions, frees it (Change.Slot).
func AssignSlots(current, desired model.Backend, owner string) (model.Backend, SlotUse) {
	current = current.Owned(owner)
	var use SlotUse
	filled := map[string]string{}       // address:port/role → slot name
	slots := map[string]*model.Server{} // filled slot name → as read
	plain := map[string]bool{}          // servers that are no slot
	entering := map[string]bool{}       // of those, on their way in: gated, not in service yet
	passed := map[string]bool{}         // of those, with a passed check: in service after this plan
	for i, s := range current.Servers {
		if s.Runtime != nil && s.Runtime.Slot {
			use.Total++
			slots[s.Name] = &current.Servers[i]
			k := slotKey(s)
			if _, dup := filled[k]; !dup || s.Name < filled[k] {
				filled[k] = s.Name
			}
			continue
		}
		plain[s.Name] = true
		entering[s.Name] = s.State != model.Maint && !serving(&current.Servers[i], false)
		passed[s.Name] = s.Runtime != nil && s.Runtime.CheckPassed
	}
	use.Total += len(current.IdleSlots)
	if use.Total == 0 {
		return desired, use
	}
	use.Names = map[string]string{}
	out := slices.Clone(desired.Servers)
	own := make([]string, len(out)) // each desired server's own name
	holder := map[string]int{}      // slot name → index in out
	var rest []int
	for i, d := range out {
		own[i] = d.Name
		if slot, ok := filled[slotKey(d)]; ok {
			if _, taken := holder[slot]; !taken {
				holder[slot] = i
				out[i].Name = slot
				continue
			}
		}
		// An added server on its way in (gated) enters where it is and
		// moves in once it serves: moving it would gate it again (slots-
		// soak seed 280120534: a pod bounced from a slot to an added
		// server to another slot, each time just before its check
		// passed, took no client for 2 s after a rezone).
		if !plain[d.Name] || d.State == model.Ready && !entering[d.Name] {
			rest = append(rest, i)
		}
	}
	sort.SliceStable(rest, func(a, b int) bool {
		ra, rb := slotRank(out[rest[a]], plain), slotRank(out[rest[b]], plain)
		if ra != rb {
			return ra < rb
		}
		return out[rest[a]].Name < out[rest[b]].Name
	})
	idle := slices.Clone(current.IdleSlots)
	givers := slotGivers(slots, holder, out)
	for _, i := range rest {
		if j := slices.IndexFunc(idle, func(s model.Server) bool { return s.Backup == out[i].Backup }); j >= 0 {
			holder[idle[j].Name] = i
			out[i].Name = idle[j].Name
			idle = slices.Delete(idle, j, j+1)
			continue
		}
		if out[i].State != model.Ready {
			continue
		}
		j := slices.IndexFunc(givers, func(s *model.Server) bool { return s.Backup == out[i].Backup })
		if j < 0 {
			continue
		}
		slot := givers[j].Name
		out[holder[slot]].Name = own[holder[slot]] // added instead, out of traffic
		holder[slot] = i
		out[i].Name = slot
		givers = slices.Delete(givers, j, j+1)
	}
	// A filled slot whose endpoint changes role (a new
	// HAPROXY_LOCAL_ZONE: HAProxy cannot make a slot a backup or not) is
	// held by nobody now: the desired server at its address and port, in
	// another slot or added, replaces it (model.Server.Replaces), so the
	// plan keeps it in traffic until the replacement serves. It was
	// parked at once, every slot at a rezone: no server in service for a
	// check (slots-soak seed 280120534 on 2.6.12).
	unheld := unheldSlots(slots, holder)
	handed := map[string]bool{}
	for i := range out {
		other := out[i]
		other.Backup = !other.Backup
		for _, slot := range unheld[slotKey(other)] {
			out[i].Replaces = append(slices.Clip(out[i].Replaces), slot)
			handed[slot] = true
		}
	}
	for slot, i := range holder {
		use.Names[slot] = own[i]
		if plain[own[i]] {
			// Moving in: the added server stays until the slot serves.
			out[i].Replaces = append(slices.Clip(out[i].Replaces), own[i])
		}
	}
	for i := range out {
		if out[i].Name != own[i] {
			continue
		}
		use.Overflow = append(use.Overflow, own[i])
		if entering[own[i]] && passed[own[i]] && out[i].State == model.Ready && slices.ContainsFunc(idle, func(s model.Server) bool { return s.Backup == out[i].Backup }) {
			use.MovingIn = append(use.MovingIn, own[i])
		}
	}
	sort.Strings(use.Overflow)
	sort.Strings(use.MovingIn)
	// A slot handed over serves its endpoint until the replacement does:
	// filled, not idle capacity.
	use.Filled = len(use.Names) + len(handed)
	use.Idle = use.Total - use.Filled
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	desired.Servers = out
	return desired, use
}

// unheldSlots indexes the filled slots no desired server holds by
// slotKey, each list by name.
func unheldSlots(slots map[string]*model.Server, holder map[string]int) map[string][]string {
	out := map[string][]string{}
	for name, s := range slots {
		if _, held := holder[name]; !held {
			out[slotKey(*s)] = append(out[slotKey(*s)], name)
		}
	}
	for _, names := range out {
		sort.Strings(names)
	}
	return out
}

// slotRank orders the desired servers that want an idle slot: new Ready
// endpoints (no move needed), then Ready ones added with "add server"
// (each moves in, gated, then removed), then the not-Ready.
func slotRank(d model.Server, plain map[string]bool) int {
	switch {
	case d.State != model.Ready:
		return 2
	case plain[d.Name]:
		return 1
	default:
		return 0
	}
}

// slotGivers lists the filled slots whose endpoint (desired, at index
// holder[name] of out) is not Ready and that are out of traffic with no
// session, for a Ready endpoint without a slot to take: parked ones first,
// then draining ones, each by name. A draining slot with sessions keeps
// its endpoint until they end.
func slotGivers(slots map[string]*model.Server, holder map[string]int, out []model.Server) []*model.Server {
	var givers []*model.Server
	for name, i := range holder {
		s, d := slots[name], out[i]
		if s == nil || d.State == model.Ready || s.State == model.Ready {
			continue
		}
		if free, kill := sessionsEnded(s, 0); free && !kill {
			givers = append(givers, s)
		}
	}
	sort.Slice(givers, func(a, b int) bool {
		if ma, mb := givers[a].State == model.Maint, givers[b].State == model.Maint; ma != mb {
			return ma
		}
		return givers[a].Name < givers[b].Name
	})
	return givers
}

// slotKey identifies an endpoint in a slot: its address, port and role.
func slotKey(s model.Server) string {
	return net.JoinHostPort(s.Address, strconv.Itoa(s.Port)) + "/" + strconv.FormatBool(s.Backup)
}

// markSlots flags the changes to slots (Change.Slot) and passes on to the
// driver the idle slots not in maintenance (fresh from haproxy.cfg with no
// state file: in service at the placeholder, their check failing), for it
// to park them: an idle slot looks idle, never DOWN.
func (p *Plan) markSlots(current model.Backend) {
	slot := map[string]bool{}
	for _, s := range current.Servers {
		if s.Runtime != nil && s.Runtime.Slot {
			slot[s.Name] = true
		}
	}
	for _, s := range current.IdleSlots {
		slot[s.Name] = true
	}
	for i := range p.Changes {
		p.Changes[i].Slot = slot[p.Changes[i].Name]
	}
	filling := map[string]bool{}
	for _, ch := range p.Changes {
		if ch.Action == Add && ch.Slot {
			filling[ch.Name] = true
		}
	}
	for _, s := range current.IdleSlots {
		if !filling[s.Name] && s.State != model.Maint {
			p.IdleSlots = append(p.IdleSlots, s)
		}
	}
}
