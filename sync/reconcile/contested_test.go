package reconcile

import (
	"context"
	"testing"
	"time"
)

// TestFollowUpBacksOffServersAnotherWriterDeletes: a waiting server found
// gone is asked for again at once the first time (a reload dropped it);
// gone again after that, another writer deletes it, and the follow-up asks
// again only after Retry, doubling: two writers of two configurations
// deleted each other's servers every poll, and none ever served (seed
// 179255428). A server that served meanwhile starts afresh.
func TestFollowUpBacksOffServersAnotherWriterDeletes(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	a := &checks{passed: map[string]bool{}}
	f := newFollowUp(clock, map[string]CheckReader{"a": a})
	var p pokes
	// polls runs the polls (50 ms each) of the result that lists n1
	// waiting, with n1 added (not passed) and then deleted by another
	// writer after one poll, and returns how long after its deletion the
	// follow-up poked.
	polls := func() time.Duration {
		t.Helper()
		a.set("n1", false)
		f.Observe(Result{Targets: []TargetResult{waiting("a", "n1")}}, nil, p.poke)
		clock.advance(50 * time.Millisecond)
		before := len(p.got())
		a.mu.Lock()
		delete(a.passed, "n1")
		a.mu.Unlock()
		for d := 50 * time.Millisecond; d <= time.Minute; d += 50 * time.Millisecond {
			clock.advance(50 * time.Millisecond)
			if len(p.got()) > before {
				return d
			}
		}
		t.Fatal("no poke within a minute of the deletion")
		return 0
	}
	for i, want := range []time.Duration{50 * time.Millisecond, time.Second + 50*time.Millisecond, 2*time.Second + 50*time.Millisecond, 4*time.Second + 50*time.Millisecond} {
		if got := polls(); got != want {
			t.Errorf("deletion %d: poked %v after it, want %v", i+1, got, want)
		}
	}
	// n1 served: the next result does not list it waiting.
	f.Observe(Result{Targets: []TargetResult{{Target: "a", Backend: "be"}}}, nil, p.poke)
	if got := polls(); got != 50*time.Millisecond {
		t.Errorf("after it served, a deletion poked %v after it, want at once (one poll)", got)
	}
	// A passed check beside a contested server still enters at once.
	polls()
	a.set("n1", false)
	a.set("n2", false)
	f.Observe(Result{Targets: []TargetResult{waiting("a", "n1", "n2")}}, nil, p.poke)
	clock.advance(50 * time.Millisecond)
	a.mu.Lock()
	delete(a.passed, "n1")
	a.passed["n2"] = true
	a.mu.Unlock()
	before := len(p.got())
	clock.advance(50 * time.Millisecond)
	if len(p.got()) != before+1 {
		t.Errorf("n2 passed beside contested n1: %d pokes at the next poll, want 1", len(p.got())-before)
	}
}

// TestTheSettlerWaitsForAContestedServer: the Settler's own one-second
// limit does not run the reconcile the follow-up holds back.
func TestTheSettlerWaitsForAContestedServer(t *testing.T) {
	f := &FollowUp{Retry: 300 * time.Millisecond}
	f.contestUntil = time.Now().Add(1500 * time.Millisecond)
	woke := make(chan struct{})
	began := time.Now()
	waitWake(context.Background(), f, woke)
	if took := time.Since(began); took < 1400*time.Millisecond {
		t.Errorf("waited %v, want until the contested wait ended (1.5 s)", took)
	}
}
