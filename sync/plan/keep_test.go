package plan

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// backup returns s with the backup role (HAPROXY_LOCAL_ZONE: another zone's).
func backup(s model.Server) model.Server { s.Backup = true; return s }

// TestMakeBeforeBreakWithBackups: a backup server that serves takes the
// traffic the moment no active one is UP, so it counts as serving: replacing
// every local server at once takes the leaving ones out, and the other
// zones' backups serve until a local replacement passed its check (seed
// 430577631). Only where no server at all would serve are the leaving ones
// kept, whatever their role.
func TestMakeBeforeBreakWithBackups(t *testing.T) {
	serving := func(name, addr string) model.Server {
		return rt(srv(name, addr, 80, model.Ready), true, true, 0, 0)
	}
	other := backup(srv("c_bk", "10.0.9.1", 80, model.Ready))
	otherServing := serving("c_bk", "10.0.9.1") // its role read only from desired (the runtime socket)
	newReady := srv("new", "10.0.1.1", 80, model.Ready)
	tests := []struct {
		name     string
		current  model.Backend
		desired  model.Backend
		want     map[Action][]string
		handover []string
	}{
		{name: "every local server replaced, another zone's backup UP: the backup serves, the local one goes",
			current: be(serving("old", "10.0.0.1"), otherServing), desired: be(newReady, other),
			want: map[Action][]string{Add: {"new"}, Delete: {"old"}}},
		{name: "the same with the backup's role as read (the Data Plane API)",
			current: be(serving("old", "10.0.0.1"), backup(otherServing)), desired: be(newReady, other),
			want: map[Action][]string{Add: {"new"}, Delete: {"old"}}},
		{name: "two local servers replaced by one: both go",
			current: be(serving("old", "10.0.0.1"), serving("old2", "10.0.0.2"), otherServing), desired: be(newReady, other),
			want: map[Action][]string{Add: {"new"}, Delete: {"old", "old2"}}},
		{name: "a local replacement passed its check: in service, the old one parked in the same plan",
			current: be(serving("old", "10.0.0.1"), rt(srv("new", "10.0.1.1", 80, model.Drain), true, true, 0, 0), otherServing),
			desired: be(newReady, other),
			want:    map[Action][]string{Update: {"new"}, Delete: {"old"}}},
		{name: "another local server stays in service: the leaving one goes",
			current: be(serving("old", "10.0.0.1"), serving("stay", "10.0.0.2"), otherServing),
			desired: be(srv("stay", "10.0.0.2", 80, model.Ready), newReady, other),
			want:    map[Action][]string{Add: {"new"}, Delete: {"old"}}},
		{name: "a leaving backup and the local one go while another backup stays",
			current: be(serving("old", "10.0.0.1"), backup(serving("x_bk", "10.0.9.2")), otherServing),
			desired: be(newReady, other),
			want:    map[Action][]string{Add: {"new"}, Delete: {"old", "x_bk"}}},
		{name: "the local zone's server leaves for good, only a backup waits: the backups serve, nothing kept",
			current: be(serving("old", "10.0.0.1"), otherServing),
			desired: be(other, backup(srv("d_bk", "10.0.9.3", 80, model.Ready))),
			want:    map[Action][]string{Add: {"d_bk"}, Delete: {"old"}}},
		{name: "the local zone's server is DOWN already (the backups serve): not kept",
			current: be(rt(srv("old", "10.0.0.1", 80, model.Ready), true, false, 0, 0), otherServing),
			desired: be(newReady, other),
			want:    map[Action][]string{Add: {"new"}, Delete: {"old"}}},
		{name: "the local replacement's check failed (a dead pod Kubernetes calls ready): the backups serve, nothing kept",
			current: be(serving("old", "10.0.0.1"), failedCheck(srv("new", "10.0.1.1", 80, model.Drain)), otherServing),
			desired: be(newReady, other),
			want:    map[Action][]string{Delete: {"old"}}},
		{name: "the local replacement's first check failed a moment ago: the backup serves all the same",
			current: be(serving("old", "10.0.0.1"), func() model.Server {
				s := failedCheck(srv("new", "10.0.1.1", 80, model.Drain))
				s.Runtime.Since = time.Second
				return s
			}(), otherServing),
			desired: be(newReady, other),
			want:    map[Action][]string{Delete: {"old"}}},
		{name: "nothing else serves, the local replacement's first check failed a moment ago: kept (it may pass the next)",
			current: be(serving("old", "10.0.0.1"), func() model.Server {
				s := failedCheck(srv("new", "10.0.1.1", 80, model.Drain))
				s.Runtime.Since = time.Second
				return s
			}()),
			desired:  be(newReady),
			handover: []string{"old"}},
		{name: "every replacement failed and no backup serves: kept all the same (no empty backend)",
			current:  be(serving("old", "10.0.0.1"), failedCheck(srv("new", "10.0.1.1", 80, model.Drain))),
			desired:  be(newReady),
			handover: []string{"old"}},
		{name: "every server replaced, backups too: all kept, as without zones",
			current: be(serving("old", "10.0.0.1"), otherServing),
			desired: be(newReady, backup(srv("d_bk", "10.0.9.3", 80, model.Ready))),
			want:    map[Action][]string{Add: {"d_bk", "new"}}, handover: []string{"c_bk", "old"}},
		{name: "only backups serve and are all replaced: kept until a replacement serves",
			current: be(backup(serving("c_bk", "10.0.9.1"))),
			desired: be(backup(srv("d_bk", "10.0.9.3", 80, model.Ready))),
			want:    map[Action][]string{Add: {"d_bk"}}, handover: []string{"c_bk"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := CalculateWith(tt.current, tt.desired, Policy{GateChecks: true})
			if got := summary(p); !equalSummary(got, tt.want) {
				t.Errorf("plan = %v, want %v", got, tt.want)
			}
			if !slices.Equal(p.HandingOver, tt.handover) {
				t.Errorf("handing over %v, want %v", p.HandingOver, tt.handover)
			}
		})
	}
}

