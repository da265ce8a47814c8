package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile/reconciletest"
)

// TestAFailingTargetStopsRetryingOnceAnotherFinished (class history seed
// 13, an HA pair): a target whose every attempt fails for a moment's reason
// (a host that resets connections) is retried until Straggle after another
// target finished (here without error), then fails with its own error and class,
// for the follow-up to try again; the reconcile does not wait for its
// deadline. Alone, it is retried to the deadline as before.
func TestAFailingTargetStopsRetryingOnceAnotherFinished(t *testing.T) {
	reset := &failure.NetworkError{Err: syscall.ECONNRESET}
	src := &desiredtest.Source{In: cluster("10.244.0.1")}
	ok, bad := &reconciletest.Driver{ID: "a"}, &reconciletest.Driver{ID: "b", ReadErr: reset}
	r := reconciler(src, ok, bad)
	r.Straggle, r.Timeout = 20*time.Millisecond, time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	res, err := r.Reconcile(ctx, false)
	if !errors.Is(err, reconcile.ErrTargets) || ctx.Err() != nil {
		t.Fatalf("err %v (ctx %v): want b's failure before any deadline", err, ctx.Err())
	}
	for _, tr := range res.Targets {
		switch tr.Target {
		case "a":
			if tr.Error != "" {
				t.Errorf("a: %s", tr.Error)
			}
		case "b":
			if !strings.Contains(tr.Error, "not retried any more") || tr.ErrorClass != failure.Temporary {
				t.Errorf("b: %q (%s): want its own failure, temporary, no longer retried", tr.Error, tr.ErrorClass)
			}
		}
	}

	alone := reconciler(src, &reconciletest.Driver{ID: "b", ReadErr: reset})
	alone.Straggle, alone.Timeout = 20*time.Millisecond, 300*time.Millisecond
	res, _ = alone.Reconcile(context.Background(), false)
	if tr := res.Targets[0]; strings.Contains(tr.Error, "not retried any more") || tr.Attempts < 2 {
		t.Errorf("alone: %q after %d attempts: want it retried to the deadline", tr.Error, tr.Attempts)
	}
}

// slowDriver answers every Read after a delay (a remote Data Plane API).
type slowDriver struct {
	*reconciletest.Driver
	delay time.Duration
}

func (s *slowDriver) Read(ctx context.Context, be string) (model.Backend, error) {
	time.Sleep(s.delay)
	return s.Driver.Read(ctx, be)
}

// TestASlowTargetsOneConflictIsRetried (a second reader): a healthy but
// slow target whose first failure (a version conflict) comes after
// Straggle is retried: a straggler is one that keeps failing.
func TestASlowTargetsOneConflictIsRetried(t *testing.T) {
	src := &desiredtest.Source{In: cluster("10.244.0.1")}
	ok := &reconciletest.Driver{ID: "a"}
	slow := &slowDriver{Driver: &reconciletest.Driver{ID: "b", Conflicts: 1}, delay: 60 * time.Millisecond}
	r := reconciler(src, ok, slow)
	r.Straggle, r.Timeout = 20*time.Millisecond, time.Minute
	res, err := r.Reconcile(context.Background(), false)
	if err != nil {
		for _, tr := range res.Targets {
			t.Logf("%s: attempts %d error %q", tr.Target, tr.Attempts, tr.Error)
		}
		t.Fatalf("err %v: a single conflict on a healthy target was not retried", err)
	}
}

// TestAConflictAfterALockWaitIsRetried (a second reader): the same for a
// target that waited for its lock (a reconcile of it alone) past Straggle.
func TestAConflictAfterALockWaitIsRetried(t *testing.T) {
	src := &desiredtest.Source{In: cluster("10.244.0.1")}
	ok, b := &reconciletest.Driver{ID: "a"}, &reconciletest.Driver{ID: "b", Conflicts: 1}
	r := reconciler(src, ok, b)
	r.Locks = &reconcile.Locks{}
	r.Straggle, r.Timeout = 20*time.Millisecond, time.Minute
	unlock, _ := r.Locks.Lock(context.Background(), "b")
	time.AfterFunc(60*time.Millisecond, unlock)
	res, err := r.Reconcile(context.Background(), false)
	if err != nil {
		for _, tr := range res.Targets {
			t.Logf("%s: attempts %d error %q", tr.Target, tr.Attempts, tr.Error)
		}
		t.Fatalf("err %v: a single conflict after a lock wait was not retried", err)
	}
}

// hungDriver's reads block until release is closed (a hung HAProxy of a
// pair: its pair check, then a request, each to its timeout).
type hungDriver struct {
	*reconciletest.Driver
	release chan struct{}
	reads   atomic.Int32
}

