package reconcile

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// fakeClock runs nothing by itself: a test fires the due timers.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	d       time.Duration
	f       func()
	stopped bool
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), d: d, f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// pending returns the delays of the timers not stopped nor fired.
func (c *fakeClock) pending() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Duration
	for _, t := range c.timers {
		if !t.stopped {
			out = append(out, t.d)
		}
	}
	return out
}

// advance moves the clock by d and fires, in order, every timer due.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var due *fakeTimer
		for _, t := range c.timers {
			if !t.stopped && !t.at.After(c.now) && (due == nil || t.at.Before(due.at)) {
				due = t
			}
		}
		if due != nil {
			due.stopped = true
		}
		c.mu.Unlock()
		if due == nil {
			return
		}
		due.f()
	}
}

// checks is a CheckReader whose answers a test sets: the servers there
// (passed), those of them parked at runtime (paused) or loaded parked
// (loaded: haproxy.cfg says "disabled").
type checks struct {
	mu     sync.Mutex
	passed map[string]bool
	paused map[string]bool
	loaded map[string]bool
	err    error
	reads  int
}

func (c *checks) ReadChecks(_ context.Context, _ string) (map[string]model.CheckState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	if c.err != nil {
		return nil, c.err
	}
	out := map[string]model.CheckState{}
	for k, v := range c.passed {
		switch {
		case c.loaded[k]:
			out[k] = model.CheckLoadedParked
		case c.paused[k]:
			out[k] = model.CheckParked
		case v:
			out[k] = model.CheckPassed
		default:
			out[k] = model.CheckPending
		}
	}
	return out, nil
}

func (c *checks) set(name string, passed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.passed[name] = passed
	delete(c.paused, name)
	delete(c.loaded, name)
}

type pokes struct {
	mu      sync.Mutex
	reasons []string
}

func (p *pokes) poke(reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reasons = append(p.reasons, reason)
}

func (p *pokes) got() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.reasons...)
}

func waiting(target string, names ...string) TargetResult {
	return TargetResult{Target: target, Backend: "be", Waiting: names}
}

func newFollowUp(clock *fakeClock, readers map[string]CheckReader) *FollowUp {
	return &FollowUp{Checks: readers, AfterFunc: clock.AfterFunc, Now: clock.Now}
}

func TestFollowUpPokesWhenAWaitingServerPasses(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)}
	a := &checks{passed: map[string]bool{"n1": false}}
	f := newFollowUp(clock, map[string]CheckReader{"a": a})
	var p pokes
	f.Observe(Result{Targets: []TargetResult{waiting("a", "n1")}}, nil, p.poke)

	clock.advance(50 * time.Millisecond)
	clock.advance(50 * time.Millisecond)
	if len(p.got()) != 0 || a.reads != 2 {
		t.Fatalf("before the check passed: pokes %v, %d reads; want none, 2", p.got(), a.reads)
	}
	a.set("n1", true)
	clock.advance(50 * time.Millisecond)
	if want := []string{"a waiting server passed its check"}; !reflect.DeepEqual(p.got(), want) {
		t.Fatalf("pokes %v, want %v", p.got(), want)
	}
	clock.advance(time.Minute)
	if len(p.got()) != 1 || len(clock.pending()) != 0 {
		t.Errorf("after the poke: pokes %v, timers %v; want one poke, nothing left", p.got(), clock.pending())
	}
}

// TestFollowUpPokesWhenALoadingServerIsLoaded: a waiting server a reload
// is still to load (Loading) is not there: that is no reason to reconcile
// (it would ask every poll until the reload ran); its being loaded is, so
// that it is gated at once.
func TestFollowUpPokesWhenALoadingServerIsLoaded(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)}
	a := &checks{passed: map[string]bool{}}
	f := newFollowUp(clock, map[string]CheckReader{"a": a})
	var p pokes
	tr := waiting("a", "n1")
	tr.Loading = []string{"n1"}
	f.Observe(Result{Targets: []TargetResult{tr}}, nil, p.poke)
	for range 5 {
		clock.advance(50 * time.Millisecond)
	}
	if len(p.got()) != 0 || a.reads != 5 {
		t.Fatalf("before the reload: pokes %v, %d reads; want none, 5", p.got(), a.reads)
	}
	a.set("n1", false) // loaded, parked: its check has not run
	clock.advance(50 * time.Millisecond)
	if len(p.got()) != 1 {
		t.Fatalf("once loaded: pokes %v, want one", p.got())
	}
}

