package reconcile

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// TestFollowUpANewServerGetsItsOwnPatience: a server whose check never
// passes is looked at every Slow once it has waited past Patience, but a
// server that begins to wait after that gets its own Patience of polls: it
// enters within a Poll of its check passing, not up to a Slow later. Once
// it is in service, the dead one alone is looked at every Slow again.
func TestFollowUpANewServerGetsItsOwnPatience(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)}
	a := &checks{passed: map[string]bool{"dead": false, "new": false}}
	f := newFollowUp(clock, map[string]CheckReader{"a": a})
	var p pokes
	f.Observe(Result{Targets: []TargetResult{waiting("a", "dead")}}, nil, p.poke)
	clock.advance(3 * time.Minute)
	f.Observe(Result{Targets: []TargetResult{waiting("a", "dead")}}, nil, p.poke)
	if got := clock.pending(); !slices.Contains(got, 10*time.Second) {
		t.Fatalf("the dead server alone, past the patience: timers %v, want a 10s reconcile", got)
	}

	f.Observe(Result{Targets: []TargetResult{waiting("a", "dead", "new")}}, nil, p.poke) // a new server joins it
	a.set("new", true)
	clock.advance(50 * time.Millisecond)
	if want := []string{"a waiting server passed its check"}; !reflect.DeepEqual(p.got(), want) {
		t.Fatalf("the new server passed its check: pokes %v, want %v within a poll", p.got(), want)
	}

	f.Observe(Result{Targets: []TargetResult{waiting("a", "dead")}}, nil, p.poke) // new is in service
	reads := a.reads
	clock.advance(9 * time.Second)
	if a.reads != reads || len(p.got()) != 1 {
		t.Errorf("the dead server alone again: %d reads, pokes %v; want no polls", a.reads-reads, p.got())
	}
}

// TestFollowUpANewDrainGetsItsOwnPatience: a server draining a long-lived
// session is asked about every Slow past Patience; a server removed later
// is asked about every Drain for its own Patience, so it is deleted within
// a second of its sessions ending.
func TestFollowUpANewDrainGetsItsOwnPatience(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)}
	f := newFollowUp(clock, nil)
	var p pokes
	draining := func(names ...string) Result {
		return Result{Targets: []TargetResult{{Target: "a", Backend: "be", Draining: names}}}
	}
	f.Observe(draining("old"), nil, p.poke)
	clock.advance(3 * time.Minute)
	f.Observe(draining("old"), nil, p.poke)
	if got := clock.pending(); !reflect.DeepEqual(got, []time.Duration{10 * time.Second}) {
		t.Fatalf("the long-lived session alone: timers %v, want one of 10s", got)
	}
	f.Observe(draining("old", "removed"), nil, p.poke)
	if got := clock.pending(); !reflect.DeepEqual(got, []time.Duration{time.Second}) {
		t.Errorf("a server removed since: timers %v, want one of 1s", got)
	}
}
