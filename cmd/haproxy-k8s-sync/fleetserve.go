package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	k8swatch "k8s.io/apimachinery/pkg/watch"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/trigger"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/metrics"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reloads"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/watch"
)

// fleetPokes is serve's machinery in many-Services mode: per-Service lanes
// with their follow-ups (fleet.Lanes), fed by a per-key queue
// (watch.Queue) that the watch (watch.Many; with --manifests, the files'
// poll, watch.Manifests), the resync tick and a reload of HAProxy by
// others poke. The queue's run waits for the lane, so its
// concurrency bounds the watch's reconciles.
type fleetPokes struct {
	lanes     *fleet.Lanes
	queue     *watch.Queue
	many      *watch.Many      // nil without WATCH or a Kubernetes client
	manifests *watch.Manifests // nil without --manifests
	reloads   *reloads.Watcher // nil without a runtime socket
	full      atomic.Bool      // a full reconcile has run, whatever its result
	log       *slog.Logger
	m         *metrics.Metrics
}

// newFleetPokes wires serve's pokes; manifests is --manifests' path, empty
// when Kubernetes is read.
func newFleetPokes(cfg config.Config, f *fleet.Fleet, checks map[string]reconcile.CheckReader, kc *kube.Client, manifests string, log *slog.Logger, m *metrics.Metrics) *fleetPokes {
	p := &fleetPokes{log: log, m: m}
	p.lanes = &fleet.Lanes{Fleet: f, Checks: checks, Log: log,
		OnPoked: func(key string, res reconcile.Result, err error) { p.logService("poke", key, res, err) },
		Followed: func(key, reason string, coalesced bool) {
			m.Poke("follow-up", coalesced)
			log.Debug("poke", "source", "follow-up", "service", key, "reason", reason, "coalesced", coalesced)
		},
	}
	p.queue = watch.NewQueue(p.run, p.left, watch.QueueLimits{}, log)
	p.lanes.LeftAgain = p.queue.Left
	if rw := reloadWatcher(checks, log, func(target string) { p.pokeAll("reload", "HAProxy reloaded or reachable again: "+target) }); rw != nil {
		p.reloads = rw
	}
	if manifests != "" {
		// No watch says which Service an edit touched: any change of the
		// files reconciles every Service, as a resync does.
		p.manifests = &watch.Manifests{Version: func() (string, error) { return kube.ManifestsVersion(manifests) }, Poke: p.pokeAll, Log: log}
	}
	if cfg.Watch && kc != nil {
		p.many = &watch.Many{
			Client: kc, Namespaces: cfg.Namespaces, Nodes: f.Template.Options.Mode == desired.NodeMode,
			Annotation: cfg.ByAnnotation, Cluster: cfg.ClusterName, Pokes: countedPokes{p},
			OnEvent:   func(kind string, typ k8swatch.EventType, poked bool) { m.WatchEvent(kind, string(typ), poked) },
			OnRestart: m.WatchRestart, Log: log,
		}
		if cfg.ByClass {
			p.many.Class = cfg.LoadBalancerClass
		}
	}
	return p
}

// countedPokes counts the watch's pokes as the single-Service mode does.
type countedPokes struct{ p *fleetPokes }

func (c countedPokes) Poke(key string) bool {
	ok := c.p.queue.Poke(key)
	if ok {
		c.p.m.Poke("watch", false)
	}
	return ok
}
func (c countedPokes) PokeAll(reason string)  { c.p.pokeAll("watch", reason) }
func (c countedPokes) Left(backends []string) { c.p.queue.Left(backends) }

func (p *fleetPokes) pokeAll(source, reason string) {
	p.m.Poke(source, false)
	p.log.Debug("poke", "source", source, "reason", reason, "service", watch.AllServices)
	p.queue.PokeAll(reason)
}

// run is the queue's: a full reconcile for watch.AllServices, else the
// Service's lane, waited for.
func (p *fleetPokes) run(ctx context.Context, key string) {
	if key != watch.AllServices {
		res, err := p.lanes.Run(ctx, key)
		if len(res.Services) == 1 {
			p.logService("watch", key, res.Services[0].Result, err)
		} else if err != nil {
			p.logService("watch", key, reconcile.Result{Status: reconcile.StatusError, Error: err.Error()}, err)
		}
		return
	}
	res, err := p.lanes.Full(ctx)
	p.full.Store(true) // ready once one ran, whatever its result: the result says
	p.logFleet("poke", res, err)
}

func (p *fleetPokes) left(ctx context.Context, backends []string) {
	res, err := p.lanes.Left(ctx, backends)
	p.logFleet("left", res, err)
}

