// Command haproxy-k8s-sync keeps HAProxy backends equal to a Kubernetes
// Service's endpoints.
//
//	haproxy-k8s-sync [serve] [--manifests PATH]               the HTTP service (default)
//	haproxy-k8s-sync reconcile [--dry-run] [--manifests PATH] one reconcile, JSON on stdout
//	haproxy-k8s-sync trigger [--timeout 1m] URL                POST a poke to a running service
//	haproxy-k8s-sync wait-drained (--node N | --ip A) URL      wait until a server is drained
//	haproxy-k8s-sync version | help
//
// --manifests reads the Service, EndpointSlices and Nodes from YAML or JSON
// files (e.g. a `kubectl get -o yaml` dump) instead of the Kubernetes API; in
// many-Services mode, every Service of the files.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/auth"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/trigger"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/drained"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/events"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/gate"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/memlimit"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/metrics"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/pair"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// version and commit are stamped at build time with -ldflags "-X
// main.version=... -X main.commit=..." (make build reads VERSION and git);
// without a stamped commit the one Go recorded, if any, is used.
var (
	version = "dev"
	commit  = ""
)

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
		fmt.Println(versionString())
		return 0
	case "help", "-h", "--help":
		return help(os.Stdout)
	case "trigger":
		return triggerCmd(args, os.Stdout, os.Stderr)
	case "wait-drained":
		return waitDrainedCmd(args, os.Stdout, os.Stderr)
	case "copy-to":
		return copyToCmd(args, os.Stderr)
	case "serve", "reconcile":
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q: use serve, reconcile [--dry-run], trigger URL, wait-drained, copy-to DIR, version or help\n", trigger.Short(cmd))
		return 2
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	var dryRun *bool
	usage := "usage: haproxy-k8s-sync serve [--manifests PATH]\n\nThe HTTP service: watches the Service (with --manifests, the files: at start and on every change) and reconciles on every change, and on POST /reconcile."
	if cmd == "reconcile" {
		dryRun = fs.Bool("dry-run", false, "plan only, apply nothing; with --manifests and no HAProxy URL, plan against empty backends")
		usage = "usage: haproxy-k8s-sync reconcile [--dry-run] [--manifests PATH]\n\nOne reconcile, the result as JSON on stdout; exit 0 on success, 1 on failure."
	} else {
		dryRun = new(bool)
	}
	manifests := fs.String("manifests", "", "read the Service, EndpointSlices and Nodes from this YAML/JSON file or directory instead of the Kubernetes API")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\nFlags:\n", usage)
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), "\nConfiguration is read from the environment: `haproxy-k8s-sync help` lists every variable.")
	}
	if code, done := parseFlags(fs, args, os.Stdout, os.Stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "%s: unexpected argument %q\n", cmd, trigger.Short(fs.Arg(0)))
		fs.Usage()
		return 2
	}

	load := config.Load
	if *dryRun && *manifests != "" {
		load = config.LoadForPlan // nothing to apply: HAProxy is optional
	}
	cfg, err := load()
	if err == nil && cmd == "serve" {
		err = cfg.RequireWebhookAuth()
	}
	if err != nil {
		// A misspelt variable may be why: said before the error.
		for _, w := range cfg.Warnings {
			fmt.Fprintf(os.Stderr, "configuration: warning: %s\n", w)
		}
		fmt.Fprintf(os.Stderr, "configuration: %v\n", err)
		return 2
	}
	log := newLogger(cfg.LogLevel, cfg.LogFormat)
	klog.SetSlogLogger(log) // client-go's own lines in the same format
	for _, w := range cfg.Warnings {
		log.Warn("configuration: " + w)
	}
	// A heap held below the container's limit: the GC works harder near it
	// rather than the kernel killing the process (many Services' entry).
	if limit, why, err := memlimit.Apply(os.Getenv("GOMEMLIMIT"), os.ReadFile); err != nil {
		log.Warn("memory limit not set", "error", err)
	} else if limit > 0 {
		log.Info("memory limit", "bytes", limit, "from", why)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg, version, revision())
	m.Cluster(cfg.ClusterName, cfg.LocalZone)
	rec, checks, pairs, kc, dps, err := newReconciler(cfg, *manifests, log, m)
	if err == nil {
		wait, late := pairTimeout, func(error) {}
		if cmd == "serve" {
			// A mismatch found after the start stops serve as one found
			// before would have: exit 2 with the configuration's line.
			wait, late = pairStartWait, func(err error) {
				fmt.Fprintf(os.Stderr, "configuration: %v\n", err)
				log.Error("configuration: a runtime socket and its Data Plane URL reach different HAProxy: stopping", "error", err)
				os.Exit(2)
			}
		}
		err = checkPairs(context.Background(), pairs, wait, late, log)
	}
	if err != nil {
		// Every error here is the configuration's (a kubeconfig or context
		// that cannot be used, a CA file, a socket URL, a runtime socket
		// paired with another HAProxy's Data Plane API): said like Load's.
		fmt.Fprintf(os.Stderr, "configuration: %v\n", err)
		return 2
	}
	source := "kubernetes"
	if *manifests != "" {
		source = "manifests " + *manifests
	}
	if cfg.ManyServices() {
		f, err := newFleet(cfg, rec, dps, pairs, kc, *manifests, log, m, cmd == "serve")
		if err != nil {
			fmt.Fprintf(os.Stderr, "configuration: %v\n", err)
			return 2
		}
		log.Info("configured", "command", cmd, "dryRun", *dryRun, "source", source, "config", cfg.String(), "owns", cfg.Owns())
		if cmd == "reconcile" {
			return reconcileFleetOnce(f, dps, checks, *dryRun, log)
		}
		if err := serveFleet(cfg, f, checks, kc, *manifests, log, m, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})); err != nil {
			log.Error("serve", "error", err)
			return 1
		}
		return 0
	}
	if cmd == "reconcile" {
		log.Info("configured", "command", "reconcile", "dryRun", *dryRun, "source", source, "config", cfg.String(), "owns", cfg.Owns())
		return reconcileOnce(rec, checks, *dryRun, log)
	}
	log.Info("configured", "command", "serve", "source", source, "config", cfg.String(), "owns", cfg.Owns(),
		"watch", cfg.Watch && kc != nil, "resync", cfg.ResyncPeriod.String(), "webhookAuth", cfg.WebhookAuth)
	if err := serve(cfg, *manifests, rec, checks, kc, log, m, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})); err != nil {
		log.Error("serve", "error", err)
		return 1
	}
	return 0
}

