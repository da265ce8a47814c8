package reconcile

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// TestGateInput: a pod's server counts as in service only when every
// target and backend shows it so; otherwise the answer says where not;
// after a failed target, nothing is said at all.
func TestGateInput(t *testing.T) {
	mk := func(target string, in map[string]bool, out map[string]string) TargetResult {
		return TargetResult{Target: target, Backend: "be", inService: in, notInService: out}
	}
	backends := []model.Backend{{Name: "be", Servers: []model.Server{{Name: "web-a", Pod: "web-a"}, {Name: "web-b", Pod: "web-b"}, {Name: "node-x"}}}}
	got, ok := gateInput([]TargetResult{
		mk("t1", map[string]bool{"web-a": true, "web-b": true}, nil),
		mk("t2", map[string]bool{"web-a": true}, map[string]string{"web-b": "waiting for its check"}),
	}, backends, nil)
	want := []GateServer{{Pod: "web-a", InService: true}, {Pod: "web-b", Why: "web-b waiting for its check on t2 be"}}
	if !ok || fmt.Sprint(got.Servers) != fmt.Sprint(want) {
		t.Errorf("got %v %+v, want %+v", ok, got.Servers, want)
	}
	got, _ = gateInput([]TargetResult{mk("t1", map[string]bool{"web-a": true}, nil)}, backends, nil)
	if fmt.Sprint(got.Servers) != fmt.Sprint([]GateServer{{Pod: "web-a", InService: true}, {Pod: "web-b", Why: "web-b absent from t1 be"}}) {
		t.Errorf("absent: %+v", got.Servers)
	}
	failed := mk("t2", nil, nil)
	failed.Error = "connection refused"
	if _, ok := gateInput([]TargetResult{mk("t1", map[string]bool{"web-a": true}, nil), failed}, backends, nil); ok {
		t.Error("a failed target still let the gate be set")
	}
}

// TestGateGoesOnPastARefusedServer: a target whose only failure is changes
// HAProxy refused for their one server each (plan.ServerErrors, the rest
// applied) still counts: the refused servers' pods are not in service, with
// the refusal as why, and every other pod gets its verdict. A target that
// failed otherwise (unreachable, a failed read) still says nothing at all.
func TestGateGoesOnPastARefusedServer(t *testing.T) {
	backends := []model.Backend{{Name: "be", Servers: []model.Server{{Name: "web-a", Pod: "web-a"}, {Name: "web-b", Pod: "web-b"}}}}
	ok := func(target string) TargetResult {
		return TargetResult{Target: target, Backend: "be", inService: map[string]bool{"web-a": true, "web-b": true}}
	}
	refusedB := func(target string) TargetResult {
		tr := ok(target)
		refused := plan.ServerErrors{{Server: "web-b", Error: "no such server"}}
		tr.Failed, tr.Error, tr.ErrorClass, tr.onlyRefused = refused, refused.Error(), failure.Permanent, true
		return tr
	}
	down := func(target string) TargetResult {
		return TargetResult{Target: target, Backend: "be", Error: "dial tcp: connection refused", ErrorClass: failure.Unreachable}
	}
	refusedThenFailed := refusedB("t2") // an error beside the refusals: not to be trusted
	refusedThenFailed.onlyRefused = false
	tests := []struct {
		name    string
		results []TargetResult
		want    []GateServer // nil: nothing said
	}{
		{name: "one server refused: the other pod in service, the refused one not",
			results: []TargetResult{refusedB("t1")},
			want:    []GateServer{{Pod: "web-a", InService: true}, {Pod: "web-b", Why: "web-b refused on t1 be: no such server"}}},
		{name: "refused on one target of two",
			results: []TargetResult{ok("t1"), refusedB("t2")},
			want:    []GateServer{{Pod: "web-a", InService: true}, {Pod: "web-b", Why: "web-b refused on t2 be: no such server"}}},
		{name: "a refusal beside an unreachable target: nothing said",
			results: []TargetResult{refusedB("t1"), down("t2")}},
		{name: "refusals and another failure on one target: nothing said",
			results: []TargetResult{ok("t1"), refusedThenFailed}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, said := gateInput(tt.results, backends, nil)
			if said != (tt.want != nil) || fmt.Sprint(got.Servers) != fmt.Sprint(tt.want) {
				t.Errorf("got %v %+v, want %+v", said, got.Servers, tt.want)
			}
		})
	}
}