// TestFollowUpWaitsOnePollForTheRestOfABurst: when some waiting servers
// passed and others are still checking (a burst whose checks pass a few ms
// apart), the follow-up looks once more before it pokes, so that one
// reconcile puts them all in service; a dead one among them delays the
// others by that one poll only. All due, or a rollout's step: no wait.
func TestFollowUpWaitsOnePollForTheRestOfABurst(t *testing.T) {
	for _, tt := range []struct {
		name      string
		waiting   []string
		at1, at2  map[string]bool // checks passed at the first and the second poll
		wantPolls int             // polls until the poke
	}{
		{"all due at once", []string{"n1", "n2", "n3"}, map[string]bool{"n1": true, "n2": true, "n3": true}, nil, 1},
		{"the rest passes a poll later", []string{"n1", "n2", "n3"}, map[string]bool{"n1": true}, map[string]bool{"n1": true, "n2": true, "n3": true}, 2},
		{"one never passes", []string{"n1", "n2", "n3"}, map[string]bool{"n1": true, "n2": true}, map[string]bool{"n1": true, "n2": true}, 2},
		{"a rollout's step beside a dead one goes at once", []string{"n1", "n2"}, map[string]bool{"n1": true}, nil, 1},
		{"a rollout's step alone goes at once", []string{"n1"}, map[string]bool{"n1": true}, nil, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)}
			a := &checks{passed: map[string]bool{}}
			for _, n := range tt.waiting {
				a.set(n, tt.at1[n])
			}
			f := newFollowUp(clock, map[string]CheckReader{"a": a})
			var p pokes
			f.Observe(Result{Targets: []TargetResult{waiting("a", tt.waiting...)}}, nil, p.poke)
			polls := 0
			for ; polls < 5 && len(p.got()) == 0; polls++ {
				if polls == 1 {
					for n, ok := range tt.at2 {
						a.set(n, ok)
					}
				}
				clock.advance(50 * time.Millisecond)
			}
			if len(p.got()) != 1 || polls != tt.wantPolls {
				t.Errorf("pokes %v after %d polls, want one after %d", p.got(), polls, tt.wantPolls)
			}
		})
	}
}

// TestFollowUpTargetsAreIndependent: a target whose socket cannot be read
// does not hold back the poke the other target's passed check asks for.
func TestFollowUpTargetsAreIndependent(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)}
	dead := &checks{err: errors.New("dial: connection refused")}
	live := &checks{passed: map[string]bool{"n1": true}}
	f := newFollowUp(clock, map[string]CheckReader{"dead": dead, "live": live})
	var p pokes
	f.Observe(Result{Targets: []TargetResult{waiting("dead", "n1"), waiting("live", "n1")}}, errors.New("dead failed"), p.poke)
	clock.advance(50 * time.Millisecond)
	if got := p.got(); len(got) != 1 || got[0] != "a waiting server passed its check" {
		t.Fatalf("pokes %v, want the live target's", got)
	}
}

func TestFollowUpRetriesFailuresWithBackoff(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)}
	f := newFollowUp(clock, nil)
	var p pokes
	var delays []time.Duration
	for range 7 {
		f.Observe(Result{}, errors.New("target down"), p.poke)
		delays = append(delays, clock.pending()...)
		clock.advance(time.Hour)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	if !reflect.DeepEqual(delays, want) || len(p.got()) != 7 {
		t.Fatalf("retry delays %v (%d pokes), want %v", delays, len(p.got()), want)
	}
	f.Observe(Result{}, nil, p.poke)
	if len(clock.pending()) != 0 {
		t.Errorf("after a success: timers %v, want none", clock.pending())
	}
	f.Observe(Result{}, errors.New("down again"), p.poke)
	if got := clock.pending(); !reflect.DeepEqual(got, []time.Duration{time.Second}) {
		t.Errorf("first failure after a success waits %v, want 1s", got)
	}
}

