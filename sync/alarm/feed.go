package alarm

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/pair"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// Result records what one reconcile's result says of each target it
// reconciled (a follow-up's names one): unreachable or answering, its
// backends refused or read, and the servers held for their check there.
// A target that failed otherwise (a timeout, a conflict, Kubernetes) says
// nothing here: the probe tells.
func (b *Book) Result(res reconcile.Result) {
	for _, t := range res.Targets {
		backend := t.Target + " " + t.Backend
		switch {
		case t.ErrorClass == failure.Unreachable:
			b.Observe(Unreachable, t.Target, true, t.Error)
		case t.BackendRefused:
			b.Observe(Unreachable, t.Target, false, "")
			b.Observe(BackendRefused, backend, true, t.Error)
		case t.Error == "" || len(t.Failed) > 0: // read and applied, but for refused servers
			b.Observe(Unreachable, t.Target, false, "")
			b.Observe(BackendRefused, backend, false, "")
			waiting := make(map[string]string, len(t.Waiting))
			for _, s := range t.Waiting {
				waiting[backend+" "+s] = "held out of traffic until its check passes"
			}
			b.Report(CheckNotPassed, backend+" ", waiting)
		}
	}
}

// Wrap returns r with every result it answers recorded (Result).
func (b *Book) Wrap(r reconcile.Runner) reconcile.Runner { return observed{b, r} }

type observed struct {
	b *Book
	r reconcile.Runner
}

func (o observed) Reconcile(ctx context.Context, dryRun bool) (reconcile.Result, error) {
	res, err := o.r.Reconcile(ctx, dryRun)
	if !dryRun {
		o.b.Result(res)
	}
	return res, err
}

// Probe reads every backend of every target once, in parallel, each read
// bounded by timeout, and records what it says: a target that does not
// answer (whatever the failure: a hung HAProxy is as unreachable to the
// service as one that refuses), a backend refused, or servers whose check
// has passed since, or that are gone. It writes nothing and takes no lock:
// a reconcile may run beside it.
func (b *Book) Probe(ctx context.Context, targets []reconcile.Driver, backends []string, timeout time.Duration) {
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Go(func() {
			for _, backend := range backends {
				rctx, cancel := context.WithTimeout(ctx, timeout)
				cur, err := t.Read(rctx, backend)
				cancel()
				if ctx.Err() != nil {
					return // shutting down: a failure of ours, not the target's
				}
				subject := t.Name() + " " + backend
				if be := (*failure.BackendError)(nil); errors.As(err, &be) {
					b.Observe(Unreachable, t.Name(), false, "")
					b.Observe(BackendRefused, subject, true, err.Error())
					continue
				}
				if errors.As(err, new(*pair.MismatchError)) {
					return // it answers; the pair guard says the rest (target_mismatched)
				}
				if err != nil {
					b.Observe(Unreachable, t.Name(), true, err.Error())
					return
				}
				b.Observe(Unreachable, t.Name(), false, "")
				b.Observe(BackendRefused, subject, false, "")
				notPassed := map[string]bool{}
				for _, s := range cur.Servers {
					notPassed[subject+" "+s.Name] = s.Runtime != nil && !s.Runtime.CheckPassed
				}
				b.Mend(CheckNotPassed, subject+" ", func(s string) bool { return notPassed[s] })
			}
		})
	}
	wg.Wait()
}

// Run calls probe every period, then decides again for every problem
// (Tick), until ctx ends. The first probe waits one period: at start the
// first reconcile reads every target already, and its result is recorded.
func (b *Book) Run(ctx context.Context, period time.Duration, probe func(context.Context)) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		probe(ctx)
		b.Tick()
	}
}
