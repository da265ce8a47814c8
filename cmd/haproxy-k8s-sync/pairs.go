package main

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/pair"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// pairTimeout bounds the start-up check of each pair.
const pairTimeout = 10 * time.Second

// checkPairs checks, at start, that each runtime socket and its Data Plane
// URL reach the same HAProxy (package pair), all pairs at once. It returns
// the mismatches, joined: the service refuses to start. A pair that cannot
// be checked (its HAProxy is down) is logged and checked again at each
// reconcile, like any unreachable target.
func checkPairs(ctx context.Context, pairs map[string]*pair.Guard, log *slog.Logger) error {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		bad []*pair.MismatchError
	)
	for _, g := range pairs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, pairTimeout)
			defer cancel()
			o, err := g.Check(ctx)
			switch {
			case err != nil:
				log.Warn("cannot check at start that the runtime socket and the Data Plane API reach the same HAProxy: checked again at each reconcile",
					"target", g.Dataplane, "runtime", g.Runtime, "pair", g.Pair, "error", err)
			case o.Verdict == pair.Different:
				var me *pair.MismatchError
				if errors.As(g.Mismatch(), &me) {
					mu.Lock()
					bad = append(bad, me)
					mu.Unlock()
				}
			case o.Verdict == pair.Same:
				log.Debug("the runtime socket and the Data Plane API reach the same HAProxy", "target", g.Dataplane, "runtime", g.Runtime, "process", o.Runtime.String())
			}
		})
	}
	wg.Wait()
	slices.SortFunc(bad, func(a, b *pair.MismatchError) int { return a.Pair - b.Pair })
	var errs []error
	for _, e := range bad {
		errs = append(errs, e)
	}
	return errors.Join(errs...)
}

// guarded is a Data Plane target that reads and writes nothing while its
// runtime socket reaches another HAProxy: each call fails with the
// *pair.MismatchError (Permanent) instead. The first Read of each
// reconcile pass checks the pair (a reconcile reads every backend before it
// applies a plan, and a reload the watch notices pokes a reconcile); the
// other reads of the pass, Apply and ReadUp keep its verdict. It is a reconcile.UpReader exactly when its driver is
// one, like the metrics wrapper, and a reconcile.BulkReader likewise (the
// bulk read checks the pair as the first Read does).
func guarded(d reconcile.Driver, g *pair.Guard) reconcile.Driver {
	gd := guardedDriver{d, g}
	ur, up := d.(reconcile.UpReader)
	br, bulk := reconcile.BulkOf(d)
	switch {
	case up && bulk:
		return bulkUpGuarded{upGuarded{gd, ur}, bulkGuard{g, br}}
	case up:
		return upGuarded{gd, ur}
	case bulk:
		return bulkGuarded{gd, bulkGuard{g, br}}
	}
	return gd
}

// bulkGuard reads every backend at once only while the pair matches.
type bulkGuard struct {
	g  *pair.Guard
	br reconcile.BulkReader
}

func (b bulkGuard) ReadAll(ctx context.Context) (map[string]model.Backend, error) {
	if err := b.g.Verify(ctx, reconcile.PassOf(ctx)); err != nil {
		return nil, err
	}
	return b.br.ReadAll(ctx)
}

type bulkGuarded struct {
	guardedDriver
	bulkGuard
}

type bulkUpGuarded struct {
	upGuarded
	bulkGuard
}

type guardedDriver struct {
	reconcile.Driver
	g *pair.Guard
}

func (d guardedDriver) Read(ctx context.Context, backend string) (model.Backend, error) {
	if err := d.g.Verify(ctx, reconcile.PassOf(ctx)); err != nil {
		return model.Backend{}, err
	}
	return d.Driver.Read(ctx, backend)
}

func (d guardedDriver) Apply(ctx context.Context, p plan.Plan) (plan.Applied, error) {
	if err := d.g.Mismatch(); err != nil {
		return plan.Applied{}, err
	}
	return d.Driver.Apply(ctx, p)
}

type upGuarded struct {
	guardedDriver
	ur reconcile.UpReader
}

func (d upGuarded) ReadUp(ctx context.Context, backend string) (map[string]bool, error) {
	if err := d.g.Mismatch(); err != nil {
		return nil, err
	}
	return d.ur.ReadUp(ctx, backend)
}
