package fleet

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
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
// is its own), no Events (no Service is).
func (f *Fleet) zero(backend string) reconcile.Runner {
	opts := f.Template.Options
	opts.Backends = []desired.PortBackend{{Backend: backend}}
	opts.ReadinessGate = false
	r := f.reconciler(noEndpoints{backend}, opts, "left", backend)
	r.Leaving = true
	return r
}
