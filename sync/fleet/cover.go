package fleet

import (
	"context"
	"time"

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
// 503). A lane may have several runs waiting (its own, and one per target
// whose check passed: reconcile.Coalescer's target lanes); each is
// answered. Class Services are not covered: their status is written after
// every Service's reconcile, which a covered run would not wait for.

// reported is a Runner that hands its result and how long it took to done
// once it ended.
type reported struct {
	reconcile.Runner
	done func(reconcile.Result, time.Duration)
}

func (t reported) Reconcile(ctx context.Context, dryRun bool) (reconcile.Result, error) {
	start := time.Now()
	r, err := t.Runner.Reconcile(ctx, dryRun)
	t.done(r, time.Since(start))
	return r, err
}

// cover is a full reconcile's part for one Service.
type cover struct {
	began   uint64 // the full reconcile's turn (Lanes.turn) when it began
	part    ServiceResult
	refused []services.Refused // the full reconcile's refusals
	took    time.Duration
}

// covering returns what a full reconcile that began at turn tells of each
// Service's part: the runs of its lane waiting since before are answered.
func (l *Lanes) covering(turn uint64) func(ServiceResult, []services.Refused, time.Duration) {
	return func(s ServiceResult, refused []services.Refused, took time.Duration) {
		l.mu.Lock()
		ln := l.lanes[s.Service]
		l.mu.Unlock()
		if ln == nil {
			return
		}
		ln.mu.Lock()
		defer ln.mu.Unlock()
		// Kept only while a run waits that began before: no other can use
		// it, and 2,000 lanes would each hold a result for nothing.
		older := false
		for began := range ln.waiters {
			older = older || began < turn
		}
		if !older {
			return
		}
		ln.cover = &cover{began: turn, part: s, refused: refused, took: took}
		close(ln.coverSet) // every waiting run looks
		ln.coverSet = make(chan struct{})
	}
}

// await registers a run that begins now, waiting for a slot: its turn, and
// the channel closed when a cover is set. Taken under ln.mu, so that a
// full reconcile that begins later sees it waiting.
func (l *Lanes) await(ln *lane) (began uint64, set <-chan struct{}) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	began = l.turn.Add(1)
	if ln.waiters == nil {
		ln.waiters = map[uint64]bool{}
	}
	ln.waiters[began] = true
	return began, ln.coverSet
}

// done says the run that began at began waits no more; the cover goes
// with the last waiting run.
func (ln *lane) done(began uint64) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	delete(ln.waiters, began)
	if len(ln.waiters) == 0 {
		ln.cover = nil
	}
}

// coveredSince returns the cover of a full reconcile that began after
// turn, if one ended, and marks it used (Full does not hand that part to
// the follow-up again); else the channel to wait on for the next.
func (ln *lane) coveredSince(turn uint64) (*cover, <-chan struct{}) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.cover == nil || ln.cover.began <= turn {
		return nil, ln.coverSet
	}
	ln.used = ln.cover.began
	return ln.cover, nil
}

// answeredBy says whether a run of ln was answered by the full reconcile
// that began at turn.
func (ln *lane) answeredBy(turn uint64) bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.used == turn
}

// answered is a lane run's result from a full reconcile's cover, as its
// own reconcile of the Service would have reported it.
func answered(c *cover) (Result, error) {
	res := Result{Services: []ServiceResult{c.part}, Refused: append([]services.Refused{}, c.refused...),
		DurationMs: float64(c.took.Microseconds()) / 1000}
	err := summarize(&res, false, false)
	if err != nil {
		res.Status, res.Error = reconcile.StatusError, err.Error()
	}
	return res, err
}
