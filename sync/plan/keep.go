package plan

import (
	"slices"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// deadReplacement is how long a replacement's check must have failed, out
// of service since it was gated, before it is taken for one that will not
// serve: a first check may fail for a moment (a NodePort kube-proxy has not
// programmed yet) on a node that serves a second later. Exported for the
// history checker's bounds (DeadReplacement).
const deadReplacement = DeadReplacement

// DeadReplacement is deadReplacement.
const DeadReplacement = 3 * time.Second

// keepUntilReplaced is make-before-break: when the plan would leave the
// backend with no server in service while Kubernetes has a ready endpoint
// whose server waits for its check (every server replaced at once: old
// nodes gone, new ones not checked yet), the servers it takes out of
// traffic that serve now with a passing check keep their traffic, listed
// in HandingOver, until a replacement is in service; the plan that puts
// one in service takes them out as usual (parked, or drained when their
// endpoints terminate). A server HAProxy holds DOWN is out already and is
// not kept; nor is one that moves (it must earn its traffic at its new
// address), nor one pinned out by the Node's annotation. Before, such a
// change emptied the backend for about a check (~0.1-0.4 s: "backend has
// no server available!").
//
// With backup servers (HAPROXY_LOCAL_ZONE, model.Server.Backup) a backup
// that serves counts as serving: HAProxy sends it the traffic the moment
// no active server is UP, so replacing every local-zone server at once
// hands the traffic to the other zones for a check, rather than keep pods
// Kubernetes took out in traffic (the guarantee: make-before-break keeps
// one only while nothing else could serve). Before 0.8.6 the leaving local
// servers were kept beside serving backups; the history checker (seed
// 430577631, Data Plane driver, zones) found a not-ready pod so kept in
// traffic for 3.9 s while the other zone's ready pod could serve.
// When no server at all would serve, every serving server that leaves is
// kept, whatever its role.
//
// A replacement whose check has failed for deadReplacement (a dead or
// unreachable pod that Kubernetes calls ready) is not about to serve: a server Kubernetes took
// out must not keep, for as long as that lasts, traffic that others could
// take. So once no replacement of the role is about to serve, the leaving
// servers are kept only where no server at all would serve, another
// cluster's (CLUSTER_NAME) included: better a pod Kubernetes calls not
// ready than an empty backend. So is a replacement HAProxy refused on the
// last reconcile (Policy.Refused): it is added again, and refused again,
// for as long as its pod stays; before, a not-ready local pod was kept in
// traffic beside the other zones' ready backups for all that time (the
// history checker, seed 324, runtime, short).
func (p *Plan) keepUntilReplaced(desired model.Backend, refused []string) {
	if len(p.Waiting) == 0 || !slices.ContainsFunc(desired.Servers, func(s model.Server) bool { return s.State == model.Ready }) {
		return
	}
	changed := make(map[string]*Change, len(p.Changes))
	for i := range p.Changes {
		changed[p.Changes[i].Name] = &p.Changes[i]
	}
	// Only this instance's servers bridge a replacement's check; another
	// cluster's (Policy.Owner) count only where nothing is about to serve.
	anyAfter, othersServe := false, false // in service after this plan
	for _, s := range p.current {
		if !model.Owns(p.owner, s.Name) {
			othersServe = othersServe || serving(&s, false)
			continue
		}
		after := serving(&s, false) // in service, and this plan leaves it so
		if ch, ok := changed[s.Name]; ok {
			// (back) in service after this plan
			after = ch.New != nil && ch.New.State == model.Ready && !ch.Gate && serving(ch.Old, true)
		}
		anyAfter = anyAfter || after
	}
	failed := map[string]bool{} // failing for deadReplacement at least, or refused
	for _, s := range p.current {
		failed[s.Name] = s.Runtime != nil && s.Runtime.CheckFailed && s.Runtime.Since >= deadReplacement
	}
	for _, n := range refused {
		failed[n] = true
	}
	pending := func(n string) bool { return !failed[n] } // about to serve
	if anyAfter || !slices.ContainsFunc(p.Waiting, pending) && othersServe {
		return
	}
	kept := map[string]bool{}
	changes := p.Changes[:0]
	for _, ch := range p.Changes {
		// Not a server an operator pinned out (the Node's annotation):
		// that is an order, not a change.
		leaving := ch.Old != nil && !ch.Gate && (ch.Action == Delete || ch.Action == Maint || ch.Action == Drain) &&
			(ch.New == nil || ch.New.Address == ch.Old.Address && ch.New.Port == ch.Old.Port && ch.New.Reason != model.ReasonAnnotation)
		if leaving && serving(ch.Old, false) {
			kept[ch.Name] = true
			if ch.Old.Runtime != nil && ch.Old.Runtime.Unwritten {
				// haproxy.cfg lacks or parks it (a reload came between
				// the socket and the write that took it out): written as
				// it serves, or the next reload takes it out all the same.
				same := *ch.Old
				changes = append(changes, Change{Action: Update, Name: ch.Name, Old: ch.Old, New: &same})
			}
			continue
		}
		changes = append(changes, ch)
	}
	if len(kept) == 0 {
		return
	}
	p.Changes = changes
	for name := range kept {
		p.HandingOver = append(p.HandingOver, name)
	}
	drop := func(l []string) []string { return slices.DeleteFunc(l, func(n string) bool { return kept[n] }) }
	p.Guarded, p.Draining = drop(p.Guarded), drop(p.Draining)
}

// serving reports whether current server s takes traffic: in service and
// UP as HAProxy sees it (one failed check of a steady server leaves it UP
// until fall of them: it still serves). Entering: whether a change that
// puts it in service puts it there with a passed check.
func serving(s *model.Server, entering bool) bool {
	switch {
	case s == nil:
		return false
	case !entering:
		return s.State == model.Ready && s.Up
	case s.Runtime == nil:
		return s.Up
	default:
		return s.Runtime.CheckRunning && s.Runtime.CheckPassed && !s.Runtime.CheckStale
	}
}
