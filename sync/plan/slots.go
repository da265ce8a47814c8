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
	// Filled and Idle count the slots that hold a desired server and the
	// rest; Total is their sum.
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
//     slot was free) keeps it: moving it would gate it again for nothing.
//  3. The others, by name, take idle slots of their role in the order the
//     read gives them (by id).
//  4. What is left is added as before, and listed in Overflow.
//
// A filled slot no desired server takes is unwanted: the plan parks it
// and, once it has no sessions, frees it (Change.Slot).
func AssignSlots(current, desired model.Backend, owner string) (model.Backend, SlotUse) {
	current = current.Owned(owner)
	var use SlotUse
	filled := map[string]string{} // address:port/role → slot name
	plain := map[string]bool{}    // servers that are no slot
	for _, s := range current.Servers {
		if s.Runtime != nil && s.Runtime.Slot {
			use.Total++
			k := slotKey(s)
			if _, dup := filled[k]; !dup || s.Name < filled[k] {
				filled[k] = s.Name
			}
			continue
		}
		plain[s.Name] = true
	}
	use.Total += len(current.IdleSlots)
	if use.Total == 0 {
		return desired, use
	}
	use.Names = map[string]string{}
	out := slices.Clone(desired.Servers)
	taken := map[string]bool{}
	var rest []int
	for i, d := range out {
		if slot, ok := filled[slotKey(d)]; ok && !taken[slot] {
			taken[slot] = true
			use.Names[slot] = d.Name
			out[i].Name = slot
			continue
		}
		if plain[d.Name] {
			use.Overflow = append(use.Overflow, d.Name) // still outside the slots
		} else {
			rest = append(rest, i)
		}
	}
	sort.SliceStable(rest, func(a, b int) bool { return out[rest[a]].Name < out[rest[b]].Name })
	idle := slices.Clone(current.IdleSlots)
	for _, i := range rest {
		j := slices.IndexFunc(idle, func(s model.Server) bool { return s.Backup == out[i].Backup })
		if j < 0 {
			use.Overflow = append(use.Overflow, out[i].Name)
			continue
		}
		use.Names[idle[j].Name] = out[i].Name
		out[i].Name = idle[j].Name
		idle = slices.Delete(idle, j, j+1)
	}
	sort.Strings(use.Overflow)
	use.Filled = len(use.Names)
	use.Idle = use.Total - use.Filled
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	desired.Servers = out
	return desired, use
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
