package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/events"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/gate"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/lb"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/metrics"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/pair"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// newFrontends makes class Services' frontends and backends: package lb's
// Manager over the Data Plane clients the drivers use (dps, in target
// order, so that HAPROXY_VIP's addresses follow the targets), each behind
// its pair's guard as the drivers are (pairs, by target name).
func newFrontends(cfg config.Config, dps []*dataplane.Client, pairs map[string]*pair.Guard, log *slog.Logger) (fleet.Frontends, error) {
	if len(dps) == 0 {
		return nil, errors.New("HAPROXY_DATAPLANE_URL: required with class selection: class Services' frontends and backends are created through the Data Plane API")
	}
	m := &lb.Manager{Class: cfg.LoadBalancerClass, Cluster: cfg.ClusterName, Namespaces: cfg.Namespaces, Log: log.With("part", "frontends")}
	for _, dp := range dps {
		m.Targets = append(m.Targets, guardedFrontends(dp, pairs[dp.Name()]))
	}
	for _, v := range cfg.VIPs {
		m.VIPs = append(m.VIPs, v.String())
	}
	return m, nil
}

// newFleet wires the many-Services reconcile around rec, the template every
// Service's Reconciler copies (targets, drivers, policies). Services are
// read from the Kubernetes API (kc), or with manifests (--manifests' path;
// kc is nil then) from the files, listed and selected by the same rules.
// With events (serve, from the API), refused Services and failed frontends
// are told as Warning Events, and with SERVICE_EVENTS each followed
// Service's reconciles too. From manifests there is no API to write to:
// no Events, no status, no readiness gate.
func newFleet(cfg config.Config, rec *reconcile.Reconciler, dps []*dataplane.Client, pairs map[string]*pair.Guard, kc *kube.Client, manifests string, log *slog.Logger, m *metrics.Metrics, withEvents bool) (*fleet.Fleet, error) {
	nodes := rec.Options.Mode == desired.NodeMode
	f := &fleet.Fleet{Selection: cfg.Selecting(), Template: rec, Log: log, Metrics: m}
	if manifests != "" {
		f.Services = fileServices{&kube.FileServices{Path: manifests}}
		f.Source = func(namespace, name string) reconcile.Source {
			return m.WrapSource(fileSource{&kube.FileSource{Path: manifests, Namespace: namespace, Service: name, Nodes: nodes}})
		}
	} else {
		f.Services = kc
		f.Source = func(namespace, name string) reconcile.Source {
			return m.WrapSource(&kube.Source{Client: kc, Namespace: namespace, Service: name, Nodes: nodes, Pods: cfg.ReadinessGate})
		}
		// A full reconcile reads each kind once (the readiness gate's
		// pods excepted: a Reconciler with the gate reads its own).
		f.Inputs = kube.Bulk{Client: kc, Namespaces: cfg.Namespaces, Nodes: nodes}
	}
	if cfg.ReadinessGate && kc != nil {
		f.Gate = func(namespace string) reconcile.PodGate {
			return &gate.Writer{Client: kc, Namespace: namespace, Log: log, OnWrite: m.PodGate}
		}
	}
	if withEvents && kc != nil {
		host, _ := os.Hostname() // the pod's name
		hub := events.NewHub(kc, host, log)
		hub.OnWrite = m.ServiceEvent
		// For the process's life: an Event still queued at exit is lost,
		// as in the single-Service mode.
		go hub.Run(context.Background())
		f.Warn = func(svc *corev1.Service, reason, message string) {
			hub.For(svc.Namespace, svc.Name).Warn(svc.UID, reason, message)
		}
		if cfg.ServiceEvents {
			f.Wrap = func(s services.Selected, r reconcile.Runner) reconcile.Runner {
				return hub.For(s.Namespace, s.Name).Wrap(r)
			}
		}
	}
	if cfg.ByClass {
		for _, v := range cfg.VIPs {
			f.VIPs = append(f.VIPs, v.String())
		}
		f.Hostname = cfg.VIPHostname
		f.ProxyProtocol = cfg.SendProxyV2
		if kc != nil {
			f.Status = kc // never a nil *kube.Client in the interface
		}
		// A dry run from manifests may have no Data Plane API (config's
		// LoadForPlan): it makes no frontend, and plans them (classPlan).
		if len(dps) > 0 || manifests == "" {
			fe, err := newFrontends(cfg, dps, pairs, log)
			if err != nil {
				return nil, err
			}
			f.Frontends = fe
		}
	}
	return f, nil
}

// reconcileFleetOnce is the reconcile command in many-Services mode: one
// reconcile of every selected Service, followed up (fleet.Settle, up to
// settleTime) until no new server waits for its check nor removed one for
// its sessions, the result as JSON on stdout. A dry run with class
// selection adds the frontends and backends it would make on each Data
// Plane target (dps), or on an empty HAProxy without one.
// settlePoll is how often the one-shot reconcile reads the checks of the
// servers that wait.
const settlePoll = 50 * time.Millisecond

func reconcileFleetOnce(f *fleet.Fleet, dps []*dataplane.Client, checks map[string]reconcile.CheckReader, dryRun bool, log *slog.Logger) int {
	ctx := context.Background()
	res, err := f.Reconcile(ctx, dryRun)
	if !dryRun {
		sctx, cancel := context.WithTimeout(ctx, settleTime)
		res, err = f.Settle(sctx, res, err, settlePoll, checks)
		cancel()
	}
	out := fleetPlan{Result: res}
	if dryRun && f.Selection.Class && err == nil {
		steps, perr := planFrontends(ctx, f, dps)
		if perr != nil {
			err = fmt.Errorf("plan class frontends: %w", perr)
			out.Status, out.Error, out.ErrorClass = reconcile.StatusError, err.Error(), failure.Of(perr)
		}
		out.FrontendPlan = steps
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
	if err != nil {
		log.Error("reconcile failed", "error", err, "errorClass", out.ErrorClass)
		return 1
	}
	return 0
}
