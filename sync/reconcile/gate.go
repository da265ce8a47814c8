package reconcile

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// PodGate sets the readiness gate condition of the Service's pods from
// what HAProxy shows (POD_READINESS_GATE; package gate).
type PodGate interface {
	Update(ctx context.Context, in GateInput)
}

// GateInput is, after a reconcile, each pod's servers as every target shows
// them, with the pods Kubernetes was read for.
type GateInput struct {
	Servers []GateServer
	// Pods are the pods read with the endpoints (those not ready), by
	// name; a pod not here has a ready endpoint.
	Pods map[string]*corev1.Pod
}

// GateServer is one pod's servers on every target and backend: one verdict
// per pod.
type GateServer struct {
	Pod string
	// InService: each of the pod's servers in service, its check passed, on
	// every target and backend. When false, Why says which is not, where.
	InService bool
	Why       string
}

// inService returns the servers of cur, once p is applied, that take
// traffic with a passed check, and where each other server stands:
// waiting (for its check), drain, maint.
func inService(cur model.Backend, p plan.Plan) (in map[string]bool, out map[string]string) {
	type st struct {
		state   model.State
		checked bool
	}
	after := make(map[string]st, len(cur.Servers))
	for _, s := range cur.Servers {
		checked := s.Up
		if rt := s.Runtime; rt != nil {
			// A server in traffic that HAProxy runs UP with a check whose
			// first result has not come is in service: a reload (by anyone)
			// loads every server haproxy.cfg has in service UP, with no
			// result yet. Saying "no passed check" then turned every
			// serving pod's gate False after each reload, and nothing
			// turned it back (the history checker, seed 109, Data Plane).
			// A server entering service was gated: its check passed first.
			reloaded := s.State == model.Ready && s.Up && rt.CheckRunning && !rt.CheckFailed && !rt.CheckStale
			checked = rt.CheckRunning && rt.CheckPassed || reloaded
		}
		after[s.Name] = st{s.State, checked}
	}
	for _, ch := range p.Changes {
		switch {
		case ch.Action == plan.Delete:
			delete(after, ch.Name)
		case ch.Old == nil || ch.Gate:
			after[ch.Name] = st{ch.New.State, false}
		default:
			after[ch.Name] = st{ch.New.State, after[ch.Name].checked}
		}
	}
	waiting := make(map[string]bool, len(p.Waiting))
	for _, w := range p.Waiting {
		waiting[w] = true
	}
	in, out = map[string]bool{}, map[string]string{}
	for name, s := range after {
		switch {
		case waiting[name]:
			out[name] = "waiting for its check"
		case s.state == model.Ready && s.checked:
			in[name] = true
		case s.state == model.Ready:
			out[name] = "no passed check"
		default:
			out[name] = string(s.state)
		}
	}
	return in, out
}

// gateInput gathers, over every target's results, one verdict per desired
// pod: in service only when each of the pod's servers (one per backend, and
// one per address family for a dual-stack pod) is in service on every
// target. A pod counts only when every target and backend was read and
// applied: a failed one cannot say whether its servers are in service, and
// then nothing is said. A target whose only failure is changes HAProxy
// refused for their one server each (plan.ServerErrors, the rest applied)
// counts: the refused servers are not in service, the others are judged as
// usual, so one refused server does not stall every pod's gate.
func gateInput(results []TargetResult, backends []model.Backend, pods []corev1.Pod) (GateInput, bool) {
	refused := make([]map[string]string, len(results)) // per result: server → refusal
	for i, t := range results {
		if t.Error != "" && !t.onlyRefused {
			return GateInput{}, false
		}
		for _, f := range t.Failed {
			if refused[i] == nil {
				refused[i] = map[string]string{}
			}
			refused[i][f.Server] = f.Error
		}
	}
	in := GateInput{Pods: make(map[string]*corev1.Pod, len(pods))}
	for i := range pods {
		in.Pods[pods[i].Name] = &pods[i]
	}
	seen := map[string]bool{} // pods with at least one server
	why := map[string][]string{}
	for _, b := range backends {
		for _, s := range b.Servers {
			if p := in.Pods[s.Pod]; s.Pod == "" || p != nil && !desired.HasIP(p, s.Address) {
				continue // an endpoint whose pod does not have its address says nothing of the pod
			}
			seen[s.Pod] = true
			checked := 0
			for i, t := range results {
				if t.Backend != b.Name {
					continue
				}
				checked++
				refusal, isRefused := refused[i][s.Name]
				switch {
				case isRefused:
					why[s.Pod] = append(why[s.Pod], fmt.Sprintf("%s refused on %s %s: %s", s.Name, t.Target, t.Backend, refusal))
				case t.inService[s.Name]:
				case t.notInService[s.Name] != "":
					why[s.Pod] = append(why[s.Pod], fmt.Sprintf("%s %s on %s %s", s.Name, t.notInService[s.Name], t.Target, t.Backend))
				default:
					why[s.Pod] = append(why[s.Pod], fmt.Sprintf("%s absent from %s %s", s.Name, t.Target, t.Backend))
				}
			}
			if checked == 0 {
				why[s.Pod] = append(why[s.Pod], fmt.Sprintf("%s on no target", s.Name))
			}
		}
	}
	for pod := range seen {
		gs := GateServer{Pod: pod, InService: len(why[pod]) == 0}
		if !gs.InService {
			sort.Strings(why[pod])
			gs.Why = strings.Join(why[pod], "; ")
		}
		in.Servers = append(in.Servers, gs)
	}
	sort.Slice(in.Servers, func(i, j int) bool { return in.Servers[i].Pod < in.Servers[j].Pod })
	return in, true
}
