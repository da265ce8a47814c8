package main

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/lb"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// Actions of a frontendStep.
const (
	actCreate  = "create"
	actUpdate  = "update" // an owned frontend bound elsewhere: bound on Bind alone
	actInPlace = "in place"
	actDrain   = "drain"  // an owned backend no Service wants: parked, removed once drained
	actDelete  = "delete" // an owned frontend no Service wants, with no backend to drain
)

// frontendStep is one line of a class dry run's frontend plan: what one
// class Service port's frontend and backend need on one target, or an
// owned section no Service wants, or why a Service gets nothing there.
type frontendStep struct {
	Target         string `json:"target"`
	Service        string `json:"service,omitempty"`
	Frontend       string `json:"frontend,omitempty"`
	FrontendAction string `json:"frontendAction,omitempty"`
	Bind           string `json:"bind,omitempty"`
	Backend        string `json:"backend,omitempty"`
	BackendAction  string `json:"backendAction,omitempty"`
	Error          string `json:"error,omitempty"`
}

// fleetPlan is a many-Services dry run's answer: the fleet's result and,
// with class selection, the frontends and backends it would make (the
// fleet's dry run makes none, so its result does not say).
type fleetPlan struct {
	fleet.Result
	FrontendPlan []frontendStep `json:"frontendPlan,omitempty"`
}

// noFrontendsTarget names the target of a class plan made with no Data
// Plane API: an HAProxy without any frontend.
const noFrontendsTarget = "none (no HAPROXY_DATAPLANE_URL set: planned against an HAProxy without class frontends)"

// planFrontends plans, without writing, the class Services' frontends and
// backends on every Data Plane target (read back), or on an empty HAProxy
// when there is none. It lists and selects the Services itself, as the
// fleet does on its first reconcile (a one-shot dry run has no other): the
// holders are what the targets' frontends say (fleet.HolderReader), none
// without a target.
func planFrontends(ctx context.Context, f *fleet.Fleet, dps []*dataplane.Client) ([]frontendStep, error) {
	all, err := kube.ReadServices(ctx, f.Services, f.Selection.Namespaces)
	if err != nil {
		return nil, err
	}
	var held map[string]string
	if hr, ok := f.Frontends.(fleet.HolderReader); ok {
		// What cannot be read back goes by status and age, as the
		// fleet's selection does; its reconcile has warned already.
		held, _ = hr.Holders(ctx)
	}
	chosen, _ := services.Select(all, f.Selection, held)
	own := lb.Owner{Class: f.Selection.ClassName, Cluster: f.Selection.Cluster, Classes: services.ClassesOf(all), Namespaces: f.Selection.Namespaces}
	if len(f.VIPs) == 0 {
		return nil, fmt.Errorf("HAPROXY_VIP: no address to plan class frontends on")
	}
	vip := func(i int) string { // one for all targets, or one each (config checks the count)
		if len(f.VIPs) > 1 && i < len(f.VIPs) {
			return f.VIPs[i]
		}
		return f.VIPs[0]
	}
	if len(dps) == 0 {
		return frontendSteps(noFrontendsTarget, vip(0), chosen, own, lb.Compute(chosen, dataplane.Proxies{}, own, vip(0), nil)), nil
	}
	var out []frontendStep
	for i, dp := range dps {
		held, err := dp.ReadProxies(ctx)
		if err != nil {
			out = append(out, frontendStep{Target: dp.Name(), Error: "read frontends: " + err.Error()})
			continue
		}
		// Nothing counts as drained: a plan removes nothing.
		out = append(out, frontendSteps(dp.Name(), vip(i), chosen, own, lb.Compute(chosen, held, own, vip(i), nil))...)
	}
	return out, nil
}

// frontendSteps says plan (lb.Compute's for target, bound on vip) port by
// port of each class Service in chosen, then the owned sections no Service
// wants.
func frontendSteps(target, vip string, chosen []services.Selected, own lb.Owner, plan lb.Plan) []frontendStep {
	writes := map[string]lb.Write{}
	var removals []lb.Write
	for _, w := range plan.Writes {
		if w.Service == "" {
			removals = append(removals, w)
			continue
		}
		writes[w.Service] = w
	}
	named := func(ps []dataplane.Pair, name string, frontend bool) bool {
		return slices.ContainsFunc(ps, func(p dataplane.Pair) bool {
			return frontend && p.Frontend == name || !frontend && p.Backend == name
		})
	}
	var out []frontendStep
	for _, s := range chosen {
		if !s.Class {
			continue
		}
		if why, failed := plan.Failed[s.Key()]; failed {
			out = append(out, frontendStep{Target: target, Service: s.Key(), Error: why})
			continue
		}
		w := writes[s.Key()]
		for _, p := range s.Ports {
			fe, be := services.ClassNames(own.Cluster, s.Namespace, s.Name, p.Port)
			st := frontendStep{Target: target, Service: s.Key(), Frontend: fe, Backend: be,
				Bind: net.JoinHostPort(vip, strconv.Itoa(int(p.Port))), FrontendAction: actInPlace, BackendAction: actInPlace}
			switch {
			case named(w.CreateFrontends, fe, true):
				st.FrontendAction = actCreate
			case named(w.UpdateFrontends, fe, true):
				st.FrontendAction = actUpdate
			}
			if named(w.CreateBackends, be, false) {
				st.BackendAction = actCreate
			}
			out = append(out, st)
		}
	}
	for _, b := range plan.Draining {
		out = append(out, frontendStep{Target: target, Backend: b, BackendAction: actDrain})
	}
	for _, w := range removals {
		for _, fe := range w.DeleteFrontends {
			out = append(out, frontendStep{Target: target, Frontend: fe, FrontendAction: actDelete})
		}
		for _, be := range w.DeleteBackends {
			out = append(out, frontendStep{Target: target, Backend: be, BackendAction: actDelete})
		}
	}
	return out
}
