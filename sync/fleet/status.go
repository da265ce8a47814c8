package fleet

import (
	"context"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/cut"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// Ingress values of a ServiceResult.
const (
	IngressWritten   = "written"
	IngressWithdrawn = "withdrawn"
)

// ours is the status.loadBalancer.ingress this instance writes: the
// hostname, or each distinct VIP in target order. Where the servers get the
// PROXY protocol (HAPROXY_SEND_PROXY_V2: a class backend has no
// default-server line, so nothing else gives it), each address says
// ipMode: Proxy (KEP-1860), so that kube-proxy sends in-cluster clients of
// the VIP through HAProxy too rather than straight to pods that expect the
// header. Not where the API server dropped the field (ipModeDropped).
func (f *Fleet) ours() []corev1.LoadBalancerIngress {
	if f.Hostname != "" {
		return []corev1.LoadBalancerIngress{{Hostname: f.Hostname}} // ipMode goes with an IP only
	}
	var mode *corev1.LoadBalancerIPMode
	f.mu.Lock()
	dropped := f.ipModeDropped
	f.mu.Unlock()
	if f.ProxyProtocol && !dropped {
		proxy := corev1.LoadBalancerIPModeProxy
		mode = &proxy
	}
	var out []corev1.LoadBalancerIngress
	seen := map[string]bool{}
	for _, v := range f.VIPs {
		if !seen[v] {
			seen[v] = true
			out = append(out, corev1.LoadBalancerIngress{IP: v, IPMode: mode})
		}
	}
	return out
}

// sameIngress compares what the ingress says (address, hostname, ipMode,
// unset being VIP as the API server defaults it), not the fields others
// may add to it.
func sameIngress(a, b []corev1.LoadBalancerIngress) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.LoadBalancerIngress) bool {
		return x.IP == y.IP && x.Hostname == y.Hostname && ipModeOf(x) == ipModeOf(y)
	})
}

// sameAddresses compares the addresses and hostnames alone.
func sameAddresses(a, b []corev1.LoadBalancerIngress) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.LoadBalancerIngress) bool { return x.IP == y.IP && x.Hostname == y.Hostname })
}

// ipModeOf is in's ipMode, VIP when unset.
func ipModeOf(in corev1.LoadBalancerIngress) corev1.LoadBalancerIPMode {
	if in.IPMode == nil || in.Hostname != "" {
		return corev1.LoadBalancerIPModeVIP
	}
	return *in.IPMode
}

// noteIPMode remembers that the API server dropped the ipMode written (a
// Kubernetes before 1.30, or its feature gate off), so that ours stops
// asking for it: else every reconcile would write the status again.
func (f *Fleet) noteIPMode(wrote, got []corev1.LoadBalancerIngress) {
	if len(wrote) == 0 || ipModeOf(wrote[0]) != corev1.LoadBalancerIPModeProxy ||
		len(got) > 0 && ipModeOf(got[0]) == corev1.LoadBalancerIPModeProxy {
		return
	}
	f.mu.Lock()
	already := f.ipModeDropped
	f.ipModeDropped = true
	f.mu.Unlock()
	if !already && f.Log != nil {
		f.Log.Warn("the API server dropped status.loadBalancer.ingress[].ipMode (Kubernetes before 1.30?): in-cluster clients of the VIP may go straight to the pods, without the PROXY protocol header HAPROXY_SEND_PROXY_V2 gives", "wrote", wrote)
	}
}

// statusChange decides a Service's status.loadBalancer.ingress (pure):
// write ours once it is selected and ready, withdraw ours (and only ours:
// another controller's is never touched) once it is no longer followed as
// a class Service or its frontends failed for good. Anything else, e.g. a failed
// reconcile or no server in service for a moment, changes nothing: a
// status that comes and goes would have external-dns churn.
func statusChange(cur, ours []corev1.LoadBalancerIngress, followed, ready, frontendFailed bool) (to []corev1.LoadBalancerIngress, change string) {
	switch {
	case followed && !frontendFailed && ready && !sameIngress(cur, ours):
		return ours, IngressWritten
	case (!followed || frontendFailed) && len(ours) > 0 && sameAddresses(cur, ours):
		// By address alone: an ipMode written under another setting
		// (HAPROXY_SEND_PROXY_V2 changed since) is ours all the same.
		return []corev1.LoadBalancerIngress{}, IngressWithdrawn
	}
	return nil, ""
}

// served is what a class Service's reconciles last found, per target and
// backend: whether a server is in service there. A follow-up reconciles one
// target at a time (reconcile.OnlyTarget: a check passed there), so one
// result need not hold every target; the status waits for all of them.
type served map[string]map[string]bool // target → backend → in service