func (h *hungDriver) Read(ctx context.Context, be string) (model.Backend, error) {
	h.reads.Add(1)
	select {
	case <-h.release:
	case <-ctx.Done():
		return model.Backend{}, ctx.Err()
	}
	return h.Driver.Read(ctx, be)
}

// TestAHungTargetIsLeftBehind (history seed 682573831, class, HAProxy 2.6):
// a target whose attempt is still in flight a second past Straggle after
// another finished is left behind: the reconcile ends with it failed,
// temporary, while its attempt goes on in the background; the next
// reconcile leaves it behind at once rather than queue a second attempt on
// it; once it answers, its attempt's write lands and reconciles find it
// free again. Before, the reconcile waited for the hung target's timeouts
// and held everything after it (a left Service's frontend on the HAProxy
// that answered, and its port's next claimant there: 16 s).
func TestAHungTargetIsLeftBehind(t *testing.T) {
	src := &desiredtest.Source{In: cluster("10.244.0.1")}
	ok := &reconciletest.Driver{ID: "a"}
	hung := &hungDriver{Driver: &reconciletest.Driver{ID: "b"}, release: make(chan struct{})}
	r := reconciler(src, ok, hung)
	r.Straggle, r.Timeout = 20*time.Millisecond, time.Minute
	byTarget := func(res reconcile.Result) map[string]reconcile.TargetResult {
		out := map[string]reconcile.TargetResult{}
		for _, tr := range res.Targets {
			out[tr.Target] = tr
		}
		return out
	}
	res, err := r.Reconcile(context.Background(), false)
	got := byTarget(res)
	if !errors.Is(err, reconcile.ErrTargets) || got["a"].Error != "" || len(got["a"].Add) != 1 ||
		!strings.Contains(got["b"].Error, "left behind this reconcile") || got["b"].ErrorClass != failure.Temporary {
		t.Fatalf("%v %+v: want a reconciled, b left behind (temporary) while it hangs", err, res.Targets)
	}
	res, _ = r.Reconcile(context.Background(), false)
	if got := byTarget(res); !strings.Contains(got["b"].Error, "still answering an earlier reconcile") || got["a"].Error != "" {
		t.Fatalf("%+v: want b left behind at once, a reconciled", res.Targets)
	}
	if n := hung.reads.Load(); n != 1 {
		t.Errorf("%d reads in flight on the hung target: want the first one alone", n)
	}
	close(hung.release)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		res, err = r.Reconcile(context.Background(), false)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v %+v: b answers again, still failed", err, res.Targets)
		}
	}
	if got := byTarget(res); got["b"].Error != "" || len(got["b"].Add) != 0 {
		t.Errorf("%+v: want b's server written by the attempt left behind, nothing more to add", res.Targets)
	}
}

// TestASnapshotReadsNotAnUnreadTarget: a full reconcile's snapshot whose
// bulk read of b failed or was left behind (Unread) is not used to read b
// alone: the reconcile runs afresh at once, where the hung b is left
// behind, and b is asked once. Before, the snapshot's run read b alone and
// waited for it (its pair check's and a request's timeouts: 15 s in history
// seed 682573831), every Service of the full reconcile with it.
func TestASnapshotReadsNotAnUnreadTarget(t *testing.T) {
	in := cluster("10.244.0.1")
	ok := &reconciletest.Driver{ID: "a"}
	hung := &hungDriver{Driver: &reconciletest.Driver{ID: "b"}, release: make(chan struct{})}
	defer close(hung.release)
	r := reconciler(&desiredtest.Source{In: in}, ok, hung)
	r.Straggle, r.Timeout = 20*time.Millisecond, time.Minute
	snap := &reconcile.Snapshot{ReadAt: time.Now(), Input: in, Unread: map[string]bool{"b": true},
		Backend: func(string, string) (model.Backend, bool) { return model.Backend{}, false }}
	res, err := r.Reconcile(reconcile.WithSnapshot(context.Background(), snap), false)
	if !errors.Is(err, reconcile.ErrTargets) || hung.reads.Load() != 1 {
		t.Fatalf("%v, %d reads of b: want b left behind by the fresh run, asked once", err, hung.reads.Load())
	}
	for _, tr := range res.Targets {
		if tr.Target == "a" && (tr.Error != "" || len(tr.Add) != 1) {
			t.Errorf("a: %+v, want its server added", tr)
		}
	}
}