// parseFlags parses args; done says the command ends here with code: 0
// after -h or --help (usage on stdout), 2 on a bad flag (the error and the
// usage on stderr).
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, done bool) {
	fs.SetOutput(io.Discard) // the flag package's own lines; ours follow
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return 0, true
	case err != nil:
		fs.SetOutput(stderr)
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		fs.Usage()
		return 2, true
	}
	fs.SetOutput(stderr)
	return 0, false
}

// settleTime bounds how long the one-shot reconcile waits for the servers
// it gated to pass their check.
const settleTime = time.Minute

// reconcileOnce runs the reconcile command: one reconcile, then, unless it
// is a dry run, more of each target while servers it gated there wait for
// their first passed check or servers it parked wait for their sessions to
// end (up to settleTime), so that what it started is finished when it
// exits; it says at info what it waits for, once a target. Each target is
// followed on its own (reconcile.Settler): one down or hung holds back
// nothing on the others, and the run then exits 1 naming it. The
// reconciles' result, together, goes to stdout; exit 1 when a target
// failed or servers still wait for their check.
func reconcileOnce(rec *reconcile.Reconciler, checks map[string]reconcile.CheckReader, dryRun bool, log *slog.Logger) int {
	ctx := context.Background()
	run := func(ctx context.Context) (reconcile.Result, error) { return rec.Reconcile(ctx, dryRun) }
	var res reconcile.Result
	var err error
	if dryRun {
		res, err = run(ctx)
	} else {
		sctx, cancel := context.WithTimeout(ctx, settleTime)
		s := &reconcile.Settler{Run: run, Checks: checks, Poll: 25 * time.Millisecond, Log: log,
			Waits: func(target string, trs []reconcile.TargetResult) {
				tellWait(log.With("target", target), reconcile.Result{Targets: trs})
			}}
		res, err = s.Settle(sctx)
		cancel()
		if errors.Is(err, reconcile.ErrStillWaiting) {
			log.Error("servers never passed their health check: does something answer at their address and port (in node mode the Node's InternalIP and nodePort)?",
				"waited", settleTime.String(), "servers", held(res, func(t reconcile.TargetResult) []string { return t.Waiting }))
		} else if d := held(res, func(t reconcile.TargetResult) []string { return t.Draining }); err == nil && len(d) > 0 {
			log.Info("servers still have sessions: parked, out of traffic; the next reconcile deletes them once their sessions end", "waited", settleTime.String(), "servers", d)
		}
		if errors.Is(err, reconcile.ErrContested) {
			log.Error("another writer deleted or parked the servers this run added, twice before their check passed: this run stopped following them; is a serve (or another instance) running with another configuration, e.g. another HAPROXY_LOCAL_ZONE?")
		}
		if errors.Is(err, reconcile.ErrTargets) {
			log.Error("reconcile failed on a target; the other targets were reconciled and their servers waited for", "error", err.Error(), "errorClass", res.ErrorClass)
		}
	}
	res.LogWarnings(log)
	_ = json.NewEncoder(os.Stdout).Encode(res)
	if err != nil {
		return 1
	}
	return 0
}

