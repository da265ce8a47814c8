package reconcile

import "github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"

// slotUse records how the backend's slots are used (plan.AssignSlots).
func (tr *TargetResult) slotUse(u plan.SlotUse) {
	tr.Overflow, tr.Slots = u.Overflow, nil
	if u.Total > 0 {
		tr.Slots = map[string]int{"filled": u.Filled, "idle": u.Idle}
	}
}

// unslot gives back the desired servers' own names to what is keyed by
// slot name (names: slot → own name), for what matches them with the
// desired state (the readiness gate).
func unslot[V any](m map[string]V, names map[string]string) map[string]V {
	if len(names) == 0 || m == nil {
		return m
	}
	out := make(map[string]V, len(m))
	for k, v := range m {
		if own, ok := names[k]; ok {
			k = own
		}
		out[k] = v
	}
	return out
}

// warnNoSlots says once per target and backend that its servers are added
// bare (TargetResult.NoSlots): a backend with a default-server line (ssl,
// send-proxy-v2) is then half-served, which the socket cannot tell.
func (r *Reconciler) warnNoSlots(target, backend string) {
	if _, seen := r.warned.LoadOrStore(target+"\x00noslots\x00"+backend, true); seen {
		return
	}
	r.log().Warn("backend has no slots: servers added through the admin socket get none of haproxy.cfg's default-server keywords (ssl, send-proxy-v2, maxconn...) and every reload drops them until re-added; declare slots (server-template, docs/haproxy.md)",
		"target", target, "backend", backend)
}
