package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile/reconciletest"
)

// TestARefusedServerDoesNotStallTheOthers: HAProxy refuses one server's
// change; the others are applied in the same attempt, the refusal is not
// retried until the deadline, and the result names the server.
func TestARefusedServerDoesNotStallTheOthers(t *testing.T) {
	d := &reconciletest.Driver{Refuse: map[string]bool{"10-244-0-2": true}}
	r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1", "10.244.0.2", "10.244.0.3")}, d)
	res, err := r.Reconcile(context.Background(), false)
	if !errors.Is(err, reconcile.ErrTargets) {
		t.Fatalf("err = %v", err)
	}
	tr := res.Targets[0]
	if tr.Attempts != 1 || len(tr.Failed) != 1 || tr.Failed[0].Server != "10-244-0-2" {
		t.Errorf("%+v", tr)
	}
	if servers := d.Servers(); len(servers) != 2 || servers["10-244-0-1"].Name == "" {
		t.Errorf("servers %v", servers)
	}
}

// TestResultGathersEveryAttempt: an attempt applies part of its plan and
// fails; the next plans only the rest. The result lists every server added,
// not only the last attempt's.
func TestResultGathersEveryAttempt(t *testing.T) {
	d := &reconciletest.Driver{FailFirst: 1}
	r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1", "10.244.0.2")}, d)
	res, err := r.Reconcile(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	tr := res.Targets[0]
	if tr.Attempts != 2 || fmt.Sprint(tr.Add) != "[10-244-0-1 10-244-0-2]" || res.Status != "applied" {
		t.Errorf("%+v", tr)
	}
}

// TestFailuresCarryTheirClass: each target's result says whether trying
// again may help, and only a temporary failure is retried within the
// reconcile; the reconcile's class is the least hopeful of its targets'.
func TestFailuresCarryTheirClass(t *testing.T) {
	refused := &failure.NetworkError{Err: fmt.Errorf("dial: %w", syscall.ECONNREFUSED)}
	for _, tt := range []struct {
		name    string
		errs    []error
		want    []failure.Class
		overall failure.Class
		retried []bool
	}{
		{"a misconfigured backend", []error{&failure.BackendError{Backend: "be", Reason: "static-rr"}}, []failure.Class{failure.Permanent}, failure.Permanent, []bool{false}},
		{"nothing listens", []error{refused}, []failure.Class{failure.Unreachable}, failure.Unreachable, []bool{false}},
		{"no answer until the deadline", []error{&failure.NetworkError{Err: errors.New("connection reset")}}, []failure.Class{failure.Temporary}, failure.Temporary, []bool{true}},
		{"one of each", []error{refused, &failure.BackendError{Backend: "be", Reason: "static-rr"}, nil},
			[]failure.Class{failure.Unreachable, failure.Permanent, ""}, failure.Permanent, []bool{false, false, false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var targets []reconcile.Driver
			var drivers []*reconciletest.Driver
			for i, err := range tt.errs {
				d := &reconciletest.Driver{ID: fmt.Sprint("t", i), ReadErr: err}
				targets = append(targets, d)
				drivers = append(drivers, d)
			}
			r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1")}, targets...)
			r.Timeout = 300 * time.Millisecond
			res, err := r.Reconcile(context.Background(), false)
			if !errors.Is(err, reconcile.ErrTargets) || res.ErrorClass != tt.overall {
				t.Fatalf("err %v, class %q; want %q", err, res.ErrorClass, tt.overall)
			}
			for i, want := range tt.want {
				if got := res.Targets[i].ErrorClass; got != want {
					t.Errorf("target %d: class %q, want %q (%s)", i, got, want, res.Targets[i].Error)
				}
				if reads, _, _ := drivers[i].Counts(); (reads > 1) != tt.retried[i] {
					t.Errorf("target %d: %d reads", i, reads)
				}
			}
		})
	}
}
