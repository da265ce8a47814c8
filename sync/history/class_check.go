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
	// death: the Service whose ready pod died; reload: when it began.
	what string
}

type classObsKind int

const (
	cStep classObsKind = iota
	cRequest
	cSettled
	cDeath  // a ready pod stopped answering (killed), svc
	cReload // HAProxy reloaded (by the Data Plane API), began..at
	cNotice // every killed pod of svc is out of Kubernetes
)

// Why a failed request through a VIP port breaks no invariant, beside a
// holder's pod's death (ExcuseDeath, ExcuseDeathInFlight, ExcuseReloadLoadsUp).
const (
	ExcuseUnclaimed = "no Service claims the port"
	// ExcuseClaimChanged: within Bounds.Converge of a Service beginning
	// or ceasing to claim the port, with no holder settled since.
	ExcuseClaimChanged = "the port's claims changed"
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
	var holders []int
	var settledAt time.Time
	deaths := map[int][]time.Time{}
	unnoticed := map[int]bool{} // a killed pod of s is still in Kubernetes
	var reloads [][2]time.Time
	lastFail := map[int]time.Time{}
	add := func(inv Invariant, at time.Time, port int, format string, args ...any) {
		what := fmt.Sprintf(format, args...)
		if n := len(ev.Violations); n > 0 && ev.Violations[n-1].Invariant == inv && inv == NoFailedRequest && at.Sub(lastFail[port]) < time.Second {
			ev.Violations[n-1].Count++
			lastFail[port] = at
			return
		}
		lastFail[port] = at
		ev.Violations = append(ev.Violations, Violation{Invariant: inv, At: at, Step: step, What: what})
	}
	// holder is the Service found holding p at the last settled moment
	// that still claims it without a break since; -1: none.
	holder := func(p int) int {
		if p < 0 || p >= len(holders) {
			return -1
		}
		h := holders[p]
		if h < 0 || claims[h] != p || claimSince[h].After(settledAt) {
			return -1
		}
		return h
	}
	excused := func(h int, at, began time.Time) string {
		for _, d := range deaths[h] {
			if !at.Before(d) && at.Sub(d) <= b.Abrupt {
				return ExcuseDeath
			}
			if !began.IsZero() && d.After(began) && !d.After(at) {
				return ExcuseDeathInFlight
			}
		}
		if unnoticed[h] {
			for _, r := range reloads {
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
			holders, settledAt = o.holders, o.at
		case cDeath:
			deaths[o.svc] = append(deaths[o.svc], o.at)
			unnoticed[o.svc] = true
		case cNotice:
			unnoticed[o.svc] = false
		case cReload:
			reloads = append(reloads, [2]time.Time{o.began, o.at})
		case cRequest:
			if o.port == opPort {
				if o.err != "" {
					add(OthersUntouchedAcross, o.at, o.port, "a request through the operator's own frontend failed (%s)", o.err)
				}
				continue
			}
			h := holder(o.port)
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
						if w := excused(s, o.at, o.began); w != "" {
							why = w
						}
					}
				}
				switch {
				case claimant < 0:
					ev.Excused[ExcuseUnclaimed]++
				case o.at.Sub(changed[o.port]) <= b.Converge:
					ev.Excused[ExcuseClaimChanged]++
				case why != "":
					ev.Excused[why]++
				default:
					add(NoFailedRequest, o.at, o.port, "a request through port %d failed (%s) while %s claimed it, unchanged for %v", o.port, o.err, className(claimant), b.Converge)
				}
				continue
			}
			if o.err != "" {
				if why := excused(h, o.at, o.began); why != "" {
					ev.Excused[why]++
					continue
				}
				add(NoFailedRequest, o.at, o.port, "a request through port %d failed (%s) while %s held it", o.port, o.err, className(h))
				continue
			}
			x := o.svc
			claimed := x >= 0 && x < services && (claims[x] == o.port || o.at.Sub(claimedUntil[[2]int{x, o.port}]) <= b.Converge)
			if !claimed {
				add(OthersUntouchedAcross, o.at, o.port, "port %d answered by a pod of %s, which has not claimed it for %v", o.port, classNameOr(x), b.Converge)
				continue
			}
			if h >= 0 && x != h {
				add(HolderKeeps, o.at, o.port, "port %d, which %s holds, answered by a pod of %s", o.port, className(h), className(x))
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