// tellWait logs, at info, what a one-shot reconcile waits for before it
// exits: a run that waits silently looks hung.
func tellWait(log *slog.Logger, res reconcile.Result) {
	w := held(res, func(t reconcile.TargetResult) []string { return t.Waiting })
	d := held(res, func(t reconcile.TargetResult) []string { return t.Draining })
	if len(w) > 0 {
		log.Info("waiting for new servers to pass their health check before they take traffic", "servers", w, "upTo", settleTime.String())
	}
	if len(d) > 0 {
		log.Info("waiting for removed servers' sessions to end before deleting them", "servers", d, "upTo", settleTime.String())
	}
}

// held lists, as target/backend/server, the servers pick takes from each
// target's result.
func held(res reconcile.Result, pick func(reconcile.TargetResult) []string) []string {
	var out []string
	for _, t := range res.Targets {
		for _, s := range pick(t) {
			out = append(out, t.Backend+"/"+s)
		}
	}
	return out
}

func newLogger(level, format string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: l}
	if format == "text" {
		return slog.New(slog.NewTextHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, opts))
}

// versionString is the version, the commit it was built from and the Go
// version, e.g. "haproxy-k8s-sync 0.2.0 (commit 1c161e6, go1.26.8)".
func versionString() string {
	rev := revision()
	if len(rev) > 7 {
		rev = rev[:7]
	}
	return fmt.Sprintf("haproxy-k8s-sync %s (commit %s, %s)", version, rev, runtime.Version())
}

