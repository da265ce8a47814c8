package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	k8swatch "k8s.io/apimachinery/pkg/watch"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/trigger"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/metrics"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reloads"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/watch"
)

// pokes is everything that asks serve's coalescer for a reconcile besides
// the HTTP callers: the watch (or, with --manifests, the files' poll), the
// first reconcile, the resync tick, the follow-up, and a reload of HAProxy
// that the service did not cause. Each poke is counted and logged by its
// source.
type pokes struct {
	shared *reconcile.Coalescer
	// runs is the context every reconcile of shared runs in: endRuns
	// cancels the one running at shutdown; once closing is set, none starts.
	runs       context.Context
	endRuns    context.CancelFunc
	closing    atomic.Bool
	follow     *reconcile.FollowUp
	watcher    *watch.Watcher   // nil without WATCH or a Kubernetes client
	manifests  *watch.Manifests // nil without --manifests
	reloads    *reloads.Watcher // nil without a runtime socket
	reconciled atomic.Bool      // a poked reconcile has run, whatever its result
	log        *slog.Logger
	m          *metrics.Metrics
}

// newPokes wires the pokes of serve; manifests is --manifests' path, empty
// when Kubernetes is read.
func newPokes(cfg config.Config, r reconcile.Runner, checks map[string]reconcile.CheckReader, kc *kube.Client, manifests string, nodeMode bool, log *slog.Logger, m *metrics.Metrics) *pokes {
	p := &pokes{log: log, m: m, follow: &reconcile.FollowUp{Checks: checks, Log: log}}
	p.runs, p.endRuns = context.WithCancel(context.Background())
	p.shared = reconcile.NewCoalescer(func(ctx context.Context) (reconcile.Result, error) { return p.run(ctx, r) })
	p.shared.Follow(p.follow, func(reason string, coalesced bool) { p.count("follow-up", reason, coalesced) })
	p.shared.OnPoked(func(res reconcile.Result, err error) {
		p.reconciled.Store(true)
		l := log.With("trigger", "poke", "id", trigger.NewID())
		res.LogWarnings(l)
		if err != nil {
			l.Error("reconcile failed", "status", res.Status, "error", err, "errorClass", res.ErrorClass, "durationMs", res.DurationMs, "targets", res.Targets)
			return
		}
		l.Log(context.Background(), reconcile.Level(res.Status), "reconcile", "status", res.Status, "desired", res.Desired, "durationMs", res.DurationMs, "targets", res.Targets)
	})
	if rw := reloadWatcher(checks, log, func(target string) { p.poke("reload", "HAProxy reloaded or reachable again: "+target) }); rw != nil {
		p.reloads = rw
	}
	if manifests != "" {
		p.manifests = &watch.Manifests{Version: func() (string, error) { return kube.ManifestsVersion(manifests) }, Poke: p.poke, Log: log}
	}
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

// errShuttingDown answers the callers of a reconcile that shutdown did not
// start or ended early.
var errShuttingDown = errors.New("the service is shutting down; try again (another replica may answer)")

// run runs one reconcile, unless shutdown began: then it answers at once,
// so that callers who queued behind the running reconcile are answered as
// soon as it ends, not after one more. The reconcile ends early when
// endRuns is called.
func (p *pokes) run(ctx context.Context, r reconcile.Runner) (reconcile.Result, error) {
	if p.closing.Load() {
		return reconcile.Result{Status: reconcile.StatusError, Targets: []reconcile.TargetResult{}, Skipped: []desired.Skipped{},
			Error: errShuttingDown.Error(), ErrorClass: failure.Temporary}, errShuttingDown
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.runs, cancel)()
	res, err := r.Reconcile(ctx, false)
	if err != nil && p.runs.Err() != nil {
		err = fmt.Errorf("%w: %w", errShuttingDown, err)
		res.Error, res.ErrorClass = err.Error(), failure.Temporary // another replica may do it
	}
	return res, err
}

// close starts the shutdown: no reconcile starts from now on, and the one
// running is cancelled once end is closed (its driver still deletes what it
// left open, on a fresh short context).
func (p *pokes) close(end <-chan struct{}) {
	p.closing.Store(true)
	go func() {
		select {
		case <-end:
			p.endRuns()
		case <-p.shared.Idle():
		}
	}()
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
// the watches began), or the manifests' poll (which asks for the first
// reconcile itself), and the resync tick until stop, which waits for them.
func (p *pokes) start(ctx context.Context, resync time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if p.watcher != nil {
		wg.Go(func() { p.watcher.Run(ctx) })
		p.poke("start", "start")
	}
	if p.manifests != nil {
		wg.Go(func() { p.manifests.Run(ctx) })
	}
	if p.reloads != nil {
		wg.Go(func() { p.reloads.Run(ctx) })
	}
	if resync > 0 {
		wg.Go(func() { reconcile.Resync(ctx, resync, nil, func() { p.poke("resync", "resync") }) })
	}
	return func() { cancel(); wg.Wait(); p.follow.Stop() }
}

// reloadWatcher watches the targets' runtime sockets for reloads (package
// reloads); nil when no target has one.
func reloadWatcher(checks map[string]reconcile.CheckReader, log *slog.Logger, poke func(target string)) *reloads.Watcher {
	targets := map[string]reloads.Process{}
	for name, cr := range checks {
		if p, ok := cr.(reloads.Process); ok {
			targets[name] = p
		}
	}
	if len(targets) == 0 {
		return nil
	}
	return &reloads.Watcher{Targets: targets, Poke: poke, Log: log}
}