// TestATargetLeftBehindByThePassIsNotAskedAgain: a many-Services pass whose
// frontends left b behind (WithBehind) reconciles its Services without
// asking b again: b's result says so, temporary, and b is not read; a
// reconcile of b alone (the follow-up's) still asks it.
func TestATargetLeftBehindByThePassIsNotAskedAgain(t *testing.T) {
	ok := &reconciletest.Driver{ID: "a"}
	hung := &hungDriver{Driver: &reconciletest.Driver{ID: "b"}, release: make(chan struct{})}
	r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1")}, ok, hung)
	r.Straggle, r.Timeout = time.Hour, time.Hour // a wait would show as a hang
	ctx := reconcile.WithBehind(context.Background(), []string{"b"})
	res, err := r.Reconcile(ctx, false)
	if !errors.Is(err, reconcile.ErrTargets) || hung.reads.Load() != 0 {
		t.Fatalf("%v, %d reads of b: want b left behind unasked", err, hung.reads.Load())
	}
	for _, tr := range res.Targets {
		if tr.Target == "b" && (!strings.Contains(tr.Error, "earlier in this pass") || tr.ErrorClass != failure.Temporary) {
			t.Errorf("b: %q (%s), want left behind by the pass, temporary", tr.Error, tr.ErrorClass)
		}
	}
	close(hung.release)
	if _, err := r.Reconcile(reconcile.OnlyTarget(ctx, "b"), false); err != nil || hung.reads.Load() == 0 {
		t.Errorf("b alone: %v after %d reads: want it asked and reconciled", err, hung.reads.Load())
	}
}

// slowApply's writes take delay, or end with their context.
type slowApply struct {
	*reconciletest.Driver
	delay time.Duration
	cut   atomic.Bool // a write's context ended before delay
}

func (s *slowApply) Apply(ctx context.Context, p plan.Plan) (plan.Applied, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		s.cut.Store(true)
		return plan.Applied{}, ctx.Err()
	}
	return s.Driver.Apply(ctx, p)
}

// TestASlowWriteIsNoHang (a second reader): a target whose read answered
// and whose write takes long (a reload's) is waited for, not left behind,
// and the next reconcile of it alone is not refused as busy; a target
// waiting for its lock while a reconcile of it alone writes is waited for
// too.
func TestASlowWriteIsNoHang(t *testing.T) {
	src := &desiredtest.Source{In: cluster("10.244.0.1")}
	slow := &slowApply{Driver: &reconciletest.Driver{ID: "a"}, delay: 1500 * time.Millisecond} // past leaveAfter (1.02 s)
	r := reconciler(src, slow, &reconciletest.Driver{ID: "b"})
	r.Straggle, r.Timeout = 20*time.Millisecond, time.Minute
	if res, err := r.Reconcile(context.Background(), false); err != nil {
		t.Fatalf("%v %+v: want a's slow write waited for", err, res.Targets)
	}
	src.In = cluster("10.244.0.2")
	if res, err := r.Reconcile(reconcile.OnlyTarget(context.Background(), "a"), false); err != nil {
		t.Fatalf("a alone: %v %+v", err, res.Targets)
	}

	// a's lock held by a reconcile of a alone, whose write is slow.
	src.In = cluster("10.244.0.3")
	lane := make(chan error, 1)
	go func() {
		_, err := r.Reconcile(reconcile.OnlyTarget(context.Background(), "a"), false)
		lane <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if res, err := r.Reconcile(context.Background(), false); err != nil {
		t.Errorf("whole, behind a's lane: %v %+v: want a waited for", err, res.Targets)
	}
	if err := <-lane; err != nil {
		t.Errorf("lane: %v", err)
	}
}

// TestACancelledReconcileCutsItsWrites (a second reader): the caller gone
// (a shutdown ends the runs in flight) cuts a write in flight, and the
// reconcile returns once it ended: nothing writes on behind its back.
func TestACancelledReconcileCutsItsWrites(t *testing.T) {
	slow := &slowApply{Driver: &reconciletest.Driver{ID: "a"}, delay: time.Minute}
	r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1")}, slow)
	r.Timeout = 2 * time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := r.Reconcile(ctx, false); err == nil || !slow.cut.Load() {
		t.Fatalf("%v, write cut %v: want the write cut and the reconcile failed", err, slow.cut.Load())
	}
}

// TestALeftBehindWriteEndsWithItsCaller: a target left behind goes on
// after the reconcile returned, until its caller's context ends (a
// shutdown), not for ever.
func TestALeftBehindWriteEndsWithItsCaller(t *testing.T) {
	hung := &hungDriver{Driver: &reconciletest.Driver{ID: "b"}, release: make(chan struct{})}
	defer close(hung.release)
	r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1")}, &reconciletest.Driver{ID: "a"}, hung)
	r.Straggle, r.Timeout = 20*time.Millisecond, time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := r.Reconcile(ctx, false); !errors.Is(err, reconcile.ErrTargets) {
		t.Fatalf("%v: want b left behind", err)
	}
	cancel()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		res, _ := r.Reconcile(context.Background(), false)
		busy := false
		for _, tr := range res.Targets {
			busy = busy || strings.Contains(tr.Error, "still answering an earlier")
		}
		if !busy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b still busy with the attempt left behind 10 s after its caller ended")
		}
	}
}