// merge returns s with r's targets as r left them: a target that failed
// anywhere (before any backend too: its lock, a Kubernetes read) is known
// nowhere in service but where r says so. s is not changed.
func (s served) merge(r reconcile.Result) served {
	out := make(served, len(s))
	for t, bes := range s {
		out[t] = maps.Clone(bes)
	}
	for _, t := range r.Targets {
		if t.Error != "" || out[t.Target] == nil {
			out[t.Target] = map[string]bool{}
		}
	}
	for _, t := range r.Targets {
		if t.Backend != "" {
			out[t.Target][t.Backend] = t.Error == "" && t.Servers[string(model.Ready)] > 0
		}
	}
	return out
}

// only returns s with sel's backends alone: what a Service whose ports
// changed served before is forgotten.
func (s served) only(sel services.Selected) served {
	out := make(served, len(s))
	for t, bes := range s {
		out[t] = map[string]bool{}
		for _, p := range sel.Ports {
			if bes[p.Backend] {
				out[t][p.Backend] = true
			}
		}
	}
	return out
}

// everywhere says whether every backend of sel has a server in service on
// each of targets.
func (s served) everywhere(sel services.Selected, targets []string) bool {
	if len(targets) == 0 {
		return false
	}
	for _, p := range sel.Ports {
		for _, t := range targets {
			if !s[t][p.Backend] {
				return false
			}
		}
	}
	return true
}

// inService says whether every backend of sel has a server in service on
// every target, as r and the reconciles before it (what it knew, s) left
// them; a failed reconcile says no.
func inService(s served, r reconcile.Result, sel services.Selected, targets []string) (bool, served) {
	now := s.merge(r).only(sel)
	return r.Status != reconcile.StatusError && now.everywhere(sel, targets), now
}

// writeStatus writes or withdraws each class Service's status as
// statusChange says: the Services followed (only the one of a
// ReconcileService), and in a full reconcile every other listed Service
// that holds this instance's status.
func (f *Fleet) writeStatus(ctx context.Context, all []corev1.Service, chosen []services.Selected, report services.FrontendReport,
	failedFE map[string]string, res *Result, only string) {
	byKey := map[string]*ServiceResult{}
	for i := range res.Services {
		byKey[res.Services[i].Service] = &res.Services[i]
	}
	var names []string
	for _, d := range f.Template.Targets {
		names = append(names, d.Name())
	}
	f.mu.Lock()
	if f.servedBy == nil {
		f.servedBy = map[string]served{}
	}
	f.mu.Unlock()
	listed := map[string]bool{}
	if only == "" {
		// A full list: what it lacks (a Service deleted) is forgotten.
		defer func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			for sk := range f.servedBy {
				if !listed[sk] {
					delete(f.servedBy, sk)
				}
			}
		}()
	}
	classByKey := map[string]services.Selected{}
	for _, s := range chosen {
		if s.Class {
			classByKey[s.Key()] = s
		}
	}
	for i := range all {
		svc := &all[i]
		k := svc.Namespace + "/" + svc.Name
		if only != "" && k != only {
			continue
		}
		sel, followed := classByKey[k]
		if c := svc.Spec.LoadBalancerClass; !followed && c != nil && f.Selection.ClassName != "" && *c != f.Selection.ClassName {
			// Another class's (its class cannot change): another install
			// writes its status, possibly the same VIP as ours (two
			// classes on one HAProxy); withdrawing it would flap.
			continue
		}
		ours := f.ours() // per Service: a write may have found the API server drops ipMode (noteIPMode)
		sr := byKey[k]
		// Keyed by UID too: a Service deleted and created again starts
		// from nothing.
		sk := k + "\x00" + string(svc.UID)
		listed[sk] = true
		ready := false
		if followed && sr != nil {
			f.mu.Lock()
			var now served
			ready, now = inService(f.servedBy[sk], sr.Result, sel, names)
			f.servedBy[sk] = now
			f.mu.Unlock()
			ready = ready && report.Ready[k]
		} else if !followed {
			f.mu.Lock()
			delete(f.servedBy, sk)
			f.mu.Unlock()
		}
		// Only a frontend failure of the Service's own withdraws (its port
		// taken, a frontend the Data Plane API refuses for good): one a
		// retry mends (an API that answered 503, a reload under way) keeps
		// what external-dns publishes, as a failed reconcile does.
		_, failed := failedFE[k]
		failed = failed && !Mendable(frontendClass(report, k))
		to, change := statusChange(svc.Status.LoadBalancer.Ingress, ours, followed, ready, failed)
		if change == "" {
			continue
		}
		up := svc.DeepCopy()
		up.Status.LoadBalancer.Ingress = to
		got, err := f.Status.UpdateServiceStatus(ctx, up)
		if err == nil && got != nil && change == IngressWritten {
			f.noteIPMode(to, got.Status.LoadBalancer.Ingress)
		}
		if err != nil && f.Log != nil {
			f.Log.Warn("service status not written; the next reconcile tries again", "service", k, "change", change, "error", err)
		} else if f.Log != nil {
			f.Log.Info("service status "+change, "service", k, "ingress", to)
		}
		if sr == nil {
			continue // not reconciled here (refused, left the class): its log says it
		}
		if err != nil {
			sr.IngressError = cut.To(err.Error(), 500)
		} else {
			sr.Ingress = change
		}
	}
}
