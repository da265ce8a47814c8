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