func (p *fleetPokes) logService(tr, key string, res reconcile.Result, err error) {
	l := p.log.With("trigger", tr, "id", trigger.NewID(), "service", key)
	res.LogWarnings(l)
	// A Service this instance does not follow (refused: another holds
	// what it names; or it left the selection) failed nothing: its
	// Event and the refusals gauge say it.
	if nse := (*fleet.NotSelectedError)(nil); errors.As(err, &nse) {
		l.Info("service not followed", "reason", cmp.Or(nse.Reason, "no selection matches it"))
		return
	}
	if err != nil {
		l.Error("reconcile failed", "status", res.Status, "error", err, "errorClass", res.ErrorClass, "durationMs", res.DurationMs, "targets", res.Targets)
		return
	}
	l.Log(context.Background(), reconcile.Level(res.Status), "reconcile", "status", res.Status, "desired", res.Desired, "durationMs", res.DurationMs, "targets", res.Targets)
}

func (p *fleetPokes) logFleet(tr string, res fleet.Result, err error) {
	l := p.log.With("trigger", tr, "id", trigger.NewID())
	// Each Service's and left backend's part, at debug: one line each.
	for _, s := range res.Services {
		l.Debug("service reconciled", "service", s.Service, "status", s.Status, "error", s.Error, "targets", s.Targets)
	}
	for _, b := range res.Left {
		l.Debug("left backend reconciled", "backend", b.Backend, "status", b.Status, "error", b.Error, "targets", b.Targets)
	}
	if err != nil {
		l.Warn("reconcile failed", "error", err, "errorClass", res.ErrorClass, "services", len(res.Services), "left", len(res.Left))
		return
	}
	l.Info("reconcile", "status", res.Status, "services", len(res.Services), "refused", len(res.Refused), "left", len(res.Left), "durationMs", res.DurationMs)
}

// ready: once every watch is established (when watching) and a first full
// reconcile ran.
func (p *fleetPokes) ready() bool {
	return (p.many == nil || p.many.Established()) && p.full.Load()
}

// start runs the queue, the watch, the reload watcher and the resync tick
// until stop, which waits for them; a first full reconcile covers whatever
// happened before the watches began.
func (p *fleetPokes) start(ctx context.Context, resync time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { p.queue.Run(ctx) })
	if p.many != nil {
		wg.Go(func() { p.many.Run(ctx) })
	}
	if p.manifests != nil {
		wg.Go(func() { p.manifests.Run(ctx) }) // pokes "start" itself
	} else {
		p.pokeAll("start", "start")
	}
	if p.reloads != nil {
		wg.Go(func() { p.reloads.Run(ctx) })
	}
	if resync > 0 {
		wg.Go(func() { reconcile.Resync(ctx, resync, nil, func() { p.pokeAll("resync", "resync") }) })
	}
	return func() { cancel(); wg.Wait() }
}

// serveFleet is serve in many-Services mode: the HTTP API over the lanes,
// the watch (or the manifests' poll), the follow-ups, the resync and a full reconcile on a reload
// of HAProxy by others. At shutdown no reconcile starts any more; the
// running ones end within the reconcile timeout, or at a second signal.
func serveFleet(cfg config.Config, f *fleet.Fleet, checks map[string]reconcile.CheckReader, kc *kube.Client, manifests string, log *slog.Logger, m *metrics.Metrics, metricsHandler http.Handler) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	authn, err := newAuthenticator(cfg, kc)
	if err != nil {
		return err
	}
	warnAuth(cfg, authn, log)
	p := newFleetPokes(cfg, f, checks, kc, manifests, log, m)
	var listening atomic.Bool
	h := handler.New(handler.Config{
		Fleet: p.lanes, Auth: authn, OnAuthFailure: m.AuthFailure, Log: log, Metrics: metricsHandler,
		Wait:  cfg.ReconcileTimeout + handler.WaitMargin,
		Ready: func() bool { return listening.Load() && p.ready() },
	})
	srv := handler.Server(net.JoinHostPort("", strconv.Itoa(cfg.Port)), h, cfg.ReconcileTimeout)
	ln, err := handler.ListenTCP(ctx, srv.Addr)
	if err != nil {
		return fmt.Errorf("PORT: listen: %w", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(handler.Listen(ln, handler.MaxConns, srv)) }()
	listening.Store(true)
	log.Info("listening", "addr", ln.Addr().String(), "version", version, "selection", cfg.ManyString(), "watch", p.many != nil)
	stopPokes := p.start(ctx, cfg.ResyncPeriod)

	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	stopPokes()
	listening.Store(false)
	if err != nil {
		return err
	}
	p.lanes.Close()
	return drainAndStop(log, srv, cfg.ReconcileTimeout+handler.WaitMargin, p.lanes.Idle, p.lanes.EndRuns)
}
