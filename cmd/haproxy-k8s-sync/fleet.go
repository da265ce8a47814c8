package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/gate"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/metrics"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// newFrontends makes class Services' frontends (package lb's Manager over
// the Data Plane targets); nil until that package is wired in, and class
// selection is then refused at start rather than left without frontends.
var newFrontends func(cfg config.Config, log *slog.Logger) (fleet.Frontends, error)

// newFleet wires the many-Services reconcile around rec, the template every
// Service's Reconciler copies (targets, drivers, policies).
func newFleet(cfg config.Config, rec *reconcile.Reconciler, kc *kube.Client, log *slog.Logger, m *metrics.Metrics) (*fleet.Fleet, error) {
	if kc == nil {
		return nil, fmt.Errorf("SERVICE_SELECTION: %s reads Services from the Kubernetes API, not --manifests", cfg.Selection)
	}
	nodes := rec.Options.Mode == desired.NodeMode
	f := &fleet.Fleet{
		Services: kc, Selection: cfg.Selecting(), Template: rec, Log: log,
		Source: func(namespace, name string) reconcile.Source {
			return m.WrapSource(&kube.Source{Client: kc, Namespace: namespace, Service: name, Nodes: nodes, Pods: cfg.ReadinessGate})
		},
	}
	if cfg.ReadinessGate {
		f.Gate = func(namespace string) reconcile.PodGate {
			return &gate.Writer{Client: kc, Namespace: namespace, Log: log, OnWrite: m.PodGate}
		}
	}
	if cfg.ByClass {
		if newFrontends == nil {
			return nil, errors.New("SERVICE_SELECTION: class needs the frontends manager, which this build lacks")
		}
		fe, err := newFrontends(cfg, log)
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
