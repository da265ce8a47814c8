package plan

import (
	"reflect"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// TestRemovals: which unwanted servers go now, given the delete batch, the
// drain timeout and each server's sessions (issue 43, defect 5: one server
// past the timeout never filled the shipped batch of 10, and stayed).
func TestRemovals(t *testing.T) {
	// parked is an unwanted server in maintenance with sessions, parked
	// for since.
	parked := func(name string, sessions int, since time.Duration) model.Server {
		return rt(srv(name, "10.0.0.2", 80, model.Maint), false, true, sessions, since)
	}
	serving := func(name string, sessions int, since time.Duration) model.Server {
		return rt(srv(name, "10.0.0.2", 80, model.Ready), true, true, sessions, since)
	}
	tests := []struct {
		name    string
		batch   int
		timeout time.Duration
		servers []model.Server
		due     []string // deleted now
		kill    []string // their sessions shut first
	}{
		{name: "batch 10, one server parked past the timeout: due alone, sessions shut",
			batch: 10, timeout: time.Minute,
			servers: []model.Server{parked("x", 2, 2*time.Minute)},
			due:     []string{"x"}, kill: []string{"x"}},
		{name: "batch 10, at the timeout as HAProxy counts it: not yet (it may be a second short)",
			batch: 10, timeout: time.Minute,
			servers: []model.Server{parked("x", 2, time.Minute)}},
		{name: "batch 10, a second past it: due",
			batch: 10, timeout: time.Minute,
			servers: []model.Server{parked("x", 2, time.Minute+time.Second)},
			due:     []string{"x"}, kill: []string{"x"}},
		{name: "batch 10, one past the timeout: the free parked servers go in the same reload",
			batch: 10, timeout: time.Minute,
			servers: []model.Server{parked("x", 2, 2*time.Minute), parked("p1", 0, time.Hour), serving("p2", 0, 0)},
			due:     []string{"x", "p1", "p2"}, kill: []string{"x"}},
		{name: "batch 10, one past the timeout: one still within it keeps waiting for its sessions",
			batch: 10, timeout: time.Minute,
			servers: []model.Server{parked("x", 2, 2*time.Minute), parked("y", 1, 30*time.Second)},
			due:     []string{"x"}, kill: []string{"x"}},
		{name: "batch 10, within the timeout: nothing goes",
			batch: 10, timeout: time.Minute,
			servers: []model.Server{parked("x", 2, 30*time.Second), parked("p1", 0, time.Hour)}},
		{name: "batch 10, no timeout: sessions keep a server however long it has been parked",
			batch:   10,
			servers: []model.Server{parked("x", 2, 24*time.Hour), parked("p1", 0, time.Hour)}},
		{name: "batch 10, past the timeout but still in service: not parked yet, waits",
			batch: 10, timeout: time.Minute,
			servers: []model.Server{serving("x", 2, time.Hour)}},
		{name: "batch 3, two free: kept parked until the batch fills",
			batch: 3, timeout: time.Minute,
			servers: []model.Server{parked("p1", 0, 0), parked("p2", 0, 0), parked("y", 1, 0)}},
		{name: "batch 3, three free: the batch is full",
			batch: 3, timeout: time.Minute,
			servers: []model.Server{parked("p1", 0, 0), parked("p2", 0, 0), serving("p3", 0, 0), parked("y", 1, 0)},
			due:     []string{"p1", "p2", "p3"}},
		{name: "batch 3, three free, one of them past the timeout",
			batch: 3, timeout: time.Minute,
			servers: []model.Server{parked("p1", 0, 0), parked("p2", 0, 0), parked("x", 4, time.Hour)},
			due:     []string{"p1", "p2", "x"}, kill: []string{"x"}},
		{name: "no batch: a free server goes at once",
			batch: 0, timeout: time.Minute,
			servers: []model.Server{serving("p1", 0, 0)},
			due:     []string{"p1"}},
		{name: "no batch: past the timeout, shut and deleted",
			batch: 1, timeout: time.Minute,
			servers: []model.Server{parked("x", 1, time.Hour)},
			due:     []string{"x"}, kill: []string{"x"}},
		{name: "sessions unknown (no runtime view): free, never shut; the batch decides",
			batch: 2, timeout: time.Minute,
			servers: []model.Server{srv("p1", "10.0.0.2", 80, model.Maint)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in []*model.Server
			for i := range tt.servers {
				in = append(in, &tt.servers[i])
			}
			var due, kill []string
			for _, r := range removals(in, tt.batch, tt.timeout) {
				if r.kill && !r.free {
					t.Errorf("%s: kill without free", r.Name)
				}
				if r.due {
					due = append(due, r.Name)
				}
				if r.due && r.kill {
					kill = append(kill, r.Name)
				}
			}
			if !reflect.DeepEqual(due, tt.due) || !reflect.DeepEqual(kill, tt.kill) {
				t.Errorf("due %v (killed %v), want %v (killed %v)", due, kill, tt.due, tt.kill)
			}
		})
	}
}

// TestExpiredServerMakesTheBatchDue: under the shipped delete batch (10),
// a server removed alone waits parked for its sessions; once parked past
// the drain timeout it is deleted with its sessions shut, and the free
// parked server beside it goes in the same reload. Before, the batch never
// filled: it stayed parked, its sessions open, no longer listed as draining
// (so no reconcile came back for it).
func TestExpiredServerMakesTheBatchDue(t *testing.T) {
	keep := rt(srv("k", "10.0.0.1", 80, model.Ready), true, true, 0, 0)
	idle := rt(srv("p", "10.0.0.3", 80, model.Maint), false, true, 0, time.Hour)
	pol := Policy{GateChecks: true, DeleteBatch: 10, DrainTimeout: time.Minute}
	desired := be(keep)
	desired.Servers[0].Runtime = nil

	waiting := rt(srv("x", "10.0.0.2", 80, model.Maint), false, true, 2, 30*time.Second)
	p := CalculateWith(be(keep, idle, waiting), desired, pol)
	if p.HasChanges() || !reflect.DeepEqual(p.Draining, []string{"x"}) || !p.Pending() {
		t.Fatalf("within the timeout: %v, draining %v; want nothing, x draining", summary(p), p.Draining)
	}

	expired := rt(srv("x", "10.0.0.2", 80, model.Maint), false, true, 2, 2*time.Minute)
	p = CalculateWith(be(keep, idle, expired), desired, pol)
	if got := summary(p); !reflect.DeepEqual(got, map[Action][]string{Delete: {"p", "x"}}) {
		t.Fatalf("past the timeout: %v, want p and x deleted", got)
	}
	for _, ch := range p.Changes {
		if ch.Kill != (ch.Name == "x") {
			t.Errorf("%s: kill = %v, want it only for x", ch.Name, ch.Kill)
		}
	}
	if len(p.Draining) != 0 {
		t.Errorf("draining = %v", p.Draining)
	}

	// The guard still holds while the server kept is not UP: expiry makes
	// the batch due, it does not overrule the guard.
	guarded := pol
	guarded.GuardPercent = 50
	down := rt(srv("k", "10.0.0.1", 80, model.Ready), true, false, 0, 0)
	if p := CalculateWith(be(down, idle, expired), desired, guarded); len(p.Names(Delete)) != 0 || len(p.Guarded) != 2 {
		t.Errorf("guarded: %v deleted, %v guarded", p.Names(Delete), p.Guarded)
	}
}

// TestLeavingBackendGoesToTheEnd (issue 54 row 7): a backend no Service
// names any more (Policy.Leaving) is not held by the zero-endpoints rule:
// its servers are parked on one read (Guarded, so a later read comes), and
// deleted by a later one that found it left too (LeftBefore) once their
// sessions ended or the drain timeout passed, whatever the delete batch. A
// server parked already on the first read that finds the backend left (its
// Service lost every endpoint, then was deleted) waits for that second
// read: one read never deletes. Without Leaving they stay parked.
func TestLeavingBackendGoesToTheEnd(t *testing.T) {
	live := func(s model.Server, sessions int, since time.Duration) model.Server {
		return rt(s, s.State != model.Maint, true, sessions, since)
	}
	tests := []struct {
		name              string
		leaving, first    bool // first: no earlier read found the backend left
		old               model.Server
		want              map[Action][]string
		guarded, draining bool
		kill              bool
	}{
		{name: "serving: parked, guarded", leaving: true, old: live(srv("x", "10.0.0.2", 80, model.Ready), 0, 0),
			want: map[Action][]string{Maint: {"x"}}, guarded: true},
		{name: "serving with sessions: parked, guarded", leaving: true, old: live(srv("x", "10.0.0.2", 80, model.Ready), 3, 0),
			want: map[Action][]string{Maint: {"x"}}, guarded: true},
		{name: "parked, no session: deleted", leaving: true, old: live(srv("x", "10.0.0.2", 80, model.Maint), 0, time.Second),
			want: map[Action][]string{Delete: {"x"}}},
		{name: "parked, sessions: draining", leaving: true, old: live(srv("x", "10.0.0.2", 80, model.Maint), 2, time.Second),
			want: map[Action][]string{}, draining: true},
		{name: "parked past the drain timeout: deleted, sessions shut", leaving: true, old: live(srv("x", "10.0.0.2", 80, model.Maint), 2, 2*time.Minute),
			want: map[Action][]string{Delete: {"x"}}, kill: true},
		{name: "parked, sessions unknown: deleted", leaving: true, old: srv("x", "10.0.0.2", 80, model.Maint),
			want: map[Action][]string{Delete: {"x"}}},
		{name: "parked in the running HAProxy only: parked in haproxy.cfg first", leaving: true, old: behindCfg(live(srv("x", "10.0.0.2", 80, model.Maint), 0, time.Second)),
			want: map[Action][]string{Maint: {"x"}}, guarded: true},
		{name: "parked, no session, first read that finds it left: kept, guarded", leaving: true, first: true, old: live(srv("x", "10.0.0.2", 80, model.Maint), 0, time.Hour),
			want: map[Action][]string{}, guarded: true},
		{name: "parked, sessions unknown, first read: kept, guarded", leaving: true, first: true, old: srv("x", "10.0.0.2", 80, model.Maint),
			want: map[Action][]string{}, guarded: true},
		{name: "serving, first read: parked, guarded", leaving: true, first: true, old: live(srv("x", "10.0.0.2", 80, model.Ready), 0, 0),
			want: map[Action][]string{Maint: {"x"}}, guarded: true},
		{name: "not leaving (zero endpoints): parked and kept", old: live(srv("x", "10.0.0.2", 80, model.Maint), 0, time.Hour),
			want: map[Action][]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := Policy{GateChecks: true, GuardPercent: 50, DeleteBatch: 10, DrainTimeout: time.Minute, Leaving: tt.leaving, LeftBefore: tt.leaving && !tt.first}
			p := CalculateWith(be(tt.old), be(), pol)
			if got := summary(p); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("plan = %v, want %v", got, tt.want)
			}
			if got := len(p.Guarded) == 1; got != tt.guarded {
				t.Errorf("guarded = %v, want listed: %v", p.Guarded, tt.guarded)
			}
			if got := len(p.Draining) == 1; got != tt.draining {
				t.Errorf("draining = %v, want listed: %v", p.Draining, tt.draining)
			}
			if len(p.Changes) == 1 && p.Changes[0].Kill != tt.kill {
				t.Errorf("kill = %v, want %v", p.Changes[0].Kill, tt.kill)
			}
		})
	}
}
