package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// memDriver is an HAProxy backend in memory. It refuses every change to the
// servers in refuse (as HAProxy refuses a command), and fails the first
// failFirst applies with a temporary error after applying their first change.
type memDriver struct {
	mu        sync.Mutex
	servers   map[string]model.Server
	refuse    map[string]bool
	failFirst int
	applies   int
}

func (d *memDriver) Name() string        { return "mem" }
func (d *memDriver) Policy() plan.Policy { return plan.Policy{} }

func (d *memDriver) Read(_ context.Context, backend string) (model.Backend, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := model.Backend{Name: backend, Settings: model.Settings{Balance: "roundrobin", TCPCheck: true}}
	for _, s := range d.servers {
		b.Servers = append(b.Servers, s)
	}
	sort.Slice(b.Servers, func(i, j int) bool { return b.Servers[i].Name < b.Servers[j].Name })
	return b, nil
}

func (d *memDriver) Apply(_ context.Context, p plan.Plan) (plan.Applied, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.applies++
	var failed plan.ServerErrors
	for i, ch := range p.Changes {
		if d.refuse[ch.Name] {
			failed = append(failed, plan.ServerError{Server: ch.Name, Error: "refused"})
			continue
		}
		if ch.Action == plan.Delete {
			delete(d.servers, ch.Name)
		} else {
			d.servers[ch.Name] = *ch.New
		}
		if d.applies <= d.failFirst && i == 0 {
			return plan.Applied{}, fmt.Errorf("after %s: %w", ch.Name, &failure.NetworkError{Err: errors.New("connection reset")})
		}
	}
	if len(failed) > 0 {
		return plan.Applied{}, failed
	}
	return plan.Applied{}, nil
}

// TestARefusedServerDoesNotStallTheOthers: HAProxy refuses one server's
// change; the others are applied in the same attempt, the refusal is not
// retried until the deadline, and the result names the server.
func TestARefusedServerDoesNotStallTheOthers(t *testing.T) {
	d := &memDriver{servers: map[string]model.Server{}, refuse: map[string]bool{"10-244-0-2": true}}
	r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1", "10.244.0.2", "10.244.0.3")}, d)
	res, err := r.Reconcile(context.Background(), false)
	if !errors.Is(err, reconcile.ErrTargets) {
		t.Fatalf("err = %v", err)
	}
	tr := res.Targets[0]
	if tr.Attempts != 1 || len(tr.Failed) != 1 || tr.Failed[0].Server != "10-244-0-2" {
		t.Errorf("%+v", tr)
	}
	if _, ok := d.servers["10-244-0-1"]; !ok || len(d.servers) != 2 {
		t.Errorf("servers %v", d.servers)
	}
}

// TestResultGathersEveryAttempt: an attempt applies part of its plan and
// fails; the next plans only the rest. The result lists every server added,
// not only the last attempt's.
func TestResultGathersEveryAttempt(t *testing.T) {
	d := &memDriver{servers: map[string]model.Server{}, failFirst: 1}
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

// failingDriver fails every Read with err.
type failingDriver struct {
	name  string
	err   error
	reads int
}

func (d *failingDriver) Name() string        { return d.name }
func (d *failingDriver) Policy() plan.Policy { return plan.Policy{} }
func (d *failingDriver) Read(context.Context, string) (model.Backend, error) {
	d.reads++
	return model.Backend{}, d.err
}
func (d *failingDriver) Apply(context.Context, plan.Plan) (plan.Applied, error) {
	return plan.Applied{}, errors.New("never asked")
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
			var drivers []*failingDriver
			for i, err := range tt.errs {
				if err == nil {
					targets = append(targets, &memDriver{servers: map[string]model.Server{}})
					drivers = append(drivers, nil)
					continue
				}
				d := &failingDriver{name: fmt.Sprint("t", i), err: err}
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
				if d := drivers[i]; d != nil && (d.reads > 1) != tt.retried[i] {
					t.Errorf("target %d: %d reads", i, d.reads)
				}
			}
		})
	}
}