func TestFollowUpDrainingAndNoReader(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)}
	f := newFollowUp(clock, nil) // the target has no socket to read checks from
	var p pokes
	res := Result{Targets: []TargetResult{waiting("a", "n1"), {Target: "b", Backend: "be", Draining: []string{"old"}}}}
	f.Observe(res, nil, p.poke)
	got := clock.pending()
	if !reflect.DeepEqual(got, []time.Duration{10 * time.Second, time.Second}) {
		t.Fatalf("timers %v, want 10s (waiting, no reader) and 1s (draining)", got)
	}
	clock.advance(time.Second)
	if want := []string{"servers wait for their sessions to end"}; !reflect.DeepEqual(p.got(), want) {
		t.Errorf("pokes %v, want %v", p.got(), want)
	}
}

// A reconcile whose guard parked servers asks for the read that confirms
// them; one that finds them parked already (guard still holding while
// replacements wait) leaves it to the check polls.
func TestFollowUpConfirmsWhatTheGuardParked(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)}
	f := newFollowUp(clock, nil)
	var p pokes
	parked := Result{Targets: []TargetResult{{Target: "a", Backend: "be", Maint: []string{"old1", "old2"}, Guarded: []string{"old1", "old2"}}}}
	f.Observe(parked, nil, p.poke)
	if got := clock.pending(); !reflect.DeepEqual(got, []time.Duration{time.Second}) {
		t.Fatalf("timers %v, want one of 1s", got)
	}
	clock.advance(time.Second)
	if want := []string{"guarded servers wait for a confirming read"}; !reflect.DeepEqual(p.got(), want) {
		t.Errorf("pokes %v, want %v", p.got(), want)
	}
}

// TestFollowUpLooksAgainWhileTheGuardHolds: a guard that holds servers an
// earlier reconcile parked (a replacement was not UP at the read) is looked
// at again, every Drain, then every Slow past Patience: a replacement put in
// service without a wait for its check asks for nothing else (history
// checker, seed 32).
func TestFollowUpLooksAgainWhileTheGuardHolds(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)}
	f := newFollowUp(clock, nil)
	var p pokes
	held := Result{Targets: []TargetResult{{Target: "a", Backend: "be", Guarded: []string{"old1", "old2"}}}}
	f.Observe(held, nil, p.poke)
	if got := clock.pending(); !reflect.DeepEqual(got, []time.Duration{time.Second}) {
		t.Fatalf("timers %v after a result whose guard holds, want one of 1s", got)
	}
	clock.advance(time.Second)
	if want := []string{"guarded servers wait for a confirming read"}; !reflect.DeepEqual(p.got(), want) {
		t.Errorf("pokes %v, want %v", p.got(), want)
	}
	clock.advance(3 * time.Minute)
	f.Observe(held, nil, p.poke)
	if got := clock.pending(); !reflect.DeepEqual(got, []time.Duration{10 * time.Second}) {
		t.Fatalf("past patience: timers %v, want one of 10s", got)
	}
	f.Observe(Result{Targets: []TargetResult{{Target: "a", Backend: "be"}}}, nil, p.poke)
	if got := clock.pending(); len(got) != 0 {
		t.Errorf("timers %v once the guard let go, want none", got)
	}
}

// TestFollowUpHandOverSlowsDown: servers kept until their replacement
// serves (make-before-break) are looked at every second, then every Slow
// once that has gone on past Patience (a replacement whose check never
// passes would cost a full reconcile a second for good).
func TestFollowUpHandOverSlowsDown(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)}
	f := newFollowUp(clock, nil)
	var p pokes
	kept := Result{Targets: []TargetResult{{Target: "a", Backend: "be", HandingOver: []string{"old"}}}}
	f.Observe(kept, nil, p.poke)
	if got := clock.pending(); !reflect.DeepEqual(got, []time.Duration{time.Second}) {
		t.Fatalf("timers %v, want one of 1s", got)
	}
	clock.advance(3 * time.Minute)
	f.Observe(kept, nil, p.poke)
	if got := clock.pending(); !reflect.DeepEqual(got, []time.Duration{10 * time.Second}) {
		t.Fatalf("past patience: timers %v, want one of 10s", got)
	}
}

