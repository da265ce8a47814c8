package history

import (
	"fmt"
	"sort"
	"time"
)

// The judge of class histories (class.go): what clients of each VIP port
// saw, against what each Service claimed and what the last settled moment
// found holding each port.

// StatusTruthful (class histories): once the history is quiet, a class
// Service's status.loadBalancer.ingress names the VIP exactly when it holds
// its port and its traffic flows there; a claimant refused, a Service that
// left the class, has it withdrawn (within Bounds.Converge).
const StatusTruthful Invariant = "status-truthful"

// classObs is one observation of a class history.
type classObs struct {
	at   time.Time
	kind classObsKind
	// step: the index; the claims after it (port index per Service, -1:
	// none).
	step   int
	claims []int
	// request: the port index (opPort: the operator's frontend), when it
	// was sent, the Service whose pod answered (-1: failed), the error.
	port  int
	began time.Time
	svc   int
	err   string
	// settled: the Service holding each port, -1 for none.
	holders []int
	// target: the HAProxy a request went through, a settled moment
	// checked, that reloaded, or whose API and socket went down (on) or
	// came back.
	target int
	on     bool
}

type classObsKind int

const (
	cStep classObsKind = iota
	cRequest
	cSettled
	cDeath  // a ready pod stopped answering (killed), svc
	cReload // HAProxy reloaded (by the Data Plane API), began..at
	cNotice // every killed pod of svc is out of Kubernetes
	cDown   // the target's API and socket refuse (on) or answer again
	cGone   // a terminating pod of svc exited, its endpoint gone
)

// Why a failed request through a VIP port breaks no invariant, beside a
// holder's pod's death (ExcuseDeath, ExcuseDeathInFlight, ExcuseReloadLoadsUp).
const (
	ExcuseUnclaimed = "no Service claims the port"
	// ExcuseClaimChanged: within Bounds.Converge of a Service beginning
	// or ceasing to claim the port, with no holder settled since.
	ExcuseClaimChanged = "the port's claims changed"
	// ExcuseTargetDown: through a target whose API and socket refuse (or
	// did within Bounds.Converge), on a port whose claims changed since
	// its holder settled there, or whose holder lost a pod since the
	// target went down: the change could not reach it. A holder that
	// keeps its port and its pods is judged there all the same.
	ExcuseTargetDown = "its target was unreachable"
)

// opPort is the operator's own frontend in requests.
const opPort = -1

