// Command haproxy-k8s-sync keeps HAProxy backends equal to a Kubernetes
// Service's endpoints.
//
//	haproxy-k8s-sync [serve] [--manifests PATH]               the HTTP service (default)
//	haproxy-k8s-sync reconcile [--dry-run] [--manifests PATH] one reconcile, JSON on stdout
//	haproxy-k8s-sync version
//
// --manifests reads the Service, EndpointSlices and Nodes from YAML or JSON
// files (e.g. a `kubectl get -o yaml` dump) instead of the Kubernetes API.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/trigger"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/metrics"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "version", "--version":
		fmt.Println(version)
		return 0
	case "serve", "reconcile":
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q: use serve, reconcile [--dry-run] or version\n", cmd)
		return 2
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	dryRun := fs.Bool("dry-run", false, "plan only, apply nothing")
	manifests := fs.String("manifests", "", "read Kubernetes objects from this file or directory instead of the API")
	if err := fs.Parse(args); err != nil {
		return 2
	}

	cfg, err := config.Load()
	if err != nil {
		fmt.Fprintf(os.Stderr, "configuration: %v\n", err)
		return 2
	}
	log := newLogger(cfg.LogLevel)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg, version)
	rec, err := newReconciler(cfg, *manifests, log, m)
	if err != nil {
		log.Error("start", "error", err)
		return 1
	}
	if cmd == "reconcile" {
		res, err := rec.Reconcile(context.Background(), *dryRun)
		_ = json.NewEncoder(os.Stdout).Encode(res)
		if err != nil {
			return 1
		}
		return 0
	}
	if err := serve(cfg, rec, log, m, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})); err != nil {
		log.Error("serve", "error", err)
		return 1
	}
	return 0
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// newReconciler wires the concrete source and drivers; the one place that does.
func newReconciler(cfg config.Config, manifests string, log *slog.Logger, m *metrics.Metrics) (*reconcile.Reconciler, error) {
	opts := cfg.Options()
	source, err := newSource(cfg, manifests, opts.Mode == desired.NodeMode)
	if err != nil {
		return nil, err
	}
	// One request may take a third of the reconcile at most, so that a hung
	// answer leaves time for retries.
	hc, err := dataplane.NewHTTPClient(cfg.DataplaneCAFile, min(10*time.Second, cfg.ReconcileTimeout/3))
	if err != nil {
		return nil, fmt.Errorf("HAPROXY_DATAPLANE_CA_FILE: %w", err)
	}
	auth := dataplane.Auth{Username: cfg.DataplaneUsername, Password: cfg.DataplanePassword, Token: cfg.DataplaneToken}
	var runtimes []*runtimeapi.Client
	for _, raw := range cfg.RuntimeURLs {
		rt, err := runtimeapi.New(raw, opts.Settings, opts.Check)
		if err != nil {
			return nil, fmt.Errorf("HAPROXY_RUNTIME_URL: %w", err)
		}
		runtimes = append(runtimes, rt)
	}
	var targets []reconcile.Driver
	for i, u := range cfg.Dataplanes {
		dpOpts := []dataplane.Option{dataplane.WithDeleteBatch(cfg.DeleteBatch)}
		if len(runtimes) > 0 { // the same instance's socket starts checks of added servers
			dpOpts = append(dpOpts, dataplane.WithHealthEnabler(runtimes[i]))
		}
		targets = append(targets, m.WrapDriver(dataplane.New(u, auth, hc, dpOpts...)))
	}
	if len(targets) == 0 { // the runtime API is used alone, as a lighter option
		for _, rt := range runtimes {
			targets = append(targets, m.WrapDriver(rt))
		}
	}
	log.Info("configured", "config", cfg.String())
	return &reconcile.Reconciler{
		Source:       m.WrapSource(source),
		Options:      opts,
		Targets:      targets,
		Timeout:      cfg.ReconcileTimeout,
		GuardPercent: cfg.DeleteGuard,
		Log:          log,
	}, nil
}

// newSource reads the Kubernetes API, or manifests when a path is given.
func newSource(cfg config.Config, manifests string, nodes bool) (reconcile.Source, error) {
	if manifests != "" {
		return &kube.FileSource{Path: manifests, Namespace: cfg.Namespace, Service: cfg.Service, Nodes: nodes}, nil
	}
	restCfg, err := kube.RESTConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	restCfg.UserAgent = "haproxy-k8s-sync/" + version
	kc, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &kube.Source{Client: kc, Namespace: cfg.Namespace, Service: cfg.Service, Nodes: nodes}, nil
}

// serve runs the HTTP service until SIGTERM or SIGINT, then drains in-flight
// requests (bounded by the reconcile timeout) and returns.
func serve(cfg config.Config, rec *reconcile.Reconciler, log *slog.Logger, m *metrics.Metrics, metricsHandler http.Handler) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var ready atomic.Bool
	target := trigger.Target{Namespace: cfg.Namespace, Service: cfg.Service, NodeMode: rec.Options.Mode == desired.NodeMode}
	h := handler.New(handler.Config{
		Reconciler: m.WrapReconciler(rec), Target: target, Token: cfg.WebhookToken,
		Ready: ready.Load, Log: log, Metrics: metricsHandler, OnIgnored: m.Ignored,
	})
	srv := handler.Server(net.JoinHostPort("", strconv.Itoa(cfg.Port)), h, cfg.ReconcileTimeout)
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		return fmt.Errorf("PORT: listen: %w", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	ready.Store(true)
	log.Info("listening", "addr", ln.Addr().String(), "version", version)

	if cfg.ResyncPeriod > 0 {
		go resync(ctx, h, cfg.ResyncPeriod, cfg.WebhookToken)
	}

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	ready.Store(false)
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ReconcileTimeout+5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// resync pokes the handler every period, through the same path as a webhook,
// so periodic runs share reconciles with incoming events.
func resync(ctx context.Context, h http.Handler, period time.Duration, token string) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "/reconcile", http.NoBody)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			h.ServeHTTP(discard{}, req)
		}
	}
}

type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}
