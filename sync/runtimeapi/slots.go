package runtimeapi

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// Slots are servers haproxy.cfg declares for this driver to fill, e.g.
//
//	server-template k8s 1-8 k8s.invalid:1 check init-addr last,0.0.0.0
//
// Unlike a server added with "add server", a slot has every keyword of
// haproxy.cfg's default-server lines, and with server-state-file and
// load-server-state-from-file a reload keeps its address, port, weight and
// state (when the state was dumped just before it: docs/haproxy.md). A
// slot is known by its host name, which ends in ".invalid" (a top-level
// domain that never resolves, RFC 2606): HAProxy keeps it through "set
// server ... addr" and through a reload, so nothing is configured and
// nothing remembered. "init-addr last,0.0.0.0" gives it an IPv4 address
// family (without one "set server ... addr" is refused) and lets the state
// file's address be applied; the port must not be 0, which would mean
// "the client's destination port" for good (seen on 2.6.12 and 3.0.11).
//
// An idle slot is at the placeholder address 0.0.0.0, in maintenance (its
// check paused): to monitoring it is a server in MAINT, never DOWN, and it
// takes no traffic. Filling one is "set server ... addr A port P", its
// check port and weight, then the steps of an added server (gated the
// same). Freeing one parks it: maintenance, placeholder address.
const (
	slotHostSuffix  = ".invalid"
	placeholderAddr = "0.0.0.0"
	placeholderPort = 1
)

// isSlot reports whether a server's host name ("show servers state"
// srv_fqdn) marks it a slot.
func isSlot(fqdn string) bool { return strings.HasSuffix(fqdn, slotHostSuffix) }

// splitIdle separates the idle slots (at the placeholder address) from the
// other servers, keeping the read's order (by id).
func splitIdle(servers []model.Server) (rest, idle []model.Server) {
	for _, s := range servers {
		if s.Runtime != nil && s.Runtime.Slot && s.Address == placeholderAddr {
			idle = append(idle, s)
		} else {
			rest = append(rest, s)
		}
	}
	return rest, idle
}

// addrOK is success for "set server ... addr": 3.0 says "port changed
// from" when only the port moves; a server already there is "no need to
// change the addr" before 3.0 and "nothing changed" since.
func addrOK(r string) bool {
	return strings.HasPrefix(r, "IP changed from") || strings.HasPrefix(r, "port changed from") ||
		strings.HasPrefix(r, "no need to change the addr") || strings.HasPrefix(r, "nothing changed")
}

// fillSteps put an endpoint into an idle slot: parked first (a slot fresh
// from haproxy.cfg without a state file is in service at 0.0.0.0 with a
// failing check, and must not enter traffic at the new address before a
// check passed there), then moved, given its check port and weight, then
// as an added server: gated (check started, drain, health down), or its
// check started and its state set.
func fillSteps(srv string, ch plan.Change) []Step {
	s := *ch.New
	checkPort := s.Check.Port
	if checkPort == 0 {
		checkPort = s.Port // the slot may carry another endpoint's
	}
	steps := []Step{
		{"set server " + srv + " state maint", empty},
		{fmt.Sprintf("set server %s addr %s port %d", srv, s.Address, s.Port), addrOK},
		{fmt.Sprintf("set server %s check-port %d", srv, checkPort), empty},
		{fmt.Sprintf("set server %s weight %d", srv, s.Weight), empty},
	}
	if ch.Gate {
		return append(steps, gateSteps(srv)...)
	}
	steps = append(steps, Step{"enable health " + srv, empty})
	if s.State != model.Maint {
		steps = append(steps, Step{"set server " + srv + " state " + stateWord(s.State), empty})
	}
	return steps
}

// refills reports whether ch hands a filled slot to another endpoint (a
// Ready one taking it from a not-ready one, plan.AssignSlots): filled
// afresh, as an idle slot is. An update in place would leave the check on
// the old endpoint's port, which fillSteps set and a read shows as unset.
func refills(ch plan.Change) bool {
	return ch.Slot && ch.Old != nil && ch.New != nil && (ch.Old.Address != ch.New.Address || ch.Old.Port != ch.New.Port)
}

// parkSteps give slot s the idle look, each step only where it lacks it:
// maintenance (which pauses its check), sessions shut (kill: parked past
// the drain timeout), placeholder address. Its check stays enabled:
// "set server ... check-port" is refused on a server whose check is
// disabled (2.6.12). A slot parked this way takes nothing, and the
// next fill starts from here.
func parkSteps(srv string, s model.Server, kill bool) []Step {
	var steps []Step
	if s.State != model.Maint {
		steps = append(steps, Step{"set server " + srv + " state maint", empty})
	}
	if kill {
		steps = append(steps, Step{"shutdown sessions server " + srv, empty})
	}
	if s.Address != placeholderAddr {
		steps = append(steps, Step{fmt.Sprintf("set server %s addr %s port %d", srv, placeholderAddr, placeholderPort), addrOK})
	}
	return steps
}

// park frees the slots p deletes and tidies the idle ones that do not look
// idle (plan.Plan.IdleSlots: fresh from haproxy.cfg, or moved by hand), on
// one connection. It returns each change it made (the frees, then a Maint
// per idle slot tidied) with the error that stopped it.
func (c *Client) park(ctx context.Context, a *applier, frees []plan.Change, idle []model.Server) ([]plan.Change, []error, error) {
	var seqs [][]Step
	changes := slices.Clone(frees)
	for _, ch := range frees {
		seqs = append(seqs, parkSteps(a.backend+"/"+ch.Name, *ch.Old, ch.Kill))
	}
	for _, s := range idle {
		if steps := parkSteps(a.backend+"/"+s.Name, s, false); len(steps) > 0 {
			seqs = append(seqs, steps)
			changes = append(changes, plan.Change{Action: plan.Maint, Name: s.Name, Slot: true})
		}
	}
	if len(seqs) == 0 {
		return nil, nil, nil
	}
	errs, err := c.run(ctx, a, seqs)
	if err != nil {
		return nil, nil, err
	}
	return changes, errs, nil
}
