package reconcile

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// deleteServer is another writer deleting name.
func (c *checks) deleteServer(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.passed, name)
}

// undone returns what runs the polls (50 ms each) of the result that
// lists n1 waiting, with n1 added (not passed) and then undone by another
// writer (undo: deleted or parked) after one poll, and returns how long
// after that the follow-up poked.
func undone(t *testing.T, clock *fakeClock, a *checks, f *FollowUp, p *pokes, undo func(string)) func() time.Duration {
	return func() time.Duration {
		t.Helper()
		a.set("n1", false)
		f.Observe(Result{Targets: []TargetResult{waiting("a", "n1")}}, nil, p.poke)
		clock.advance(50 * time.Millisecond)
		before := len(p.got())
		undo("n1")
		for d := 50 * time.Millisecond; d <= time.Minute; d += 50 * time.Millisecond {
			clock.advance(50 * time.Millisecond)
			if len(p.got()) > before {
				return d
			}
		}
		t.Fatal("no poke within a minute of n1 undone")
		return 0
	}
}

// TestFollowUpBacksOffServersAnotherWriterDeletes: a waiting server found
// gone is asked for again at once the first time (a reload dropped it);
// gone again after that, another writer deletes it, and the follow-up asks
// again only after Retry, doubling up to contestMax: two writers of two
// configurations deleted each other's servers every poll, and none ever
// served (seed 179255428). A server that served meanwhile starts afresh.
func TestFollowUpBacksOffServersAnotherWriterDeletes(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	a := &checks{passed: map[string]bool{}}
	f := newFollowUp(clock, map[string]CheckReader{"a": a})
	var contested []string
	f.OnContested = func(target string, servers []string) { contested = append(contested, servers...) }
	var p pokes
	polls := undone(t, clock, a, f, &p, a.deleteServer)
	ms := time.Millisecond
	for i, want := range []time.Duration{50 * ms, 1050 * ms, 2050 * ms, 4050 * ms, 4050 * ms} {
		if got := polls(); got != want {
			t.Errorf("deletion %d: poked %v after it, want %v", i+1, got, want)
		}
	}
	if len(contested) != 4 || contested[0] != "be/n1" {
		t.Errorf("told of contested servers %v, want be/n1 four times", contested)
	}
	// n1 served: the next result does not list it waiting.
	f.Observe(Result{Targets: []TargetResult{{Target: "a", Backend: "be"}}}, nil, p.poke)
	if got := polls(); got != 50*ms {
		t.Errorf("after it served, a deletion poked %v after it, want at once (one poll)", got)
	}
	// Gone again after contestWindow: a reload by others, not a writer.
	clock.advance(contestWindow + time.Second)
	if got := polls(); got != 50*ms {
		t.Errorf("a deletion %v after the last: poked %v after it, want at once", contestWindow, got)
	}
}

// TestAContestedServerHoldsBackNoOther: a server waiting beside a
// contested one enters as soon as its check passes (its target's checks
// are still read every poll), and a newer result retires the contested
// one's timer: it does not poke for a server that is there again.
func TestAContestedServerHoldsBackNoOther(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	a := &checks{passed: map[string]bool{}}
	f := newFollowUp(clock, map[string]CheckReader{"a": a})
	var p pokes
	contest := func() {
		t.Helper()
		for i := range 2 {
			a.set("n1", false)
			a.set("n2", false)
			f.Observe(Result{Targets: []TargetResult{waiting("a", "n1", "n2")}}, nil, p.poke)
			clock.advance(50 * time.Millisecond)
			a.deleteServer("n1")
			before := len(p.got())
			clock.advance(50 * time.Millisecond)
			if got := len(p.got()) - before; i == 0 && got != 1 || i == 1 && got != 0 {
				t.Fatalf("deletion %d of n1: %d pokes at the next poll", i+1, got)
			}
		}
	}
	contest()
	before := len(p.got())
	a.set("n2", true)
	clock.advance(50 * time.Millisecond)
	if len(p.got()) != before+1 {
		t.Fatalf("n2 passed its check beside contested n1: %d pokes at the next poll, want 1", len(p.got())-before)
	}

	// Contested again (its third deletion: 2 s), then added again by the
	// reconcile another event asked for.
	a.set("n1", false)
	a.set("n2", false)
	f.Observe(Result{Targets: []TargetResult{waiting("a", "n1", "n2")}}, nil, p.poke)
	clock.advance(50 * time.Millisecond)
	a.deleteServer("n1")
	before = len(p.got())
	clock.advance(50 * time.Millisecond)
	if len(p.got()) != before {
		t.Fatal("contested n1 poked at once")
	}
	clock.advance(100 * time.Millisecond)
	a.set("n1", false)
	f.Observe(Result{Targets: []TargetResult{waiting("a", "n1", "n2")}}, nil, p.poke)
	clock.advance(2500 * time.Millisecond)
	if n := len(p.got()) - before; n != 0 {
		t.Errorf("%d pokes (%v) with n1 there and not passed: the older result's contested timer fired", n, p.got()[before:])
	}
}

// TestTheOneShotYieldsToAnotherWriter: the one-shot command's Settler
// stops following a target whose servers another writer deletes twice, and
// says so (ErrContested), instead of adding them again for its whole
// settle time; a serve of another configuration runs on.
func TestTheOneShotYieldsToAnotherWriter(t *testing.T) {
	yields(t, &checks{passed: map[string]bool{}}) // n1 never stays: deleted at once
}

