package fleet

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// zeroPort is the one port of the Service a left backend is reconciled
// against; it has no endpoint, so its number never reaches HAProxy.
const zeroPort = 1

// noEndpoints is a Service with one port and no endpoint: what a backend no
// Service names any more is reconciled against. Its servers are parked
// first, as a Service's that lost every endpoint, and then, since no
// Service will come back for them (Leaving), deleted by a later reconcile
// once their sessions ended: the fleet lists the Services afresh before
// each, which confirms the backend is still no Service's.
type noEndpoints struct{ backend string }

func (z noEndpoints) Read(context.Context) (desired.Input, error) {
	return desired.Input{Service: &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "left", Namespace: "left"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: zeroPort, NodePort: zeroPort}}},
	}}, nil
}

// zero returns the Reconciler of a left backend: no readiness gate (no pod
// is its own), no Events (no Service is). before says an earlier read
// found it left too: only then are its parked servers deleted.
func (f *Fleet) zero(backend string, before bool) reconcile.Runner {
	opts := f.Template.Options
	opts.Backends = []desired.PortBackend{{Backend: backend}}
	opts.ReadinessGate = false
	r := f.reconciler(noEndpoints{backend}, opts, "left", backend)
	r.Leaving, r.LeftBefore = true, before
	return r
}

// seenLeft says whether an earlier read found backend left, and (unless a
// dry run, which applies nothing) remembers that this one did.
func (f *Fleet) seenLeft(backend string, dryRun bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	before := f.leftSeen[backend]
	if !dryRun {
		if f.leftSeen == nil {
			f.leftSeen = map[string]bool{}
		}
		f.leftSeen[backend] = true
	}
	return before
}

// forgetLeft forgets the left backends a Service names again: if it
// leaves again, its servers wait for two reads once more. (A left
// backend whose servers are all gone is forgotten by run: finished.)
func (f *Fleet) forgetLeft(named map[string]*services.Selected) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for b := range f.leftSeen {
		if named[b] != nil {
			delete(f.leftSeen, b)
		}
	}
}

// finished says a left backend's reconcile r left nothing to do on any
// target: no server waits for a read, its sessions or a check.
func finished(r reconcile.Result) bool {
	if r.Status == reconcile.StatusError {
		return false
	}
	for _, t := range r.Targets {
		if t.Error != "" || len(t.Guarded)+len(t.Draining)+len(t.Waiting)+len(t.HandingOver) > 0 {
			return false
		}
	}
	return true
}