// classEvaluate judges a class history's observations:
//   - others-untouched-across-services: a client of port P is answered by a
//     pod of a Service that has not claimed P for Bounds.Converge;
//   - holder-keeps: by another Service's pod while the Service found
//     holding P at the last settled moment still claims it, without a break;
//   - no-failed-request: a request through P fails more than
//     Bounds.Converge after the last change of P's claims while a Service
//     claims it, or while that holder holds it so, unless a ready pod of it died within Bounds.Abrupt before or
//     while the request was under way, or HAProxy reloaded within
//     Bounds.Abrupt while a killed pod of it was still in Kubernetes (a
//     reload loads it UP until its first check); a request through the
//     operator's frontend never fails.
func classEvaluate(all []classObs, b Bounds, services int) Evaluation {
	sort.SliceStable(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	ev := Evaluation{Excused: map[string]int{}}
	step := -1
	claims := make([]int, services)
	for i := range claims {
		claims[i] = -1
	}
	claimSince := make([]time.Time, services)
	// changed[p]: the last step at which a Service began or stopped
	// claiming port p.
	changed := map[int]time.Time{}
	// claimedUntil[s][p]: the last time s claimed p, while it does not.
	claimedUntil := map[[2]int]time.Time{}
	// Per target: the holders found at its last settled moment (a target
	// that is down is not checked), and its outages.
	holders, settledAt := map[int][]int{}, map[int]time.Time{}
	downSince, upAt, wentDown := map[int]time.Time{}, map[int]time.Time{}, map[int]time.Time{}
	// lost: when each Service lost a pod (it died, or exited terminating).
	lost := map[int][]time.Time{}
	// outage says whether target tg is down, or came back within
	// Bounds.Converge: what Kubernetes changed meanwhile may not have
	// reached it.
	outage := func(tg int, at time.Time) bool {
		return !downSince[tg].IsZero() || !upAt[tg].IsZero() && at.Sub(upAt[tg]) <= b.Converge
	}
	deaths := map[int][]time.Time{}
	unnoticed := map[int]bool{}         // a killed pod of s is still in Kubernetes
	reloads := map[int][][2]time.Time{} // by target
	lastFail := map[[2]int]time.Time{}
	add := func(inv Invariant, o classObs, format string, args ...any) {
		at, port := o.at, [2]int{o.target, o.port}
		what := fmt.Sprintf(format, args...)
		if o.target > 0 {
			what = fmt.Sprintf("target %d: %s", o.target, what)
		}
		if n := len(ev.Violations); n > 0 && ev.Violations[n-1].Invariant == inv && inv == NoFailedRequest && at.Sub(lastFail[port]) < time.Second {
			ev.Violations[n-1].Count++
			lastFail[port] = at
			return
		}
		lastFail[port] = at
		ev.Violations = append(ev.Violations, Violation{Invariant: inv, Target: o.target, At: at, Step: step, What: what})
	}
	// holder is the Service found holding p through tg at its last
	// settled moment that still claims it without a break since; -1: none.
	holder := func(tg, p int) int {
		hs := holders[tg]
		if p < 0 || p >= len(hs) {
			return -1
		}
		h := hs[p]
		if h < 0 || claims[h] != p || claimSince[h].After(settledAt[tg]) {
			return -1
		}
		return h
	}
	excused := func(h, tg int, at, began time.Time, why string) string {
		for _, d := range deaths[h] {
			if !at.Before(d) && at.Sub(d) <= b.Abrupt {
				return ExcuseDeath
			}
			if !began.IsZero() && d.After(began) && !d.After(at) && heldPastDeath(why) {
				return ExcuseDeathInFlight
			}
		}
		if outage(tg, at) {
			// The holder lost a pod since its target went down: the
			// target still sends to it.
			for _, l := range lost[h] {
				if !l.Before(wentDown[tg]) && !l.After(at) {
					return ExcuseTargetDown
				}
			}
		}
		if unnoticed[h] {
			for _, r := range reloads[tg] {
				if !at.Before(r[0]) && at.Sub(r[1]) <= b.Abrupt {
					return ExcuseReloadLoadsUp
				}
			}
		}
		return ""
	}
	for _, o := range all {
		switch o.kind {
		case cStep:
			step = o.step
			for s, p := range o.claims {
				if s >= services || p == claims[s] {
					continue
				}
				if claims[s] >= 0 {
					claimedUntil[[2]int{s, claims[s]}] = o.at
					changed[claims[s]] = o.at
				}
				if p >= 0 {
					changed[p] = o.at
				}
				claims[s], claimSince[s] = p, o.at
			}
		case cSettled:
			holders[o.target], settledAt[o.target] = o.holders, o.at
		case cDown:
			if o.on {
				downSince[o.target], wentDown[o.target] = o.at, o.at
			} else {
				downSince[o.target], upAt[o.target] = time.Time{}, o.at
			}
		case cDeath:
			deaths[o.svc] = append(deaths[o.svc], o.at)
			lost[o.svc] = append(lost[o.svc], o.at)
			unnoticed[o.svc] = true
		case cGone:
			lost[o.svc] = append(lost[o.svc], o.at)
		case cNotice:
			unnoticed[o.svc] = false
		case cReload:
			reloads[o.target] = append(reloads[o.target], [2]time.Time{o.began, o.at})
		case cRequest:
			if o.port == opPort {
				if o.err != "" {
					add(OthersUntouchedAcross, o, "a request through the operator's own frontend failed (%s)", o.err)
				}
				continue
			}
			if o.port == otherPortIdx {
				if o.err != "" {
					add(OthersUntouchedAcross, o, "a request through the other install's %s failed (%s)", otherService, o.err)
				}
				continue
			}
			h := holder(o.target, o.port)
			if o.err != "" && h < 0 {
				// No settled holder: one of the claimants serves once
				// the last change of the port's claims is Bounds.Converge
				// old (a frontend made, handed over).
				claimant, why := -1, ""
				for s, p := range claims {
					if p == o.port {
						if claimant < 0 {
							claimant = s
						}
						if w := excused(s, o.target, o.at, o.began, o.err); w != "" {
							why = w
						}
					}
				}
				switch {
				case claimant < 0:
					ev.Excused[ExcuseUnclaimed]++
				case o.at.Sub(changed[o.port]) <= b.Converge:
					ev.Excused[ExcuseClaimChanged]++
				case outage(o.target, o.at) && changed[o.port].After(settledAt[o.target]):
					ev.Excused[ExcuseTargetDown]++
				case why != "":
					ev.Excused[why]++
				default:
					add(NoFailedRequest, o, "a request through port %d failed (%s) while %s claimed it, unchanged for %v", o.port, o.err, className(claimant), b.Converge)
				}
				continue
			}
			if o.err != "" {
				if why := excused(h, o.target, o.at, o.began, o.err); why != "" {
					ev.Excused[why]++
					continue
				}
				add(NoFailedRequest, o, "a request through port %d failed (%s) while %s held it", o.port, o.err, className(h))
				continue
			}
			x := o.svc
			claimed := x >= 0 && x < services && (claims[x] == o.port || o.at.Sub(claimedUntil[[2]int{x, o.port}]) <= b.Converge ||
				outage(o.target, o.at) && claimedUntil[[2]int{x, o.port}].After(settledAt[o.target]))
			if !claimed {
				add(OthersUntouchedAcross, o, "port %d answered by a pod of %s, which has not claimed it for %v", o.port, classNameOr(x), b.Converge)
				continue
			}
			if h >= 0 && x != h {
				add(HolderKeeps, o, "port %d, which %s holds, answered by a pod of %s", o.port, className(h), className(x))
			}
		}
	}
	return ev
}

func className(s int) string { return fmt.Sprintf("c-%d", s) }

func classNameOr(s int) string {
	if s < 0 {
		return "no Service"
	}
	return className(s)
}
