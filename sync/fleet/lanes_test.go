package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// memChecks is the check reader of a memHAProxy: every server of a backend
// is listed, its check passed once pass is set.
type memChecks struct {
	h     *memHAProxy
	pass  atomic.Bool
	reads atomic.Int32
}

func (c *memChecks) ReadChecks(_ context.Context, backend string) (map[string]model.CheckState, error) {
	c.reads.Add(1)
	out := map[string]model.CheckState{}
	for n := range c.h.states(backend) {
		out[n] = model.CheckPending
		if c.pass.Load() {
			out[n] = model.CheckPassed
		}
	}
	return out, nil
}

// gated is a memHAProxy whose checks are seen (model.Runtime): new servers
// are gated until cr says their check passed.
type gated struct {
	*memHAProxy
	cr *memChecks
}

func (g gated) Policy() plan.Policy { return plan.Policy{GateChecks: true} }

func (g gated) Read(ctx context.Context, backend string) (model.Backend, error) {
	b, err := g.memHAProxy.Read(ctx, backend)
	for i := range b.Servers {
		b.Servers[i].Runtime = &model.Runtime{CheckRunning: true, CheckPassed: g.cr.pass.Load()}
	}
	return b, err
}

// newGated returns an HAProxy that gates new servers, and its checks.
func newGated(name string, backends ...string) (gated, *memChecks) {
	h := newMem(name, backends...)
	cr := &memChecks{h: h}
	return gated{h, cr}, cr
}

func newLanes(f *Fleet, cr *memChecks) *Lanes {
	return &Lanes{Fleet: f, Checks: map[string]reconcile.CheckReader{cr.h.name: cr},
		Tune: func(fu *reconcile.FollowUp) { fu.Poll = 5 * time.Millisecond }}
}

// eventually waits up to 2 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

func allIn(h *memHAProxy, backend string, want model.State) func() bool {
	return func() bool {
		st := h.states(backend)
		for _, s := range st {
			if s != want {
				return false
			}
		}
		return len(st) > 0
	}
}

// A gated server is put in service by its lane's follow-up as soon as its
// check passed, with no other poke; not before.
func TestLaneFollowUpEntersGatedServer(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "web", "be_web"), "127.0.1.1", "127.0.1.2")
	c.add(annotatedSvc("apps", "other", "be_other"), "127.0.2.1")
	g, cr := newGated("h", "be_web", "be_other")
	h := g.memHAProxy
	l := newLanes(newFleet(c, g), cr)
	defer l.Close()
	res, err := l.Run(context.Background(), "apps/web")
	if err != nil || len(res.Services) != 1 || len(res.Services[0].Targets) != 1 || len(res.Services[0].Targets[0].Waiting) != 2 {
		t.Fatalf("first reconcile: %v %+v; want apps/web's two servers waiting for their check", err, res)
	}
	if !allIn(h, "be_web", model.Drain)() {
		t.Fatalf("be_web %v: want its servers gated (drain)", h.states("be_web"))
	}
	eventually(t, "the follow-up reads the checks", func() bool { return cr.reads.Load() > 3 })
	if !allIn(h, "be_web", model.Drain)() {
		t.Fatalf("be_web %v: in service before its check passed", h.states("be_web"))
	}
	writes := h.writes["be_other"]
	cr.pass.Store(true)
	eventually(t, "be_web in service once its checks passed", allIn(h, "be_web", model.Ready))
	if h.writes["be_other"] != writes || len(h.states("be_other")) != 0 {
		t.Fatalf("be_other written by apps/web's lane: %v", h.states("be_other"))
	}
}

// A full reconcile hands each Service's result to its lane, whose
// follow-up finishes what is left to do; a Service not selected any more
// loses its lane.
func TestFullHandsPendingServicesToTheirLanes(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "web", "be_web"), "127.0.1.1")
	c.add(annotatedSvc("apps", "empty", "be_empty")) // no endpoint: nothing to follow up
	g, cr := newGated("h", "be_web", "be_empty")
	h := g.memHAProxy
	l := newLanes(newFleet(c, g), cr)
	defer l.Close()
	if _, err := l.Full(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l.Len() != 2 {
		t.Fatalf("%d lanes, want one per selected Service", l.Len())
	}
	cr.pass.Store(true)
	eventually(t, "be_web in service after the full reconcile, through its lane", allIn(h, "be_web", model.Ready))

	c.mu.Lock()
	c.svcs[0].Annotations = nil // apps/web leaves the selection
	c.mu.Unlock()
	if _, err := l.Full(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l.Len() != 1 {
		t.Fatalf("%d lanes after apps/web left, want apps/empty's alone", l.Len())
	}
}

func TestLaneOfAServiceNotSelectedIsDropped(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "web", "be_web"), "127.0.1.1")
	g, cr := newGated("h", "be_web")
	l := newLanes(newFleet(c, g), cr)
	defer l.Close()
	var nse *NotSelectedError
	if _, err := l.Run(context.Background(), "apps/nope"); !errors.As(err, &nse) {
		t.Fatalf("err = %v, want NotSelectedError", err)
	}
	for i := range 20 {
		l.Poke(fmt.Sprintf("apps/nope%d", i))
	}
	eventually(t, "the lanes of Services not selected dropped", func() bool { return l.Len() == 0 })
}

