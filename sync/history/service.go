package history

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reloads"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// The service under test as the histories run it: its processes (writers),
// what each reports (reconciles, the readiness gate's verdicts), a crash,
// and the gate as the checker judges it.

// writer is what one replica of the service reports to the history: its
// reconciles' results and, with POD_READINESS_GATE, the pods' verdicts.
type writer struct {
	i int
	w *world
}

func (w *world) writer(i int) writer { return writer{i: i, w: w} }

// podNumber is the number of the pod named name, -1 if none.
func (w *world) podNumber(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	for n, nm := range w.names {
		if nm == name {
			if _, ok := w.k8s[n]; ok {
				return n
			}
		}
	}
	var n int
	if _, err := fmt.Sscanf(name, "p-%d", &n); err != nil {
		return -1
	}
	return n
}

// Update is the readiness gate as the history reads it: each pod's verdict
// (serve's gate patches it into the pod's status condition).
func (wr writer) Update(_ context.Context, in reconcile.GateInput) {
	now := time.Now()
	for _, s := range in.Servers {
		if n := wr.w.podNumber(s.Pod); n >= 0 {
			wr.w.rec.add(obs{at: now, kind: obsGate, pod: n, gate: s.InService, target: wr.i, err: s.Why})
			wr.w.mu.Lock()
			wr.w.gates[n] = s.InService
			wr.w.gateWhy[n] = fmt.Sprintf("%s at %s", cmp.Or(s.Why, "True"), now.Format("15:04:05.000"))
			wr.w.mu.Unlock()
		}
	}
}

// reconciled records one reconcile's end: its error, and each target's.
func (wr writer) reconciled(began time.Time, res reconcile.Result, err error) {
	o := obs{kind: obsReconcile, began: began, target: wr.i}
	if err != nil {
		o.err = err.Error()
		for _, t := range res.Targets {
			if t.Error != "" {
				o.failures = append(o.failures, targetFailure{target: t.Target, err: t.Error, servers: serversOf(t.Failed)})
			}
		}
	}
	wr.w.rec.add(o)
}

func serversOf(failed []plan.ServerError) []string {
	var out []string
	for _, f := range failed {
		out = append(out, f.Server)
	}
	return out
}

// startService wires the reconcile loop the way serve does (a Reconciler from
// cfg, a Coalescer with the follow-up, the reload watcher) and returns its poke, what the watch
// calls on a Kubernetes change, and what stops it.
func startService(t testing.TB, cfg config.Config, src reconcile.Source, wr writer) (poke func(), stop func()) {
	p := startProcess(t, cfg, src, wr)
	return p.poke, p.stop
}

// process is one running service: what the watch pokes, what stops it
// (waiting for its reconcile), and what kills it where it is.
type process struct {
	poke, stop, crash func()
	// base is a serve process's HTTP address (serve histories); ended
	// is set once the history stops or crashes it.
	base  string
	ended atomic.Bool
}

// startProcess is startService's process: crash cancels every reconcile of
// it at once, wherever its writes are, and stops its timers and watch
// without waiting; its reconciles after that are not recorded (a dead
// process says nothing).
func startProcess(t testing.TB, cfg config.Config, src reconcile.Source, wr writer) *process {
	alive, kill := context.WithCancel(context.Background())
	log := serviceLog(t)
	if wr.i > 0 {
		log = log.With("replica", wr.i)
	}
	rec, checks, watched := reconcilerOf(t, cfg, log)
	rec.Source = src
	if cfg.ReadinessGate {
		rec.Gate = wr
	}
	follow := &reconcile.FollowUp{Checks: checks}
	co := reconcile.NewCoalescer(func(ctx context.Context) (reconcile.Result, error) {
		began := time.Now()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(alive, cancel)()
		res, err := rec.Reconcile(ctx, false)
		log.Debug("reconciled", "result", res, "err", err)
		if alive.Err() == nil {
			wr.reconciled(began, res, err)
		}
		return res, err
	})
	co.Follow(follow, nil)
	ctx, cancel := context.WithCancel(context.Background())
	rw := &reloads.Watcher{Targets: watched, Poke: func(string) { co.Poke() }}
	watching := make(chan struct{})
	go func() { rw.Run(ctx); close(watching) }()
	return &process{
		poke: func() {
			if alive.Err() == nil {
				co.Poke()
			}
		},
		stop: func() {
			cancel()
			<-watching
			follow.Stop()
			select {
			case <-co.Idle():
			case <-time.After(cfg.ReconcileTimeout + 5*time.Second):
			}
			kill()
		},
		crash: func() {
			log.Debug("crashed")
			kill()
			cancel()
			follow.Stop()
		},
	}
}

