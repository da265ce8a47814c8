package dataplane

import (
	"reflect"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// TestToShut: whose sessions the socket shuts before the transaction
// deletes them (issue 43, defect 5: none were, through this driver).
func TestToShut(t *testing.T) {
	// parked is a server parked in the running HAProxy and haproxy.cfg.
	parked := func(name string) *model.Server {
		s := server(name, model.Maint, model.Maint)
		s.Runtime = &model.Runtime{Sessions: 2, CheckRunning: true, CheckPassed: true}
		return s
	}
	expired := func(s *model.Server) plan.Change {
		return plan.Change{Action: plan.Delete, Name: s.Name, Old: s, Kill: true}
	}
	for _, tt := range []struct {
		name    string
		changes []plan.Change
		socket  bool
		routes  string
		shut    []string
	}{
		{"past the drain timeout, socket: shut, then the transaction deletes it",
			[]plan.Change{expired(parked("x"))}, true, "structural:x", []string{"x"}},
		{"no socket: the transaction alone (the reload leaves its sessions to the old worker)",
			[]plan.Change{expired(parked("x"))}, false, "structural:x", nil},
		{"a deletion whose sessions ended: nothing to shut",
			[]plan.Change{{Action: plan.Delete, Name: "x", Old: parked("x")}}, true, "structural:x", nil},
		{"a server only the running HAProxy holds: the runtime API driver shuts and deletes it",
			[]plan.Change{expired(socketOnly("x", model.Maint))}, true, "onSocket:x", nil},
		{"beside many entries: still deleted by the transaction, shut first",
			append(entries(MaxRuntimeAdds+1), expired(parked("x"))), true, "first:21 structural:22", []string{"x"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := route(plan.Plan{Backend: "be", Changes: tt.changes}, tt.socket, false, true)
			if got := r.summary(); got != tt.routes {
				t.Errorf("routes %s, want %s", got, tt.routes)
			}
			if got := toShut(r.structural, tt.socket); !reflect.DeepEqual(got, tt.shut) {
				t.Errorf("shut %v, want %v", got, tt.shut)
			}
		})
	}
}
