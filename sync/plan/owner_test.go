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

// TestRoleChangeHandsOver: a server whose zone role changes is a new
// server under its other name; the old one keeps serving as it is until
// the new one is in service, so the backend never loses it, even when
// every server changes role at once under the guard.
func TestRoleChangeHandsOver(t *testing.T) {
	running := func(s model.Server) model.Server {
		s.Runtime = &model.Runtime{CheckRunning: true, CheckPassed: true}
		return up(s)
	}
	backup := func(s model.Server, replaces string) model.Server {
		s.Backup, s.Replaces = true, []string{replaces}
		return s
	}
	active := func(s model.Server, replaces string) model.Server { s.Replaces = []string{replaces}; return s }
	cur := be(running(srv("a-n1", "10.0.0.1", 80, model.Ready)), running(srv("a-n2", "10.0.0.2", 80, model.Ready)))
	want := be(backup(srv("a-n1_bk", "10.0.0.1", 80, model.Ready), "a-n1"), backup(srv("a-n2_bk", "10.0.0.2", 80, model.Ready), "a-n2"))
	pol := Policy{GateChecks: true, GuardPercent: 100, Owner: "a-"}

	p := CalculateWith(cur, want, pol)
	if got, want := summary(p), map[Action][]string{Add: {"a-n1_bk", "a-n2_bk"}}; !equalSummary(got, want) {
		t.Fatalf("round 1: %v, want %v (the old servers untouched)", got, want)
	}
	if !slices.Equal(p.Waiting, []string{"a-n1_bk", "a-n2_bk"}) {
		t.Errorf("round 1: waiting %v", p.Waiting)
	}
	// Applied, without the checks passing yet: still nothing for the old ones.
	gated := cur
	for _, ch := range p.Changes {
		s := *ch.New
		s.Runtime = &model.Runtime{CheckRunning: true}
		gated.Servers = append(gated.Servers, s)
	}
	if p := CalculateWith(gated, want, pol); len(summary(p)) != 0 || !slices.Equal(p.HandingOver, []string{"a-n1", "a-n2"}) || !p.Pending() {
		t.Fatalf("while the new ones wait: %v, handing over %v; want nothing, both old ones listed", summary(p), p.HandingOver)
	}
	// An old one that no longer serves (down, or drained: its pod is
	// going) leaves no hole: it is not kept for a replacement whose check
	// may never pass (seed 490652228 on 3.4.0 kept one for good).
	down := gated
	down.Servers = slices.Clone(gated.Servers)
	down.Servers[0].Up = false
	down.Servers[1].State, down.Servers[1].Weight = model.Drain, 0
	if p := CalculateWith(down, want, pol); len(p.HandingOver) != 0 {
		t.Errorf("old ones down and drained: handing over %v, want none", p.HandingOver)
	}
	// The reconcile that puts the new ones in service removes the old ones:
	// nothing is left for a later reconcile nobody would ask for.
	passed := gated
	passed.Servers = slices.Clone(gated.Servers)
	for i, s := range passed.Servers {
		if s.Backup {
			s.Runtime = &model.Runtime{CheckRunning: true, CheckPassed: true}
			passed.Servers[i] = up(s)
		}
	}
	if p := CalculateWith(passed, want, pol); !equalSummary(summary(p), map[Action][]string{Update: {"a-n1_bk", "a-n2_bk"}, Delete: {"a-n1", "a-n2"}}) || len(p.HandingOver) != 0 {
		t.Errorf("once checked: %v, handing over %v; want the new ones in service and the old ones gone (no session: the driver parks, then deletes) together", summary(p), p.HandingOver)
	}
	// The checks pass: the new ones enter service, the old ones are parked
	// and then deleted; at every step some server is in service.
	b := gated
	for round := 2; round < 8; round++ {
		b = simulate(b, CalculateWith(b, want, pol))
		if inService(b) == 0 {
			t.Fatalf("round %d: no server in service: %+v", round, b.Servers)
		}
	}
	var names []string
	for _, s := range b.Servers {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"a-n1_bk", "a-n2_bk"}) {
		t.Errorf("in the end: %v, want the backup servers only", names)
	}

	// Back to active, on a driver that cannot see checks: the new server is
	// added ready, as in service as it will ever be shown, and the old one
	// goes in the same plan.
	b.Servers[0].Runtime, b.Servers[1].Runtime = nil, nil
	back := be(active(srv("a-n1", "10.0.0.1", 80, model.Ready), "a-n1_bk"), active(srv("a-n2", "10.0.0.2", 80, model.Ready), "a-n2_bk"))
	if got, want := summary(CalculateWith(b, back, Policy{Owner: "a-"})), (map[Action][]string{Add: {"a-n1", "a-n2"}, Delete: {"a-n1_bk", "a-n2_bk"}}); !equalSummary(got, want) {
		t.Errorf("back to active: %v, want %v", got, want)
	}
	// A replacement that is not ready itself hands nothing over.
	drained := be(active(srv("a-n1", "10.0.0.1", 80, model.Drain), "a-n1_bk"))
	if got := summary(CalculateWith(b, drained, Policy{Owner: "a-"})); !slices.Contains(got[Delete], "a-n1_bk") {
		t.Errorf("a drained replacement: %v, want a-n1_bk deleted", got)
	}
}
