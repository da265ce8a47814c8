package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/events"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/gate"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/lb"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/metrics"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// newFrontends makes class Services' frontends and backends: package lb's
// Manager over the Data Plane clients the drivers use (dps, in target
// order, so that HAPROXY_VIP's addresses follow the targets).
func newFrontends(cfg config.Config, dps []*dataplane.Client, log *slog.Logger) (fleet.Frontends, error) {
	if len(dps) == 0 {
		return nil, errors.New("HAPROXY_DATAPLANE_URL: required with class selection: class Services' frontends and backends are created through the Data Plane API")
	}
	m := &lb.Manager{Class: cfg.LoadBalancerClass, Cluster: cfg.ClusterName, Namespaces: cfg.Namespaces, Log: log.With("part", "frontends")}
	for _, dp := range dps {
		m.Targets = append(m.Targets, dp)
	}
	for _, v := range cfg.VIPs {
		m.VIPs = append(m.VIPs, v.String())
	}
	return m, nil
}

// newFleet wires the many-Services reconcile around rec, the template every
// Service's Reconciler copies (targets, drivers, policies). With events
// (serve), refused Services and failed frontends are told as Warning
// Events, and with SERVICE_EVENTS each followed Service's reconciles too.
func newFleet(cfg config.Config, rec *reconcile.Reconciler, dps []*dataplane.Client, kc *kube.Client, log *slog.Logger, m *metrics.Metrics, withEvents bool) (*fleet.Fleet, error) {
	if kc == nil {
		return nil, fmt.Errorf("SERVICE_SELECTION: %s reads Services from the Kubernetes API, not --manifests", cfg.Selection)
	}
	nodes := rec.Options.Mode == desired.NodeMode
	f := &fleet.Fleet{
		Services: kc, Selection: cfg.Selecting(), Template: rec, Log: log, Metrics: m,
		Source: func(namespace, name string) reconcile.Source {
			return m.WrapSource(&kube.Source{Client: kc, Namespace: namespace, Service: name, Nodes: nodes, Pods: cfg.ReadinessGate})
		},
	}
	if cfg.ReadinessGate {
		f.Gate = func(namespace string) reconcile.PodGate {
			return &gate.Writer{Client: kc, Namespace: namespace, Log: log, OnWrite: m.PodGate}
		}
	}
	if withEvents {
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
		fe, err := newFrontends(cfg, dps, log)
		if err != nil {
			return nil, err
		}
		f.Frontends, f.Status, f.Hostname = fe, kc, cfg.VIPHostname
		for _, v := range cfg.VIPs {
			f.VIPs = append(f.VIPs, v.String())
		}
	}
	return f, nil
}

// reconcileFleetOnce is the reconcile command in many-Services mode: one
// reconcile of every selected Service, the result as JSON on stdout.
func reconcileFleetOnce(f *fleet.Fleet, dryRun bool, log *slog.Logger) int {
	res, err := f.Reconcile(context.Background(), dryRun)
	_ = json.NewEncoder(os.Stdout).Encode(res)
	if err != nil {
		log.Error("reconcile failed", "error", err, "errorClass", res.ErrorClass)
		return 1
	}
	return 0
}
