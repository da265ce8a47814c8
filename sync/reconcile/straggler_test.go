package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
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