func TestFollowUpNewerResultReplacesOlder(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)}
	a := &checks{passed: map[string]bool{"n1": false}}
	f := newFollowUp(clock, map[string]CheckReader{"a": a})
	var p pokes
	f.Observe(Result{Targets: []TargetResult{waiting("a", "n1")}}, nil, p.poke)
	f.Observe(Result{}, nil, p.poke) // nothing waits any more
	a.set("n1", true)
	clock.advance(time.Minute)
	if len(p.got()) != 0 || a.reads != 0 {
		t.Errorf("pokes %v, %d reads after a result with nothing waiting; want none", p.got(), a.reads)
	}
	f.Observe(Result{Targets: []TargetResult{waiting("a", "n1")}}, nil, p.poke)
	f.Stop()
	clock.advance(time.Minute)
	if len(p.got()) != 0 {
		t.Errorf("pokes %v after Stop", p.got())
	}
}

func TestFollowUpSlowsDownAfterPatience(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)}
	a := &checks{passed: map[string]bool{"n1": false}}
	f := newFollowUp(clock, map[string]CheckReader{"a": a})
	var p pokes
	res := Result{Targets: []TargetResult{waiting("a", "n1")}}
	f.Observe(res, nil, p.poke)
	if got := clock.pending(); !reflect.DeepEqual(got, []time.Duration{50 * time.Millisecond}) {
		t.Fatalf("timers %v, want a 50ms poll", got)
	}
	clock.advance(3 * time.Minute) // polls all along; the server never passes
	f.Observe(res, nil, p.poke)    // the same server still waits, past the patience
	reads := a.reads
	if got := clock.pending(); !slices.Contains(got, 10*time.Second) {
		t.Errorf("timers %v past the patience, want a 10s reconcile", got)
	}
	clock.advance(9 * time.Second)
	if a.reads != reads || len(p.got()) != 0 {
		t.Errorf("past the patience: %d more reads, pokes %v; want no polling", a.reads-reads, p.got())
	}
	clock.advance(time.Second)
	if want := []string{"servers wait for their check"}; !reflect.DeepEqual(p.got(), want) {
		t.Errorf("pokes %v, want %v", p.got(), want)
	}
}

// TestFollowUpLooksAgainWhilePodsStart: pods that list the readiness gate
// and wait for their containers change no EndpointSlice when they get
// ready, so the follow-up reconciles every second, every 10 s past the
// patience, and stops once none waits.
func TestFollowUpLooksAgainWhilePodsStart(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)}
	f := newFollowUp(clock, nil)
	var p pokes
	starting := Result{podsStarting: true}
	f.Observe(starting, nil, p.poke)
	if got := clock.pending(); !reflect.DeepEqual(got, []time.Duration{time.Second}) {
		t.Fatalf("timers %v, want one of 1s", got)
	}
	clock.advance(time.Second)
	if want := []string{"pods wait for their containers (readiness gate)"}; !reflect.DeepEqual(p.got(), want) {
		t.Errorf("pokes %v, want %v", p.got(), want)
	}
	clock.advance(3 * time.Minute)
	f.Observe(starting, nil, p.poke) // still starting, past the patience
	if got := clock.pending(); !reflect.DeepEqual(got, []time.Duration{10 * time.Second}) {
		t.Errorf("timers %v past the patience, want one of 10s", got)
	}
	f.Observe(Result{}, nil, p.poke)
	if got := clock.pending(); len(got) != 0 {
		t.Errorf("timers %v once no pod starts, want none", got)
	}
}

