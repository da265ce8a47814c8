package plan

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

var chk = model.Check{Inter: 5 * time.Second, Rise: 2, Fall: 2}

func srv(name, addr string, port int, st model.State) model.Server {
	return model.Server{Name: name, Address: addr, Port: port, Weight: 1, State: st, Check: chk}
}

func up(s model.Server) model.Server { s.Up = true; return s }

func be(servers ...model.Server) model.Backend {
	return model.Backend{Name: "be", Settings: model.Settings{Balance: "roundrobin", TCPCheck: true}, Servers: servers}
}

// summary is a plan reduced to action -> names, for readable expectations.
func summary(p Plan) map[Action][]string {
	out := map[Action][]string{}
	for _, c := range p.Changes {
		out[c.Action] = append(out[c.Action], c.Name)
	}
	return out
}

func TestCalculate(t *testing.T) {
	weighted := srv("a", "10.0.0.1", 80, model.Ready)
	weighted.Weight = 3
	drainedW0 := srv("a", "10.0.0.1", 80, model.Drain)
	drainedW0.Weight = 0
	maintW5 := srv("a", "10.0.0.1", 80, model.Maint)
	maintW5.Weight = 5
	proxied := srv("a", "10.0.0.1", 80, model.Ready)
	proxied.Check.SendProxyV2 = true

	tests := []struct {
		name     string
		current  model.Backend
		desired  model.Backend
		want     map[Action][]string
		settings bool
	}{
		{name: "unchanged backend gives an empty plan",
			current: be(srv("a", "10.0.0.1", 80, model.Ready), srv("b", "10.0.0.2", 80, model.Ready)),
			desired: be(srv("b", "10.0.0.2", 80, model.Ready), srv("a", "10.0.0.1", 80, model.Ready)),
			want:    map[Action][]string{}},
		{name: "first sync adds every server",
			current: be(),
			desired: be(srv("b", "10.0.0.2", 80, model.Ready), srv("a", "10.0.0.1", 80, model.Ready)),
			want:    map[Action][]string{Add: {"a", "b"}}},
		{name: "scale down deletes the missing server",
			current: be(srv("a", "10.0.0.1", 80, model.Ready), srv("b", "10.0.0.2", 80, model.Ready)),
			desired: be(srv("a", "10.0.0.1", 80, model.Ready)),
			want:    map[Action][]string{Delete: {"b"}}},
		{name: "address and port moves are updates",
			current: be(srv("a", "10.0.0.1", 80, model.Ready), srv("b", "10.0.0.2", 80, model.Ready)),
			desired: be(srv("a", "10.0.0.9", 80, model.Ready), srv("b", "10.0.0.2", 8080, model.Ready)),
			want:    map[Action][]string{Update: {"a", "b"}}},
		{name: "terminating endpoint drains",
			current: be(srv("a", "10.0.0.1", 80, model.Ready)),
			desired: be(srv("a", "10.0.0.1", 80, model.Drain)),
			want:    map[Action][]string{Drain: {"a"}}},
		{name: "not ready endpoint goes to maint",
			current: be(srv("a", "10.0.0.1", 80, model.Drain)),
			desired: be(srv("a", "10.0.0.1", 80, model.Maint)),
			want:    map[Action][]string{Maint: {"a"}}},
		{name: "drained server coming back is an update",
			current: be(drainedW0),
			desired: be(srv("a", "10.0.0.1", 80, model.Ready)),
			want:    map[Action][]string{Update: {"a"}}},
		{name: "weight of a drained or maint server does not matter",
			current: be(drainedW0, func() model.Server { s := maintW5; s.Name = "b"; return s }()),
			desired: be(srv("a", "10.0.0.1", 80, model.Drain), srv("b", "10.0.0.1", 80, model.Maint)),
			want:    map[Action][]string{}},
		{name: "weight change of a ready server is an update",
			current: be(srv("a", "10.0.0.1", 80, model.Ready)),
			desired: be(weighted),
			want:    map[Action][]string{Update: {"a"}}},
		{name: "check parameters change is an update",
			current: be(srv("a", "10.0.0.1", 80, model.Ready)),
			desired: be(proxied),
			want:    map[Action][]string{Update: {"a"}}},
		{name: "zero endpoints parks every server and deletes none",
			current: be(srv("a", "10.0.0.1", 80, model.Ready), srv("b", "10.0.0.2", 80, model.Drain), srv("c", "10.0.0.3", 80, model.Maint)),
			desired: be(),
			want:    map[Action][]string{Maint: {"a", "b"}}},
		{name: "mixed churn is sorted by name",
			current: be(srv("d", "10.0.0.4", 80, model.Ready), srv("b", "10.0.0.2", 80, model.Ready), srv("c", "10.0.0.3", 80, model.Ready)),
			desired: be(srv("c", "10.0.0.3", 80, model.Drain), srv("a", "10.0.0.1", 80, model.Ready), srv("b", "10.0.0.7", 80, model.Ready)),
			want:    map[Action][]string{Add: {"a"}, Update: {"b"}, Drain: {"c"}, Delete: {"d"}}},
		{name: "balance change is a settings change",
			current: model.Backend{Name: "be", Settings: model.Settings{Balance: "leastconn", TCPCheck: true}},
			desired: be(),
			want:    map[Action][]string{}, settings: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Calculate(tt.current, tt.desired)
			if got := summary(p); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("changes = %v, want %v", got, tt.want)
			}
			if (p.Settings != nil) != tt.settings {
				t.Errorf("settings change = %v, want %v", p.Settings, tt.settings)
			}
			if p.HasChanges() != (len(tt.want) > 0 || tt.settings) {
				t.Errorf("HasChanges = %v", p.HasChanges())
			}
			for i := 1; i < len(p.Changes); i++ {
				if p.Changes[i-1].Name >= p.Changes[i].Name {
					t.Errorf("changes not sorted: %q before %q", p.Changes[i-1].Name, p.Changes[i].Name)
				}
			}
		})
	}
}