// yields: a Settler whose run adds n1 at target a, read by a, ends with
// ErrContested within three reconciles.
func yields(t *testing.T, a *checks) {
	t.Helper()
	var runs atomic.Int32
	s := &Settler{Poll: 5 * time.Millisecond, Checks: map[string]CheckReader{"a": a},
		Run: func(context.Context) (Result, error) {
			runs.Add(1)
			return Result{Status: StatusApplied, Targets: []TargetResult{waiting("a", "n1")}}, nil
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := s.Settle(ctx)
	if !errors.Is(err, ErrContested) || ctx.Err() != nil {
		t.Fatalf("settle: %v (ctx %v), want ErrContested before the deadline", err, ctx.Err())
	}
	if n := runs.Load(); n > 3 {
		t.Errorf("%d reconciles: want the run to yield at n1's second undoing", n)
	}
}

// TestOneDeletionBesideABurstIsNoContest: a burst's extra poll (part of it
// due, the rest about to pass) sees the same deleted server again; that is
// one deletion, not two: it is asked for again at that poll, and nobody is
// told of another writer (second reader: the one-shot gave up on one
// deletion among three waiting servers).
func TestOneDeletionBesideABurstIsNoContest(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	a := &checks{passed: map[string]bool{"n1": false, "n2": false, "n3": false}}
	f := newFollowUp(clock, map[string]CheckReader{"a": a})
	var contested []string
	f.OnContested = func(_ string, servers []string) { contested = append(contested, servers...) }
	var p pokes
	f.Observe(Result{Targets: []TargetResult{waiting("a", "n1", "n2", "n3")}}, nil, p.poke)
	clock.advance(50 * time.Millisecond)
	a.deleteServer("n1")
	clock.advance(50 * time.Millisecond) // one of three due: one more poll
	clock.advance(50 * time.Millisecond)
	if len(p.got()) != 1 || len(contested) != 0 {
		t.Fatalf("pokes %v, contested %v: want one poke, no contest", p.got(), contested)
	}
}

// park is another writer putting name in maintenance (its guard parks
// what it does not want): its check stops.
func (c *checks) park(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused == nil {
		c.paused = map[string]bool{}
	}
	c.paused[name] = true
}

// TestFollowUpBacksOffServersAnotherWriterParks: a waiting server found
// parked (no check runs) is gated again at once the first time (a reload
// loaded it parked); parked again after that, another writer parks it, and
// the follow-up asks again only after a backoff, as for one deleted (soak
// seed 188303918 on 3.0.11: a one-shot run of the old zone gated again,
// at every poll, the servers serve's guard parked, and deleted serve's, 212
// times in 50 s).
func TestFollowUpBacksOffServersAnotherWriterParks(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	a := &checks{passed: map[string]bool{}}
	f := newFollowUp(clock, map[string]CheckReader{"a": a})
	var contested []string
	f.OnContested = func(target string, servers []string) { contested = append(contested, servers...) }
	var p pokes
	polls := undone(t, clock, a, f, &p, a.park)
	ms := time.Millisecond
	for i, want := range []time.Duration{50 * ms, 1050 * ms, 2050 * ms, 4050 * ms} {
		if got := polls(); got != want {
			t.Errorf("parking %d: poked %v after it, want %v", i+1, got, want)
		}
	}
	if len(contested) != 3 || contested[0] != "be/n1" {
		t.Errorf("told of contested servers %v, want be/n1 three times", contested)
	}
}

// TestTheOneShotYieldsToAnotherWriterThatParks: the one-shot command's
// Settler stops following a target whose servers another writer parks
// twice (ErrContested), as one whose servers it deletes.
func TestTheOneShotYieldsToAnotherWriterThatParks(t *testing.T) {
	yields(t, &checks{passed: map[string]bool{"n1": false}, paused: map[string]bool{"n1": true}}) // parked at once, every time
}

// loadParked is a reload loading name parked (haproxy.cfg says
// "disabled": the Data Plane driver writes its waiting servers so).
func (c *checks) loadParked(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded == nil {
		c.loaded = map[string]bool{}
	}
	c.loaded[name] = true
}

// TestAReloadLoadingAServerParkedIsNoContest: a waiting server that
// haproxy.cfg holds "disabled" found parked, again and again, is gated
// again at once each time and nobody is told of another writer: the Data
// Plane driver's own reloads load its waiting servers so (second reader:
// with every parked server counted, two of its reloads within 10 s made
// the one-shot run yield, exit 1, its servers left out of traffic).
func TestAReloadLoadingAServerParkedIsNoContest(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	a := &checks{passed: map[string]bool{}}
	f := newFollowUp(clock, map[string]CheckReader{"a": a})
	var contested []string
	f.OnContested = func(_ string, servers []string) { contested = append(contested, servers...) }
	var p pokes
	polls := undone(t, clock, a, f, &p, a.loadParked)
	for i := range 4 {
		if got := polls(); got != 50*time.Millisecond {
			t.Errorf("reload %d: poked %v after it, want at once (one poll)", i+1, got)
		}
	}
	if len(contested) != 0 {
		t.Errorf("told of contested servers %v, want none", contested)
	}

	// The one-shot run: loaded parked by two reloads, then passed.
	b := &checks{passed: map[string]bool{}}
	var runs atomic.Int32
	s := &Settler{Poll: 5 * time.Millisecond, Checks: map[string]CheckReader{"a": b},
		Run: func(context.Context) (Result, error) {
			if runs.Add(1) <= 2 {
				b.set("n1", false)
				b.loadParked("n1") // a reload right after the gate
				return Result{Status: StatusApplied, Targets: []TargetResult{waiting("a", "n1")}}, nil
			}
			b.set("n1", true)
			return Result{Status: StatusApplied, Targets: []TargetResult{{Target: "a", Backend: "be"}}}, nil
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.Settle(ctx); err != nil {
		t.Fatalf("settle: %v after %d reconciles, want nil: the reloads were no other writer", err, runs.Load())
	}
}