// reconcilerOf is the Reconciler serve builds from cfg (without its
// Source), its targets' check readers and what the reload watch watches.
func reconcilerOf(t testing.TB, cfg config.Config, log *slog.Logger) (*reconcile.Reconciler, map[string]reconcile.CheckReader, map[string]reloads.Process) {
	opts := cfg.Options()
	var drivers []reconcile.Driver
	checks := map[string]reconcile.CheckReader{}
	watched := map[string]reloads.Process{}
	hc := &http.Client{Timeout: min(10*time.Second, cfg.ReconcileTimeout/3)}
	for i, raw := range cfg.RuntimeURLs {
		var tlsOpts []runtimeapi.Option
		if cfg.RuntimeTLS != nil {
			tlsOpts = append(tlsOpts, runtimeapi.WithTLS(cfg.RuntimeTLS, cfg.RuntimeTLSServerName))
		}
		rt, err := runtimeapi.New(raw, opts.Settings, opts.Check, tlsOpts...)
		if err != nil {
			t.Fatal(err)
		}
		var drv reconcile.Driver = rt
		if len(cfg.Dataplanes) > 0 {
			drv = dataplane.New(cfg.Dataplanes[i], dataplane.Auth{}, hc, dataplane.WithDeleteBatch(cfg.DeleteBatch), dataplane.WithRuntime(rt))
		}
		drivers = append(drivers, drv)
		checks[drv.Name()] = rt
		watched[drv.Name()] = rt
	}
	return &reconcile.Reconciler{
		Options: opts, Targets: drivers,
		Timeout: cfg.ReconcileTimeout, GuardPercent: cfg.DeleteGuard, MaxServers: cfg.MaxServers,
		DrainTimeout: cfg.DrainTimeout, Log: log, Cluster: cfg.ClusterName,
	}, checks, watched
}

// logEnv names a file for the service's own log (make replay LOG=…);
// logDirEnv a folder for one log a history (make soak), kept only for a
// history that failed (keepLog), so a finding that does not replay can be
// read still.
const (
	logEnv    = "HKS_HISTORY_LOG"
	logDirEnv = "HKS_HISTORY_LOG_DIR"
)

