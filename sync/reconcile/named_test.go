package reconcile

import "testing"

// TestNamed: one name per state in logs and metrics. A server held in drain
// for its check is gated on entry and on exit; a server drained for another
// reason (a taint, a terminating pod) stays drain both ways.
func TestNamed(t *testing.T) {
	for _, c := range []struct {
		name       string
		in         Transition
		wasGated   bool
		from, to   string
		wantReason string
	}{
		{"new server gated", Transition{From: "absent", To: "drain", Reason: "check"}, false, "absent", "gated", "awaiting-check"},
		{"back from maintenance, gated", Transition{From: "maint", To: "drain", Reason: "check"}, false, "maint", "gated", "awaiting-check"},
		{"parked awaiting the reload", Transition{From: "absent", To: "maint", Reason: "check"}, false, "absent", "maint", "awaiting-reload"},
		{"gated server enters service", Transition{From: "drain", To: "ready", Reason: "endpoints"}, true, "gated", "ready", "endpoints"},
		{"gated server parked", Transition{From: "drain", To: "maint", Reason: "endpoints"}, true, "gated", "maint", "endpoints"},
		{"tainted server back", Transition{From: "drain", To: "ready", Reason: "endpoints"}, false, "drain", "ready", "endpoints"},
		{"taint drains", Transition{From: "ready", To: "drain", Reason: "taint"}, false, "ready", "drain", "taint"},
		{"unwanted deleted", Transition{From: "maint", To: "deleted", Reason: "unwanted"}, false, "maint", "deleted", "unwanted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := named(c.in, c.wasGated)
			if got.From != c.from || got.To != c.to || got.Reason != c.wantReason {
				t.Errorf("named(%+v, %v) = %s>%s %s, want %s>%s %s", c.in, c.wasGated, got.From, got.To, got.Reason, c.from, c.to, c.wantReason)
			}
		})
	}
}
