package reconcile

import (
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// Stages of a Programmed change.
const (
	// StageApplied: the change was written to HAProxy.
	StageApplied = "applied"
	// StageInService: the server it brought in takes traffic, its check
	// passed.
	StageInService = "in-service"
)

// Why a Programmed change has no latency.
const (
	// Unstamped: no slice of the server carries last-change-trigger-time.
	Unstamped = "unstamped"
	// Stale: the stamp is older than MaxProgrammingLatency, so the change is
	// not a programming delay but a restore (HAProxy restarted and lost its
	// runtime servers, or the service was down).
	Stale = "stale"
)

// MaxProgrammingLatency is the oldest stamp timed; see Stale.
const MaxProgrammingLatency = 15 * time.Minute

// Programmed is one Kubernetes change of a server as HAProxy took it, timed
// from the EndpointSlice stamp the way kube-proxy times its rules
// (model.Server.Changed).
type Programmed struct {
	Target, Backend, Server string
	// Stage is StageApplied or StageInService.
	Stage string
	// Latency runs from the stamp to now; set when Unmeasured is empty.
	Latency time.Duration
	// Unmeasured says why there is no latency: Unstamped or Stale.
	Unmeasured string
}

// programmed returns the changes of p, applied at now to servers read at
// readAt, that Kubernetes asked for, each timed from its stamp. It keeps
// nothing and never counts a stamp twice for one server and stage:
//
//   - only servers in their desired state because of their endpoints
//     (desired.ReasonEndpoints) count: a Node's cordon, taint or label has
//     no stamp;
//   - a change of state, address, port or weight counts as applied when
//     its server is new, or HAProxy shows no runtime view of it, or when HAProxy's
//     last state change of the server (model.Runtime.Since) came before the
//     stamp: every state change it applies moves that past the stamp, so
//     the next reconcile's change of the same server (the gate's release,
//     say) does not count again. HAProxy counts whole seconds, so the
//     comparison is of whole seconds: a change whose stamp falls in the
//     second of the server's last change is left out, never counted twice;
//   - a server put in service with its check passed counts as in service,
//     once: it is in service afterwards;
//   - changes of servers that no endpoint asks for have no slice, hence no
//     stamp, and are not listed; neither are those HAProxy refused.
func programmed(target string, p plan.Plan, want model.Backend, refused map[string]bool, now, readAt time.Time) []Programmed {
	desiredBy := make(map[string]*model.Server, len(want.Servers))
	for i := range want.Servers {
		desiredBy[want.Servers[i].Name] = &want.Servers[i]
	}
	var out []Programmed
	for _, ch := range p.Changes {
		d := desiredBy[ch.Name]
		if d == nil || ch.New == nil || refused[ch.Name] || d.Reason != desired.ReasonEndpoints {
			continue
		}
		one := func(stage string) {
			pr := Programmed{Target: target, Backend: p.Backend, Server: ch.Name, Stage: stage}
			switch lat := now.Sub(d.Changed); {
			case d.Changed.IsZero():
				pr.Unmeasured = Unstamped
			case lat > MaxProgrammingLatency:
				pr.Unmeasured = Stale
			default:
				pr.Latency = max(lat, 0) // a clock behind the stamp's
			}
			out = append(out, pr)
		}
		in := enters(ch)
		if applied(ch, d.Changed, in, readAt) {
			one(StageApplied)
		}
		if in {
			one(StageInService)
		}
	}
	return out
}

// applied reports whether ch applies a Kubernetes change stamped at stamp
// for the first time (see programmed); readAt is when HAProxy's view of the
// server (Runtime.Since) had been read.
func applied(ch plan.Change, stamp time.Time, enters bool, readAt time.Time) bool {
	old := ch.Old
	switch {
	case old == nil:
		return true
	case old.State == ch.New.State && old.Address == ch.New.Address && old.Port == ch.New.Port && old.Weight == ch.New.Weight:
		return false // only its check settings: the configuration's doing
	case old.Runtime == nil:
		return true // no gate without a runtime view: one change is all
	case stamp.IsZero():
		return !enters // unstamped: at least never the gate's release
	default:
		// HAProxy counts whole seconds: its last change of the server fell
		// in the second Since before the one it answered in, which is the
		// second of readAt or an earlier one, so this is that change's
		// second or later. Only a stamp of a later second is surely newer.
		// Taken from the read, not from now: an apply that crosses into
		// the next second would leave out a change made a second before.
		// HAProxy 3.1+ counts its seconds on the monotonic clock, whose
		// second boundaries fall anywhere in the wall clock's (seen: .661
		// on 3.2.0 and 3.4.0, .001 on 3.0.11), so a change may read one
		// second older than it is: a second of slack, to never count twice.
		last := readAt.Truncate(time.Second).Add(-old.Runtime.Since).Add(time.Second)
		return last.Before(stamp.Truncate(time.Second))
	}
}

// enters reports whether ch puts a server in service whose check HAProxy
// shows passed: a gated server released, or a draining one ready again.
func enters(ch plan.Change) bool {
	old := ch.Old
	return !ch.Gate && ch.New.State == model.Ready && old != nil && old.State != model.Ready &&
		old.Runtime != nil && old.Runtime.CheckRunning && old.Runtime.CheckPassed
}