// serviceLog is where the service under test logs: nowhere, or, for a replay
// worth reading, the file HKS_HISTORY_LOG names, or one file a history in
// HKS_HISTORY_LOG_DIR (debug level, JSON).
func serviceLog(t testing.TB) *slog.Logger {
	f := serviceLogFile(t)
	if f == io.Discard {
		return slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	return slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// serviceLogFile is serviceLog's file, io.Discard when none.
func serviceLogFile(t testing.TB) io.Writer {
	path := os.Getenv(logEnv)
	if dir := os.Getenv(logDirEnv); path == "" && dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path = historyLog(t, dir)
		t.Cleanup(func() {
			if !t.Failed() {
				os.Remove(path)
			}
		})
	}
	if path == "" {
		return io.Discard
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// historyLog is the file of t's history in dir: its test's name, with the
// seed in it.
func historyLog(t testing.TB, dir string) string {
	return filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+".log")
}

// gateDiffs says, with POD_READINESS_GATE, how the pods' gates differ from
// what HAProxy runs once the history is quiet: True exactly for the pods
// whose every server is in service (not parked, not draining, UP) on every
// target: each instance's server of the pod (serverOf: named after it, of
// its zone's role, in service where one is), not a server parked at its
// address (slot soak seed 374419966 on 2.6.12: the server added for a pod
// beyond the slots, parked for its sessions once the pod had a slot, made
// the pod's gate judged wrong). A pod MAX_SERVERS left
// without a server, or whose server HAProxy refused, is not in service.
func (w *world) gateDiffs() []string {
	if !w.setup.Config.Gate {
		return nil
	}
	units := w.units()
	inService := map[string]bool{} // by unit name: the pod's podName
	for _, u := range units {
		inService[u.name] = true
	}
	for _, tg := range w.targets {
		reply, err := tg.h.Command("show servers state " + backend)
		if err != nil {
			return []string{"gate: show servers state: " + err.Error()}
		}
		all := haproxytest.ParseServers(reply, backend)
		// Each instance's servers apart (Config.Writer2 "cluster"): each
		// has its own server for every pod.
		groups := []map[string]haproxytest.Server{all}
		if w.setup.Config.Writer2 == "cluster" {
			rest, west := splitWest(all)
			groups = []map[string]haproxytest.Server{rest, west}
		}
		for _, g := range groups {
			atAddr := map[string][]haproxytest.Server{}
			for _, sv := range g {
				atAddr[sv.Address] = append(atAddr[sv.Address], sv)
			}
			for _, u := range units {
				sv, ok := w.serverOf(atAddr, u)
				if !ok || sv.Maint() || sv.Drain() || !sv.Up() || sv.Weight == 0 {
					inService[u.name] = false
				}
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var diffs []string
	for n, st := range w.k8s {
		switch {
		case st != live:
			// Not ready: what its gate says is the kubelet's business.
		case inService[podName(n)] && !w.gates[n]:
			diffs = append(diffs, fmt.Sprintf("%s: in service on every target, its gate not True (last verdict: %s)", podName(n), cmp.Or(w.gateWhy[n], "none")))
		case !inService[podName(n)] && w.gates[n]:
			diffs = append(diffs, podName(n)+": gate True, its server not in service on every target")
		}
	}
	sort.Strings(diffs)
	return diffs
}

// crash carries out a Crash: the first writer is killed where it is, and a
// fresh process takes over and reconciles, as one started by Kubernetes
// does; with "rezone" (histories with zones) it runs with the other zone as
// HAPROXY_LOCAL_ZONE.
func (w *world) crash(st Step) error {
	if w.first == nil {
		return nil // many-Services histories: the fleet is not restarted
	}
	w.mu.Lock()
	old := w.first
	cfg := w.cfg
	w.mu.Unlock()
	old.crash()
	traceNote("crash: the first writer killed")
	// A second writer keeps its zone: a rezone is drawn for the first
	// writer alone, so it flips only where that is the whole service.
	w.mu.Lock()
	if st.Fault == "rezone" && w.setup.Zones && w.setup.Config.Writer2 == "" {
		w.local = map[string]string{localZone: "zone-b", "zone-b": localZone}[w.local]
		w.rec.add(obs{kind: obsLocalZone, err: w.local})
	}
	if w.setup.Zones {
		cfg.LocalZone = w.local // a restart keeps the zone it was given last
	}
	w.mu.Unlock()
	var p *process
	if w.mirror != nil {
		p = w.startServe(0, cfg.LocalZone)
	} else {
		p = startProcess(w.t, cfg, w.live, w.writer(0))
	}
	traceNote("crash: its successor listens")
	w.mu.Lock()
	// The one-shot command runs with what the service runs now (a
	// rezone's zone too), as an operator's change reaches both.
	w.first, w.cfg = p, cfg
	w.mu.Unlock()
	p.poke()
	return nil
}
