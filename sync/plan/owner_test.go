package plan

import (
	"slices"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// foreign are servers of another cluster ("b-") and a static one of
// haproxy.cfg: an instance with Owner "a-" must never touch them.
func foreign() []model.Server {
	return []model.Server{
		up(srv("b-node1", "10.1.0.1", 80, model.Ready)),
		up(srv("b-node2", "10.1.0.2", 80, model.Ready)),
		srv("b-node3", "10.1.0.3", 80, model.Maint),
		up(srv("static1", "10.2.0.1", 80, model.Ready)),
		// A name that only starts like the prefix is not the prefix.
		up(srv("a", "10.2.0.2", 80, model.Ready)),
	}
}

func withForeign(own ...model.Server) model.Backend {
	return be(append(own, foreign()...)...)
}

func TestOwnerLeavesForeignServersAlone(t *testing.T) {
	withRT := func(s model.Server, sessions int) model.Server {
		s.Runtime = &model.Runtime{CheckRunning: true, CheckPassed: true, Sessions: sessions}
		return s
	}
	tests := []struct {
		name    string
		current model.Backend
		desired model.Backend
		pol     Policy
		want    map[Action][]string
		guarded []string
		capped  []string
	}{
		{name: "first sync adds only its own servers",
			current: withForeign(),
			desired: be(srv("a-node1", "10.0.0.1", 80, model.Ready)),
			want:    map[Action][]string{Add: {"a-node1"}}},
		{name: "a scale-down deletes only its own server",
			current: withForeign(up(srv("a-node1", "10.0.0.1", 80, model.Ready)), up(srv("a-node2", "10.0.0.2", 80, model.Ready))),
			desired: be(srv("a-node1", "10.0.0.1", 80, model.Ready)),
			want:    map[Action][]string{Delete: {"a-node2"}}},
		{name: "zero endpoints park its own servers only",
			current: withForeign(up(srv("a-node1", "10.0.0.1", 80, model.Ready))),
			desired: be(),
			want:    map[Action][]string{Maint: {"a-node1"}}},
		{name: "the guard's share counts its own servers: 1 of 2 holds at 50%",
			current: withForeign(up(srv("a-node1", "10.0.0.1", 80, model.Ready)), up(srv("a-node2", "10.0.0.2", 80, model.Ready))),
			desired: be(srv("a-node1", "10.0.0.1", 80, model.Ready)),
			pol:     Policy{GuardPercent: 50},
			want:    map[Action][]string{Maint: {"a-node2"}},
			guarded: []string{"a-node2"}},
		{name: "the guard's share counts its own servers: 1 of 3 does not hold at 50%",
			current: withForeign(up(srv("a-node1", "10.0.0.1", 80, model.Ready)), up(srv("a-node2", "10.0.0.2", 80, model.Ready)), up(srv("a-node3", "10.0.0.3", 80, model.Ready))),
			desired: be(srv("a-node1", "10.0.0.1", 80, model.Ready), srv("a-node2", "10.0.0.2", 80, model.Ready)),
			pol:     Policy{GuardPercent: 50},
			want:    map[Action][]string{Delete: {"a-node3"}}},
		{name: "every own server going is guarded, the others' UP servers do not release it",
			current: withForeign(up(srv("a-node1", "10.0.0.1", 80, model.Ready))),
			desired: be(srv("a-node9", "10.0.0.9", 80, model.Ready)),
			pol:     Policy{GuardPercent: 100},
			want:    map[Action][]string{Add: {"a-node9"}, Maint: {"a-node1"}},
			guarded: []string{"a-node1"}},
		{name: "MAX_SERVERS counts its own servers only",
			current: withForeign(srv("a-node1", "10.0.0.1", 80, model.Ready)),
			desired: be(srv("a-node1", "10.0.0.1", 80, model.Ready), srv("a-node2", "10.0.0.2", 80, model.Ready), srv("a-node3", "10.0.0.3", 80, model.Ready)),
			pol:     Policy{MaxServers: 2},
			want:    map[Action][]string{Add: {"a-node2"}},
			capped:  []string{"a-node3"}},
		{name: "gated entry and sessions: only its own",
			current: withForeign(withRT(srv("a-node1", "10.0.0.1", 80, model.Ready), 3)),
			desired: be(srv("a-node2", "10.0.0.2", 80, model.Ready)),
			pol:     Policy{GateChecks: true, DeleteBatch: 1},
			want:    map[Action][]string{Add: {"a-node2"}, Maint: {"a-node1"}}},
		{name: "a desired state that names a foreign server leaves it alone",
			current: withForeign(),
			desired: be(srv("a-node1", "10.0.0.1", 80, model.Ready), srv("b-node1", "10.9.9.9", 80, model.Maint)),
			want:    map[Action][]string{Add: {"a-node1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.pol.Owner = "a-"
			// A desired server outside the prefix never comes from package
			// desired; should one come, it is not this instance's either.
			tt.desired = tt.desired.Owned(tt.pol.Owner)
			p := CalculateWith(tt.current, tt.desired, tt.pol)
			if got := summary(p); !equalSummary(got, tt.want) {
				t.Errorf("plan = %v, want %v", got, tt.want)
			}
			if !slices.Equal(p.Guarded, tt.guarded) {
				t.Errorf("guarded = %v, want %v", p.Guarded, tt.guarded)
			}
			if !slices.Equal(p.Capped, tt.capped) {
				t.Errorf("capped = %v, want %v", p.Capped, tt.capped)
			}
			for _, f := range foreign() {
				for _, ch := range p.Changes {
					if ch.Name == f.Name {
						t.Errorf("foreign server %s planned: %s", f.Name, ch.Action)
					}
				}
				for _, l := range [][]string{p.Guarded, p.Capped, p.Waiting, p.Draining} {
					if slices.Contains(l, f.Name) {
						t.Errorf("foreign server %s listed in %v", f.Name, l)
					}
				}
			}
			// Applied, the plan leaves every foreign server as it was.
			after := simulate(tt.current, p)
			for _, f := range foreign() {
				i := slices.IndexFunc(after.Servers, func(s model.Server) bool { return s.Name == f.Name })
				if i < 0 || after.Servers[i].State != f.State || after.Servers[i].Address != f.Address {
					t.Errorf("foreign server %s changed", f.Name)
				}
			}
		})
	}
}

func equalSummary(a, b map[Action][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func TestNoOwnerOwnsEverything(t *testing.T) {
	p := CalculateWith(withForeign(), be(), Policy{})
	if got := len(p.Names(Maint)); got != 4 { // the four not in maint already
		t.Errorf("without an owner every server is the instance's: %d parked, want 4", got)
	}
}
