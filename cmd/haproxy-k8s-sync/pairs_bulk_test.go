package main

import (
	"context"
	"errors"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/pair"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// bulkDriver is a Data Plane driver as the guard sees one: it reads one
// backend, every backend at once, and which servers are UP.
type bulkDriver struct{ bulkReads int }

func (*bulkDriver) Name() string { return "dp" }
func (*bulkDriver) Read(context.Context, string) (model.Backend, error) {
	return model.Backend{Name: "be"}, nil
}
func (*bulkDriver) Apply(context.Context, plan.Plan) (plan.Applied, error) {
	return plan.Applied{}, nil
}
func (*bulkDriver) Policy() plan.Policy { return plan.Policy{} }
func (*bulkDriver) ReadUp(context.Context, string) (map[string]bool, error) {
	return nil, nil
}
func (d *bulkDriver) ReadAll(context.Context) (map[string]model.Backend, error) {
	d.bulkReads++
	return map[string]model.Backend{"be": {Name: "be"}}, nil
}

type view struct{ pid int64 }

func (v *view) ProcessInfo(context.Context) (pair.Process, error) {
	return pair.Process{PID: v.pid}, nil
}

// TestGuardedReadsAllOnlyWhilePaired: a pair's Data Plane driver keeps its
// bulk read behind the guard (a full reconcile of many Services reads
// every backend of the target through it), which checks the pair first
// and refuses, reading nothing, while the socket reaches another HAProxy;
// the guarded driver is still an UpReader.
func TestGuardedReadsAllOnlyWhilePaired(t *testing.T) {
	d := &bulkDriver{}
	rt, dp := &view{pid: 7}, &view{pid: 7}
	g := &pair.Guard{Pair: 1, Dataplane: "dp", Runtime: "rt", DataplaneView: dp, RuntimeView: rt, Settle: 1}
	gd := guarded(d, g)
	if _, ok := gd.(reconcile.UpReader); !ok {
		t.Fatal("the guarded driver is no UpReader")
	}
	br, ok := reconcile.BulkOf(gd)
	if !ok {
		t.Fatal("the guarded driver reads no backend at once: every Service of a full reconcile reads its own")
	}
	if got, err := br.ReadAll(context.Background()); err != nil || len(got) != 1 || d.bulkReads != 1 {
		t.Fatalf("paired: %v, %v, %d reads", got, err, d.bulkReads)
	}
	rt.pid = 8 // the socket now reaches another HAProxy
	got, err := br.ReadAll(context.Background())
	var me *pair.MismatchError
	if !errors.As(err, &me) || got != nil || d.bulkReads != 1 {
		t.Fatalf("mismatched: %v, %v, %d reads; want the MismatchError and no read", got, err, d.bulkReads)
	}
}
