package reconcile

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestCoalescerShares(t *testing.T) {
	var runs atomic.Int32
	release := make(chan struct{})
	c := NewCoalescer(func(context.Context) (Result, error) {
		n := runs.Add(1)
		if n == 1 {
			<-release // hold the first run while the others arrive
		}
		return Result{Status: StatusApplied, Desired: int(n)}, nil
	})
	first := make(chan Result)
	go func() { r, _ := c.Do(context.Background()); first <- r }()
	for runs.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	results := make([]Result, 100)
	for i := range results {
		wg.Add(1)
		go func() { defer wg.Done(); results[i], _ = c.Do(context.Background()) }()
	}
	time.Sleep(50 * time.Millisecond) // let them all queue behind the first run
	close(release)
	wg.Wait()
	if r := <-first; r.Desired != 1 {
		t.Errorf("first caller got run %d", r.Desired)
	}
	for i, r := range results {
		// Every later caller arrived during run 1, so it must get a later run.
		if r.Desired < 2 {
			t.Errorf("caller %d got run %d, which started before it arrived", i, r.Desired)
		}
	}
	// Normally 2; 3 if a goroutine was scheduled only after run 2 began.
	if n := runs.Load(); n > 3 {
		t.Errorf("%d runs for 101 callers, want at most 3", n)
	}
}

