package reconcile

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

var (
	now   = time.Date(2026, 11, 24, 12, 0, 10, 500_000_000, time.UTC)
	stamp = now.Add(-3 * time.Second) // 12:00:07.5
	chk   = model.Check{Inter: time.Second, Rise: 2, Fall: 2}
)

// want is a desired ready server stamped at at.
func wantSrv(name string, st model.State, at time.Time) model.Server {
	return model.Server{Name: name, Address: "10.244.0.1", Port: 80, Weight: 1, State: st,
		Reason: desired.ReasonEndpoints, Check: chk, Changed: at}
}

// cur is a current server HAProxy shows with its check passed or not, its
// last state change since ago.
func cur(name string, st model.State, passed bool, since time.Duration) model.Server {
	// HAProxy pauses the check of a server in maintenance.
	return model.Server{Name: name, Address: "10.244.0.1", Port: 80, Weight: 1, State: st, Check: chk, Up: passed,
		Runtime: &model.Runtime{CheckRunning: st != model.Maint, CheckPassed: passed, Since: since}}
}

// got renders programmed's answer for a plan of cur against want.
func got(current, want []model.Server, refused ...string) string {
	p := plan.CalculateWith(model.Backend{Name: "be", Servers: current}, model.Backend{Name: "be", Servers: want}, plan.Policy{GateChecks: true})
	no := map[string]bool{}
	for _, r := range refused {
		no[r] = true
	}
	var out []string
	for _, pr := range programmed("t", p, model.Backend{Name: "be", Servers: want}, no, now, now) {
		v := pr.Latency.String()
		if pr.Unmeasured != "" {
			v = pr.Unmeasured
		}
		out = append(out, fmt.Sprintf("%s %s %s", pr.Server, pr.Stage, v))
	}
	return strings.Join(out, "; ")
}

func TestProgrammed(t *testing.T) {
	taint := wantSrv("a", model.Drain, stamp)
	taint.Reason = desired.ReasonTaint
	noRuntime := cur("a", model.Drain, true, 0)
	noRuntime.Runtime = nil
	slower := wantSrv("a", model.Ready, stamp)
	slower.Check.Inter = 5 * time.Second
	for _, tt := range []struct {
		name      string
		current   []model.Server
		want      []model.Server
		refused   []string
		programed string
	}{
		{"a new server: applied when gated", nil,
			[]model.Server{wantSrv("a", model.Ready, stamp)}, nil, "a applied 3s"},
		{"the gate's release: in service, not applied again (its last change after the stamp)",
			[]model.Server{cur("a", model.Drain, true, 2*time.Second)},
			[]model.Server{wantSrv("a", model.Ready, stamp)}, nil, "a in-service 3s"},
		{"a release within the stamp's second: still only in service",
			[]model.Server{cur("a", model.Drain, true, 3*time.Second)},
			[]model.Server{wantSrv("a", model.Ready, stamp)}, nil, "a in-service 3s"},
		{"a draining server ready again, its check passing: applied and in service",
			[]model.Server{cur("a", model.Drain, true, time.Minute)},
			[]model.Server{wantSrv("a", model.Ready, stamp)}, nil, "a applied 3s; a in-service 3s"},
		{"a ready server drained (endpoint terminating)",
			[]model.Server{cur("a", model.Ready, true, time.Hour)},
			[]model.Server{wantSrv("a", model.Drain, stamp)}, nil, "a applied 3s"},
		{"a server back from maintenance: applied at its gate, not in service yet",
			[]model.Server{cur("a", model.Maint, false, time.Hour)},
			[]model.Server{wantSrv("a", model.Ready, stamp)}, nil, "a applied 3s"},
		{"a weight change", []model.Server{cur("a", model.Ready, true, time.Hour)},
			[]model.Server{func() model.Server { s := wantSrv("a", model.Ready, stamp); s.Weight = 3; return s }()}, nil, "a applied 3s"},
		{"only check settings: the configuration's, not Kubernetes'",
			[]model.Server{cur("a", model.Ready, true, time.Hour)}, []model.Server{slower}, nil, ""},
		{"a Node's taint has no stamp", []model.Server{cur("a", model.Ready, true, time.Hour)},
			[]model.Server{taint}, nil, ""},
		{"a server nobody asks for", []model.Server{cur("gone", model.Ready, true, time.Hour)},
			[]model.Server{wantSrv("a", model.Ready, stamp)}, nil, "a applied 3s"},
		{"refused by HAProxy", nil,
			[]model.Server{wantSrv("a", model.Ready, stamp)}, []string{"a"}, ""},
		{"unstamped: counted, never timed", nil,
			[]model.Server{wantSrv("a", model.Ready, time.Time{})}, nil, "a applied unstamped"},
		{"unstamped release: in service only", []model.Server{cur("a", model.Drain, true, time.Second)},
			[]model.Server{wantSrv("a", model.Ready, time.Time{})}, nil, "a in-service unstamped"},
		{"older than the bound: a restore, not a delay", nil,
			[]model.Server{wantSrv("a", model.Ready, now.Add(-time.Hour))}, nil, "a applied stale"},
		{"a stamp ahead of this clock: zero", nil,
			[]model.Server{wantSrv("a", model.Ready, now.Add(time.Second))}, nil, "a applied 0s"},
		{"no runtime view (no gate): applied, and in service unknown", []model.Server{noRuntime},
			[]model.Server{wantSrv("a", model.Ready, stamp)}, nil, "a applied 3s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if g := got(tt.current, tt.want, tt.refused...); g != tt.programed {
				t.Errorf("programmed %q, want %q", g, tt.programed)
			}
		})
	}
}

