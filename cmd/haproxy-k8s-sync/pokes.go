package main

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	k8swatch "k8s.io/apimachinery/pkg/watch"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/trigger"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/metrics"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/watch"
)

// pokes is everything that asks serve's coalescer for a reconcile besides
// the HTTP callers: the watch, the first reconcile, the resync tick and the
// follow-up. Each poke is counted and logged by its source.
type pokes struct {
	shared     *reconcile.Coalescer
	follow     *reconcile.FollowUp
	watcher    *watch.Watcher // nil without WATCH or a Kubernetes client
	reconciled atomic.Bool    // a poked reconcile has run, whatever its result
	log        *slog.Logger
	m          *metrics.Metrics
}

func newPokes(cfg config.Config, r reconcile.Runner, checks map[string]reconcile.CheckReader, kc *kube.Client, nodeMode bool, log *slog.Logger, m *metrics.Metrics) *pokes {
	p := &pokes{log: log, m: m, follow: &reconcile.FollowUp{Checks: checks}}
	p.shared = reconcile.NewCoalescer(func(ctx context.Context) (reconcile.Result, error) { return r.Reconcile(ctx, false) })
	p.shared.Follow(p.follow, func(reason string, coalesced bool) { p.count("follow-up", reason, coalesced) })
	p.shared.OnPoked(func(res reconcile.Result, err error) {
		p.reconciled.Store(true)
		l := log.With("trigger", "poke", "id", trigger.NewID())
		if err != nil {
			l.Error("reconcile failed", "status", res.Status, "error", err, "errorClass", res.ErrorClass, "durationMs", res.DurationMs, "targets", res.Targets)
			return
		}
		l.Info("reconcile", "status", res.Status, "desired", res.Desired, "durationMs", res.DurationMs, "targets", res.Targets)
	})
	if cfg.Watch && kc != nil {
		p.watcher = &watch.Watcher{
			Client: kc, Namespace: cfg.Namespace, Service: cfg.Service, Nodes: nodeMode,
			Poke:      func(reason string) { p.poke("watch", reason) },
			OnEvent:   func(kind string, typ k8swatch.EventType, poked bool) { m.WatchEvent(kind, string(typ), poked) },
			OnRestart: m.WatchRestart,
			Log:       log,
		}
	}
	return p
}

func (p *pokes) poke(source, reason string) { p.count(source, reason, p.shared.Poke()) }

func (p *pokes) count(source, reason string, coalesced bool) {
	p.m.Poke(source, coalesced)
	p.log.Debug("poke", "source", source, "reason", reason, "coalesced", coalesced)
}

// ready: watching, once every watch is established and the first reconcile
// ran, so a new pod takes over only when it follows.
func (p *pokes) ready() bool {
	return p.watcher == nil || p.watcher.Established() && p.reconciled.Load()
}

// start runs the watch (and the first reconcile: whatever happened before
// the watches began) and the resync tick until stop, which waits for them.
func (p *pokes) start(ctx context.Context, resync time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if p.watcher != nil {
		wg.Go(func() { p.watcher.Run(ctx) })
		p.poke("start", "start")
	}
	if resync > 0 {
		wg.Go(func() { reconcile.Resync(ctx, resync, nil, func() { p.poke("resync", "resync") }) })
	}
	return func() { cancel(); wg.Wait(); p.follow.Stop() }
}
