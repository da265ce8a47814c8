package fleet

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// Reasons of the warnings Warn is told (the Events' reasons).
const (
	// ReasonRefused: the Service asked to be followed and is not (a
	// backend another Service names too, a port of the load balancer
	// address another holds, a bad annotation...).
	ReasonRefused = "Refused"
	// ReasonFrontendFailed: a class Service's frontends could not be made.
	ReasonFrontendFailed = "FrontendFailed"
)

// notice is one warning about one Service, as Warn is told it.
type notice struct {
	key, reason, message string
}

// changedNotices returns the notices of now that were not in before (pure):
// a warning is told once while it lasts, again only once it changed or
// ended and came back. Their order is now's.
func changedNotices(before, now map[string][]notice) []notice {
	var out []notice
	keys := make([]string, 0, len(now))
	for k := range now {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Equal(before[k], now[k]) {
			out = append(out, now[k]...)
		}
	}
	return out
}

// refusalNotices groups refusals by Service.
func refusalNotices(refused []services.Refused) map[string][]notice {
	out := map[string][]notice{}
	for _, r := range refused {
		out[r.Service] = append(out[r.Service], notice{key: r.Service, reason: ReasonRefused, message: r.Reason})
	}
	return out
}

// frontendNotices are the class Services whose frontends failed.
func frontendNotices(failed map[string]string) map[string][]notice {
	out := map[string][]notice{}
	for k, why := range failed {
		out[k] = []notice{{key: k, reason: ReasonFrontendFailed, message: why}}
	}
	return out
}

// tell logs each changed notice and has Warn told of it, with the Service
// it concerns (from all: a Service not listed gets no Event, there is no
// object to tell). It replaces the notices remembered under kind for the
// keys in now; full (every Service was listed) also forgets those that
// ended, so that one coming back is told again.
func (f *Fleet) tell(kind string, now map[string][]notice, all []corev1.Service, full bool) {
	f.mu.Lock()
	if f.notices == nil {
		f.notices = map[string]map[string][]notice{}
	}
	before := f.notices[kind]
	if before == nil {
		before = map[string][]notice{}
	}
	changed := changedNotices(before, now)
	if full {
		before = map[string][]notice{}
	}
	for k, n := range now {
		before[k] = n
	}
	f.notices[kind] = before
	f.mu.Unlock()

	var byKey map[string]*corev1.Service
	for _, n := range changed {
		if f.Log != nil {
			f.Log.Warn("service "+strings.ToLower(n.reason), "service", n.key, "reason", n.message)
		}
		if f.Warn == nil {
			continue
		}
		if byKey == nil {
			byKey = map[string]*corev1.Service{}
			for i := range all {
				byKey[all[i].Namespace+"/"+all[i].Name] = &all[i]
			}
		}
		if svc, ok := byKey[n.key]; ok {
			f.Warn(svc, n.reason, n.message)
		}
	}
}