func TestCoalescerCallerCancel(t *testing.T) {
	release := make(chan struct{})
	c := NewCoalescer(func(ctx context.Context) (Result, error) {
		<-release
		return Result{}, ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { _, err := c.Do(ctx); done <- err }()
	cancel()
	if err := <-done; err == nil {
		t.Error("cancelled caller got no error")
	}
	close(release)
	// The shared run was not cancelled with the caller, and the next caller is served.
	if _, err := c.Do(context.Background()); err != nil {
		t.Errorf("next run: %v", err)
	}
}

// TestCoalescerPoke: pokes do not wait, a burst of them while a reconcile
// runs costs one more reconcile, each poke gets a reconcile that started after
// it, their results go to OnPoked, and Idle says when all is done.
func TestCoalescerPoke(t *testing.T) {
	var runs atomic.Int32
	release := make(chan struct{})
	c := NewCoalescer(func(context.Context) (Result, error) {
		if runs.Add(1) == 1 {
			<-release
		}
		return Result{Status: StatusUnchanged}, nil
	})
	var poked atomic.Int32
	c.OnPoked(func(Result, error) { poked.Add(1) })
	if c.Poke() {
		t.Error("the first poke was coalesced")
	}
	for runs.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	coalesced := 0
	for range 50 { // all arrive while run 1 holds
		if c.Poke() {
			coalesced++
		}
	}
	if coalesced != 49 {
		t.Errorf("%d of 50 pokes coalesced, want 49", coalesced)
	}
	select {
	case <-c.Idle():
		t.Fatal("idle while a reconcile runs")
	default:
	}
	close(release)
	select {
	case <-c.Idle():
	case <-time.After(5 * time.Second):
		t.Fatal("never idle")
	}
	if runs.Load() != 2 || poked.Load() != 2 {
		t.Errorf("%d runs, %d OnPoked calls; want 2 and 2", runs.Load(), poked.Load())
	}
}

// TestCoalescerEntersATargetWhileAnotherHangs: a whole reconcile hangs on
// one target; the other target, done, has a server waiting for its check.
// Once the check passes, that target's own reconcile runs at once, not
// after the hung one.
func TestCoalescerEntersATargetWhileAnotherHangs(t *testing.T) {
	live := &checks{passed: map[string]bool{"n1": false}}
	hung := &checks{err: context.DeadlineExceeded}
	release := make(chan struct{})
	entered := make(chan struct{})
	var once sync.Once
	c := NewCoalescer(func(ctx context.Context) (Result, error) {
		if only, ok := ctx.Value(onlyTargetKey{}).(string); ok {
			if only == "live" {
				once.Do(func() { close(entered) })
			}
			return Result{Targets: []TargetResult{{Target: only, Backend: "be"}}}, nil
		}
		done, _ := ctx.Value(targetDoneKey{}).(func(string, []TargetResult))
		if done == nil {
			t.Error("a whole reconcile is not told to report targets as they end")
			return Result{}, nil
		}
		done("live", []TargetResult{waiting("live", "n1")})
		<-release // the other target hangs
		return Result{Targets: []TargetResult{{Target: "live", Backend: "be"}, {Target: "hung", Backend: "be", Error: "timeout"}}}, ErrTargets
	})
	f := &FollowUp{Checks: map[string]CheckReader{"live": live, "hung": hung}, Poll: 5 * time.Millisecond}
	c.Follow(f, nil)
	defer f.Stop()
	c.Poke()
	live.set("n1", true)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the live target's entry waited for the hung one")
	}
	close(release)
	<-c.Idle()
}

// TestCoalescerLateCallerLearnsWhy: a caller that came while a reconcile ran
// and whose own did not end within its wait is told how the one before
// ended: that is usually why (a target that does not answer).
func TestCoalescerLateCallerLearnsWhy(t *testing.T) {
	var runs atomic.Int32
	release, hold := make(chan struct{}), make(chan struct{})
	defer close(hold)
	c := NewCoalescer(func(context.Context) (Result, error) {
		if runs.Add(1) == 1 {
			<-release
			return Result{Status: StatusError, Targets: []TargetResult{{Target: "http://haproxy:5555", Error: "no answer"}}},
				errors.New("haproxy target failed: 1 of 1")
		}
		<-hold // the caller's own reconcile outlives its wait
		return Result{}, nil
	})
	go func() { _, _ = c.Do(context.Background()) }()
	for runs.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	go func() { time.Sleep(20 * time.Millisecond); close(release) }()
	_, err := c.Do(ctx)
	var late *LateError
	if !errors.As(err, &late) || !errors.Is(err, context.DeadlineExceeded) || late.Before == nil ||
		late.Before.Targets[0].Error != "no answer" || late.BeforeErr == nil {
		t.Fatalf("err = %#v", err)
	}
	if want := "the reconcile did not end in time; the one before it failed: haproxy target failed: 1 of 1"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
}

// TestCoalescerPokeReachesATargetWhileAnotherHangs (issue 43, found by the
// history checker: an HA pair whose second HAProxy hangs): a change poked
// while a whole reconcile hangs on one target reaches the other target at
// once, in a reconcile of its own, instead of waiting for the hung one (up
// to RECONCILE_TIMEOUT).
func TestCoalescerPokeReachesATargetWhileAnotherHangs(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	reached := make(chan string, 8)
	var whole atomic.Int32
	c := NewCoalescer(func(ctx context.Context) (Result, error) {
		if only, ok := ctx.Value(onlyTargetKey{}).(string); ok {
			reached <- only
			if only == "hung" {
				<-release
			}
			return Result{Targets: []TargetResult{{Target: only, Backend: "be"}}}, nil
		}
		if whole.Add(1) == 1 {
			close(started)
			<-release // the hung target holds the whole reconcile
		}
		return Result{Targets: []TargetResult{{Target: "live", Backend: "be"}, {Target: "hung", Backend: "be"}}}, nil
	})
	f := &FollowUp{Checks: map[string]CheckReader{"live": &checks{}, "hung": &checks{}}, Poll: 5 * time.Millisecond}
	c.Follow(f, nil)
	defer f.Stop()
	c.Poke()
	<-started
	c.Poke() // a Kubernetes change while the first reconcile hangs
	deadline := time.After(10 * time.Second)
	for {
		select {
		case target := <-reached:
			if target == "live" {
				close(release)
				<-c.Idle()
				return
			}
		case <-deadline:
			close(release)
			t.Fatal("the change waited for the reconcile the hung target holds")
		}
	}
}
