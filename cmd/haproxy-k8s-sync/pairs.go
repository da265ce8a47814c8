package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/pair"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// pairTimeout bounds the start-up check of each pair; pairStartWait is how
// long the start waits for a pair's views to answer at all. A pair whose
// views answer within it is checked to the end (a mismatch waits
// pair.DefaultSettle and reads again) and a mismatch stops the start; one
// that does not (its HAProxy is down or hangs) is checked in the
// background while the service starts and reconciles the others: its
// Guard refuses writes once it mismatches, and every reconcile checks it
// again. Seed 971962119 (serve-soak): with one HAProxy of the pair hung, a
// restarted service waited the runtime read's timeout, 2.5 s, before its
// first reconcile of the other.
const (
	pairTimeout   = 10 * time.Second
	pairStartWait = 500 * time.Millisecond
)

// checkPairs checks, at start, that each runtime socket and its Data Plane
// URL reach the same HAProxy (package pair), all pairs at once. It returns
// the mismatches found, joined: the service refuses to start. A pair whose
// views do not both answer within wait is checked in the background and at
// each reconcile, like any unreachable target.
func checkPairs(ctx context.Context, pairs map[string]*pair.Guard, wait time.Duration, log *slog.Logger) error {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		bad []*pair.MismatchError
	)
	check := func(g *pair.Guard) {
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
	}
	for _, g := range pairs {
		wg.Go(func() {
			if err := answers(ctx, g, wait); err != nil {
				log.Warn("cannot check at start that the runtime socket and the Data Plane API reach the same HAProxy: starting without it; checked in the background and at each reconcile, nothing written to it while they differ",
					"target", g.Dataplane, "runtime", g.Runtime, "pair", g.Pair, "waited", wait.String(), "error", err)
				go func() { _, _ = g.Check(context.WithoutCancel(ctx)) }() // the Guard logs a mismatch
				return
			}
			check(g)
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

// answers returns why a view of g does not answer within wait, nil when
// both do. It does not rely on the views keeping the deadline.
func answers(ctx context.Context, g *pair.Guard, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		if _, err := g.RuntimeView.ProcessInfo(ctx); err != nil {
			got <- fmt.Errorf("runtime socket: %w", err)
			return
		}
		if _, err := g.DataplaneView.ProcessInfo(ctx); err != nil {
			got <- fmt.Errorf("Data Plane API: %w", err)
			return
		}
		got <- nil
	}()
	select {
	case err := <-got:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no answer within %v", wait)
	}
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
