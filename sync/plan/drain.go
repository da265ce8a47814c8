package plan

import (
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// removal is where one unwanted server stands on its way out, as far as
// its sessions and the delete batch go (the guard, the zero-endpoints rule
// and MaxServers are CalculateWith's).
type removal struct {
	*model.Server
	// free: it may be deleted: no sessions (or the driver cannot tell), or
	// parked past Policy.DrainTimeout.
	free bool
	// kill: free only because the drain timeout passed: its sessions must
	// be shut first (Change.Kill).
	kill bool
	// due: free, and the batch is due: deleted by this plan.
	due bool
}

// removals decides, for each unwanted server, whether it may go and whether
// it goes now. The free servers go together, in one reload through the
// Data Plane API, once the batch is due:
//
//	free servers \ one past the drain timeout   no            yes
//	fewer than batch                            kept parked   all deleted
//	batch or more                               all deleted   all deleted
//
// A server past the drain timeout makes the batch due: it has waited as
// long as it may, and a batch that never fills (with the shipped batch of
// 10, one server removed alone) would keep it, and its sessions, for good;
// no later reconcile would come for it either, as it is no longer listed in
// Draining. Its deletion costs the reload a full batch costs, so the other
// free servers go with it. A server with sessions before its timeout is
// not free and waits, whatever the batch.
func removals(unwanted []*model.Server, batch int, timeout time.Duration) []removal {
	out := make([]removal, len(unwanted))
	free, expired := 0, 0
	for i, u := range unwanted {
		r := removal{Server: u}
		r.free, r.kill = sessionsEnded(u, timeout)
		if r.free {
			free++
		}
		if r.kill {
			expired++
		}
		out[i] = r
	}
	due := free >= max(batch, 1) || expired > 0
	for i := range out {
		out[i].due = due && out[i].free
	}
	return out
}

// sessionsEnded reports whether unwanted server u may be deleted now: it has
// no sessions (or the driver cannot tell), or it has been parked for
// timeout, in which case kill says its sessions must be shut first.
func sessionsEnded(u *model.Server, timeout time.Duration) (free, kill bool) {
	rt := u.Runtime
	switch {
	case rt == nil || rt.Sessions == 0:
		return true, false
	case timeout > 0 && u.State == model.Maint && rt.Since >= timeout+time.Second:
		// HAProxy counts the time in whole seconds, from a change it
		// stamps with the second it happened in: a Since of n may be
		// n-1 seconds and a fraction. One more makes the timeout a floor
		// (history seed 3, runtime, short: sessions shut 1.6 s after
		// their server was parked, with a timeout of 2 s).
		return true, true
	default:
		return false, false
	}
}

// leave is what a reconcile does to a server of a backend no Service names
// any more (Policy.Leaving).
type leave int

const (
	leavePark    leave = iota // out of traffic now; a later read confirms
	leaveConfirm              // parked already; no earlier read found the backend left
	leaveDelete               // parked, left on an earlier read too, and free
	leaveDrain                // parked, its sessions not ended yet
)

// leaveStep decides for one server of a leaving backend, confirmed when an
// earlier read of Kubernetes found the backend left too (Policy.LeftBefore):
//
//	parked \ confirmed, free   yes, yes   yes, no       no, any
//	no                        park       park          park
//	yes                       delete     drain (wait)  wait for a second read
//
// Nothing is deleted on one read of Kubernetes: a server parked for another
// reason (its Service had lost every endpoint before it was deleted) waits
// for a second read that still finds no Service for the backend. A server
// parked in the running HAProxy only (Behind) is parked in haproxy.cfg
// first.
func leaveStep(r removal, confirmed bool) leave {
	switch {
	case r.State != model.Maint || behind(r.Server):
		return leavePark
	case !confirmed:
		return leaveConfirm
	case r.free:
		return leaveDelete
	default:
		return leaveDrain
	}
}