func TestCalculateCarriesOldAndNew(t *testing.T) {
	cur := be(srv("a", "10.0.0.1", 80, model.Ready), srv("gone", "10.0.0.3", 80, model.Ready))
	cur.Revision = 42
	p := Calculate(cur, be(srv("a", "10.0.0.2", 80, model.Ready), srv("new", "10.0.0.4", 80, model.Ready)))
	if p.Revision != 42 || p.Backend != "be" {
		t.Fatalf("revision/backend = %d/%q", p.Revision, p.Backend)
	}
	byName := map[string]Change{}
	for _, c := range p.Changes {
		byName[c.Name] = c
	}
	if c := byName["a"]; c.Old.Address != "10.0.0.1" || c.New.Address != "10.0.0.2" {
		t.Errorf("update a: old %+v new %+v", c.Old, c.New)
	}
	if c := byName["new"]; c.Old != nil || c.New == nil {
		t.Errorf("add: old %+v new %+v", c.Old, c.New)
	}
	if c := byName["gone"]; c.Old == nil || c.New != nil {
		t.Errorf("delete: old %+v new %+v", c.Old, c.New)
	}
	if got := p.Names(Delete); !reflect.DeepEqual(got, []string{"gone"}) {
		t.Errorf("Names(Delete) = %v", got)
	}
	if got := p.Names(Drain); got == nil || len(got) != 0 {
		t.Errorf("Names(Drain) = %#v, want empty non-nil (JSON [])", got)
	}
}

