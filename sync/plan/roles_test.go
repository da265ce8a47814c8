package plan

import (
	"slices"
	"strings"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// TestRoleChangeAtTheCapFinishes: a zone role change replaces a server by
// one under its other name, kept until the new one serves (handingOver). At
// MAX_SERVERS the new one was capped and the old one handed over for good,
// the follow-up asking every 10 s. Now the old server gives its room: parked
// while at least half of the serving servers (and one) keep serving, deleted
// by a later reconcile, and its replacement added, gated. Successive
// reconciles (simulate: every check passes between two) converge, never
// past the cap, never with an empty backend, never putting a server in
// service before its check passed.
func TestRoleChangeAtTheCapFinishes(t *testing.T) {
	serving := func(name, addr string) model.Server { return rt(srv(name, addr, 80, model.Ready), true, true, 0, 0) }
	// becomes is the desired server replacing old under name, with the
	// role its name says.
	becomes := func(name, addr, old string) model.Server {
		s := srv(name, addr, 80, model.Ready)
		s.Backup, s.Replaces = strings.HasSuffix(name, "_bk"), []string{old}
		return s
	}
	same := func(name, addr string) model.Server {
		s := srv(name, addr, 80, model.Ready)
		s.Backup = strings.HasSuffix(name, "_bk")
		return s
	}
	tests := []struct {
		name    string
		current model.Backend
		desired model.Backend
		pol     Policy
		// minServing: servers in service after every reconcile, at least.
		minServing int
		// kept: the role change cannot finish without emptying the
		// backend; the old server stays handed over, in service.
		kept []string
	}{
		{name: "one of four servers becomes a backup",
			current:    be(serving("n1", "10.0.0.1"), serving("n2", "10.0.0.2"), serving("n3", "10.0.0.3"), serving("n4", "10.0.0.4")),
			desired:    be(becomes("n1_bk", "10.0.0.1", "n1"), same("n2", "10.0.0.2"), same("n3", "10.0.0.3"), same("n4", "10.0.0.4")),
			pol:        Policy{GateChecks: true, MaxServers: 4},
			minServing: 3},
		{name: "a backup becomes active (its zone is the local one now)",
			current:    be(serving("n1", "10.0.0.1"), serving("n2_bk", "10.0.0.2")),
			desired:    be(same("n1", "10.0.0.1"), becomes("n2", "10.0.0.2", "n2_bk")),
			pol:        Policy{GateChecks: true, MaxServers: 2},
			minServing: 1},
		{name: "every server changes role at once (a new HAPROXY_LOCAL_ZONE), guard and batch on",
			current: be(serving("n1", "10.0.0.1"), serving("n2", "10.0.0.2"), serving("n3_bk", "10.0.0.3"), serving("n4_bk", "10.0.0.4")),
			desired: be(becomes("n1_bk", "10.0.0.1", "n1"), becomes("n2_bk", "10.0.0.2", "n2"),
				becomes("n3", "10.0.0.3", "n3_bk"), becomes("n4", "10.0.0.4", "n4_bk")),
			pol:        Policy{GateChecks: true, MaxServers: 4, GuardPercent: 100, DeleteBatch: 10},
			minServing: 2},
		{name: "this cluster's only server, another cluster's serving",
			current:    be(serving("a-n1", "10.0.0.1"), serving("b-n9", "10.0.9.1")),
			desired:    be(becomes("a-n1_bk", "10.0.0.1", "a-n1")),
			pol:        Policy{GateChecks: true, MaxServers: 1, Owner: "a-"},
			minServing: 1},
		{name: "the backend's only server at a cap of one: kept, never an empty backend",
			current:    be(serving("n1", "10.0.0.1")),
			desired:    be(becomes("n1_bk", "10.0.0.1", "n1")),
			pol:        Policy{GateChecks: true, MaxServers: 1},
			minServing: 1,
			kept:       []string{"n1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.current
			var p Plan
			for round := 1; round <= 12; round++ {
				p = CalculateWith(b, tt.desired, tt.pol)
				for _, ch := range p.Changes {
					if ch.New != nil && ch.New.State == model.Ready && !ch.Gate &&
						(ch.Old == nil || ch.Old.Runtime == nil || !ch.Old.Runtime.CheckPassed) {
						t.Fatalf("round %d: %s put in service before its check passed", round, ch.Name)
					}
				}
				b = simulate(b, p)
				if n := len(b.Owned(tt.pol.Owner).Servers); n > tt.pol.MaxServers {
					t.Fatalf("round %d: %d servers, past the cap of %d: %v", round, n, tt.pol.MaxServers, serverNames(b))
				}
				if n := inService(b); n < tt.minServing {
					t.Fatalf("round %d: %d in service, want %d at least: %v", round, n, tt.minServing, serverNames(b))
				}
			}
			if tt.kept != nil {
				if !slices.Equal(p.HandingOver, tt.kept) || p.HasChanges() {
					t.Errorf("handing over %v, changes %v; want %v kept as it is", p.HandingOver, summary(p), tt.kept)
				}
				return
			}
			if p.HasChanges() || p.Pending() || len(p.Capped) > 0 {
				t.Errorf("not finished: %v, capped %v, handing over %v, waiting %v, draining %v",
					summary(p), p.Capped, p.HandingOver, p.Waiting, p.Draining)
			}
			var want []string
			for _, s := range tt.desired.Servers {
				want = append(want, s.Name)
			}
			slices.Sort(want)
			if got := serverNames(b.Owned(tt.pol.Owner)); !slices.Equal(got, want) {
				t.Errorf("in the end %v, want %v", got, want)
			}
		})
	}
}

func serverNames(b model.Backend) []string {
	var out []string
	for _, s := range b.Servers {
		out = append(out, s.Name)
	}
	return out
}