// TestProgrammedWholeSeconds: HAProxy says its last change of a server was
// 1 s ago at 12:00:11.1, i.e. within 12:00:10; a stamp of 12:00:10.3 may
// be older than that change (the gate it caused, at 12:00:10.4, say), so
// the release counts only as in service.
func TestProgrammedWholeSeconds(t *testing.T) {
	at := time.Date(2026, 11, 24, 12, 0, 11, 100_000_000, time.UTC)
	st := time.Date(2026, 11, 24, 12, 0, 10, 300_000_000, time.UTC)
	current := model.Backend{Name: "be", Servers: []model.Server{cur("a", model.Drain, true, time.Second)}}
	want := model.Backend{Name: "be", Servers: []model.Server{wantSrv("a", model.Ready, st)}}
	p := plan.CalculateWith(current, want, plan.Policy{GateChecks: true})
	got := programmed("t", p, want, nil, at, at)
	if len(got) != 1 || got[0].Stage != StageInService {
		t.Errorf("programmed %+v, want the release in service only", got)
	}
}

// TestProgrammedFromTheRead: HAProxy answered at 12:00:10.9 that its last
// change of a draining server was 3 s before (12:00:07, or 12:00:08 on a
// clock a second apart); Kubernetes asked for it to be ready again at
// 12:00:09.2, and the apply ended at 12:00:11.05. That is a new change:
// from the second of the apply it would look like one of 12:00:08 or
// 12:00:09, too close to the stamp's second, and be left out.
func TestProgrammedFromTheRead(t *testing.T) {
	readAt := time.Date(2026, 11, 24, 12, 0, 10, 900_000_000, time.UTC)
	at := time.Date(2026, 11, 24, 12, 0, 11, 50_000_000, time.UTC)
	st := time.Date(2026, 11, 24, 12, 0, 9, 200_000_000, time.UTC)
	current := model.Backend{Name: "be", Servers: []model.Server{cur("a", model.Drain, true, 3*time.Second)}}
	want := model.Backend{Name: "be", Servers: []model.Server{wantSrv("a", model.Ready, st)}}
	p := plan.CalculateWith(current, want, plan.Policy{GateChecks: true})
	got := programmed("t", p, want, nil, at, readAt)
	if len(got) != 2 || got[0].Stage != StageApplied || got[0].Latency != at.Sub(st) || got[1].Stage != StageInService {
		t.Errorf("programmed %+v, want applied and in service, timed to the apply", got)
	}
	if got := programmed("t", p, want, nil, at, at); len(got) != 1 {
		t.Errorf("from the apply's second: %+v, want the change left out", got)
	}
}

// TestProgrammedOncePerStage follows one endpoint's entry over the
// reconciles that make it (gate, waiting, release, steady), with HAProxy's
// view of the server between them: each stage is counted once.
func TestProgrammedOncePerStage(t *testing.T) {
	want := []model.Server{wantSrv("a", model.Ready, stamp)}
	gated := cur("a", model.Drain, false, 0)
	checked := cur("a", model.Drain, true, time.Second)
	inService := cur("a", model.Ready, true, 0)
	var all []string
	for _, current := range [][]model.Server{nil, {gated}, {gated}, {checked}, {inService}, {inService}} {
		if g := got(current, want); g != "" {
			all = append(all, g)
		}
	}
	if !slices.Equal(all, []string{"a applied 3s", "a in-service 3s"}) {
		t.Errorf("over the whole entry: %q", all)
	}
}
