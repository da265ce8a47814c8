package fleet

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// hungHAProxy is a memHAProxy whose reads block, once hang is closed's
// opposite: until release is closed or the reconcile gives up.
type hungHAProxy struct {
	*memHAProxy
	hang    chan struct{} // closed: reads block
	release chan struct{}
}

func (h *hungHAProxy) Read(ctx context.Context, backend string) (model.Backend, error) {
	select {
	case <-h.hang:
		select {
		case <-h.release:
		case <-ctx.Done():
			return model.Backend{}, ctx.Err()
		}
	default:
	}
	return h.memHAProxy.Read(ctx, backend)
}

// perTarget is drainingFrontends over each target of a pair, with
// SyncTarget (fleet.TargetSyncer) as package lb's Manager has it.
type perTarget map[string]*drainingFrontends

func (p perTarget) Sync(ctx context.Context, want []services.Selected, classes map[string]string) (services.FrontendReport, error) {
	out := services.FrontendReport{Ready: map[string]bool{}}
	for name := range p {
		rep, _ := p.SyncTarget(ctx, name, want, classes)
		out.Removed = append(out.Removed, rep.Removed...)
		out.Draining = append(out.Draining, rep.Draining...)
	}
	out.Draining = dedupe(out.Draining)
	return out, nil
}

func (p perTarget) SyncTarget(ctx context.Context, name string, want []services.Selected, classes map[string]string) (services.FrontendReport, error) {
	return p[name].Sync(ctx, want, classes)
}

// TestLeftClassSectionsGoOnTheTargetThatAnswers (history seed 682573831,
// class, HAProxy 2.6): a class Service deleted while one HAProxy of the
// pair hangs: on the other, once its parked server is deleted, its frontend
// and backend go at once, while the hung one still holds the reconcile —
// not when that target's attempt ends (its pair check and request timeout:
// 16 s there, the port's next claimant refused meanwhile).
func TestLeftClassSectionsGoOnTheTargetThatAnswers(t *testing.T) {
	c := &cluster{}
	c.add(lbService("web", 80), "127.0.1.1")
	_, be := services.ClassNames("", "apps", "web", 80)
	h0, h1 := newMem("h0", be), &hungHAProxy{memHAProxy: newMem("h1", be), hang: make(chan struct{}), release: make(chan struct{})}
	fe := perTarget{"h0": {h: h0, owned: map[string]bool{be: true}}, "h1": {h: h1.memHAProxy, owned: map[string]bool{be: true}}}
	f := newFleet(c, h0, h1)
	f.Frontends = fe
	f.Template.Timeout = time.Minute // the hung target's attempt outlasts the test's wait
	if _, err := f.Reconcile(context.Background(), false); err != nil || len(h0.states(be)) != 1 || len(h1.states(be)) != 1 {
		t.Fatalf("%v, %v %v: want web's server on both", err, h0.states(be), h1.states(be))
	}
	c.mu.Lock()
	c.svcs = []corev1.Service{} // deleted
	c.mu.Unlock()
	if _, err := f.ReconcileLeft(context.Background(), []string{be}); err != nil {
		t.Fatal(err)
	}
	if st := h0.states(be); st["127-0-1-1"] != model.Maint {
		t.Fatalf("%v: want web's server parked", st)
	}
	close(h1.hang)
	done := make(chan error, 1)
	go func() { _, err := f.ReconcileLeft(context.Background(), []string{be}); done <- err }()
	gone := false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !gone; time.Sleep(10 * time.Millisecond) {
		h0.mu.Lock()
		_, still := h0.backends[be]
		h0.mu.Unlock()
		gone = !still
	}
	select {
	case err := <-done:
		t.Fatalf("the reconcile ended (%v) while h1 hung", err)
	default:
	}
	close(h1.release)
	<-done
	if !gone {
		t.Fatalf("%s still on h0 while h1 hung: want its sections removed there once its server was deleted", be)
	}
}

// bulkHAProxy reads every backend at once (reconcile.BulkReader); hung, its
// bulk read blocks until release is closed.
type bulkHAProxy struct {
	*memHAProxy
	hung    bool
	release chan struct{}
	calls   atomic.Int32
}

func (b *bulkHAProxy) ReadAll(ctx context.Context) (map[string]model.Backend, error) {
	b.calls.Add(1)
	if b.hung {
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out := map[string]model.Backend{}
	for name := range b.memHAProxy.backends {
		be, err := b.memHAProxy.Read(ctx, name)
		if err != nil {
			return nil, err
		}
		out[name] = be
	}
	return out, nil
}

// TestABulkReadWaitsNotForAHungTarget (history seed 682573831): a full
// reconcile's one read of every backend per target gives up on a target
// that has not answered a straggle after another did, and the next one
// does not ask it again while that read is in flight. Before, it waited
// for the hung one's timeouts, and so did every Service's reconcile on the
// HAProxy that answered: a Service moved to another port had no server
// there 10 s.
func TestABulkReadWaitsNotForAHungTarget(t *testing.T) {
	a := &bulkHAProxy{memHAProxy: newMem("a", "be_a")}
	b := &bulkHAProxy{memHAProxy: newMem("b", "be_a"), hung: true, release: make(chan struct{})}
	defer close(b.release)
	f := newFleet(&cluster{}, a, b)
	f.Template.Straggle = 20 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, unread := f.readAll(ctx)
	if _, ok := got["a"]["be_a"]; !ok || len(got) != 1 || !unread["b"] || len(unread) != 1 {
		t.Fatalf("read %v, unread %v: want a's backends alone, b left behind and unread", got, unread)
	}
	if got, unread := f.readAll(ctx); len(got) != 1 || !unread["b"] || b.calls.Load() != 1 {
		t.Fatalf("read again %v (unread %v), %d bulk reads of b: want a's alone, b's first read still the only one", got, unread, b.calls.Load())
	}
}
