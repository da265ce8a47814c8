package main

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/lb"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/pair"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// pairTimeout bounds the start-up check of each pair. serve waits
// pairStartWait for the checks, the one-shot reconcile pairTimeout: a pair
// not checked by then (its HAProxy is down, hangs, or is far) is checked
// on in the background while serve reconciles the others, and nothing is
// written to it meanwhile (its Guard is verified before every reconcile's
// first read of it). Seed 971962119 (serve-soak): with one HAProxy of the
// pair hung, a restarted service waited the runtime read's timeout, twice
// 2.5 s, before its first reconcile of the other.
const (
	pairTimeout   = 10 * time.Second
	pairStartWait = 500 * time.Millisecond
)

// checkPairs checks, at start, that each runtime socket and its Data Plane
// URL reach the same HAProxy (package pair), all pairs at once, waiting
// at most wait. It returns the mismatches found by then, joined: the
// service refuses to start. Those found later are given to late, joined,
// once every check has ended (serve stops there, as it would have at
// start: the verdict does not depend on how fast the pair answers). A
// pair that cannot be checked (its HAProxy is down) is logged and checked
// again at each reconcile, like any unreachable target.
func checkPairs(ctx context.Context, pairs map[string]*pair.Guard, wait time.Duration, late func(error), log *slog.Logger) error {
	var (
		mu  sync.Mutex
		bad []*pair.MismatchError
		wg  sync.WaitGroup
	)
	for _, g := range pairs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pairTimeout)
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
	joined := func() error {
		mu.Lock()
		defer mu.Unlock()
		slices.SortFunc(bad, func(a, b *pair.MismatchError) int { return a.Pair - b.Pair })
		var errs []error
		for _, e := range bad {
			errs = append(errs, e)
		}
		return errors.Join(errs...)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return joined()
	case <-time.After(wait):
	}
	log.Warn("not every pair is checked yet: starting; the rest are checked in the background and at each reconcile, and nothing is written to a pair found mismatched",
		"waited", wait.String())
	go func() {
		<-done
		if err := joined(); err != nil && late != nil {
			late(err)
		}
	}()
	return nil
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

// guardedFrontends is a class Services' frontend target (lb.Target) that,
// like the pair's driver, reads and writes nothing while its runtime socket
// reaches another HAProxy: the frontends' read verifies the pair once per
// pass (a many-Services pass reads the frontends first, then each
// Service's backends, all in one pass), its writes and session reads keep
// that verdict. Before, frontends went through the bare Data Plane client:
// written with no check at all, also on a pair found mismatched. Without a
// guard (no socket beside the Data Plane API) it is t itself.
func guardedFrontends(t lb.Target, g *pair.Guard) lb.Target {
	if g == nil {
		return t
	}
	return frontendGuard{t, g}
}

type frontendGuard struct {
	lb.Target
	g *pair.Guard
}

func (f frontendGuard) ReadProxies(ctx context.Context) (dataplane.Proxies, error) {
	if err := f.g.Verify(ctx, reconcile.PassOf(ctx)); err != nil {
		return dataplane.Proxies{}, err
	}
	return f.Target.ReadProxies(ctx)
}

func (f frontendGuard) WriteProxies(ctx context.Context, version int64, w dataplane.ProxyWrite) (int64, error) {
	if err := f.g.Mismatch(); err != nil {
		return 0, err
	}
	return f.Target.WriteProxies(ctx, version, w)
}

func (f frontendGuard) Sessions(ctx context.Context, backend string) (int, bool, error) {
	if err := f.g.Mismatch(); err != nil {
		return 0, false, err
	}
	return f.Target.Sessions(ctx, backend)
}
