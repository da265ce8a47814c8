package main

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/lb"

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

// frontTarget is a class Services' frontend target that counts its calls.
type frontTarget struct{ reads, writes, sessions int }

func (*frontTarget) Name() string { return "dp" }
func (f *frontTarget) ReadProxies(context.Context) (dataplane.Proxies, error) {
	f.reads++
	return dataplane.Proxies{Version: 1}, nil
}
func (f *frontTarget) WriteProxies(context.Context, int64, dataplane.ProxyWrite) (int64, error) {
	f.writes++
	return 2, nil
}
func (f *frontTarget) Sessions(context.Context, string) (int, bool, error) {
	f.sessions++
	return 0, true, nil
}

// TestGuardedFrontendsOnlyWhilePaired: class Services' frontends are read
// and written behind the pair's guard, as its backends are. The read of a
// pass checks the pair; while the socket reaches another HAProxy nothing is
// read, written or asked. Before, lb.Manager held the bare Data Plane
// client: since serve starts before a slow pair's check ends (pairStartWait),
// a frontend could be written to a mismatched pair, and to one found
// mismatched later, at every pass.
func TestGuardedFrontendsOnlyWhilePaired(t *testing.T) {
	ft := &frontTarget{}
	rt, dp := &view{pid: 7}, &view{pid: 7}
	g := &pair.Guard{Pair: 1, Dataplane: "dp", Runtime: "rt", DataplaneView: dp, RuntimeView: rt, Settle: 1}
	gt := guardedFrontends(ft, g)
	ctx := reconcile.WithPass(context.Background())
	if _, err := gt.ReadProxies(ctx); err != nil {
		t.Fatalf("paired read: %v", err)
	}
	if _, err := gt.WriteProxies(ctx, 1, dataplane.ProxyWrite{}); err != nil {
		t.Fatalf("paired write: %v", err)
	}
	rt.pid = 8 // the socket now reaches another HAProxy
	ctx = reconcile.WithPass(context.Background())
	var me *pair.MismatchError
	if _, err := gt.ReadProxies(ctx); !errors.As(err, &me) {
		t.Fatalf("mismatched read: %v, want the MismatchError", err)
	}
	if _, err := gt.WriteProxies(ctx, 1, dataplane.ProxyWrite{}); !errors.As(err, &me) {
		t.Fatalf("mismatched write: %v, want the MismatchError", err)
	}
	if _, _, err := gt.Sessions(ctx, "be"); !errors.As(err, &me) {
		t.Fatalf("mismatched sessions: %v, want the MismatchError", err)
	}
	if ft.reads != 1 || ft.writes != 1 || ft.sessions != 0 {
		t.Fatalf("the target was called %d reads, %d writes, %d session reads; want 1, 1, 0", ft.reads, ft.writes, ft.sessions)
	}
	if guardedFrontends(ft, nil) != lb.Target(ft) {
		t.Fatal("without a pair the target is not the client itself")
	}
}

// TestFrontendsAreGuardedByTheirPair: serve's wiring puts each paired Data
// Plane client's frontends behind that pair's guard.
func TestFrontendsAreGuardedByTheirPair(t *testing.T) {
	u1, _ := url.Parse("http://127.0.0.1:1")
	u2, _ := url.Parse("http://127.0.0.1:2")
	dps := []*dataplane.Client{dataplane.New(u1, dataplane.Auth{}, nil), dataplane.New(u2, dataplane.Auth{}, nil)}
	g := &pair.Guard{Pair: 2, Dataplane: dps[1].Name()}
	fe, err := newFrontends(config.Config{}, dps, map[string]*pair.Guard{dps[1].Name(): g}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m := fe.(*lb.Manager)
	if m.Targets[0] != lb.Target(dps[0]) {
		t.Fatalf("unpaired target %T, want the client itself", m.Targets[0])
	}
	if fg, ok := m.Targets[1].(frontendGuard); !ok || fg.g != g {
		t.Fatalf("paired target %T, want it behind its pair's guard", m.Targets[1])
	}
}
