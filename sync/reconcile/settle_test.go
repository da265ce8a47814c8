package reconcile

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

func settle(ctx context.Context, run func(context.Context) (Result, error), checks map[string]CheckReader) (Result, error) {
	return (&Settler{Run: run, Checks: checks, Poll: time.Millisecond}).Settle(ctx)
}

func TestSettleRunsUntilNothingWaits(t *testing.T) {
	a := &checks{passed: map[string]bool{"n1": true}}
	runs := 0
	run := func(context.Context) (Result, error) {
		runs++
		tr := TargetResult{Target: "a", Backend: "be", Attempts: 1, Add: []string{}, Update: []string{}}
		if runs == 1 {
			tr.Add, tr.Waiting = []string{"n1"}, []string{"n1"}
			return Result{Status: StatusApplied, Targets: []TargetResult{tr}}, nil
		}
		tr.Update = []string{"n1"}
		return Result{Status: StatusApplied, Targets: []TargetResult{tr}}, nil
	}
	res, err := settle(context.Background(), run, map[string]CheckReader{"a": a})
	if err != nil || runs != 2 {
		t.Fatalf("err %v after %d runs, want nil after 2", err, runs)
	}
	tr := res.Targets[0]
	if !reflect.DeepEqual(tr.Add, []string{"n1"}) || !reflect.DeepEqual(tr.Update, []string{"n1"}) || tr.Attempts != 2 || len(tr.Waiting) != 0 {
		t.Errorf("merged result %+v", tr)
	}
	if res.Status != StatusApplied {
		t.Errorf("status %s, want applied", res.Status)
	}
}

