package plan

import (
	"reflect"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// slotSrv is a slot of haproxy.cfg as the runtime driver reads it.
func slotSrv(name, addr string, port int, st model.State) model.Server {
	return model.Server{Name: name, Address: addr, Port: port, Weight: 1, State: st, Runtime: &model.Runtime{Slot: true, CheckRunning: st != model.Maint, CheckPassed: st == model.Ready}}
}

func idleSlot(name string) model.Server {
	return model.Server{Name: name, Address: "0.0.0.0", Port: 1, Weight: 1, State: model.Maint, Runtime: &model.Runtime{Slot: true}}
}

func st(s model.Server, state model.State) model.Server { s.State = state; return s }

func withSessions(s model.Server, n int) model.Server { s.Runtime.Sessions = n; return s }

func TestAssignSlots(t *testing.T) {
	ep := func(name, addr string, port int) model.Server {
		return model.Server{Name: name, Address: addr, Port: port, Weight: 1, State: model.Ready}
	}
	added := model.Server{Name: "node-c", Address: "10.0.0.3", Port: 30080, Weight: 1, State: model.Ready, Up: true, Runtime: &model.Runtime{CheckRunning: true, CheckPassed: true, Ours: true}}
	tests := []struct {
		name      string
		current   model.Backend
		desired   []model.Server
		owner     string
		wantNames []string // desired names after, sorted
		// wantReplaces: the Replaces of desired servers (by name after)
		// that have some.
		wantReplaces map[string][]string
		want         SlotUse
	}{
		{name: "no slots: nothing renamed",
			current:   model.Backend{Servers: []model.Server{added}},
			desired:   []model.Server{ep("node-a", "10.0.0.1", 30080)},
			wantNames: []string{"node-a"}, want: SlotUse{}},
		{name: "new endpoints fill idle slots in their order",
			current:   model.Backend{IdleSlots: []model.Server{idleSlot("k8s1"), idleSlot("k8s2"), idleSlot("k8s3")}},
			desired:   []model.Server{ep("node-b", "10.0.0.2", 30080), ep("node-a", "10.0.0.1", 30080)},
			wantNames: []string{"k8s1", "k8s2"},
			want:      SlotUse{Names: map[string]string{"k8s1": "node-a", "k8s2": "node-b"}, Filled: 2, Idle: 1, Total: 3}},
		{name: "a filled slot keeps its endpoint, read back by address and port",
			current: model.Backend{Servers: []model.Server{slotSrv("k8s2", "10.0.0.2", 30080, model.Ready)},
				IdleSlots: []model.Server{idleSlot("k8s1")}},
			desired:   []model.Server{ep("node-a", "10.0.0.1", 30080), ep("node-b", "10.0.0.2", 30080)},
			wantNames: []string{"k8s1", "k8s2"},
			want:      SlotUse{Names: map[string]string{"k8s1": "node-a", "k8s2": "node-b"}, Filled: 2, Total: 2}},
		{name: "another port is another endpoint",
			current: model.Backend{Servers: []model.Server{slotSrv("k8s1", "10.0.0.1", 30080, model.Ready)},
				IdleSlots: []model.Server{idleSlot("k8s2")}},
			desired:   []model.Server{ep("node-a", "10.0.0.1", 30081)},
			wantNames: []string{"k8s2"},
			want:      SlotUse{Names: map[string]string{"k8s2": "node-a"}, Filled: 1, Idle: 1, Total: 2}},
		{name: "more endpoints than slots: the rest overflows",
			current:   model.Backend{IdleSlots: []model.Server{idleSlot("k8s1")}},
			desired:   []model.Server{ep("node-a", "10.0.0.1", 30080), ep("node-b", "10.0.0.2", 30080), ep("node-c", "10.0.0.3", 30080)},
			wantNames: []string{"k8s1", "node-b", "node-c"},
			want:      SlotUse{Names: map[string]string{"k8s1": "node-a"}, Overflow: []string{"node-b", "node-c"}, Filled: 1, Total: 1}},
		{name: "moves in: a ready added server moves into a slot once one is idle, replacing itself",
			current:      model.Backend{Servers: []model.Server{added}, IdleSlots: []model.Server{idleSlot("k8s1")}},
			desired:      []model.Server{ep("node-c", "10.0.0.3", 30080)},
			wantNames:    []string{"k8s1"},
			wantReplaces: map[string][]string{"k8s1": {"node-c"}},
			want:         SlotUse{Names: map[string]string{"k8s1": "node-c"}, Filled: 1, Total: 1}},
		{name: "moves in: the move goes on once the slot is filled at the added server's address",
			current:      model.Backend{Servers: []model.Server{added, slotSrv("k8s1", "10.0.0.3", 30080, model.Drain)}},
			desired:      []model.Server{ep("node-c", "10.0.0.3", 30080)},
			wantNames:    []string{"k8s1"},
			wantReplaces: map[string][]string{"k8s1": {"node-c"}},
			want:         SlotUse{Names: map[string]string{"k8s1": "node-c"}, Filled: 1, Total: 1}},
		{name: "moves in: a ready added server still gated enters where it is, then moves in (slots-soak seed 280120534)",
			current: model.Backend{Servers: []model.Server{{Name: "node-c", Address: "10.0.0.3", Port: 30080, Weight: 1, State: model.Drain,
				Runtime: &model.Runtime{CheckRunning: true, CheckPassed: true, Ours: true}}}, IdleSlots: []model.Server{idleSlot("k8s1")}},
			desired:   []model.Server{ep("node-c", "10.0.0.3", 30080)},
			wantNames: []string{"node-c"},
			want:      SlotUse{Names: map[string]string{}, Overflow: []string{"node-c"}, MovingIn: []string{"node-c"}, Idle: 1, Total: 1}},
		{name: "moves in: a not-ready added server stays where it is",
			current:   model.Backend{Servers: []model.Server{added}, IdleSlots: []model.Server{idleSlot("k8s1")}},
			desired:   []model.Server{st(ep("node-c", "10.0.0.3", 30080), model.Maint)},
			wantNames: []string{"node-c"},
			want:      SlotUse{Names: map[string]string{}, Overflow: []string{"node-c"}, Idle: 1, Total: 1}},
		{name: "moves in: a new ready endpoint takes the idle slot before an added one moves",
			current:   model.Backend{Servers: []model.Server{added}, IdleSlots: []model.Server{idleSlot("k8s1")}},
			desired:   []model.Server{ep("node-c", "10.0.0.3", 30080), ep("node-d", "10.0.0.4", 30080)},
			wantNames: []string{"k8s1", "node-c"},
			want:      SlotUse{Names: map[string]string{"k8s1": "node-d"}, Overflow: []string{"node-c"}, Filled: 1, Total: 1}},
		{name: "ready first: ready endpoints take idle slots before not-ready and terminating ones",
			current: model.Backend{IdleSlots: []model.Server{idleSlot("k8s1"), idleSlot("k8s2")}},
			desired: []model.Server{st(ep("node-a", "10.0.0.1", 30080), model.Maint), st(ep("node-b", "10.0.0.2", 30080), model.Drain),
				ep("node-c", "10.0.0.3", 30080), ep("node-d", "10.0.0.4", 30080)},
			wantNames: []string{"k8s1", "k8s2", "node-a", "node-b"},
			want:      SlotUse{Names: map[string]string{"k8s1": "node-c", "k8s2": "node-d"}, Overflow: []string{"node-a", "node-b"}, Filled: 2, Total: 2}},
		{name: "ready first: a slot left after the ready ones goes to a not-ready endpoint",
			current:   model.Backend{IdleSlots: []model.Server{idleSlot("k8s1"), idleSlot("k8s2")}},
			desired:   []model.Server{st(ep("node-a", "10.0.0.1", 30080), model.Maint), ep("node-c", "10.0.0.3", 30080)},
			wantNames: []string{"k8s1", "k8s2"},
			want:      SlotUse{Names: map[string]string{"k8s1": "node-c", "k8s2": "node-a"}, Filled: 2, Total: 2}},
		{name: "gives way: a parked not-ready endpoint gives its slot to a ready added server when none is idle",
			current:      model.Backend{Servers: []model.Server{added, slotSrv("k8s1", "10.0.0.1", 30080, model.Maint)}},
			desired:      []model.Server{st(ep("node-a", "10.0.0.1", 30080), model.Maint), ep("node-c", "10.0.0.3", 30080)},
			wantNames:    []string{"k8s1", "node-a"},
			wantReplaces: map[string][]string{"k8s1": {"node-c"}},
			want:         SlotUse{Names: map[string]string{"k8s1": "node-c"}, Overflow: []string{"node-a"}, Filled: 1, Total: 1}},
		{name: "gives way: and to a new ready endpoint, parked slots first",
			current: model.Backend{Servers: []model.Server{slotSrv("k8s1", "10.0.0.1", 30080, model.Drain), slotSrv("k8s2", "10.0.0.2", 30080, model.Maint)}},
			desired: []model.Server{st(ep("node-a", "10.0.0.1", 30080), model.Drain), st(ep("node-b", "10.0.0.2", 30080), model.Maint),
				ep("node-d", "10.0.0.4", 30080)},
			wantNames: []string{"k8s1", "k8s2", "node-b"},
			want:      SlotUse{Names: map[string]string{"k8s1": "node-a", "k8s2": "node-d"}, Overflow: []string{"node-b"}, Filled: 2, Total: 2}},
		{name: "gives way: a draining slot with no session gives way too",
			current:   model.Backend{Servers: []model.Server{slotSrv("k8s1", "10.0.0.1", 30080, model.Drain)}},
			desired:   []model.Server{st(ep("node-a", "10.0.0.1", 30080), model.Drain), ep("node-d", "10.0.0.4", 30080)},
			wantNames: []string{"k8s1", "node-a"},
			want:      SlotUse{Names: map[string]string{"k8s1": "node-d"}, Overflow: []string{"node-a"}, Filled: 1, Total: 1}},
		{name: "gives way: a draining slot with sessions keeps its endpoint",
			current:   model.Backend{Servers: []model.Server{added, withSessions(slotSrv("k8s1", "10.0.0.1", 30080, model.Drain), 3)}},
			desired:   []model.Server{st(ep("node-a", "10.0.0.1", 30080), model.Drain), ep("node-c", "10.0.0.3", 30080)},
			wantNames: []string{"k8s1", "node-c"},
			want:      SlotUse{Names: map[string]string{"k8s1": "node-a"}, Overflow: []string{"node-c"}, Filled: 1, Total: 1}},
		{name: "gives way: a not-ready endpoint's slot still in traffic is not taken (the plan parks it first)",
			current:   model.Backend{Servers: []model.Server{added, slotSrv("k8s1", "10.0.0.1", 30080, model.Ready)}},
			desired:   []model.Server{st(ep("node-a", "10.0.0.1", 30080), model.Maint), ep("node-c", "10.0.0.3", 30080)},
			wantNames: []string{"k8s1", "node-c"},
			want:      SlotUse{Names: map[string]string{"k8s1": "node-a"}, Overflow: []string{"node-c"}, Filled: 1, Total: 1}},
		{name: "gives way: a not-ready endpoint keeps its slot for a not-ready one",
			current:   model.Backend{Servers: []model.Server{slotSrv("k8s1", "10.0.0.1", 30080, model.Maint)}},
			desired:   []model.Server{st(ep("node-a", "10.0.0.1", 30080), model.Maint), st(ep("node-d", "10.0.0.4", 30080), model.Maint)},
			wantNames: []string{"k8s1", "node-d"},
			want:      SlotUse{Names: map[string]string{"k8s1": "node-a"}, Overflow: []string{"node-d"}, Filled: 1, Total: 1}},
		{name: "two slots at one address: the first by name holds it",
			current:   model.Backend{Servers: []model.Server{slotSrv("k8s2", "10.0.0.1", 30080, model.Ready), slotSrv("k8s1", "10.0.0.1", 30080, model.Ready)}},
			desired:   []model.Server{ep("node-a", "10.0.0.1", 30080)},
			wantNames: []string{"k8s1"},
			want:      SlotUse{Names: map[string]string{"k8s1": "node-a"}, Filled: 1, Idle: 1, Total: 2}},
		{name: "a backup endpoint takes only a backup slot",
			current:   model.Backend{IdleSlots: []model.Server{idleSlot("k8s1"), func() model.Server { s := idleSlot("k8sb1"); s.Backup = true; return s }()}},
			desired:   []model.Server{func() model.Server { s := ep("node-z", "10.0.9.1", 30080); s.Backup = true; return s }()},
			wantNames: []string{"k8sb1"},
			want:      SlotUse{Names: map[string]string{"k8sb1": "node-z"}, Filled: 1, Idle: 1, Total: 2}},
		{name: "another cluster's slots are not this instance's",
			current:   model.Backend{IdleSlots: []model.Server{idleSlot("east-k8s1"), idleSlot("west-k8s1")}},
			desired:   []model.Server{ep("west-node-a", "10.0.0.1", 30080)},
			owner:     "west-",
			wantNames: []string{"west-k8s1"},
			want:      SlotUse{Names: map[string]string{"west-k8s1": "west-node-a"}, Filled: 1, Total: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, use := AssignSlots(tt.current, model.Backend{Name: "be", Servers: tt.desired}, tt.owner)
			var names []string
			for _, s := range got.Servers {
				names = append(names, s.Name)
			}
			if !reflect.DeepEqual(names, tt.wantNames) {
				t.Errorf("names = %v, want %v", names, tt.wantNames)
			}
			if !reflect.DeepEqual(use, tt.want) {
				t.Errorf("use = %+v, want %+v", use, tt.want)
			}
			replaces := map[string][]string{}
			for _, s := range got.Servers {
				if len(s.Replaces) > 0 {
					replaces[s.Name] = s.Replaces
				}
			}
			if len(replaces) > 0 || len(tt.wantReplaces) > 0 {
				if !reflect.DeepEqual(replaces, tt.wantReplaces) {
					t.Errorf("replaces = %v, want %v", replaces, tt.wantReplaces)
				}
			}
		})
	}
}

// TestSlotPlans: once named, slots are filled (an add, gated) and freed (a
// delete once parked with no sessions), each change flagged Slot; idle
// slots the plan leaves are passed on, and never deleted nor counted.
func TestSlotPlans(t *testing.T) {
	pol := Policy{GateChecks: true}
	want := func(s ...model.Server) model.Backend { return model.Backend{Name: "be", Servers: s} }
	ep := model.Server{Name: "node-a", Address: "10.0.0.1", Port: 30080, Weight: 1, State: model.Ready}

	cur := model.Backend{Name: "be", IdleSlots: []model.Server{idleSlot("k8s1"), idleSlot("k8s2")}}
	named, _ := AssignSlots(cur, want(ep), "")
	p := CalculateWith(cur, named, pol)
	if len(p.Changes) != 1 || p.Changes[0].Action != Add || !p.Changes[0].Slot || !p.Changes[0].Gate || p.Changes[0].Name != "k8s1" {
		t.Fatalf("fill: %+v", p.Changes)
	}
	if len(p.IdleSlots) != 0 {
		t.Errorf("parked idle slots passed on: %+v", p.IdleSlots)
	}

	// Its endpoint gone, with other endpoints: parked, then freed once
	// parked with no sessions.
	other := model.Server{Name: "node-b", Address: "10.0.0.2", Port: 30080, Weight: 1, State: model.Ready}
	filled := slotSrv("k8s1", "10.0.0.1", 30080, model.Ready)
	filled.Runtime.Sessions = 2
	cur = model.Backend{Name: "be", Servers: []model.Server{filled, slotSrv("k8s2", "10.0.0.2", 30080, model.Ready)}}
	named, _ = AssignSlots(cur, want(other), "")
	p = CalculateWith(cur, named, pol)
	if len(p.Changes) != 1 || p.Changes[0].Action != Maint || !p.Changes[0].Slot || len(p.Draining) != 1 {
		t.Fatalf("park with sessions: %+v draining %v", p.Changes, p.Draining)
	}
	parked := slotSrv("k8s1", "10.0.0.1", 30080, model.Maint)
	cur.Servers[0] = parked
	p = CalculateWith(cur, named, pol)
	if len(p.Changes) != 1 || p.Changes[0].Action != Delete || !p.Changes[0].Slot {
		t.Fatalf("free: %+v", p.Changes)
	}

	// Idle slots are nobody's server: no endpoint at all parks nothing more.
	cur = model.Backend{Name: "be", IdleSlots: []model.Server{idleSlot("k8s1")}}
	named, _ = AssignSlots(cur, want(), "")
	if p = CalculateWith(cur, named, pol); p.HasChanges() {
		t.Errorf("idle slots planned: %+v", p.Changes)
	}

	// Fresh from haproxy.cfg (no state file): in service at the
	// placeholder. The plan has them parked, and nothing else.
	fresh := idleSlot("k8s1")
	fresh.State = model.Ready
	cur = model.Backend{Name: "be", IdleSlots: []model.Server{fresh}}
	named, _ = AssignSlots(cur, want(), "")
	if p = CalculateWith(cur, named, pol); !p.HasChanges() || len(p.Changes) != 0 || len(p.IdleSlots) != 1 {
		t.Errorf("fresh slot: changes %+v, idle %+v", p.Changes, p.IdleSlots)
	}
}

// TestSlotMoveMakeBeforeBreak: a ready endpoint added with "add server"
// (no slot was free) moves into a slot once one is idle, over three
// reconciles, with never fewer servers in traffic: the slot is filled and
// gated while the added server keeps serving (HandingOver); once the
// slot's check passed, the slot enters service and the added server goes
// in the same plan (the driver puts entering servers in first).
func TestSlotMoveMakeBeforeBreak(t *testing.T) {
	pol := Policy{GateChecks: true}
	added := model.Server{Name: "node-c", Address: "10.0.0.3", Port: 30080, Weight: 1, State: model.Ready, Up: true,
		Runtime: &model.Runtime{CheckRunning: true, CheckPassed: true, Ours: true}}
	want := model.Backend{Name: "be", Servers: []model.Server{{Name: "node-c", Address: "10.0.0.3", Port: 30080, Weight: 1, State: model.Ready}}}

	// 1. A slot is idle: filled and gated; the added server untouched.
	cur := model.Backend{Name: "be", Servers: []model.Server{added}, IdleSlots: []model.Server{idleSlot("k8s1")}}
	named, _ := AssignSlots(cur, want, "")
	p := CalculateWith(cur, named, pol)
	if len(p.Changes) != 1 || p.Changes[0].Name != "k8s1" || p.Changes[0].Action != Add || !p.Changes[0].Slot || !p.Changes[0].Gate ||
		!reflect.DeepEqual(p.HandingOver, []string{"node-c"}) || !p.Pending() {
		t.Fatalf("fill: changes %+v, handing over %v", p.Changes, p.HandingOver)
	}

	// 2. The slot's check has not passed yet: nothing changes.
	gated := slotSrv("k8s1", "10.0.0.3", 30080, model.Drain)
	cur = model.Backend{Name: "be", Servers: []model.Server{added, gated}}
	named, use := AssignSlots(cur, want, "")
	p = CalculateWith(cur, named, pol)
	if len(p.Changes) != 0 || !reflect.DeepEqual(p.HandingOver, []string{"node-c"}) || !reflect.DeepEqual(p.Waiting, []string{"k8s1"}) || len(use.Overflow) != 0 {
		t.Fatalf("gated: changes %+v, handing over %v, waiting %v, use %+v", p.Changes, p.HandingOver, p.Waiting, use)
	}

	// 3. Its check passed: the slot enters service, the added server
	// leaves in the same plan (deleted; parked while it has sessions).
	passed := gated
	passed.Runtime = &model.Runtime{Slot: true, CheckRunning: true, CheckPassed: true}
	cur = model.Backend{Name: "be", Servers: []model.Server{added, passed}}
	named, _ = AssignSlots(cur, want, "")
	p = CalculateWith(cur, named, pol)
	if len(p.Changes) != 2 || p.Changes[0].Name != "k8s1" || p.Changes[0].Action != Update || p.Changes[0].New.State != model.Ready ||
		p.Changes[1].Name != "node-c" || p.Changes[1].Action != Delete || len(p.HandingOver) != 0 {
		t.Fatalf("serves: changes %+v, handing over %v", p.Changes, p.HandingOver)
	}
	busy := added
	busy.Runtime = &model.Runtime{CheckRunning: true, CheckPassed: true, Ours: true, Sessions: 4}
	cur.Servers[0] = busy
	p = CalculateWith(cur, named, pol)
	if len(p.Changes) != 2 || p.Changes[1].Action != Maint || !reflect.DeepEqual(p.Draining, []string{"node-c"}) {
		t.Fatalf("serves, the added server busy: changes %+v, draining %v", p.Changes, p.Draining)
	}
}

// TestSlotGivenWay: with no slot idle, a not-ready endpoint's parked slot
// goes to a ready endpoint added with "add server": the slot moves to its
// address gated (Change.Slot, which the runtime driver fills afresh), the
// not-ready endpoint is added out of traffic, and the ready one's added
// server keeps serving until the slot does.
func TestSlotGivenWay(t *testing.T) {
	pol := Policy{GateChecks: true}
	added := model.Server{Name: "node-c", Address: "10.0.0.3", Port: 30080, Weight: 1, State: model.Ready, Up: true,
		Runtime: &model.Runtime{CheckRunning: true, CheckPassed: true, Ours: true}}
	cur := model.Backend{Name: "be", Servers: []model.Server{added, slotSrv("k8s1", "10.0.0.1", 30080, model.Maint)}}
	want := model.Backend{Name: "be", Servers: []model.Server{
		{Name: "node-a", Address: "10.0.0.1", Port: 30080, Weight: 1, State: model.Maint},
		{Name: "node-c", Address: "10.0.0.3", Port: 30080, Weight: 1, State: model.Ready}}}
	named, use := AssignSlots(cur, want, "")
	p := CalculateWith(cur, named, pol)
	if len(p.Changes) != 2 {
		t.Fatalf("changes %+v", p.Changes)
	}
	slot, a := p.Changes[0], p.Changes[1]
	if slot.Name != "k8s1" || !slot.Slot || !slot.Gate || slot.Old.Address != "10.0.0.1" || slot.New.Address != "10.0.0.3" {
		t.Errorf("slot change %+v", slot)
	}
	if a.Name != "node-a" || a.Action != Add || a.Slot || a.New.State != model.Maint {
		t.Errorf("node-a change %+v", a)
	}
	if !reflect.DeepEqual(p.HandingOver, []string{"node-c"}) || !reflect.DeepEqual(use.Overflow, []string{"node-a"}) {
		t.Errorf("handing over %v, overflow %v", p.HandingOver, use.Overflow)
	}
}

// TestSlotRoleChangeIsHandedOver: a new HAPROXY_LOCAL_ZONE turns every
// endpoint's role; HAProxy cannot change a slot's, so each endpoint goes to
// a slot of its new role or is added, and the slot that held it in the old
// role must serve until its replacement does. Every slot was parked at once
// (slots-soak seed 280120534 on 2.6.12: no server in service on either
// target for a check). With MAX_SERVERS binding, half of them keep serving.
func TestSlotRoleChangeIsHandedOver(t *testing.T) {
	up := func(name, addr string, backup bool) model.Server {
		s := slotSrv(name, addr, 30080, model.Ready)
		s.Backup, s.Up = backup, true
		return s
	}
	cur := model.Backend{Name: "be", Servers: []model.Server{
		up("k8s1", "10.0.0.1", false), up("k8s2", "10.0.0.2", false), up("k8sb1", "10.0.0.3", true),
	}}
	rezoned := func(name, addr string, backup bool, old string) model.Server {
		return model.Server{Name: name, Address: addr, Port: 30080, Weight: 1, State: model.Ready, Backup: backup, Replaces: []string{old}}
	}
	want := model.Backend{Name: "be", Servers: []model.Server{
		rezoned("n1_bk", "10.0.0.1", true, "n1"), rezoned("n2_bk", "10.0.0.2", true, "n2"), rezoned("n3", "10.0.0.3", false, "n3_bk"),
	}}
	for _, tc := range []struct {
		name    string
		pol     Policy
		serving int // slots still in service after the plan, at least
	}{
		{"no cap", Policy{GateChecks: true, GuardPercent: 100, DeleteBatch: 10}, 3},
		{"at MAX_SERVERS", Policy{GateChecks: true, GuardPercent: 100, DeleteBatch: 10, MaxServers: 3}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			named, use := AssignSlots(cur, want, "")
			if use.Filled != 3 || use.Idle != 0 {
				t.Errorf("slots filled %d, idle %d; want 3 and 0: each serves its endpoint until the replacement does", use.Filled, use.Idle)
			}
			p := CalculateWith(cur, named, tc.pol)
			parked := map[string]bool{}
			for _, ch := range p.Changes {
				if ch.Action == Maint || ch.Action == Delete || ch.Action == Drain {
					parked[ch.Name] = true
				}
			}
			kept := 0
			for _, s := range cur.Servers {
				if !parked[s.Name] {
					kept++
				}
			}
			if kept < tc.serving {
				t.Fatalf("%d slots kept in service, want %d at least: changes %v, handing over %v, capped %v", kept, tc.serving, summary(p), p.HandingOver, p.Capped)
			}
			if len(p.HandingOver) == 0 {
				t.Errorf("no slot handed over: changes %v", summary(p))
			}
		})
	}
}