// failedCheck returns s out of service with its check running and failed
// since it was gated, 5 s ago.
func failedCheck(s model.Server) model.Server {
	s = rt(s, true, false, 0, 5*time.Second)
	s.Runtime.CheckFailed = true
	return s
}

// TestReplacingEveryLocalServerNeverEmptiesTheBackend: three local servers
// all replaced beside a serving backup of another zone, the replacements'
// checks passing only from the third reconcile on: the old ones leave at
// once (the backup serves), after every reconcile a server is in service,
// and in the end the new ones serve beside the backup. Then the same
// without the backup: the old ones keep their traffic until a replacement
// serves.
func TestReplacingEveryLocalServerNeverEmptiesTheBackend(t *testing.T) {
	for _, withBackup := range []bool{true, false} {
		current, desired := be(), be()
		if withBackup {
			current = be(backup(rt(up(srv("c_bk", "10.0.9.1", 80, model.Ready)), true, true, 0, 0)))
			desired = be(backup(srv("c_bk", "10.0.9.1", 80, model.Ready)))
		}
		for i := range 3 {
			current.Servers = append(current.Servers, rt(up(srv(fmt.Sprintf("old%d", i), fmt.Sprintf("10.0.0.%d", i+1), 80, model.Ready)), true, true, 0, 0))
			desired.Servers = append(desired.Servers, srv(fmt.Sprintf("new%d", i), fmt.Sprintf("10.0.1.%d", i+1), 80, model.Ready))
		}
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
			inService, old := 0, 0
			for _, s := range next.Servers {
				if s.State == model.Ready && s.Runtime.CheckPassed {
					inService++
					if strings.HasPrefix(s.Name, "old") {
						old++
					}
				}
			}
			if inService == 0 {
				t.Fatalf("backup %v, round %d: no server in service after plan %v", withBackup, round, summary(p))
			}
			if withBackup && old > 0 {
				t.Fatalf("round %d: %d old servers kept in traffic beside a serving backup after plan %v", round, old, summary(p))
			}
			if !withBackup && round < 2 && old == 0 {
				t.Fatalf("round %d: the old servers left before a replacement served: plan %v", round, summary(p))
			}
			current = next
		}
		for _, s := range current.Servers {
			if s.Name != "c_bk" && (!strings.HasPrefix(s.Name, "new") || s.State != model.Ready) {
				t.Errorf("backup %v, in the end: %s %s", withBackup, s.Name, s.State)
			}
		}
	}
}

// TestKeepUntilReplacedWithAnotherClusters: another cluster's servers
// (Policy.Owner) do not bridge a replacement's check, so a leaving server is
// kept while its replacement waits for its first check; but once every
// replacement's check has failed, nothing is about to serve, and a serving
// server of another cluster takes the traffic: the leaving one is not kept
// for as long as the dead pods stay ready.
func TestKeepUntilReplacedWithAnotherClusters(t *testing.T) {
	serving := func(name, addr string) model.Server {
		return rt(srv(name, addr, 80, model.Ready), true, true, 0, 0)
	}
	other := serving("static", "10.0.9.1")
	newReady := srv("east-new", "10.0.1.1", 80, model.Ready)
	tests := []struct {
		name     string
		current  model.Backend
		want     map[Action][]string
		handover []string
	}{
		{name: "the replacement waits for its first check: ours kept beside the other cluster's",
			current: be(serving("east-old", "10.0.0.1"), other),
			want:    map[Action][]string{Add: {"east-new"}}, handover: []string{"east-old"}},
		{name: "the replacement's check failed: the other cluster's server serves, ours goes",
			current: be(serving("east-old", "10.0.0.1"), failedCheck(srv("east-new", "10.0.1.1", 80, model.Drain)), other),
			want:    map[Action][]string{Delete: {"east-old"}}},
		{name: "the replacement's check failed and the other cluster's server is DOWN: ours kept",
			current:  be(serving("east-old", "10.0.0.1"), failedCheck(srv("east-new", "10.0.1.1", 80, model.Drain)), rt(srv("static", "10.0.9.1", 80, model.Ready), true, false, 0, 0)),
			handover: []string{"east-old"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := CalculateWith(tt.current, be(newReady), Policy{GateChecks: true, Owner: "east-"})
			if got := summary(p); !equalSummary(got, tt.want) {
				t.Errorf("plan = %v, want %v", got, tt.want)
			}
			if !slices.Equal(p.HandingOver, tt.handover) {
				t.Errorf("handing over %v, want %v", p.HandingOver, tt.handover)
			}
		})
	}
}

