package services

import (
	"cmp"
	"strconv"
	"time"
)

// Hold is how surely a Service serves a resource it claims now. A later
// claimant must never take what a Service serves: its clients would reach
// the other Service's pods, and a refusal of both would freeze the holder.
type Hold int

// The holds, from the least sure.
const (
	// HoldsNothing: nothing says the Service serves it (a new claimant).
	HoldsNothing Hold = iota
	// HoldsStatus: the class Service's status.loadBalancer.ingress is
	// written, so it is served; the status does not say which ports.
	HoldsStatus
	// HoldsResource: the previous selection gave the Service this very
	// resource (see Holdings).
	HoldsResource
)

// Claim is one Service asking for one resource: a backend (annotation) or a
// port of the load balancer address (class); see BackendResource and
// PortResource.
type Claim struct {
	Resource string
	Service  string // its key
	Created  time.Time
	Hold     Hold
}

// BackendResource and PortResource name what an annotated Service's backend
// and a class Service's port claim: a backend is one Service's, and so is a
// port of the load balancer address (one per target).
func BackendResource(backend string) string { return "backend " + backend }

// PortResource: see BackendResource.
func PortResource(port int32) string { return "port " + strconv.Itoa(int(port)) }

// Award returns, for each resource claimed, the Service it goes to: the
// claimant that holds it most surely; between claimants that hold it alike
// (none yet, usually), the oldest by creationTimestamp, then by key. Age
// only breaks ties, so an older Service edited to name what another serves
// does not take it. Pure, and the claims' order does not matter.
func Award(claims []Claim) map[string]string {
	best := map[string]Claim{}
	for _, c := range claims {
		b, ok := best[c.Resource]
		if !ok || before(c, b) {
			best[c.Resource] = c
		}
	}
	out := make(map[string]string, len(best))
	for r, c := range best {
		out[r] = c.Service
	}
	return out
}

// before reports whether a wins a resource over b.
func before(a, b Claim) bool {
	if a.Hold != b.Hold {
		return a.Hold > b.Hold
	}
	if c := a.Created.Compare(b.Created); c != 0 {
		return c < 0
	}
	return cmp.Less(a.Service, b.Service)
}

// Holdings are the resources the chosen Services hold, by resource: what
// the next Select is given as held, so that each keeps what it serves.
func Holdings(chosen []Selected) map[string]string {
	out := map[string]string{}
	for _, s := range chosen {
		for _, r := range s.resources() {
			out[r] = s.Key()
		}
	}
	return out
}

// resources are what s claims: a class Service its ports of the load
// balancer address, an annotated one its backends.
func (s Selected) resources() []string {
	out := make([]string, 0, len(s.Ports))
	for _, p := range s.Ports {
		if s.Class {
			out = append(out, PortResource(p.Port))
		} else {
			out = append(out, BackendResource(p.Backend))
		}
	}
	return out
}
