package desired

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// ReadinessGate is the pod readiness gate this service answers (pod mode,
// POD_READINESS_GATE): a pod that lists it in spec.readinessGates is Ready
// only once the service sets this condition True, which it does when the
// pod's server is in service with a passed check on every HAProxy target.
const ReadinessGate = "haproxy-k8s-sync.io/in-service"

// A pod that lists the gate is not Ready, so its endpoint is not ready,
// until the gate is True: the server must enter HAProxy before Kubernetes
// calls the pod ready, or neither would ever move. An endpoint that is
// neither ready nor terminating therefore counts as ready (its server then
// earns traffic by its check) when its pod lists the gate and would be
// Ready but for it: containers ready, every other readiness gate True.
// AWS's load balancer controller registers targets on the same test.

// gateHeld reports whether pod waits only for this service's gate.
func gateHeld(pod *corev1.Pod) bool {
	if pod == nil || !ListsGate(pod) || pod.DeletionTimestamp != nil {
		return false
	}
	cond := map[corev1.PodConditionType]corev1.ConditionStatus{}
	for _, c := range pod.Status.Conditions {
		cond[c.Type] = c.Status
	}
	if cond[corev1.ContainersReady] != corev1.ConditionTrue {
		return false
	}
	for _, g := range pod.Spec.ReadinessGates {
		if g.ConditionType != ReadinessGate && cond[g.ConditionType] != corev1.ConditionTrue {
			return false
		}
	}
	return true
}

// GatePending reports whether pod lists this service's gate and is on its
// way in but not there yet: not deleted, containers (or another gate) not
// ready. Nothing in its EndpointSlice changes when its containers become
// ready (the pod stays not Ready, waiting for the gate), so the service
// must look again by itself (reconcile.FollowUp).
func GatePending(pod *corev1.Pod) bool {
	return pod != nil && ListsGate(pod) && pod.DeletionTimestamp == nil && !gateHeld(pod)
}

// ListsGate reports whether pod lists this service's readiness gate.
func ListsGate(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.ReadinessGates {
		if g.ConditionType == ReadinessGate {
			return true
		}
	}
	return false
}

// GateCondition returns pod's condition of this service's gate, nil if it
// has none yet.
func GateCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == ReadinessGate {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// gatedState is an endpoint's state once the readiness gate is considered:
// a not-ready endpoint at addr whose pod waits only for the gate is ready.
// The endpoint's pod reference is not trusted on its own: the pod must have
// addr among its IPs, or another pod's conditions would let the endpoint in.
func (c *computer) gatedState(st model.State, terminating bool, podName, addr string) model.State {
	if !c.opts.ReadinessGate || st == model.Ready || terminating || podName == "" {
		return st
	}
	if pod := c.pods[podName]; gateHeld(pod) && HasIP(pod, addr) {
		return model.Ready
	}
	return st
}

// HasIP reports whether addr is one of pod's IPs.
func HasIP(pod *corev1.Pod, addr string) bool {
	want, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	ips := []string{pod.Status.PodIP}
	for _, ip := range pod.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil && a.Unmap() == want.Unmap() {
			return true
		}
	}
	return false
}