func TestSettleGivesUpWithServersWaiting(t *testing.T) {
	a := &checks{passed: map[string]bool{"n1": false}}
	run := func(context.Context) (Result, error) {
		return Result{Status: StatusApplied, Targets: []TargetResult{waiting("a", "n1")}}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	res, err := settle(ctx, run, map[string]CheckReader{"a": a})
	if !errors.Is(err, ErrStillWaiting) || res.Status != StatusError || len(res.Targets[0].Waiting) != 1 {
		t.Fatalf("err %v, result %+v; want ErrStillWaiting, status error, n1 still waiting", err, res)
	}
}

// TestSettleDeletesWhatItParked: a removed server is parked first and
// deleted by a later reconcile once its sessions ended; the one-shot
// reconcile runs that one too, so one command removes it. Sessions that
// outlive the bound are no failure: the result lists them as draining.
func TestSettleDeletesWhatItParked(t *testing.T) {
	runs := 0
	run := func(context.Context) (Result, error) {
		runs++
		tr := TargetResult{Target: "a", Backend: "be", Attempts: 1, Add: []string{}, Update: []string{}}
		if runs == 1 {
			tr.Maint, tr.Draining = []string{"n3"}, []string{"n3"}
		} else {
			tr.Delete = []string{"n3"}
		}
		return Result{Status: StatusApplied, Targets: []TargetResult{tr}}, nil
	}
	res, err := settle(context.Background(), run, nil)
	if err != nil || runs != 2 {
		t.Fatalf("err %v after %d runs, want nil after 2", err, runs)
	}
	if tr := res.Targets[0]; !reflect.DeepEqual(tr.Maint, []string{"n3"}) || !reflect.DeepEqual(tr.Delete, []string{"n3"}) || len(tr.Draining) != 0 {
		t.Errorf("merged result %+v", tr)
	}

	held := func(context.Context) (Result, error) {
		tr := TargetResult{Target: "a", Backend: "be", Attempts: 1, Draining: []string{"n3"}}
		return Result{Status: StatusUnchanged, Targets: []TargetResult{tr}}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	res, err = settle(ctx, held, nil)
	if err != nil || res.Status == StatusError || len(res.Targets[0].Draining) != 1 {
		t.Errorf("sessions that outlive the bound: err %v, result %+v; want no error, n3 draining", err, res)
	}
}

// pairRun is a reconcile of an HA pair: "a" answers, its new server n1
// gated by the whole reconcile and put in service by the next; "dead"
// fails the whole reconcile with fail. A reconcile of one target alone
// (OnlyTarget) is counted in alone.
type pairRun struct {
	fail  TargetResult
	mu    sync.Mutex
	whole int
	alone map[string]int
}

func (p *pairRun) run(ctx context.Context) (Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if target, ok := OnlyTargetOf(ctx); ok {
		if p.alone == nil {
			p.alone = map[string]int{}
		}
		p.alone[target]++
		if target != "a" {
			return Result{Status: StatusError, Targets: []TargetResult{p.fail}}, fmt.Errorf("%w: 1 of 1", ErrTargets)
		}
		return Result{Status: StatusApplied, Targets: []TargetResult{{Target: "a", Backend: "be", Attempts: 1, Update: []string{"n1"}, changed: true}}}, nil
	}
	p.whole++
	a := TargetResult{Target: "a", Backend: "be", Attempts: 1, Add: []string{"n1"}, Waiting: []string{"n1"}, changed: true}
	return Result{Status: StatusError, Targets: []TargetResult{a, p.fail}}, fmt.Errorf("%w: 1 of 2", ErrTargets)
}

// TestSettleFollowsEveryTargetPastAFailedOne: with one target of an HA pair
// down, the one-shot reconcile does not stop at its error: the other
// target's gated server is put in service once its check passed, the down
// target is not tried again, and the error and the result name it with its
// class.
func TestSettleFollowsEveryTargetPastAFailedOne(t *testing.T) {
	dead := TargetResult{Target: "unix:///run/b.sock", Backend: "be", Attempts: 1,
		Error: "dial unix /run/b.sock: connect: connection refused", ErrorClass: failure.Unreachable}
	p := &pairRun{fail: dead}
	a := &checks{passed: map[string]bool{"n1": true}}
	res, err := settle(context.Background(), p.run, map[string]CheckReader{"a": a})
	if !errors.Is(err, ErrTargets) || !strings.Contains(err.Error(), "unix:///run/b.sock (unreachable)") {
		t.Fatalf("err %v, want ErrTargets naming unix:///run/b.sock (unreachable)", err)
	}
	if p.whole != 1 || p.alone["a"] != 1 || p.alone[dead.Target] != 0 {
		t.Errorf("%d whole reconciles, alone %v; want 1 whole, then a alone once, the dead target never again", p.whole, p.alone)
	}
	if res.Status != StatusError || res.Error != err.Error() || res.ErrorClass != failure.Unreachable || len(res.Targets) != 2 {
		t.Fatalf("result %+v", res)
	}
	if tr := res.Targets[0]; tr.Target != "a" || len(tr.Waiting) != 0 || !reflect.DeepEqual(tr.Update, []string{"n1"}) || tr.Attempts != 2 {
		t.Errorf("the target that answers: %+v, want n1 in service after 2 attempts", tr)
	}
	if tr := res.Targets[1]; tr.Target != dead.Target || tr.Error != dead.Error {
		t.Errorf("the dead target: %+v", tr)
	}
}

// TestSettleFollowsATargetWhileAnotherHangs: the whole reconcile is done
// with "a" while "slow" hangs until its timeout; a's gated server enters
// service meanwhile, through a reconcile of a alone, not after the hang.
func TestSettleFollowsATargetWhileAnotherHangs(t *testing.T) {
	entered := make(chan struct{})
	var once sync.Once
	var hung atomic.Bool
	run := func(ctx context.Context) (Result, error) {
		if target, ok := OnlyTargetOf(ctx); ok {
			if target != "a" {
				t.Errorf("a reconcile of %s alone", target)
			}
			once.Do(func() { close(entered) })
			return Result{Status: StatusApplied, Targets: []TargetResult{{Target: "a", Backend: "be", Attempts: 1, Update: []string{"n1"}}}}, nil
		}
		a := TargetResult{Target: "a", Backend: "be", Attempts: 1, Add: []string{"n1"}, Waiting: []string{"n1"}}
		if done, ok := ctx.Value(targetDoneKey{}).(func(string, []TargetResult)); ok {
			done("a", []TargetResult{a})
		}
		select { // "slow" hangs, up to its timeout
		case <-entered:
		case <-time.After(5 * time.Second):
			hung.Store(true)
		}
		slow := TargetResult{Target: "slow", Backend: "be", Attempts: 4, Error: "context deadline exceeded", ErrorClass: failure.Temporary}
		return Result{Status: StatusError, Targets: []TargetResult{a, slow}}, fmt.Errorf("%w: 1 of 2", ErrTargets)
	}
	a := &checks{passed: map[string]bool{"n1": true}}
	res, err := settle(context.Background(), run, map[string]CheckReader{"a": a})
	if hung.Load() {
		t.Fatal("a's server waited for the other target's hang to end")
	}
	if !errors.Is(err, ErrTargets) || !strings.Contains(err.Error(), "slow (temporary)") {
		t.Errorf("err %v, want ErrTargets naming slow (temporary)", err)
	}
	if tr := res.Targets[0]; tr.Target != "a" || len(tr.Waiting) != 0 || !reflect.DeepEqual(tr.Update, []string{"n1"}) {
		t.Errorf("a: %+v, want n1 in service", tr)
	}
}

// TestSettleSetsTheGateOnceEveryTargetServes: a reconcile of one target
// leaves the readiness gate as it was; once every target succeeded and
// nothing waits, one more whole reconcile sets it. With a target failed,
// the gate cannot be judged: no more reconcile.
func TestSettleSetsTheGateOnceEveryTargetServes(t *testing.T) {
	for _, failed := range []bool{false, true} {
		var whole atomic.Int32
		run := func(ctx context.Context) (Result, error) {
			if _, ok := OnlyTargetOf(ctx); ok {
				return Result{Status: StatusApplied, gateDeferred: true, Targets: []TargetResult{{Target: "a", Backend: "be", Attempts: 1, Update: []string{"n1"}}}}, nil
			}
			res := Result{Status: StatusApplied, Targets: []TargetResult{{Target: "a", Backend: "be", Attempts: 1}}}
			if whole.Add(1) == 1 {
				res.Targets[0].Add, res.Targets[0].Waiting = []string{"n1"}, []string{"n1"}
			}
			if !failed {
				return res, nil
			}
			res.Targets = append(res.Targets, TargetResult{Target: "b", Backend: "be", Attempts: 1, Error: "refused", ErrorClass: failure.Unreachable})
			return res, fmt.Errorf("%w: 1 of 2", ErrTargets)
		}
		res, err := settle(context.Background(), run, map[string]CheckReader{"a": &checks{passed: map[string]bool{"n1": true}}})
		want := int32(2)
		if failed {
			want = 1
		}
		if whole.Load() != want || (err != nil) != failed {
			t.Errorf("a target failed %v: %d whole reconciles, err %v; want %d", failed, whole.Load(), err, want)
		}
		if tr := res.Targets[0]; !reflect.DeepEqual(tr.Add, []string{"n1"}) || !reflect.DeepEqual(tr.Update, []string{"n1"}) || len(tr.Waiting) != 0 {
			t.Errorf("a target failed %v: merged %+v", failed, tr)
		}
	}
}

// TestPending: what a later reconcile of a target would have work for.
func TestPending(t *testing.T) {
	refused := []plan.ServerError{{Server: "n2", Error: "refused"}}
	for _, tt := range []struct {
		name string
		in   []TargetResult
		want bool
	}{
		{"nothing", []TargetResult{{Target: "a", Backend: "be"}}, false},
		{"a server waits for its check", []TargetResult{{Target: "a", Backend: "be", Waiting: []string{"n1"}}}, true},
		{"a server waits for its sessions", []TargetResult{{Target: "a", Backend: "be", Draining: []string{"n1"}}}, true},
		{"a failed backend's waits are the failure's", []TargetResult{{Target: "a", Backend: "be", Waiting: []string{"n1"}, Draining: []string{"n3"}, Error: "down"}}, false},
		{"one server refused, another waits", []TargetResult{{Target: "a", Backend: "be", Waiting: []string{"n1"}, Error: "1 refused", Failed: refused}}, true},
		{"one backend failed, another waits", []TargetResult{{Target: "a", Backend: "x", Error: "no such backend"}, {Target: "a", Backend: "be", Draining: []string{"n3"}}}, true},
	} {
		if got := pending(tt.in); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestSettleError: each failed target named once, with its class; servers
// still waiting said beside.
func TestSettleError(t *testing.T) {
	down := TargetResult{Target: "b", Backend: "x", Error: "down", ErrorClass: failure.Unreachable}
	for _, tt := range []struct {
		name    string
		in      []TargetResult
		waiting bool
		want    string
	}{
		{"all well", []TargetResult{{Target: "a"}}, false, ""},
		{"still waiting", []TargetResult{{Target: "a"}}, true, "servers still wait for their first passed health check"},
		{"a target down, on two backends", []TargetResult{{Target: "a"}, down, {Target: "b", Backend: "y", Error: "down", ErrorClass: failure.Unreachable}}, false,
			"haproxy target failed: b (unreachable)"},
		{"two failed, one still waiting elsewhere", []TargetResult{{Target: "a", Error: "refused", ErrorClass: failure.Permanent}, down}, true,
			"haproxy target failed: a (permanent), b (unreachable); servers still wait for their first passed health check"},
	} {
		err := settleError(tt.in, tt.waiting, false)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want || (err != nil && errors.Is(err, ErrTargets) != strings.Contains(tt.want, "target failed")) ||
			(err != nil && errors.Is(err, ErrStillWaiting) != tt.waiting) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}
