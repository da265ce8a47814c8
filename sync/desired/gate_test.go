package desired

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// pod is a pod of the Service's namespace with the given readiness gates
// and condition statuses.
func pod(name string, gates []string, conds map[corev1.PodConditionType]corev1.ConditionStatus) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, g := range gates {
		p.Spec.ReadinessGates = append(p.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: corev1.PodConditionType(g)})
	}
	for t, st := range conds {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: st})
	}
	return p
}

// TestReadinessGate: with the gate on (pod mode), a not-ready endpoint
// whose pod waits only for this service's gate is a ready server (it then
// earns traffic by its check); any other reason to be not ready keeps it
// in maintenance (so does an endpoint whose pod does not have its address),
// and a terminating one drains.
func TestReadinessGate(t *testing.T) {
	http := map[string]int32{"http": 8080}
	yes, no := corev1.ConditionTrue, corev1.ConditionFalse
	ours := []string{ReadinessGate}
	deleted := pod("deleted", ours, map[corev1.PodConditionType]corev1.ConditionStatus{corev1.ContainersReady: yes})
	deleted.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	pods := []corev1.Pod{
		pod("waits", ours, map[corev1.PodConditionType]corev1.ConditionStatus{corev1.ContainersReady: yes}),
		pod("starting", ours, map[corev1.PodConditionType]corev1.ConditionStatus{corev1.ContainersReady: no}),
		pod("other-gate", []string{ReadinessGate, "example.com/lb"}, map[corev1.PodConditionType]corev1.ConditionStatus{corev1.ContainersReady: yes, "example.com/lb": no}),
		pod("both-gates", []string{ReadinessGate, "example.com/lb"}, map[corev1.PodConditionType]corev1.ConditionStatus{corev1.ContainersReady: yes, "example.com/lb": yes}),
		pod("no-gate", nil, map[corev1.PodConditionType]corev1.ConditionStatus{corev1.ContainersReady: yes}),
		pod("leaving", ours, map[corev1.PodConditionType]corev1.ConditionStatus{corev1.ContainersReady: yes}),
		deleted,
		pod("impostor", ours, map[corev1.PodConditionType]corev1.ConditionStatus{corev1.ContainersReady: yes}),
	}
	for i, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.7", "10.9.9.9"} {
		pods[i].Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	in := Input{Service: service(svcPort("http", 80, 0)), Pods: pods, Slices: []discoveryv1.EndpointSlice{
		slice("web-1", svcName, v4, http,
			ep{addr: "10.0.0.1", pod: "waits", c: notReady}, ep{addr: "10.0.0.2", pod: "starting", c: notReady},
			ep{addr: "10.0.0.3", pod: "other-gate", c: notReady}, ep{addr: "10.0.0.4", pod: "both-gates", c: notReady},
			ep{addr: "10.0.0.5", pod: "no-gate", c: notReady}, ep{addr: "10.0.0.6", pod: "leaving", c: terminating},
			ep{addr: "10.0.0.7", pod: "deleted", c: notReady}, ep{addr: "10.0.0.8", pod: "unread", c: notReady},
			ep{addr: "10.0.0.9", pod: "ready"}, ep{addr: "10.0.0.10", pod: "impostor", c: notReady}),
	}}
	want := map[string]model.State{"waits": model.Ready, "starting": model.Maint, "other-gate": model.Maint, "both-gates": model.Ready,
		"no-gate": model.Maint, "leaving": model.Drain, "deleted": model.Maint, "unread": model.Maint, "ready": model.Ready,
		"impostor": model.Maint} // its pod waits only for the gate, but at another address
	for _, gate := range []bool{true, false} {
		got, _, err := Compute(in, Options{Mode: PodMode, Backends: []PortBackend{{Backend: "be"}}, Addresses: testAddresses, ReadinessGate: gate})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range got[0].Servers {
			w := want[s.Pod]
			if !gate && w == model.Ready && s.Pod != "ready" {
				w = model.Maint // without the option, not ready is not ready
			}
			if s.State != w || s.Name != s.Pod {
				t.Errorf("gate %v: %s (pod %q): %s, want %s", gate, s.Name, s.Pod, s.State, w)
			}
		}
	}
}