func TestCalculateWithDeleteBatch(t *testing.T) {
	parked := func(name string) model.Server { return srv(name, "10.0.0.9", 80, model.Maint) }
	keep := srv("keep", "10.0.0.1", 80, model.Ready)
	tests := []struct {
		name    string
		current model.Backend
		desired model.Backend
		batch   int
		want    map[Action][]string
	}{
		{name: "first unwanted server is parked, not deleted",
			current: be(keep, srv("gone", "10.0.0.2", 80, model.Ready)), desired: be(keep), batch: 3,
			want: map[Action][]string{Maint: {"gone"}}},
		{name: "already parked servers below the batch: nothing to do",
			current: be(keep, parked("p1"), parked("p2")), desired: be(keep), batch: 3,
			want: map[Action][]string{}},
		{name: "the batch fills: every unwanted server is deleted together",
			current: be(keep, parked("p1"), parked("p2"), srv("gone", "10.0.0.2", 80, model.Ready)), desired: be(keep), batch: 3,
			want: map[Action][]string{Delete: {"gone", "p1", "p2"}}},
		{name: "a parked server asked for again comes back",
			current: be(keep, parked("p1")), desired: be(keep, srv("p1", "10.0.0.9", 80, model.Ready)), batch: 3,
			want: map[Action][]string{Update: {"p1"}}},
		{name: "batch 1 deletes at once",
			current: be(keep, srv("gone", "10.0.0.2", 80, model.Ready)), desired: be(keep), batch: 1,
			want: map[Action][]string{Delete: {"gone"}}},
		{name: "zero endpoints never delete, whatever the batch",
			current: be(parked("p1"), parked("p2"), srv("a", "10.0.0.2", 80, model.Ready)), desired: be(), batch: 2,
			want: map[Action][]string{Maint: {"a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := summary(CalculateWith(tt.current, tt.desired, Policy{DeleteBatch: tt.batch})); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("changes = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCalculateWithDeletionGuard(t *testing.T) {
	a, b, c := srv("a", "10.0.0.1", 80, model.Ready), srv("b", "10.0.0.2", 80, model.Ready), srv("c", "10.0.0.3", 80, model.Ready)
	n1, n2 := srv("n1", "10.0.1.1", 80, model.Ready), srv("n2", "10.0.1.2", 80, model.Ready)
	tests := []struct {
		name        string
		current     model.Backend
		desired     model.Backend
		guard       int
		want        map[Action][]string
		wantGuarded []string
	}{
		{name: "every server replaced at once: old ones parked, not deleted",
			current: be(a, b), desired: be(n1, n2), guard: 100,
			want:        map[Action][]string{Add: {"n1", "n2"}, Maint: {"a", "b"}},
			wantGuarded: []string{"a", "b"}},
		{name: "next reconcile, replacements in but not UP yet: still parked",
			current: be(srv("a", "10.0.0.1", 80, model.Maint), srv("b", "10.0.0.2", 80, model.Maint), n1, n2), desired: be(n1, n2), guard: 100,
			want: map[Action][]string{}, wantGuarded: []string{"a", "b"}},
		{name: "one replacement UP, the other not: still parked",
			current: be(srv("a", "10.0.0.1", 80, model.Maint), srv("b", "10.0.0.2", 80, model.Maint), up(n1), n2), desired: be(n1, n2), guard: 50,
			want: map[Action][]string{}, wantGuarded: []string{"a", "b"}},
		{name: "every replacement UP: the parked servers are deleted",
			current: be(srv("a", "10.0.0.1", 80, model.Maint), srv("b", "10.0.0.2", 80, model.Maint), up(n1), up(n2)), desired: be(n1, n2), guard: 100,
			want: map[Action][]string{Delete: {"a", "b"}}},
		{name: "scale down to servers that are UP: parked first",
			current: be(up(a), b, c), desired: be(a), guard: 50,
			want:        map[Action][]string{Maint: {"b", "c"}},
			wantGuarded: []string{"b", "c"}},
		{name: "scale down confirmed by the next reconcile: deleted",
			current: be(up(a), srv("b", "10.0.0.2", 80, model.Maint), srv("c", "10.0.0.3", 80, model.Maint)), desired: be(a), guard: 50,
			want: map[Action][]string{Delete: {"b", "c"}}},
		{name: "scale down, one more goes on the confirming reconcile: parked again",
			current: be(up(a), up(b), srv("c", "10.0.0.3", 80, model.Maint)), desired: be(a), guard: 50,
			want:        map[Action][]string{Maint: {"b"}},
			wantGuarded: []string{"b", "c"}},
		{name: "one of three goes: below the guard",
			current: be(up(a), up(b), c), desired: be(a, b), guard: 50,
			want: map[Action][]string{Delete: {"c"}}},
		{name: "two of three go: above 50%, parked",
			current: be(a, b, c), desired: be(a), guard: 50,
			want:        map[Action][]string{Maint: {"b", "c"}},
			wantGuarded: []string{"b", "c"}},
		{name: "exactly the share holds",
			current: be(a, b), desired: be(a), guard: 50,
			want:        map[Action][]string{Maint: {"b"}},
			wantGuarded: []string{"b"}},
		{name: "guard off deletes everything asked",
			current: be(a, b), desired: be(n1), guard: 0,
			want: map[Action][]string{Add: {"n1"}, Delete: {"a", "b"}}},
		{name: "zero endpoints: the safety rule, not the guard, parks",
			current: be(a, b), desired: be(), guard: 100,
			want: map[Action][]string{Maint: {"a", "b"}}},
		{name: "nothing unwanted: guard silent",
			current: be(a), desired: be(a, b), guard: 100,
			want: map[Action][]string{Add: {"b"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := CalculateWith(tt.current, tt.desired, Policy{GuardPercent: tt.guard})
			if got := summary(p); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("changes = %v, want %v", got, tt.want)
			}
			if !reflect.DeepEqual(p.Guarded, tt.wantGuarded) {
				t.Errorf("guarded = %v, want %v", p.Guarded, tt.wantGuarded)
			}
		})
	}
}

// TestGuardReleasesBesideAServerDesiredInMaintenance: the guard waits for
// the replacements meant to serve (desired Ready) to be UP, not for a server
// desired in drain or maintenance (a not-ready or terminating pod, a Node
// pinned), which may never be UP: beside one, the parked servers still go.
func TestGuardReleasesBesideAServerDesiredInMaintenance(t *testing.T) {
	a, n1 := srv("a", "10.0.0.1", 80, model.Ready), srv("n1", "10.0.1.1", 80, model.Ready)
	parkedB, parkedC := srv("b", "10.0.0.2", 80, model.Maint), srv("c", "10.0.0.3", 80, model.Maint)
	m, d := srv("m", "10.0.2.1", 80, model.Maint), srv("d", "10.0.2.2", 80, model.Drain)
	tests := []struct {
		name        string
		current     model.Backend
		desired     model.Backend
		want        map[Action][]string
		wantGuarded []string
	}{
		{name: "scale down beside a not-ready pod: parked first",
			current: be(up(a), srv("b", "10.0.0.2", 80, model.Ready), srv("c", "10.0.0.3", 80, model.Ready), m), desired: be(a, m),
			want:        map[Action][]string{Maint: {"b", "c"}},
			wantGuarded: []string{"b", "c"}},
		{name: "confirmed, the ready replacement UP, one desired in maintenance: deleted",
			current: be(up(a), parkedB, parkedC, m), desired: be(a, m),
			want: map[Action][]string{Delete: {"b", "c"}}},
		{name: "every server replaced, one replacement not ready: deleted once the ready one is UP",
			current: be(parkedB, parkedC, up(n1), m), desired: be(n1, m),
			want: map[Action][]string{Delete: {"b", "c"}}},
		{name: "beside a server desired in drain: deleted",
			current: be(up(a), parkedB, parkedC, d), desired: be(a, d),
			want: map[Action][]string{Delete: {"b", "c"}}},
		{name: "a ready replacement not UP yet: still parked",
			current: be(up(a), parkedB, parkedC, n1, m), desired: be(a, n1, m),
			want: map[Action][]string{}, wantGuarded: []string{"b", "c"}},
		{name: "no desired server meant to serve: still parked",
			current: be(parkedB, parkedC, m), desired: be(m),
			want: map[Action][]string{}, wantGuarded: []string{"b", "c"}},
		{name: "a ready replacement HAProxy refused (never added): deleted, it is not waited for",
			current: be(up(a), parkedB, parkedC), desired: be(a, n1),
			want: map[Action][]string{Add: {"n1"}, Delete: {"b", "c"}}},
		{name: "a ready replacement whose check has failed for 3 s (a dead node): deleted",
			current: be(up(a), parkedB, parkedC, deadFor(n1, deadReplacement)), desired: be(a, n1),
			want: map[Action][]string{Delete: {"b", "c"}}},
		{name: "a ready replacement whose check failed just now: still parked",
			current: be(up(a), parkedB, parkedC, deadFor(n1, time.Second)), desired: be(a, n1),
			want: map[Action][]string{}, wantGuarded: []string{"b", "c"}},
		{name: "a server going to maintenance does not count as serving for the share",
			current: be(up(a), up(srv("m", "10.0.2.1", 80, model.Ready)), srv("b", "10.0.0.2", 80, model.Ready)), desired: be(a, m),
			want:        map[Action][]string{Maint: {"b", "m"}},
			wantGuarded: []string{"b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := CalculateWith(tt.current, tt.desired, Policy{GuardPercent: 50})
			if got := summary(p); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("changes = %v, want %v", got, tt.want)
			}
			if !reflect.DeepEqual(p.Guarded, tt.wantGuarded) {
				t.Errorf("guarded = %v, want %v", p.Guarded, tt.wantGuarded)
			}
		})
	}
}

func TestCalculateWithMaxServers(t *testing.T) {
	a, b := srv("a", "10.0.0.1", 80, model.Ready), srv("b", "10.0.0.2", 80, model.Ready)
	c, d, e := srv("c", "10.0.0.3", 80, model.Ready), srv("d", "10.0.0.4", 80, model.Ready), srv("e", "10.0.0.5", 80, model.Ready)
	for _, tt := range []struct {
		name             string
		current, desired model.Backend
		max              int
		want             map[Action][]string
		capped           []string
	}{
		{"under the cap", be(a), be(a, b), 3, map[Action][]string{Add: {"b"}}, nil},
		{"adds past the cap are left out, last names first", be(a, b), be(a, b, c, d, e), 3, map[Action][]string{Add: {"c"}}, []string{"d", "e"}},
		{"deletions make room", be(a, b), be(c, d), 2, map[Action][]string{Add: {"c", "d"}, Delete: {"a", "b"}}, nil},
		{"already over: nothing added, nothing removed for it", be(a, b, c), be(a, b, c, d), 2, map[Action][]string{}, []string{"d"}},
		{"a ready pod's add before a parked one's, whatever the names", be(a), be(a, srv("b", "10.0.0.2", 80, model.Maint), e), 2, map[Action][]string{Add: {"e"}}, []string{"b"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := CalculateWith(tt.current, tt.desired, Policy{MaxServers: tt.max})
			if gated := CalculateWith(tt.current, tt.desired, Policy{MaxServers: tt.max, GateChecks: true}); !reflect.DeepEqual(gated.Capped, tt.capped) {
				t.Errorf("gated: capped = %v, want %v", gated.Capped, tt.capped)
			}
			if got := summary(p); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("changes = %v, want %v", got, tt.want)
			}
			if !reflect.DeepEqual(p.Capped, tt.capped) {
				t.Errorf("capped = %v, want %v", p.Capped, tt.capped)
			}
		})
	}
}

// TestSettingsLeftAloneWhenNotManaged: with no balance asked for
// (HAPROXY_BALANCE unset), the backend's settings are not touched.
func TestSettingsLeftAloneWhenNotManaged(t *testing.T) {
	cur := model.Backend{Name: "be", Settings: model.Settings{Balance: "leastconn"}}
	if p := Calculate(cur, model.Backend{Name: "be"}); p.Settings != nil || p.HasChanges() {
		t.Errorf("plan %+v", p)
	}
	if p := Calculate(cur, model.Backend{Name: "be", Settings: model.Settings{Balance: "roundrobin", TCPCheck: true}}); p.Settings == nil {
		t.Error("an asked-for balance was not planned")
	}
}

// rt returns s as a driver that reads the runtime shows it.
func rt(s model.Server, running, passed bool, sessions int, since time.Duration) model.Server {
	s.Runtime = &model.Runtime{CheckRunning: running, CheckPassed: passed, Sessions: sessions, Since: since}
	s.Up = running && passed
	return s
}

func stale(s model.Server) model.Server { s.Runtime.CheckStale = true; return s }

func loading(s model.Server) model.Server { s.Runtime = &model.Runtime{Loading: true}; return s }

func addable(s model.Server) model.Server { s.Runtime.Addable = true; return s }

func withCheck(s model.Server, c model.Check) model.Server { s.Check = c; return s }

func TestCalculateGatesEntryOnChecks(t *testing.T) {
	ready := srv("a", "10.0.0.1", 80, model.Ready)
	type change struct {
		Action Action
		State  model.State
		Gate   bool
	}
	tests := []struct {
		name    string
		current model.Backend
		want    []change // for server "a"
		waiting bool
	}{
		{name: "a new server is added in drain with its check restarted",
			current: be(), want: []change{{Add, model.Drain, true}}, waiting: true},
		{name: "a parked server (check paused) is restarted in drain, not put in service",
			current: be(rt(srv("a", "10.0.0.1", 80, model.Maint), false, true, 0, time.Minute)),
			want:    []change{{Drain, model.Drain, true}}, waiting: true},
		{name: "a server whose check never started gets it started, still out of service",
			current: be(rt(srv("a", "10.0.0.1", 80, model.Drain), false, false, 0, 0)),
			want:    []change{{Drain, model.Drain, true}}, waiting: true},
		{name: "a server whose running check has not passed yet waits, unchanged",
			current: be(rt(srv("a", "10.0.0.1", 80, model.Drain), true, false, 0, 0)),
			want:    nil, waiting: true},
		{name: "a server in maintenance with its check running and not passed waits too",
			current: be(rt(srv("a", "10.0.0.1", 80, model.Maint), true, false, 0, 0)),
			want:    nil, waiting: true},
		{name: "a server whose check passed is put in service",
			current: be(rt(srv("a", "10.0.0.1", 80, model.Drain), true, true, 0, 0)),
			want:    []change{{Update, model.Ready, false}}},
		{name: "a checked server in maintenance (held by the API's config) is put in service",
			current: be(rt(srv("a", "10.0.0.1", 80, model.Maint), true, true, 0, 0)),
			want:    []change{{Update, model.Ready, false}}},
		{name: "a ready server keeps serving: HAProxy's checks rule it",
			current: be(rt(srv("a", "10.0.0.1", 80, model.Ready), true, false, 0, 0)),
			want:    nil},
		{name: "a ready server without a running check is taken out until it passes one",
			current: be(rt(srv("a", "10.0.0.1", 80, model.Ready), false, true, 0, 0)),
			want:    []change{{Drain, model.Drain, true}}, waiting: true},
		{name: "a ready server moving to a new address earns traffic again",
			current: be(rt(srv("a", "10.0.0.9", 80, model.Ready), true, true, 0, 0)),
			want:    []change{{Drain, model.Drain, true}}, waiting: true},
		{name: "a server out of service on a result it did not earn (stale) is gated afresh",
			current: be(stale(rt(srv("a", "10.0.0.1", 80, model.Drain), true, false, 0, 0))),
			want:    []change{{Drain, model.Drain, true}}, waiting: true},
		{name: "a waiting server whose check changes is gated afresh, not just updated",
			current: be(withCheck(rt(srv("a", "10.0.0.1", 80, model.Drain), true, false, 0, 0), model.Check{Inter: time.Second, Rise: 2, Fall: 2})),
			want:    []change{{Drain, model.Drain, true}}, waiting: true},
		{name: "a server written in service that the running HAProxy lacks (a reload is to load it) is written parked and waits",
			current: be(loading(srv("a", "10.0.0.1", 80, model.Ready))),
			want:    []change{{Maint, model.Maint, false}}, waiting: true},
		{name: "a parked server the running HAProxy lacks waits for the reload, unchanged",
			current: be(loading(srv("a", "10.0.0.1", 80, model.Maint))),
			want:    nil, waiting: true},
		{name: "a parked server the running HAProxy lacks, moving, is written parked at its new address",
			current: be(loading(srv("a", "10.0.0.9", 80, model.Maint))),
			want:    []change{{Update, model.Maint, false}}, waiting: true},
		{name: "a server the running HAProxy lacks and the driver can add there is gated at once",
			current: be(addable(loading(srv("a", "10.0.0.1", 80, model.Ready)))),
			want:    []change{{Drain, model.Drain, true}}, waiting: true},
		{name: "the same, parked already",
			current: be(addable(loading(srv("a", "10.0.0.1", 80, model.Maint)))),
			want:    []change{{Drain, model.Drain, true}}, waiting: true},
		{name: "a driver that cannot see checks puts servers in service as before",
			current: be(srv("a", "10.0.0.1", 80, model.Maint)),
			want:    []change{{Update, model.Ready, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := CalculateWith(tt.current, be(ready), Policy{GateChecks: true})
			var got []change
			for _, c := range p.Changes {
				got = append(got, change{c.Action, c.New.State, c.Gate})
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("changes = %+v, want %+v", got, tt.want)
			}
			if w := len(p.Waiting) == 1 && p.Waiting[0] == "a"; w != tt.waiting {
				t.Errorf("waiting = %v, want a listed: %v", p.Waiting, tt.waiting)
			}
			if l := len(p.Loading) == 1 && p.Loading[0] == "a"; l != (tt.current.Servers != nil && tt.current.Servers[0].Runtime != nil && tt.current.Servers[0].Runtime.Loading) {
				t.Errorf("loading = %v", p.Loading)
			}
			if p.Pending() != tt.waiting {
				t.Errorf("Pending() = %v", p.Pending())
			}
		})
	}
	t.Run("without GateChecks a new server goes in service at once", func(t *testing.T) {
		p := Calculate(be(), be(ready))
		if len(p.Changes) != 1 || p.Changes[0].New.State != model.Ready || p.Changes[0].Gate || len(p.Waiting) != 0 {
			t.Fatalf("plan = %+v", p)
		}
	})
	t.Run("a desired drain server is added in drain, not gated", func(t *testing.T) {
		p := CalculateWith(be(), be(srv("a", "10.0.0.1", 80, model.Drain)), Policy{GateChecks: true})
		if len(p.Changes) != 1 || p.Changes[0].Gate || len(p.Waiting) != 0 {
			t.Fatalf("plan = %+v", p)
		}
	})
	t.Run("capped servers are not listed as waiting", func(t *testing.T) {
		p := CalculateWith(be(), be(ready, srv("b", "10.0.0.2", 80, model.Ready)), Policy{GateChecks: true, MaxServers: 1})
		if !reflect.DeepEqual(p.Waiting, []string{"a"}) || !reflect.DeepEqual(p.Capped, []string{"b"}) {
			t.Fatalf("waiting %v capped %v", p.Waiting, p.Capped)
		}
	})
}

func TestCalculateWaitsForSessionsBeforeDeleting(t *testing.T) {
	keep := rt(srv("k", "10.0.0.1", 80, model.Ready), true, true, 0, 0)
	tests := []struct {
		name     string
		old      model.Server
		timeout  time.Duration
		want     map[Action][]string
		kill     bool
		draining bool
	}{
		{name: "no sessions: deleted at once",
			old:  rt(srv("x", "10.0.0.2", 80, model.Ready), true, true, 0, 0),
			want: map[Action][]string{Delete: {"x"}}},
		{name: "sessions: parked, listed draining",
			old:  rt(srv("x", "10.0.0.2", 80, model.Ready), true, true, 3, 0),
			want: map[Action][]string{Maint: {"x"}}, draining: true},
		{name: "parked with sessions: left alone, still draining",
			old:  rt(srv("x", "10.0.0.2", 80, model.Maint), false, true, 1, time.Hour),
			want: map[Action][]string{}, draining: true},
		{name: "parked past the drain timeout: deleted, sessions shut",
			old:     rt(srv("x", "10.0.0.2", 80, model.Maint), false, true, 1, 2*time.Minute),
			timeout: time.Minute,
			want:    map[Action][]string{Delete: {"x"}}, kill: true},
		{name: "parked for the timeout as HAProxy counts it (whole seconds): not yet",
			old:     rt(srv("x", "10.0.0.2", 80, model.Maint), false, true, 1, time.Minute),
			timeout: time.Minute,
			want:    map[Action][]string{}, draining: true},
		{name: "parked a second past it: the timeout surely ran out",
			old:     rt(srv("x", "10.0.0.2", 80, model.Maint), false, true, 1, time.Minute+time.Second),
			timeout: time.Minute,
			want:    map[Action][]string{Delete: {"x"}}, kill: true},
		{name: "the timeout counts only once parked",
			old:     rt(srv("x", "10.0.0.2", 80, model.Ready), true, true, 1, 2*time.Minute),
			timeout: time.Minute,
			want:    map[Action][]string{Maint: {"x"}}, draining: true},
		{name: "sessions unknown (no runtime view): deleted at once",
			old:  srv("x", "10.0.0.2", 80, model.Ready),
			want: map[Action][]string{Delete: {"x"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := CalculateWith(be(keep, tt.old), be(srv("k", "10.0.0.1", 80, model.Ready)), Policy{GateChecks: true, DrainTimeout: tt.timeout})
			if got := summary(p); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("plan = %v, want %v", got, tt.want)
			}
			if len(p.Changes) == 1 && p.Changes[0].Kill != tt.kill {
				t.Errorf("kill = %v, want %v", p.Changes[0].Kill, tt.kill)
			}
			if got := len(p.Draining) == 1; got != tt.draining {
				t.Errorf("draining = %v, want listed: %v", p.Draining, tt.draining)
			}
		})
	}
}

func TestDeferringParksWhatTheDriverDidNotDelete(t *testing.T) {
	a, b := srv("a", "10.0.0.1", 80, model.Ready), srv("b", "10.0.0.2", 80, model.Maint)
	p := Calculate(be(a, b), be(srv("k", "10.0.0.3", 80, model.Ready)))
	got := p.Deferring([]string{"a"})
	if s := summary(got); !reflect.DeepEqual(s, map[Action][]string{Add: {"k"}, Maint: {"a"}, Delete: {"b"}}) {
		t.Errorf("plan = %v", s)
	}
	if got.Changes[0].New.State != model.Maint || !reflect.DeepEqual(got.Draining, []string{"a"}) || !got.Pending() {
		t.Errorf("a not parked and draining: %+v", got)
	}
	if s := summary(p); !reflect.DeepEqual(s[Delete], []string{"a", "b"}) {
		t.Errorf("Deferring changed the plan it was called on: %v", s)
	}
}

// TestGuardHoldsOnAPureShrink: losing 99 of 100 servers whose survivor is
// UP is a share the guard must hold for one reconcile, whatever else is UP.
func TestGuardHoldsOnAPureShrink(t *testing.T) {
	var current []model.Server
	for i := range 100 {
		current = append(current, up(srv(fmt.Sprintf("s%03d", i), fmt.Sprintf("10.0.%d.%d", i/200, i%200+1), 80, model.Ready)))
	}
	desired := be(current[0])
	p := CalculateWith(be(current...), desired, Policy{GuardPercent: 50})
	if got := p.Names(Delete); len(got) != 0 {
		t.Fatalf("deleted %d servers on the first read", len(got))
	}
	if len(p.Guarded) != 99 || len(p.Names(Maint)) != 99 {
		t.Fatalf("guarded %d, parked %d; want 99 each", len(p.Guarded), len(p.Names(Maint)))
	}
	// The next reconcile reads the same: the parked servers go.
	next := simulate(be(current...), p)
	p = CalculateWith(next, desired, Policy{GuardPercent: 50})
	if got := p.Names(Delete); len(got) != 99 || len(p.Guarded) != 0 {
		t.Fatalf("confirming reconcile deleted %d, guarded %d; want 99, 0", len(got), len(p.Guarded))
	}
}

// TestCapAndGuardDoNotDeadlock: a backend at MaxServers whose servers are
// all renamed (a node-pool swap) ends with every new server in service. The
// cap once counted the parked old servers against the new ones while the
// guard waited for the new ones: zero in service, for good.
func TestCapAndGuardDoNotDeadlock(t *testing.T) {
	var old, renamed []model.Server
	for i := range 10 {
		o := rt(srv(fmt.Sprintf("old%02d", i), fmt.Sprintf("10.0.0.%d", i+1), 80, model.Ready), true, true, 0, 0)
		old = append(old, o)
		renamed = append(renamed, srv(fmt.Sprintf("new%02d", i), fmt.Sprintf("10.0.1.%d", i+1), 80, model.Ready))
	}
	pol := Policy{MaxServers: 10, DeleteBatch: 10, GuardPercent: 100, GateChecks: true}
	current, desired := be(old...), be(renamed...)
	var p Plan
	for range 10 {
		p = CalculateWith(current, desired, pol)
		current = simulate(current, p)
	}
	if n := inService(current); n != 10 || len(current.Servers) != 10 {
		t.Fatalf("after 10 reconciles: %d in service of %d servers (capped %v, guarded %v)", n, len(current.Servers), p.Capped, p.Guarded)
	}
	for _, s := range current.Servers {
		if !strings.HasPrefix(s.Name, "new") {
			t.Errorf("server %s left", s.Name)
		}
	}
}

// simulate applies p to current as a driver would, then lets every health
// check run and pass, as it does between two reconciles.
func simulate(current model.Backend, p Plan) model.Backend {
	byName := map[string]model.Server{}
	for _, s := range current.Servers {
		byName[s.Name] = s
	}
	for _, c := range p.Changes {
		switch c.Action {
		case Delete:
			delete(byName, c.Name)
		default:
			s := *c.New
			if old, ok := byName[c.Name]; ok && !c.Gate {
				s.Runtime = old.Runtime
			}
			if s.Runtime == nil || c.Gate {
				s.Runtime = &model.Runtime{}
			}
			byName[c.Name] = s
		}
	}
	out := current
	out.Servers = nil
	for _, s := range byName {
		s.Runtime = &model.Runtime{CheckRunning: true, CheckPassed: true}
		s.Up = s.State == model.Ready
		out.Servers = append(out.Servers, s)
	}
	sort.Slice(out.Servers, func(i, j int) bool { return out.Servers[i].Name < out.Servers[j].Name })
	return out
}

func inService(b model.Backend) int {
	n := 0
	for _, s := range b.Servers {
		if s.State == model.Ready && s.Up {
			n++
		}
	}
	return n
}

// TestMakeBeforeBreak: when a plan would leave the backend with no server in
// service while a replacement waits for its check, the servers leaving that
// serve with a passing check keep their traffic (HandingOver) until a
// replacement is in service; the plan that puts one in service takes them
// out. Before, replacing every server at once emptied the backend for about
// a check ("backend has no server available!").
func TestMakeBeforeBreak(t *testing.T) {
	serving := func(name, addr string) model.Server {
		return rt(srv(name, addr, 80, model.Ready), true, true, 0, 0)
	}
	newReady := srv("new", "10.0.1.1", 80, model.Ready)
	tests := []struct {
		name     string
		current  model.Backend
		desired  model.Backend
		pol      Policy
		want     map[Action][]string
		handover []string
	}{
		{name: "every server replaced: the old one keeps its traffic while the new one waits",
			current: be(serving("old", "10.0.0.1")), desired: be(newReady),
			pol:  Policy{GateChecks: true, GuardPercent: 50},
			want: map[Action][]string{Add: {"new"}}, handover: []string{"old"}},
		{name: "the same without the guard: not deleted either",
			current: be(serving("old", "10.0.0.1")), desired: be(newReady),
			pol:  Policy{GateChecks: true},
			want: map[Action][]string{Add: {"new"}}, handover: []string{"old"}},
		{name: "its endpoint terminating (drain): it keeps serving until the replacement is in service",
			current: be(serving("old", "10.0.0.1")), desired: be(srv("old", "10.0.0.1", 80, model.Drain), newReady),
			pol:  Policy{GateChecks: true},
			want: map[Action][]string{Add: {"new"}}, handover: []string{"old"}},
		{name: "the replacement passed its check: in service, and the old one parked in the same plan",
			current: be(serving("old", "10.0.0.1"), rt(srv("new", "10.0.1.1", 80, model.Drain), true, true, 0, 0)), desired: be(newReady),
			pol:  Policy{GateChecks: true, GuardPercent: 50},
			want: map[Action][]string{Update: {"new"}, Maint: {"old"}}},
		{name: "another server still serves: the leaving one goes at once",
			current: be(serving("old", "10.0.0.1"), serving("stay", "10.0.0.2")), desired: be(srv("stay", "10.0.0.2", 80, model.Ready), newReady),
			pol:  Policy{GateChecks: true},
			want: map[Action][]string{Add: {"new"}, Delete: {"old"}}},
		{name: "a leaving server HAProxy holds DOWN (its own checks fail) is not kept",
			current: be(rt(srv("old", "10.0.0.1", 80, model.Ready), true, false, 0, 0)), desired: be(newReady),
			pol:  Policy{GateChecks: true},
			want: map[Action][]string{Add: {"new"}, Delete: {"old"}}},
		{name: "a leaving server UP whose last check failed (one of fall) still serves: kept",
			current: be(func() model.Server {
				s := rt(srv("old", "10.0.0.1", 80, model.Ready), true, false, 0, 0)
				s.Up = true
				return s
			}()), desired: be(newReady),
			pol:  Policy{GateChecks: true},
			want: map[Action][]string{Add: {"new"}}, handover: []string{"old"}},
		{name: "no ready endpoint in Kubernetes: nothing to make before the break",
			current: be(serving("old", "10.0.0.1")), desired: be(srv("old", "10.0.0.1", 80, model.Maint)),
			pol:  Policy{GateChecks: true},
			want: map[Action][]string{Maint: {"old"}}},
		{name: "a server that moves must earn its traffic at its new address: not kept",
			current: be(serving("old", "10.0.0.1")), desired: be(srv("old", "10.0.0.9", 80, model.Ready)),
			pol:  Policy{GateChecks: true},
			want: map[Action][]string{Drain: {"old"}}},
		{name: "a server an operator pinned in maintenance (the Node's annotation) is not kept",
			current: be(serving("old", "10.0.0.1")), desired: be(func() model.Server {
				s := srv("old", "10.0.0.1", 80, model.Maint)
				s.Reason = model.ReasonAnnotation
				return s
			}(), newReady),
			pol:  Policy{GateChecks: true},
			want: map[Action][]string{Add: {"new"}, Maint: {"old"}}},
		{name: "a driver that cannot gate: no waiting, nothing kept",
			current: be(up(srv("old", "10.0.0.1", 80, model.Ready))), desired: be(newReady),
			pol:  Policy{},
			want: map[Action][]string{Add: {"new"}, Delete: {"old"}}},
		{name: "a kept server haproxy.cfg no longer holds in service (a reload came before its write): written as it serves",
			current: be(unwritten(serving("old", "10.0.0.1"))), desired: be(newReady),
			pol:  Policy{GateChecks: true},
			want: map[Action][]string{Add: {"new"}, Update: {"old"}}, handover: []string{"old"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := CalculateWith(tt.current, tt.desired, tt.pol)
			for _, ch := range p.Changes {
				if ch.Action == Update && slices.Contains(tt.handover, ch.Name) && !ch.New.SameTraffic(*ch.Old) {
					t.Errorf("kept server %s written as %s, want as it serves (%s)", ch.Name, ch.New.State, ch.Old.State)
				}
			}
			if got := summary(p); !equalSummary(got, tt.want) {
				t.Errorf("plan = %v, want %v", got, tt.want)
			}
			if !slices.Equal(p.HandingOver, tt.handover) {
				t.Errorf("handing over %v, want %v", p.HandingOver, tt.handover)
			}
			if len(tt.handover) > 0 && (len(p.Guarded) > 0 || len(p.Draining) > 0 || !p.Pending()) {
				t.Errorf("guarded %v, draining %v, pending %v: a kept server is neither, and a later reconcile is due", p.Guarded, p.Draining, p.Pending())
			}
		})
	}
}

func unwritten(s model.Server) model.Server {
	r := *s.Runtime
	r.Unwritten = true
	s.Runtime = &r
	return s
}

// TestUnwrittenServersAreWritten: a server HAProxy runs in service whose
// haproxy.cfg entry parks or lacks it (model.Runtime.Unwritten: the write
// after the socket failed) is written again while it is wanted in service;
// one wanted out leaves as any other.
func TestUnwrittenServersAreWritten(t *testing.T) {
	ready := srv("a", "10.0.0.1", 80, model.Ready)
	for _, tt := range []struct {
		name    string
		current model.Server
		desired model.Server
		want    map[Action][]string
	}{
		{"wanted in service: written as it is", unwritten(rt(ready, true, true, 0, 0)), ready, map[Action][]string{Update: {"a"}}},
		{"written already: nothing", rt(ready, true, true, 0, 0), ready, map[Action][]string{}},
		{"wanted parked: parked", unwritten(rt(ready, true, true, 0, 0)), srv("a", "10.0.0.1", 80, model.Maint), map[Action][]string{Maint: {"a"}}},
		{"its check no longer runs: gated", unwritten(rt(ready, false, true, 0, 0)), ready, map[Action][]string{Drain: {"a"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := CalculateWith(be(tt.current), be(tt.desired), Policy{GateChecks: true})
			if got := summary(p); !equalSummary(got, tt.want) {
				t.Errorf("plan = %v, want %v", got, tt.want)
			}
		})
	}
}

func behindCfg(s model.Server) model.Server {
	s = unwritten(s)
	s.Runtime.Unwritten, s.Runtime.Behind = false, true
	return s
}

// TestServersBehindHAProxyCfgAreMended: a server the running HAProxy has
// less in traffic than haproxy.cfg does (model.Runtime.Behind) is brought
// up to what is wanted, or haproxy.cfg is written down to it: a reload
// would load haproxy.cfg's. (Seed 490652228 on 3.4.0: left at weight 0.)
func TestServersBehindHAProxyCfgAreMended(t *testing.T) {
	ready := srv("a", "10.0.0.1", 80, model.Ready)
	drained, parked := ready, ready
	drained.State, drained.Weight = model.Drain, 0
	parked.State = model.Maint
	for _, tt := range []struct {
		name    string
		current model.Server
		desired *model.Server
		want    map[Action][]string
	}{
		{"drained at runtime, wanted ready: brought back", behindCfg(rt(drained, true, true, 0, 0)), &ready, map[Action][]string{Update: {"a"}}},
		{"drained both ways, wanted ready: brought back", rt(drained, true, true, 0, 0), &ready, map[Action][]string{Update: {"a"}}},
		{"drained at runtime, wanted drained: written so", behindCfg(rt(drained, true, true, 0, 0)), &drained, map[Action][]string{Update: {"a"}}},
		{"drained both ways, wanted drained: nothing", rt(drained, true, true, 0, 0), &drained, map[Action][]string{}},
		{"parked at runtime, wanted ready: gated", behindCfg(rt(parked, false, true, 0, 0)), &ready, map[Action][]string{Drain: {"a"}}},
		{"parked at runtime, wanted parked: written so", behindCfg(rt(parked, false, true, 0, 0)), &parked, map[Action][]string{Update: {"a"}}},
		{"parked at runtime, unwanted, sessions: written parked", behindCfg(rt(parked, false, true, 2, 0)), nil, map[Action][]string{Maint: {"a"}}},
		{"parked both ways, unwanted, sessions: waits", rt(parked, false, true, 2, 0), nil, map[Action][]string{}},
		{"parked at runtime, unwanted, none: deleted", behindCfg(rt(parked, false, true, 0, 0)), nil, map[Action][]string{Delete: {"a"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			other := rt(up(srv("b", "10.0.0.2", 80, model.Ready)), true, true, 0, 0)
			desired := be(srv("b", "10.0.0.2", 80, model.Ready))
			if tt.desired != nil {
				desired.Servers = append(desired.Servers, *tt.desired)
			}
			current := be(other)
			current.Servers = append(current.Servers, tt.current)
			p := CalculateWith(current, desired, Policy{GateChecks: true, DeleteBatch: 1})
			if got := summary(p); !equalSummary(got, tt.want) {
				t.Errorf("plan = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestReplacingEveryServerNeverEmptiesTheBackend: three serving servers all
// replaced, the replacements' checks passing only from the third reconcile
// on: after every reconcile some server is in service, and in the end the
// new ones alone.
func TestReplacingEveryServerNeverEmptiesTheBackend(t *testing.T) {
	var current, desired model.Backend
	for i := range 3 {
		current.Servers = append(current.Servers, rt(up(srv(fmt.Sprintf("old%d", i), fmt.Sprintf("10.0.0.%d", i+1), 80, model.Ready)), true, true, 0, 0))
		desired.Servers = append(desired.Servers, srv(fmt.Sprintf("new%d", i), fmt.Sprintf("10.0.1.%d", i+1), 80, model.Ready))
	}
	current.Name, desired.Name = "be", "be"
	pol := Policy{GateChecks: true, GuardPercent: 50, DeleteBatch: 1}
	for round := range 6 {
		p := CalculateWith(current, desired, pol)
		next := simulate(current, p)
		if round < 2 { // the new servers' checks have not passed yet
			for i, s := range next.Servers {
				if strings.HasPrefix(s.Name, "new") {
					next.Servers[i].Runtime.CheckPassed, next.Servers[i].Up = false, false
				}
			}
		}
		// What clients see between this reconcile and the next.
		n := 0
		for _, s := range next.Servers {
			if s.State == model.Ready && s.Runtime.CheckPassed {
				n++
			}
		}
		if n == 0 {
			t.Fatalf("round %d: no server in service after plan %v", round, summary(p))
		}
		current = next
	}
	for _, s := range current.Servers {
		if !strings.HasPrefix(s.Name, "new") || s.State != model.Ready {
			t.Errorf("in the end: %s %s", s.Name, s.State)
		}
	}
}

// deadFor is s as HAProxy shows it after its check has failed for d.
func deadFor(s model.Server, d time.Duration) model.Server {
	s.Runtime = &model.Runtime{CheckRunning: true, CheckFailed: true, Since: d}
	return s
}

// TestCapGivesReadyPodsTheRoomOfServersThatWouldNotServe: at MaxServers,
// where the plan would leave nothing in service (any cluster's server) and
// no ready pod's server about to serve, a ready pod's add that would be left
// out takes instead the room of a server that would not serve: a not-ready
// pod's, parked, or a terminating one's, draining with no session left
// (parked first, in name order), deleted in the same plan; the first names
// of the adds get the room, as the cap keeps them. Make-before-break keeps
// what the plan takes out of traffic until the new server's check passed.
// Where something serves or is about to, nothing is given (a pod flapping
// at the cap would have its server deleted and added again each time).
// (The history checker, seed 126, runtime, short, MAX_SERVERS=8: the
// backend full of not-ready and terminating pods' servers, three ready pods
// left out, nothing in service: 28 requests failed.)
func TestCapGivesReadyPodsTheRoomOfServersThatWouldNotServe(t *testing.T) {
	serving := func(name, addr string, st model.State) model.Server {
		return rt(srv(name, addr, 80, st), true, true, 0, 0)
	}
	withSessions := func(s model.Server) model.Server { r := *s.Runtime; r.Sessions = 2; s.Runtime = &r; return s }
	aDown := rt(srv("a", "10.0.0.1", 80, model.Ready), true, false, 0, 0) // a ready pod killed: its check failed, DOWN
	a := srv("a", "10.0.0.1", 80, model.Ready)
	bMaint, cDrain := srv("b", "10.0.0.2", 80, model.Maint), srv("c", "10.0.0.3", 80, model.Drain)
	bParked, cDrained := serving("b", "10.0.0.2", model.Maint), serving("c", "10.0.0.3", model.Drain)
	d, e, f := srv("d", "10.0.0.4", 80, model.Ready), srv("e", "10.0.0.5", 80, model.Ready), srv("f", "10.0.0.6", 80, model.Ready)
	for _, tt := range []struct {
		name             string
		current, desired model.Backend
		max              int
		refused          []string
		owner            string
		want             map[Action][]string
		capped, handover []string
	}{
		{name: "nothing serves: a parked not-ready pod's and a drained terminating one's servers give their room, the first names get it",
			current: be(aDown, bParked, cDrained), desired: be(a, bMaint, cDrain, d, e, f), max: 3,
			want: map[Action][]string{Add: {"d", "e"}, Delete: {"b", "c"}}, capped: []string{"f"}},
		{name: "parked ones give first: one add, the parked server goes, the draining one stays",
			current: be(aDown, bParked, cDrained), desired: be(a, bMaint, cDrain, d), max: 3,
			want: map[Action][]string{Add: {"d"}, Delete: {"b"}}},
		{name: "the seed's: the last server in service goes not ready: the room goes to a ready pod, the leaving one is kept until it serves",
			current: be(aDown, serving("g_bk", "10.0.0.7", model.Ready), bParked), desired: be(a, srv("g_bk", "10.0.0.7", 80, model.Maint), bMaint, d), max: 3,
			want: map[Action][]string{Add: {"d"}, Delete: {"b"}}, handover: []string{"g_bk"}},
		{name: "a server in service: nothing given",
			current: be(serving("a", "10.0.0.1", model.Ready), bParked, cDrained), desired: be(a, bMaint, cDrain, d), max: 3,
			want: map[Action][]string{}, capped: []string{"d"}},
		{name: "another cluster's server in service: nothing given",
			current: be(rt(srv("e-a", "10.0.0.1", 80, model.Ready), true, false, 0, 0), serving("e-b", "10.0.0.2", model.Maint), serving("w-a", "10.0.0.1", model.Ready)),
			desired: be(srv("e-a", "10.0.0.1", 80, model.Ready), srv("e-b", "10.0.0.2", 80, model.Maint), srv("e-d", "10.0.0.4", 80, model.Ready)), max: 2, owner: "e-",
			want: map[Action][]string{}, capped: []string{"e-d"}},
		{name: "a ready pod's server waits for its first check: nothing given",
			current: be(rt(srv("a", "10.0.0.1", 80, model.Drain), true, false, 0, 0), bParked, cDrained), desired: be(a, bMaint, cDrain, d), max: 3,
			want: map[Action][]string{}, capped: []string{"d"}},
		{name: "its check has failed for 3 s (a dead node): given",
			current: be(deadFor(srv("a", "10.0.0.1", 80, model.Drain), deadReplacement), bParked, cDrained), desired: be(a, bMaint, cDrain, d), max: 3,
			want: map[Action][]string{Add: {"d"}, Delete: {"b"}}},
		{name: "the only add that fits is refused on the last reconcile: given to the others",
			current: be(aDown, bParked), desired: be(a, bMaint, d, e), max: 3, refused: []string{"d"},
			want: map[Action][]string{Add: {"d", "e"}, Delete: {"b"}}},
		{name: "a terminating server with sessions finishes them: not given",
			current: be(aDown, withSessions(cDrained)), desired: be(a, cDrain, d), max: 2,
			want: map[Action][]string{}, capped: []string{"d"}},
		{name: "a not-ready pod's add is left out, it takes no room",
			current: be(aDown, bParked), desired: be(a, bMaint, srv("c", "10.0.0.3", 80, model.Maint)), max: 2,
			want: map[Action][]string{}, capped: []string{"c"}},
		{name: "under the cap nothing is given",
			current: be(aDown, bParked), desired: be(a, bMaint, d), max: 3,
			want: map[Action][]string{Add: {"d"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := CalculateWith(tt.current, tt.desired, Policy{MaxServers: tt.max, GateChecks: true, Refused: tt.refused, Owner: tt.owner})
			if got := summary(p); !equalSummary(got, tt.want) {
				t.Errorf("changes = %v, want %v", got, tt.want)
			}
			if !slices.Equal(p.Capped, tt.capped) {
				t.Errorf("capped = %v, want %v", p.Capped, tt.capped)
			}
			if !slices.Equal(p.HandingOver, tt.handover) {
				t.Errorf("handing over %v, want %v", p.HandingOver, tt.handover)
			}
			for _, n := range p.Capped {
				if slices.Contains(p.Waiting, n) {
					t.Errorf("capped %s still waited for", n)
				}
			}
		})
	}
}
