package runtimeapi

import (
	"reflect"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

func cmds(steps []Step) []string {
	out := []string{}
	for _, s := range steps {
		out = append(out, s.Cmd)
	}
	return out
}

func TestFillSteps(t *testing.T) {
	ep := model.Server{Address: "10.0.0.1", Port: 30080, Weight: 3, State: model.Ready}
	health := ep
	health.Check.Port = 10256
	drain := ep
	drain.State = model.Drain
	tests := []struct {
		name string
		ch   plan.Change
		want []string
	}{
		{"gated, as an added server", plan.Change{Action: plan.Add, Slot: true, Gate: true, New: &ep}, []string{
			"set server be/k8s1 state maint", "set server be/k8s1 addr 10.0.0.1 port 30080", "set server be/k8s1 check-port 30080",
			"set server be/k8s1 weight 3", "enable health be/k8s1", "set server be/k8s1 state drain", "set server be/k8s1 health down"}},
		{"checked on the health port", plan.Change{Action: plan.Add, Slot: true, Gate: true, New: &health}, []string{
			"set server be/k8s1 state maint", "set server be/k8s1 addr 10.0.0.1 port 30080", "set server be/k8s1 check-port 10256",
			"set server be/k8s1 weight 3", "enable health be/k8s1", "set server be/k8s1 state drain", "set server be/k8s1 health down"}},
		{"not gated: a Node drained by its annotation", plan.Change{Action: plan.Add, Slot: true, New: &drain}, []string{
			"set server be/k8s1 state maint", "set server be/k8s1 addr 10.0.0.1 port 30080", "set server be/k8s1 check-port 30080",
			"set server be/k8s1 weight 3", "enable health be/k8s1", "set server be/k8s1 state drain"}},
	}
	for _, tt := range tests {
		if got := cmds(fillSteps("be/k8s1", tt.ch)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, got, tt.want)
		}
	}
}

func TestParkSteps(t *testing.T) {
	rt := func(running bool) *model.Runtime { return &model.Runtime{Slot: true, CheckRunning: running} }
	tests := []struct {
		name string
		s    model.Server
		kill bool
		want []string
	}{
		{"parked, no sessions: back to the placeholder", model.Server{Address: "10.0.0.1", Port: 30080, State: model.Maint, Runtime: rt(false)}, false,
			[]string{"set server be/k8s1 addr 0.0.0.0 port 1"}},
		{"past the drain timeout", model.Server{Address: "10.0.0.1", Port: 30080, State: model.Maint, Runtime: rt(false)}, true,
			[]string{"shutdown sessions server be/k8s1", "set server be/k8s1 addr 0.0.0.0 port 1"}},
		{"fresh from haproxy.cfg: in service at 0.0.0.0, its check failing", model.Server{Address: "0.0.0.0", Port: 1, State: model.Ready, Runtime: rt(true)}, false,
			[]string{"set server be/k8s1 state maint"}},
		{"idle already", model.Server{Address: "0.0.0.0", Port: 1, State: model.Maint, Runtime: rt(false)}, false, []string{}},
	}
	for _, tt := range tests {
		if got := cmds(parkSteps("be/k8s1", tt.s, tt.kill)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, got, tt.want)
		}
	}
}

// TestReadSplitsIdleSlots: a slot is known by its host name (srv_fqdn
// ending in .invalid), idle at 0.0.0.0; other servers are as before.
func TestReadSplitsIdleSlots(t *testing.T) {
	reply := `1
# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port
3 be 1 k8s1 127.0.0.1 2 0 1 1 26 6 3 1 6 0 0 0 k8s.invalid 19001 - 0 19001 - - 0
3 be 2 k8s2 0.0.0.0 0 1 1 1 29 8 2 0 10 0 0 0 k8s.invalid 1 - 0 0 - - 0
3 be 3 static 10.0.0.9 2 0 1 1 29 6 3 1 6 0 0 0 - 80 - 0 0 - - 0
3 be 16777216 node-a 10.0.0.1 2 0 1 1 29 6 3 1 6 0 0 1 - 30080 - 0 0 - - 0
`
	servers, err := ParseServersState(reply, "be", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	rest, idle := splitIdle(servers)
	var names []string
	for _, s := range rest {
		names = append(names, s.Name)
	}
	if len(idle) != 1 || idle[0].Name != "k8s2" || idle[0].State != model.Maint || !idle[0].Runtime.Slot {
		t.Errorf("idle = %+v", idle)
	}
	if !reflect.DeepEqual(names, []string{"k8s1", "static", "node-a"}) || !rest[0].Runtime.Slot || rest[1].Runtime.Slot || rest[2].Runtime.Slot {
		t.Errorf("rest = %+v", rest)
	}
	if rest[0].Check.Port != 0 {
		t.Errorf("a filled slot's check port equal to its port reads as unset: %d", rest[0].Check.Port)
	}
}

// TestSlotRefills: a filled slot handed to an endpoint at another address
// (plan.AssignSlots: a not-ready endpoint gives way) is filled afresh, its
// check port with it; other changes to a slot are updates in place.
func TestSlotRefills(t *testing.T) {
	old := model.Server{Address: "10.0.0.1", Port: 30080, Weight: 1, State: model.Maint}
	moved := model.Server{Address: "10.0.0.3", Port: 30081, Weight: 1, State: model.Drain}
	same := old
	same.State = model.Drain
	if !refills(plan.Change{Action: plan.Drain, Slot: true, Gate: true, Old: &old, New: &moved}) {
		t.Error("a slot moving to another endpoint is not filled afresh")
	}
	if refills(plan.Change{Action: plan.Drain, Slot: true, Gate: true, Old: &old, New: &same}) {
		t.Error("a slot gated in place is filled afresh")
	}
	if refills(plan.Change{Action: plan.Drain, Gate: true, Old: &old, New: &moved}) {
		t.Error("an added server that moves is filled as a slot")
	}
	if got := cmds(fillSteps("be/k8s1", plan.Change{Action: plan.Drain, Slot: true, Gate: true, Old: &old, New: &moved})); got[2] != "set server be/k8s1 check-port 30081" {
		t.Errorf("refill steps %q", got)
	}
}
