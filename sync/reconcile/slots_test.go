package reconcile

import (
	"reflect"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// TestUnslot: what the readiness gate matches with the desired state is
// keyed by the desired servers' own names, not by the slots holding them.
func TestUnslot(t *testing.T) {
	in := map[string]bool{"k8s1": true, "node-c": true}
	got := unslot(in, map[string]string{"k8s1": "node-a", "k8s2": "node-b"})
	if want := map[string]bool{"node-a": true, "node-c": true}; !reflect.DeepEqual(got, want) {
		t.Errorf("unslot = %v, want %v", got, want)
	}
	if got := unslot(in, nil); !reflect.DeepEqual(got, in) {
		t.Errorf("no slots: %v", got)
	}
	var tr TargetResult
	tr.slotUse(plan.SlotUse{Total: 3, Filled: 2, Idle: 1, Overflow: []string{"node-d"}})
	if !reflect.DeepEqual(tr.Slots, map[string]int{"filled": 2, "idle": 1}) || len(tr.Overflow) != 1 {
		t.Errorf("result %+v", tr)
	}
	tr.slotUse(plan.SlotUse{})
	if tr.Slots != nil || tr.Overflow != nil {
		t.Errorf("no slots: %+v", tr)
	}
}