// TestGateInputOneVerdictPerPod: a dual-stack pod has a server per address
// family; it is in service only when both are, and it gets one verdict, not
// one per server (two verdicts would be two racing patches).
func TestGateInputOneVerdictPerPod(t *testing.T) {
	backends := []model.Backend{
		{Name: "be", Servers: []model.Server{{Name: "web-a", Pod: "web-a"}, {Name: "web-a-v6", Pod: "web-a"}, {Name: "web-b", Pod: "web-b"}}},
		{Name: "be2", Servers: []model.Server{{Name: "web-b", Pod: "web-b"}}},
	}
	res := []TargetResult{
		{Target: "t1", Backend: "be", inService: map[string]bool{"web-a": true, "web-b": true}, notInService: map[string]string{"web-a-v6": "waiting for its check"}},
		{Target: "t1", Backend: "be2", inService: map[string]bool{"web-b": true}},
	}
	got, ok := gateInput(res, backends, nil)
	want := []GateServer{{Pod: "web-a", Why: "web-a-v6 waiting for its check on t1 be"}, {Pod: "web-b", InService: true}}
	if !ok || fmt.Sprint(got.Servers) != fmt.Sprint(want) {
		t.Errorf("got %+v, want %+v", got.Servers, want)
	}
	res[0].inService["web-a-v6"], res[0].notInService = true, nil
	got, _ = gateInput(res, backends, nil)
	if want := []GateServer{{Pod: "web-a", InService: true}, {Pod: "web-b", InService: true}}; fmt.Sprint(got.Servers) != fmt.Sprint(want) {
		t.Errorf("both in service: got %+v, want %+v", got.Servers, want)
	}
}

// TestGateInputChecksThePodsAddress: an endpoint naming a pod that does not
// have its address says nothing of that pod: no verdict from it.
func TestGateInputChecksThePodsAddress(t *testing.T) {
	backends := []model.Backend{{Name: "be", Servers: []model.Server{
		{Name: "web-a", Pod: "web-a", Address: "10.0.0.1"}, {Name: "forged", Pod: "web-b", Address: "10.0.0.9"}, {Name: "web-b", Pod: "web-b", Address: "10.0.0.2"},
	}}}
	pods := []corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "web-a"}, Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "web-b"}, Status: corev1.PodStatus{PodIP: "10.0.0.2"}},
	}
	res := []TargetResult{{Target: "t1", Backend: "be", inService: map[string]bool{"web-a": true, "web-b": true}, notInService: map[string]string{"forged": "maint"}}}
	got, _ := gateInput(res, backends, pods)
	if want := []GateServer{{Pod: "web-a", InService: true}, {Pod: "web-b", InService: true}}; fmt.Sprint(got.Servers) != fmt.Sprint(want) {
		t.Errorf("got %+v, want %+v", got.Servers, want)
	}
}

// TestInService: after a plan, in service means ready with a passed check:
// a gated server is not, a released one is, a drained one says drain.
func TestInService(t *testing.T) {
	current := model.Backend{Name: "be", Servers: []model.Server{
		cur("released", model.Drain, true, time.Second), cur("steady", model.Ready, true, time.Hour),
		cur("leaving", model.Ready, true, time.Hour), cur("unchecked", model.Ready, false, time.Hour),
	}}
	want := model.Backend{Name: "be", Servers: []model.Server{
		wantSrv("released", model.Ready, stamp), wantSrv("steady", model.Ready, stamp), wantSrv("leaving", model.Drain, stamp),
		wantSrv("unchecked", model.Ready, stamp), wantSrv("new", model.Ready, stamp),
	}}
	p := plan.CalculateWith(current, want, plan.Policy{GateChecks: true})
	in, out := inService(current, p)
	if fmt.Sprint(in) != "map[released:true steady:true]" ||
		fmt.Sprint(out) != "map[leaving:drain new:waiting for its check unchecked:no passed check]" {
		t.Errorf("in %v, out %v", in, out)
	}
}

// TestGateStaysTrueAcrossAReload: a reload loads every server in service UP
// with no check result yet; such a server is in service (HAProxy sends it
// traffic), not "no passed check", or every serving pod's gate turned False
// after each reload by others (history checker, seed 109, Data Plane). One
// whose check failed since is not.
func TestGateStaysTrueAcrossAReload(t *testing.T) {
	loaded := func(name string, failed bool) model.Server {
		return model.Server{Name: name, Address: "10.244.0.1", Port: 80, Weight: 1, State: model.Ready, Check: chk, Up: !failed,
			Runtime: &model.Runtime{CheckRunning: true, CheckFailed: failed}}
	}
	current := model.Backend{Name: "be", Servers: []model.Server{loaded("reloaded", false), loaded("dead", true)}}
	want := model.Backend{Name: "be", Servers: []model.Server{wantSrv("reloaded", model.Ready, stamp), wantSrv("dead", model.Ready, stamp)}}
	p := plan.CalculateWith(current, want, plan.Policy{GateChecks: true})
	in, out := inService(current, p)
	if !in["reloaded"] || in["dead"] || out["dead"] == "" {
		t.Errorf("in %v, out %v: want reloaded in service, dead not", in, out)
	}
}
