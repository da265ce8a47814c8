package fleet

import (
	"context"
	"sync"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// TargetSyncer is Frontends that can pass over one target alone (a
// *lb.Manager): left class Services' sections go on a target as soon as
// their servers there are deleted (early).
type TargetSyncer interface {
	SyncTarget(ctx context.Context, target string, want []services.Selected, classes map[string]string) (services.FrontendReport, error)
}

// early removes left class backends' drained sections on each target once
// every left class backend's reconcile is done there, rather than once it
// is done on every target: a hung HAProxy of the pair holds a reconcile
// for its pair check and a request's timeout, and the port's next
// claimant would be refused that long on the HAProxy that answers.
type early struct {
	sync    func(target string) services.FrontendReport
	wg      sync.WaitGroup
	mu      sync.Mutex
	jobs    int            // left class backends' reconciles
	done    map[string]int // target → how many of them are done there
	worth   map[string]bool
	removed []string
}

// newEarly returns nil when no job is a left class backend's.
func newEarly(jobs []job, sync func(target string) services.FrontendReport) *early {
	n := 0
	for _, j := range jobs {
		if j.svc == nil && isClassBackend(j.backend) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return &early{sync: sync, jobs: n, done: map[string]int{}, worth: map[string]bool{}}
}

// context is j's context: a left class backend's tells e each target it is
// done with.
func (e *early) context(ctx context.Context, j job) context.Context {
	if e == nil || j.svc != nil || !isClassBackend(j.backend) {
		return ctx
	}
	return reconcile.WithTargetDone(ctx, e.targetDone)
}

// targetDone counts one left class backend's reconcile done on target; the
// last to be done there passes over it if one of them deleted its servers
// there and kept none (deletedAll, per target): its sections drained.
func (e *early) targetDone(target string, trs []reconcile.TargetResult) {
	deleted, kept, failed := false, false, false
	for _, t := range trs {
		failed = failed || t.Error != ""
		deleted = deleted || len(t.Delete) > 0
		for _, n := range t.Servers {
			kept = kept || n > 0
		}
	}
	e.mu.Lock()
	e.done[target]++
	e.worth[target] = e.worth[target] || deleted && !kept && !failed
	last, worth := e.done[target] == e.jobs, e.worth[target]
	e.mu.Unlock()
	if !last || !worth {
		return
	}
	// Not under the target's lock (this is told from within the attempt,
	// and every Service's reconcile there waits on that lock): the pass
	// waits for it after its reconciles (Wait).
	e.wg.Go(func() {
		rep := e.sync(target)
		e.mu.Lock()
		e.removed = append(e.removed, rep.Removed...)
		e.mu.Unlock()
	})
}

// Wait waits for the passes started.
func (e *early) Wait() {
	if e != nil {
		e.wg.Wait()
	}
}

// Removed is what the early passes removed.
func (e *early) Removed() []string {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.removed
}
