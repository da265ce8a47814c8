package history

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// The one-shot reconcile command (what a CronJob, a PingSource-free timer or
// an operator's hand runs) beside serve, in histories that draw it
// (Config.OneShot): every few steps, when the last run has ended, a fresh
// reconciler, built as the command builds it, runs reconcile.Settler as the
// command does (every target followed on its own, waiting for what it gated
// and parked), while serve's loop goes on. Its reconciles are judged as
// every writer's (failures-explained), and its writes by every invariant.

// oneShotEvery is how many steps apart the runs start, at most.
const oneShotEvery = 4

// oneShotLimit is how long one run may wait for its servers: the command's
// settleTime.
const oneShotLimit = time.Minute

// oneShot starts the command's runs, one at a time.
type oneShot struct {
	w       *world
	mu      sync.Mutex
	running bool
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

func (w *world) startOneShot() *oneShot {
	ctx, stop := context.WithCancel(context.Background())
	o := &oneShot{w: w, ctx: ctx, stop: stop}
	w.t.Cleanup(o.close)
	return o
}

// maybeRun starts a run at step i when one is due and none runs.
func (o *oneShot) maybeRun(i int) {
	if i%oneShotEvery != 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.running || o.ctx.Err() != nil {
		return
	}
	o.running = true
	o.wg.Go(func() {
		defer func() {
			o.mu.Lock()
			o.running = false
			o.mu.Unlock()
		}()
		o.w.mu.Lock()
		cfg := o.w.cfg
		o.w.mu.Unlock()
		ctx, cancel := context.WithTimeout(o.ctx, oneShotLimit+10*time.Second)
		defer cancel()
		began := time.Now()
		var res reconcile.Result
		var err error
		if o.w.mirror != nil {
			res, err = o.w.oneShotBinary(ctx, cfg.LocalZone) // the binary's own, against the API server
		} else {
			res, err = o.settle(ctx, cfg, i)
		}
		if o.ctx.Err() != nil {
			return // the history ended: the run was cut, as a CronJob's pod deleted
		}
		// Servers still waiting at the command's limit (a pod that never
		// answers) are its documented exit 1, not a failed reconcile.
		if errors.Is(err, reconcile.ErrStillWaiting) && !errors.Is(err, reconcile.ErrTargets) {
			err = nil
		}
		// A run that yielded to serve (ErrContested: what it added was
		// deleted twice before its check passed) is the command's
		// documented exit 1: serve always runs beside it here, and may
		// disagree (a rezone since the run started, or a newer view of
		// Kubernetes), or reloads by others dropped its servers twice.
		// What it left is serve's to finish, which every invariant judges.
		if errors.Is(err, reconcile.ErrContested) && !errors.Is(err, reconcile.ErrTargets) {
			err = nil
		}
		o.w.writer(oneShotWriter).reconciled(began, res, err)
	})
}

// settle is one run of the command as it is built, in this process.
func (o *oneShot) settle(ctx context.Context, cfg config.Config, i int) (reconcile.Result, error) {
	log := serviceLog(o.w.t).With("oneshot", i)
	rec, checks, _ := reconcilerOf(o.w.t, cfg, log)
	rec.Source = o.w.live
	run := func(ctx context.Context) (reconcile.Result, error) { return rec.Reconcile(ctx, false) }
	ctx, cancel := context.WithTimeout(ctx, oneShotLimit)
	defer cancel()
	s := &reconcile.Settler{Run: run, Checks: checks, Poll: 25 * time.Millisecond}
	res, err := s.Settle(ctx)
	log.Debug("one-shot reconcile", "result", res, "err", err)
	return res, err
}

// oneShotWriter numbers the command's runs among the writers.
const oneShotWriter = 2

func (o *oneShot) close() {
	o.stop()
	o.wg.Wait()
}
