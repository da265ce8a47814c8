package desired

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// What moves a Node's server, besides its endpoints (node mode), as the
// Kubernetes service controller and cloud load balancers do, plus a pin for
// operators:
//
//	an exclude label              not wanted: parked, then removed (guard applies)
//	annotation haproxy-k8s-sync.io/state: ready|drain|maint
//	                              that state, whatever the rest says
//	a termination taint           drain (at most)
//	cordoned, with DrainCordoned  drain (at most)
//	otherwise                     the endpoints' state
const (
	// LabelExcludeFromLB takes a Node out of load balancers (any value).
	LabelExcludeFromLB = "node.kubernetes.io/exclude-from-external-load-balancers"
	// LabelExcludeBalancer is the label's older name, which the service
	// controller still honours (any value).
	LabelExcludeBalancer = "alpha.service-controller.kubernetes.io/exclude-balancer"
	// TaintToBeDeleted marks a Node the cluster autoscaler is removing.
	TaintToBeDeleted = "ToBeDeletedByClusterAutoscaler"
	// TaintKarpenterDisrupted marks a Node Karpenter is about to remove
	// (consolidation, drift, expiry, interruption).
	TaintKarpenterDisrupted = "karpenter.sh/disrupted"
	// AnnotationState pins the state of a Node's server.
	AnnotationState = "haproxy-k8s-sync.io/state"
)

// Reasons a server has its state (model.Server.Reason).
const (
	ReasonEndpoints  = "endpoints"
	ReasonAnnotation = model.ReasonAnnotation
	ReasonTaint      = "taint"
	ReasonCordon     = "cordon"
	ReasonLabel      = "label"
)

// ReasonInvalidAnnotation is a skipped, invalid state annotation: the Node
// then follows its endpoints and the other rules.
const ReasonInvalidAnnotation = "invalid-annotation"

// nodeState decides the state of n's server from the state its endpoints
// give, and why; excluded means n takes no part in load balancing.
func (c *computer) nodeState(n *corev1.Node, fromEndpoints model.State) (model.State, string, bool) {
	for _, l := range []string{LabelExcludeFromLB, LabelExcludeBalancer} {
		if _, ok := n.Labels[l]; ok {
			return "", ReasonLabel, true
		}
	}
	if v, ok := n.Annotations[AnnotationState]; ok {
		switch s := model.State(v); s {
		case model.Ready, model.Drain, model.Maint:
			return s, ReasonAnnotation, false
		default:
			c.report.skip("node "+quote(n.Name), ReasonInvalidAnnotation, AnnotationState+" is "+quote(v)+", not ready, drain or maint")
		}
	}
	st, reason := fromEndpoints, ReasonEndpoints
	lower := func(to model.State, why string) {
		if st.Rank() > to.Rank() {
			st, reason = to, why
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == TaintToBeDeleted || t.Key == TaintKarpenterDisrupted {
			lower(model.Drain, ReasonTaint)
		}
	}
	if n.Spec.Unschedulable && c.opts.DrainCordoned {
		lower(model.Drain, ReasonCordon)
	}
	return st, reason, false
}