func TestReconcileServicesReportsEachAndSkipsTheUnselected(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "a", "be_a"), "127.0.1.1")
	c.add(annotatedSvc("apps", "b", "be_b"), "127.0.1.2")
	c.add(annotatedSvc("apps", "dup1", "be_dup"), "127.0.1.3")
	c.add(annotatedSvc("apps", "dup2", "be_dup"), "127.0.1.4")
	g, cr := newGated("h", "be_a", "be_b", "be_dup")
	h := g.memHAProxy
	l := newLanes(newFleet(c, g), cr)
	defer l.Close()
	// Same age: apps/dup1 gets be_dup by its key; apps/dup2 is refused.
	res, err := l.ReconcileServices(context.Background(), []string{"apps/a", "apps/b", "apps/dup2", "apps/none"})
	if err != nil || res.Status != reconcile.StatusApplied || len(res.Services) != 2 || res.Services[0].Service != "apps/a" || res.Services[1].Service != "apps/b" {
		t.Fatalf("%v %+v: want apps/a and apps/b applied", err, res)
	}
	if !refusedHas(res.Refused, "apps/dup2") || len(h.states("be_dup")) != 0 {
		t.Fatalf("refused %+v, be_dup %v: want apps/dup2 refused and be_dup untouched", res.Refused, h.states("be_dup"))
	}
}

func refusedHas(rs []services.Refused, key string) bool {
	for _, r := range rs {
		if r.Service == key {
			return true
		}
	}
	return false
}

// After Close no reconcile starts and the follow-ups end.
func TestLanesClose(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "web", "be_web"), "127.0.1.1")
	g, cr := newGated("h", "be_web")
	h := g.memHAProxy
	l := newLanes(newFleet(c, g), cr)
	if _, err := l.Run(context.Background(), "apps/web"); err != nil {
		t.Fatal(err)
	}
	l.Close()
	select {
	case <-l.Idle():
	case <-time.After(2 * time.Second):
		t.Fatal("not idle after Close")
	}
	cr.pass.Store(true)
	if _, err := l.Run(context.Background(), "apps/web"); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("err = %v after Close, want ErrShuttingDown", err)
	}
	time.Sleep(50 * time.Millisecond)
	if !allIn(h, "be_web", model.Drain)() {
		t.Fatalf("be_web %v: a follow-up ran after Close", h.states("be_web"))
	}
	if _, err := l.Full(context.Background()); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("Full after Close: %v", err)
	}
}

// A left backend whose reconcile failed is handed over again (LeftAgain)
// after the retry pause, until one succeeds; then no more: no Service
// names it, so nothing else would ever reconcile it.
func TestLeftBackendsAreRetried(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "web", "be_web"), "127.0.1.1")
	g, cr := newGated("h", "be_web")
	h := g.memHAProxy
	l := newLanes(newFleet(c, g), cr)
	l.Tune = func(fu *reconcile.FollowUp) { fu.Retry = 5 * time.Millisecond }
	defer l.Close()
	again := make(chan []string, 10)
	l.LeftAgain = func(b []string) { again <- b }
	if res, _ := l.Left(context.Background(), []string{"be_gone"}); len(res.Left) != 1 || res.Left[0].Status != reconcile.StatusError {
		t.Fatalf("be_gone is not in HAProxy yet: want a failure, got %+v", res.Left)
	}
	select {
	case b := <-again:
		if fmt.Sprint(b) != "[be_gone]" {
			t.Fatalf("handed over again: %v", b)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the failed left backend was never handed over again")
	}
	h.mu.Lock()
	h.backends["be_gone"] = map[string]model.Server{"old-1": {Name: "old-1", Address: "127.0.3.1", Port: 80, State: model.Ready, Weight: 1}}
	h.mu.Unlock()
	if _, err := l.Left(context.Background(), []string{"be_gone"}); err != nil {
		t.Fatal(err)
	}
	if st := h.states("be_gone"); st["old-1"] != model.Maint {
		t.Fatalf("be_gone %v: want old-1 parked", st)
	}
	select {
	case b := <-again:
		t.Fatalf("handed over again with nothing left to do: %v", b)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestSettleFinishesTheOneShotReconcile: the one-shot reconcile (a
// CronJob's) in many-Services mode follows its pending Services up until
// their gated servers entered service (their checks passed) and nothing
// waits, and leaves a Service with nothing pending alone; without Settle
// the servers stayed gated until the next run.
func TestSettleFinishesTheOneShotReconcile(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "web", "be_web"), "127.0.1.1", "127.0.1.2")
	c.add(annotatedSvc("apps", "empty", "be_empty"))
	g, cr := newGated("h", "be_web", "be_empty")
	h := g.memHAProxy
	f := newFleet(c, g)
	res, err := f.Reconcile(context.Background(), false)
	if err != nil || !allIn(h, "be_web", model.Drain)() {
		t.Fatalf("first reconcile: %v, be_web %v: want its servers gated", err, h.states("be_web"))
	}
	go func() { time.Sleep(50 * time.Millisecond); cr.pass.Store(true) }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reads, webReads := h.reads["be_empty"], h.reads["be_web"]
	res, err = f.Settle(ctx, res, err, 10*time.Millisecond, map[string]reconcile.CheckReader{"h": cr})
	t.Logf("be_web read %d times by reconciles while settling", h.reads["be_web"]-webReads)
	if n := h.reads["be_web"] - webReads; n > 2 {
		t.Errorf("be_web reconciled %d times while settling: its checks are read until one passed, then one reconcile puts it in service", n)
	}
	if err != nil || ctx.Err() != nil {
		t.Fatalf("settle: %v (ctx %v)", err, ctx.Err())
	}
	if !allIn(h, "be_web", model.Ready)() {
		t.Fatalf("be_web %v after settling: want its servers in service", h.states("be_web"))
	}
	for _, s := range res.Services {
		if s.Pending() {
			t.Errorf("%s still pending in the settled result", s.Service)
		}
	}
	if res.Status != reconcile.StatusApplied {
		t.Errorf("status %s, want applied", res.Status)
	}
	if h.reads["be_empty"] != reads {
		t.Errorf("be_empty read %d times more: a Service with nothing pending is not followed", h.reads["be_empty"]-reads)
	}
}
