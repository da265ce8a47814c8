package plan

import (
	"slices"
	"sort"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// roomForRoles lets a role change (model.Server.Replaces) finish at
// Policy.MaxServers. There the replacement is capped, and its old server,
// handed over until the replacement serves (handingOver), would be kept
// for good: no room, no replacement, no end. Neither driver can give a live
// server the other role in place (HAProxy takes "backup" only on "add
// server"; through the Data Plane API the name, which carries the role,
// would change too), and the cap is not passed (roundrobin takes 4095
// servers at most). So the old server gives its room: this plan parks it
// (listed in Draining, so that the follow-up comes back), a later reconcile
// deletes it once its sessions ended (parked servers make room, guard or
// not), and its replacement is added, gated, as any new server: no server
// takes traffic before its check passed. Break before make, as for servers
// renamed at the cap, but bounded:
//
//   - never an empty backend: at least one server, any cluster's, stays in
//     service after the plan; where none would (the backend's only server
//     at a cap of one), the old server stays handed over;
//   - at least half of the servers in service after the plan (rounded up)
//     stay there, so a backend whose every server changes role (a new
//     HAPROXY_LOCAL_ZONE) loses half its servers at most, for a delete and
//     a check: the other half goes once the first half's replacements
//     serve;
//   - nothing more is parked while a replacement waits for its check,
//     lest the loss add up.
//
// The old servers of the first capped replacements in name order go first:
// the cap keeps adds in name order, so the room goes to those very
// replacements.
func (p *Plan) roomForRoles(desired model.Backend, pol Policy) {
	if pol.MaxServers <= 0 || len(p.Capped) == 0 || len(p.HandingOver) == 0 {
		return
	}
	wanted := make(map[string]*model.Server, len(desired.Servers))
	for i := range desired.Servers {
		wanted[desired.Servers[i].Name] = &desired.Servers[i]
	}
	have := make(map[string]*model.Server, len(p.current))
	for i := range p.current {
		have[p.current[i].Name] = &p.current[i]
	}
	for _, n := range p.Waiting {
		s, d := have[n], wanted[n]
		dead := s != nil && s.Runtime != nil && s.Runtime.CheckFailed && s.Runtime.Since >= deadReplacement
		if d != nil && len(d.Replaces) > 0 && !dead {
			return
		}
	}
	changed := make(map[string]*Change, len(p.Changes))
	for i := range p.Changes {
		changed[p.Changes[i].Name] = &p.Changes[i]
	}
	after := 0 // servers in service after this plan, any cluster's
	for i := range p.current {
		s := &p.current[i]
		in := serving(s, false)
		if ch, ok := changed[s.Name]; ok {
			in = ch.New != nil && ch.New.State == model.Ready && !ch.Gate && serving(ch.Old, true)
		}
		if in {
			after++
		}
	}
	keep := max(1, (after+1)/2)
	parked := map[string]bool{}
	for _, name := range p.Capped {
		d := wanted[name]
		if d == nil {
			continue
		}
		for _, r := range d.Replaces {
			old := have[r]
			if old == nil || parked[r] || !slices.Contains(p.HandingOver, r) {
				continue
			}
			if serving(old, false) {
				if after-1 < keep {
					continue
				}
				after--
			}
			parked[r] = true
			s := *old
			s.State = model.Maint
			p.Changes = append(p.Changes, Change{Action: Maint, Name: r, Old: old, New: &s})
			p.Draining = append(p.Draining, r)
		}
	}
	if len(parked) == 0 {
		return
	}
	p.HandingOver = slices.DeleteFunc(p.HandingOver, func(n string) bool { return parked[n] })
	sort.Slice(p.Changes, func(i, j int) bool { return p.Changes[i].Name < p.Changes[j].Name })
	sort.Strings(p.Draining)
}