// TestFollowUpDrainingSlowsDown: a server parked with a long-lived session
// (the shipped drain timeout is 0) is asked after every second at first,
// then every 10 s past the patience, not every second for the session's
// life.
func TestFollowUpDrainingSlowsDown(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)}
	f := newFollowUp(clock, nil)
	draining := Result{Targets: []TargetResult{{Target: "a", Backend: "be", Draining: []string{"old"}}}}
	var mu sync.Mutex
	var at []time.Time
	var poke func(string)
	poke = func(string) { // each poke is a reconcile that finds it still draining
		mu.Lock()
		at = append(at, clock.now)
		mu.Unlock()
		go f.Observe(draining, nil, poke)
	}
	f.Observe(draining, nil, poke)
	for range 10 * 60 * 10 { // ten minutes in steps of 100ms
		clock.advance(100 * time.Millisecond)
		for wait := 0; len(clock.pending()) == 0; wait++ { // let the reconcile's Observe land
			if wait == 5000 {
				t.Fatal("no follow-up pending while a server drains")
			}
			time.Sleep(time.Millisecond)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	start, tenth := clock.now.Add(-10*time.Minute), 0
	first := 0
	for _, x := range at {
		if x.After(start.Add(9 * time.Minute)) {
			tenth++
		}
		if !x.After(start.Add(time.Minute)) {
			first++
		}
	}
	if first < 50 || tenth > 6 {
		t.Errorf("pokes: %d in the first minute (want ~60), %d in the tenth (want at most 6)", first, tenth)
	}
}

// TestFollowUpLeavesAFailedTargetToTheRetry: a backend that refuses runtime
// servers fails every reconcile; the server it refused is not there to
// pass a check, and polling for it would poke every Poll. The retry after a
// failure comes instead, with its backoff.
func TestFollowUpLeavesAFailedTargetToTheRetry(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)}
	a := &checks{passed: map[string]bool{}} // the refused server is absent
	f := newFollowUp(clock, map[string]CheckReader{"a": a})
	var p pokes
	refused := waiting("a", "n1")
	refused.Error, refused.ErrorClass = "backend be cannot take runtime servers", "permanent"
	f.Observe(Result{Targets: []TargetResult{refused}}, errors.New("haproxy target failed"), p.poke)
	clock.advance(900 * time.Millisecond)
	if len(p.got()) != 0 || a.reads != 0 {
		t.Fatalf("pokes %v, %d check reads before the retry; want none", p.got(), a.reads)
	}
	clock.advance(100 * time.Millisecond)
	if want := []string{"retry after a failure"}; !reflect.DeepEqual(p.got(), want) {
		t.Errorf("pokes %v, want %v", p.got(), want)
	}
	// One server refused among others that wait: those are still polled.
	some := waiting("a", "n2")
	some.Error, some.Failed = "1 server change(s) refused", []plan.ServerError{{Server: "n1", Error: "refused"}}
	a.set("n2", true)
	f.Observe(Result{Targets: []TargetResult{some}}, errors.New("haproxy target failed"), p.poke)
	clock.advance(50 * time.Millisecond)
	if got := p.got(); len(got) != 2 || got[1] != "a waiting server passed its check" {
		t.Errorf("pokes %v, want the waiting server's", got)
	}
}

// TestFollowUpEntersTargetByTarget: with Enter, a passed check asks for its
// target's reconcile alone; that target's result replaces only its own
// polls, and the other target keeps being polled.
func TestFollowUpEntersTargetByTarget(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)}
	live := &checks{passed: map[string]bool{"n1": false}}
	slow := &checks{passed: map[string]bool{"n1": false}}
	f := newFollowUp(clock, map[string]CheckReader{"live": live, "slow": slow})
	var entered []string
	f.Enter = func(target string) { entered = append(entered, target) }
	var p pokes
	f.ObserveTarget("live", Result{Targets: []TargetResult{waiting("live", "n1")}}, nil) // live is done; slow still runs
	f.Observe(Result{Targets: []TargetResult{waiting("live", "n1"), waiting("slow", "n1")}}, nil, p.poke)
	live.set("n1", true)
	clock.advance(50 * time.Millisecond)
	if !reflect.DeepEqual(entered, []string{"live"}) || len(p.got()) != 0 {
		t.Fatalf("entered %v, pokes %v; want live entered alone", entered, p.got())
	}
	reads := slow.reads
	f.ObserveTarget("live", Result{Targets: []TargetResult{{Target: "live", Backend: "be"}}}, nil)
	clock.advance(50 * time.Millisecond)
	if slow.reads == reads {
		t.Error("the other target's polls stopped with live's result")
	}
	if live.reads > 2 {
		t.Errorf("live read %d times after nothing waits there", live.reads)
	}
	f.ObserveTarget("live", Result{gateDeferred: true}, nil)
	clock.advance(0)
	if want := []string{"the readiness gate needs every target"}; !reflect.DeepEqual(p.got(), want) {
		t.Errorf("pokes %v, want %v", p.got(), want)
	}
}