// TestMakeBeforeBreakWaitsForNoRefusedReplacement: a replacement HAProxy
// refused on the last reconcile (Policy.Refused: added again, refused
// again, for as long as its pod stays) is not about to serve, as one whose
// check has failed for deadReplacement is not: a leaving local server is
// not kept in traffic for it beside the other zones' serving backups, nor
// beside another cluster's serving server; where no server at all would
// serve, it is kept all the same. (The history checker, seed 324, runtime,
// short: a not-ready pod kept in traffic beside ready backups for as long
// as the refused pod's server was refused.)
func TestMakeBeforeBreakWaitsForNoRefusedReplacement(t *testing.T) {
	serving := func(name, addr string) model.Server {
		return rt(srv(name, addr, 80, model.Ready), true, true, 0, 0)
	}
	other := backup(srv("c_bk", "10.0.9.1", 80, model.Ready))
	otherServing := serving("c_bk", "10.0.9.1")
	newReady := srv("new", "10.0.1.1", 80, model.Ready)
	notReady := srv("old", "10.0.0.1", 80, model.Maint) // the leaving pod is not ready
	tests := []struct {
		name     string
		current  model.Backend
		desired  model.Backend
		refused  []string
		owner    string
		want     map[Action][]string
		handover []string
	}{
		{name: "the local replacement was refused, a backup serves: the leaving local server goes, the add is tried again",
			current: be(serving("old", "10.0.0.1"), otherServing), desired: be(newReady, other), refused: []string{"new"},
			want: map[Action][]string{Add: {"new"}, Delete: {"old"}}},
		{name: "the seed's: a not-ready local pod, its would-be replacement refused, a backup serves: parked",
			current: be(serving("old", "10.0.0.1"), otherServing), desired: be(notReady, newReady, other), refused: []string{"new"},
			want: map[Action][]string{Add: {"new"}, Maint: {"old"}}},
		{name: "one local replacement refused, another waits for its first check, a backup serves: parked",
			current: be(serving("old", "10.0.0.1"), otherServing),
			desired: be(notReady, newReady, srv("new2", "10.0.1.2", 80, model.Ready), other), refused: []string{"new"},
			want: map[Action][]string{Add: {"new", "new2"}, Maint: {"old"}}},
		{name: "one replacement refused, another waits for its first check, nothing else serves: kept for that one",
			current: be(serving("old", "10.0.0.1")),
			desired: be(notReady, newReady, srv("new2", "10.0.1.2", 80, model.Ready)), refused: []string{"new"},
			want: map[Action][]string{Add: {"new", "new2"}}, handover: []string{"old"}},
		{name: "refused, and no other server serves: kept all the same (no empty backend)",
			current: be(serving("old", "10.0.0.1")), desired: be(notReady, newReady), refused: []string{"new"},
			want: map[Action][]string{Add: {"new"}}, handover: []string{"old"}},
		{name: "refused, another cluster's server serves: ours goes",
			current: be(serving("east-old", "10.0.0.1"), serving("static", "10.0.9.1")),
			desired: be(srv("east-new", "10.0.1.1", 80, model.Ready)), refused: []string{"east-new"}, owner: "east-",
			want: map[Action][]string{Add: {"east-new"}, Delete: {"east-old"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := CalculateWith(tt.current, tt.desired, Policy{GateChecks: true, Refused: tt.refused, Owner: tt.owner})
			if got := summary(p); !equalSummary(got, tt.want) {
				t.Errorf("plan = %v, want %v", got, tt.want)
			}
			if !slices.Equal(p.HandingOver, tt.handover) {
				t.Errorf("handing over %v, want %v", p.HandingOver, tt.handover)
			}
			without := CalculateWith(tt.current, tt.desired, Policy{GateChecks: true, Owner: tt.owner})
			if len(without.Waiting) == 0 || !slices.Contains(without.Waiting, tt.refused[0]) {
				t.Errorf("the refused server is not waited for even unrefused (waiting %v): the case tests nothing", without.Waiting)
			}
		})
	}
}
