package fleet

import (
	"context"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// A full reconcile covers the lane reconciles that were waiting for a slot
// when it began: its part for their Service read Kubernetes and HAProxy
// after they began, which began after every poke they serve, so it is an
// answer to them as good as their own, and they end with it rather than
// reconcile that Service a second time. After a mass entry (2,000
// Services, each lane's follow-up poking once its servers' checks pass) a
// full reconcile otherwise shared the targets' locks with a reconcile of
// every Service queued behind the slots, and waited for all of them
// (BenchmarkServiceRSSManyServices under -race: over the handler's 62 s,
// 503).

// reported is a Runner that hands its result to done once it ended.
type reported struct {
	reconcile.Runner
	done func(reconcile.Result)
}

func (t reported) Reconcile(ctx context.Context, dryRun bool) (reconcile.Result, error) {
	r, err := t.Runner.Reconcile(ctx, dryRun)
	t.done(r)
	return r, err
}

// cover is a full reconcile's part for one Service.
type cover struct {
	began uint64 // the full reconcile's turn (Lanes.turn) when it began
	part  ServiceResult
}

// covering returns what a full reconcile that began at turn tells of each
// Service's part: its lane's reconciles that began before are answered.
func (l *Lanes) covering(turn uint64) func(ServiceResult) {
	return func(s ServiceResult) {
		l.mu.Lock()
		ln := l.lanes[s.Service]
		l.mu.Unlock()
		if ln == nil {
			return
		}
		ln.mu.Lock()
		// Kept only for a run that waits and began before: no other can
		// use it, and 2,000 lanes would each hold a result for nothing.
		if ln.waiting == 0 || ln.waiting >= turn {
			ln.mu.Unlock()
			return
		}
		ln.cover = &cover{began: turn, part: s}
		ln.mu.Unlock()
		select {
		case ln.covered <- struct{}{}:
		default: // told already: the waiting run reads the newest
		}
	}
}

// wait says that a run that began at turn waits for a slot (0: none does
// any more), and forgets the cover it no longer needs.
func (ln *lane) wait(turn uint64) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.waiting, ln.cover = turn, nil
}

// coveredSince returns the part of a full reconcile that began after turn,
// if one ended.
func (ln *lane) coveredSince(turn uint64) (ServiceResult, bool) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.cover == nil || ln.cover.began <= turn {
		return ServiceResult{}, false
	}
	return ln.cover.part, true
}

// answered is a lane run's result from a full reconcile's part s, as its
// own reconcile of the Service would have reported it.
func answered(s ServiceResult) (Result, error) {
	res := Result{Services: []ServiceResult{s}, Refused: []services.Refused{}}
	err := summarize(&res, false, false)
	if err != nil {
		res.Status, res.Error = reconcile.StatusError, err.Error()
	}
	return res, err
}
