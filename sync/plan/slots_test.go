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

func TestAssignSlots(t *testing.T) {
	ep := func(name, addr string, port int) model.Server {
		return model.Server{Name: name, Address: addr, Port: port, Weight: 1, State: model.Ready}
	}
	added := model.Server{Name: "node-c", Address: "10.0.0.3", Port: 30080, Weight: 1, State: model.Ready, Runtime: &model.Runtime{CheckRunning: true, CheckPassed: true, Ours: true}}
	tests := []struct {
		name      string
		current   model.Backend
		desired   []model.Server
		owner     string
		wantNames []string // desired names after, sorted
		want      SlotUse
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
		{name: "an added server stays where it is when a slot frees",
			current:   model.Backend{Servers: []model.Server{added}, IdleSlots: []model.Server{idleSlot("k8s1")}},
			desired:   []model.Server{ep("node-c", "10.0.0.3", 30080)},
			wantNames: []string{"node-c"},
			want:      SlotUse{Names: map[string]string{}, Overflow: []string{"node-c"}, Idle: 1, Total: 1}},
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
