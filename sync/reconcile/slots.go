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
