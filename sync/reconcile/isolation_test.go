package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
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

type tempErr struct{}

func (tempErr) Error() string   { return "connection reset" }
func (tempErr) Temporary() bool { return true }

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
			return plan.Applied{}, fmt.Errorf("after %s: %w", ch.Name, tempErr{})
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