// revision is the VCS revision the binary was built from, or "unknown".
func revision() string {
	if commit != "" {
		return commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// help lists the commands and every variable, from the configuration's own
// definition.
func help(w io.Writer) int {
	fmt.Fprint(w, `haproxy-k8s-sync keeps HAProxy backends equal to a Kubernetes Service's endpoints.

Commands:
  serve [--manifests PATH]                  the HTTP service (the default): watches and reconciles
  reconcile [--dry-run] [--manifests PATH]  one reconcile, the result as JSON on stdout; exit 1 on failure
  trigger [--timeout 1m] URL                POST a poke to a running service with the webhook token
                                            (URL without a scheme: http:// is assumed)
  wait-drained (--node N | --ip A) [--timeout 5m] [--missing-ok] URL
                                            wait until the running service says that server is out of
                                            rotation with no sessions on every HAProxy target; a server
                                            no target has is an error unless --missing-ok
  copy-to DIR                               copy this executable into DIR (for another container's preStop)
  version                                   version, commit and Go version
  help                                      this text

--manifests reads the Service, EndpointSlices and Nodes from YAML or JSON files
instead of the Kubernetes API; reconcile --dry-run --manifests needs no HAProxy
(with no HAProxy URL set it plans against empty backends). With SERVICE_SELECTION
annotation or class, every Service of the files is selected as from the API; a
class dry run also lists the frontends and backends it would make. Each command
takes --help.

Variables (name, default, meaning):
`)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if err := config.Usage(tw); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = tw.Flush()
	return 0
}

// newReconciler wires the concrete source and drivers; the one place that
// does. checks reads each target's health checks through its runtime socket
// (when it has one), for the follow-ups. pairs checks, by target, that a
// Data Plane target and its runtime socket reach the same HAProxy (with
// both URLs set). kc is the Kubernetes client, nil when reading manifests.
// dps are the Data Plane clients the drivers wrap, in target order (class
// Services' frontends are made through them).
func newReconciler(cfg config.Config, manifests string, log *slog.Logger, m *metrics.Metrics) (rec *reconcile.Reconciler, checks map[string]reconcile.CheckReader, pairs map[string]*pair.Guard, kc *kube.Client, dps []*dataplane.Client, err error) {
	opts := cfg.Options()
	source, kc, err := newSource(cfg, manifests, opts.Mode == desired.NodeMode)
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	// One request may take a third of the reconcile at most, so that a hung
	// answer leaves time for retries.
	hc, err := dataplane.NewHTTPClient(cfg.DataplaneCAFile, min(10*time.Second, cfg.ReconcileTimeout/3))
	if err != nil {
		return nil, nil, nil, nil, nil, fmt.Errorf("HAPROXY_DATAPLANE_CA_FILE: %w", err)
	}
	auth := dataplane.Auth{Username: cfg.DataplaneUsername, Password: cfg.DataplanePassword, Token: cfg.DataplaneToken}
	var runtimes []*runtimeapi.Client
	for _, raw := range cfg.RuntimeURLs {
		rt, err := runtimeapi.New(raw, opts.Settings, opts.Check, runtimeOptions(cfg)...)
		if err != nil {
			return nil, nil, nil, nil, nil, fmt.Errorf("HAPROXY_RUNTIME_URL: %w", err)
		}
		runtimes = append(runtimes, rt)
	}
	var targets []reconcile.Driver
	checks = map[string]reconcile.CheckReader{}
	pairs = map[string]*pair.Guard{}
	for i, u := range cfg.Dataplanes {
		dpOpts := []dataplane.Option{dataplane.WithDeleteBatch(cfg.DeleteBatch)}
		if len(runtimes) > 0 { // the same instance's socket starts checks of added servers
			dpOpts = append(dpOpts, dataplane.WithRuntime(runtimes[i]))
		}
		dp := dataplane.New(u, auth, hc, dpOpts...)
		dps = append(dps, dp)
		if len(runtimes) == 0 {
			targets = append(targets, m.WrapDriver(dp))
			continue
		}
		checks[dp.Name()] = runtimes[i]
		name := dp.Name()
		g := &pair.Guard{Pair: i + 1, Dataplane: name, Runtime: runtimes[i].Name(), DataplaneView: dp, RuntimeView: runtimes[i],
			Log: log, OnChange: func(mismatched bool) { m.Mismatched(name, mismatched) }}
		pairs[name] = g
		targets = append(targets, m.WrapDriver(guarded(dp, g)))
	}
	if len(targets) == 0 { // the runtime API is used alone, as a lighter option
		for _, rt := range runtimes {
			checks[rt.Name()] = rt
			targets = append(targets, m.WrapDriver(rt))
		}
	}
	if len(targets) == 0 { // a dry run from manifests (config.LoadForPlan)
		targets = append(targets, noHAProxy{})
	}
	var podGate reconcile.PodGate
	if cfg.ReadinessGate && kc != nil {
		podGate = &gate.Writer{Client: kc, Namespace: cfg.Namespace, Log: log, OnWrite: m.PodGate}
	}
	return &reconcile.Reconciler{
		Gate:         podGate,
		Source:       m.WrapSource(source),
		Options:      opts,
		Targets:      targets,
		Timeout:      cfg.ReconcileTimeout,
		GuardPercent: cfg.DeleteGuard,
		MaxServers:   cfg.MaxServers,
		DrainTimeout: cfg.DrainTimeout,
		OnTransition: m.Transition,
		OnProgrammed: m.Programmed,
		Log:          log,
		Cluster:      cfg.ClusterName,
	}, checks, pairs, kc, dps, nil
}

// runtimeOptions are how every runtime socket is reached: the driver's,
// the reload watch's and the check reads' (one Client each target).
func runtimeOptions(cfg config.Config) []runtimeapi.Option {
	if cfg.RuntimeTLS == nil {
		return nil
	}
	return []runtimeapi.Option{runtimeapi.WithTLS(cfg.RuntimeTLS, cfg.RuntimeTLSServerName)}
}

// drainChecker reads the reconciler's targets and backends for GET /drained.
func drainChecker(rec *reconcile.Reconciler) *drained.Checker {
	c := &drained.Checker{Owner: rec.Options.NamePrefix,
		Names: func(node string) []string { return desired.NodeServerNames(rec.Options, node) }}
	for _, t := range rec.Targets {
		c.Targets = append(c.Targets, t)
	}
	for _, pb := range rec.Options.Backends {
		c.Backends = append(c.Backends, pb.Backend)
	}
	return c
}

// newSource reads the Kubernetes API, or manifests when a path is given (then
// the client is nil).
func newSource(cfg config.Config, manifests string, nodes bool) (reconcile.Source, *kube.Client, error) {
	if manifests != "" {
		return fileSource{&kube.FileSource{Path: manifests, Namespace: cfg.Namespace, Service: cfg.Service, Nodes: nodes}}, nil, nil
	}
	restCfg, err := kube.RESTConfig(cfg.Kubeconfig, cfg.KubeContext)
	if err != nil {
		return nil, nil, err
	}
	restCfg.UserAgent = "haproxy-k8s-sync/" + version
	kc, err := kube.NewClient(restCfg)
	if err != nil {
		return nil, nil, err
	}
	return &kube.Source{Client: kc, Namespace: cfg.Namespace, Service: cfg.Service, Nodes: nodes, Pods: cfg.ReadinessGate}, kc, nil
}

// serve runs the HTTP service until SIGTERM or SIGINT, then drains in-flight
// requests and the running reconcile (bounded by the reconcile timeout) and
// returns. With WATCH (and a Kubernetes client) it watches the Service's
// objects and reconciles by itself on every change that can matter; with
// manifests (--manifests' path) it reconciles at start and whenever the
// files change (watch.Manifests); with RESYNC_PERIOD it also reconciles on
// that period.
func serve(cfg config.Config, manifests string, rec *reconcile.Reconciler, checks map[string]reconcile.CheckReader, kc *kube.Client, log *slog.Logger, m *metrics.Metrics, metricsHandler http.Handler) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	book := alarms(log, m)
	go book.Run(ctx, alarmPeriod, func(ctx context.Context) { probe(ctx, book, cfg, rec) })
	wrapped := book.Wrap(m.WrapReconciler(rec))
	if cfg.ServiceEvents && kc != nil {
		host, _ := os.Hostname() // the pod's name
		ev := events.New(kc, cfg.Namespace, cfg.Service, host, log)
		ev.OnWrite = m.ServiceEvent
		go ev.Run(ctx)
		wrapped = ev.Wrap(wrapped)
	}
	p := newPokes(cfg, wrapped, checks, kc, manifests, rec.Options.Mode == desired.NodeMode, log, m)
	authn, err := newAuthenticator(cfg, kc)
	if err != nil {
		return err
	}
	warnAuth(cfg, authn, log)

	var listening atomic.Bool
	h := handler.New(handler.Config{
		Reconciler: wrapped, Shared: p.shared, Auth: authn, OnAuthFailure: m.AuthFailure,
		Target: trigger.Target{Namespace: cfg.Namespace, Service: cfg.Service, NodeMode: rec.Options.Mode == desired.NodeMode, ManagedBy: cfg.ManagedBy},
		Wait:   cfg.ReconcileTimeout + handler.WaitMargin, Ready: func() bool { return listening.Load() && p.ready() },
		Log: log, Metrics: metricsHandler, OnIgnored: m.Ignored,
		Drained: drainChecker(rec), NodeMode: rec.Options.Mode == desired.NodeMode,
	})
	srv := handler.Server(net.JoinHostPort("", strconv.Itoa(cfg.Port)), h, cfg.ReconcileTimeout)
	ln, err := handler.ListenTCP(ctx, srv.Addr)
	if err != nil {
		return fmt.Errorf("PORT: listen: %w", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(handler.Listen(ln, handler.MaxConns, srv)) }()
	listening.Store(true)
	log.Info("listening", "addr", ln.Addr().String(), "version", version, "watch", p.watcher != nil)
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
	// No reconcile starts from now on: the running one ends as
	// drainAndStop says.
	end := make(chan struct{})
	p.close(end)
	return drainAndStop(log, srv, cfg.ReconcileTimeout+handler.WaitMargin, p.shared.Idle, func() { close(end) })
}

// drainAndStop ends serve once no reconcile starts any more (callers
// queued behind a running one are answered 503 at once): the running ones
// may end by themselves within drain, the longest a reconcile takes, and
// are ended (endRuns) then, or at a second signal; the HTTP server stops
// within drain and 3 s more. idle returns a channel closed once no
// reconcile runs (asked again after the HTTP server stopped: a request it
// answered meanwhile may have started one).
func drainAndStop(log *slog.Logger, srv *http.Server, drain time.Duration, idle func() <-chan struct{}, endRuns func()) error {
	grace := drain + 3*time.Second
	log.Info("shutting down", "drain", drain.String())
	again := make(chan os.Signal, 1)
	signal.Notify(again, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(again)
	go func() {
		select {
		case <-again:
			log.Info("second signal: ending the running reconciles now")
		case <-time.After(drain):
			log.Warn("the running reconciles did not end in time: ending them", "drain", drain.String())
		case <-idle():
			return
		}
		endRuns()
	}()
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	select { // a poked reconcile has no caller for Shutdown to wait for
	case <-idle():
		return nil
	case <-sctx.Done():
		return fmt.Errorf("shutdown: a reconcile still runs after %s", grace)
	}
}

// warnAuth warns at start about auth that lets more callers in than needed.
func warnAuth(cfg config.Config, authn auth.Authenticator, log *slog.Logger) {
	switch {
	case authn.Mode() == config.AuthNone:
		log.Warn("webhook auth is off (WEBHOOK_AUTH=none): whoever reaches the port can trigger reconciles and read the plan")
	case authn.Mode() == config.AuthKubernetes && len(cfg.AllowedServiceAccounts) == 0:
		log.Warn("kubernetes auth accepts any ServiceAccount token issued for the audience; list the callers in WEBHOOK_ALLOWED_SERVICEACCOUNTS to narrow it", "audience", cfg.WebhookAudience)
	}
}

// newAuthenticator returns the webhook authenticator cfg asks for.
func newAuthenticator(cfg config.Config, kc *kube.Client) (auth.Authenticator, error) {
	switch cfg.WebhookAuth {
	case config.AuthToken:
		t, err := auth.NewToken(cfg.WebhookToken)
		if err != nil {
			return nil, fmt.Errorf("WEBHOOK_TOKEN: %w", err)
		}
		return t, nil
	case config.AuthKubernetes:
		if kc == nil {
			return nil, errors.New("WEBHOOK_AUTH: kubernetes needs the Kubernetes API, not --manifests")
		}
		k, err := auth.NewKubernetes(kc, cfg.WebhookAudience, cfg.AllowedServiceAccounts)
		if err != nil {
			return nil, fmt.Errorf("WEBHOOK_AUTH: %w", err)
		}

		return k, nil
	case config.AuthNone:
		return auth.None{}, nil
	}
	return nil, cfg.RequireWebhookAuth()
}
