package history

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// TestPublishNotReadyAddressesAsKubernetesWritesThem: with
// Config.PublishNotReady the history's Service and slices are what the
// EndpointSlice controller writes for publishNotReadyAddresses (every
// endpoint ready, serving the pod's readiness), the service computes a
// server in service for a not-ready pod, and the judge holds it ready;
// without it, or where the draw does not apply (node mode, the gate), as
// before.
func TestPublishNotReadyAddressesAsKubernetesWritesThem(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup Setup
		want  bool // publishNotReadyAddresses applies
	}{
		{"drawn", Setup{Config: Config{PublishNotReady: true}}, true},
		{"not drawn", Setup{}, false},
		{"node mode", Setup{Nodes: 3, Config: Config{PublishNotReady: true}}, false},
		{"readiness gate", Setup{Config: Config{PublishNotReady: true, Gate: true}}, false},
		{"many Services", Setup{Services: true, Config: Config{PublishNotReady: true}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := &world{setup: c.setup, port: 8080, k8s: map[int]podState{1: live, 2: notReady, 3: terminating, 4: noticed}, nflags: map[int]*nodeFlags{}}
			for k := 1; k <= c.setup.Nodes; k++ {
				w.nflags[k] = &nodeFlags{}
			}
			in := w.input()
			if got := in.Service.Spec.PublishNotReadyAddresses; got != c.want {
				t.Errorf("Service publishNotReadyAddresses %v, want %v", got, c.want)
			}
			conds := map[string]discoveryv1.EndpointConditions{}
			for _, sl := range in.Slices {
				for _, e := range sl.Endpoints {
					conds[e.TargetRef.Name] = e.Conditions
				}
			}
			for _, n := range []int{2, 4} {
				if e := conds[podName(n)]; *e.Ready != c.want || *e.Serving {
					t.Errorf("%s (not ready): ready=%v serving=%v, want ready=%v serving=false", podName(n), *e.Ready, *e.Serving, c.want)
				}
			}
			if e := conds[podName(3)]; *e.Ready != c.want || !*e.Terminating || !*e.Serving {
				t.Errorf("p-3 (terminating): ready=%v serving=%v terminating=%v, want ready=%v", *e.Ready, *e.Serving, *e.Terminating, c.want)
			}
			for _, n := range []int{2, 4} {
				if got := w.setup.asJudged(w.k8s[n]) == live; got != c.want {
					t.Errorf("%s judged ready: %v, want %v", podName(n), got, c.want)
				}
			}
			if w.setup.asJudged(terminating) != terminating {
				t.Error("a terminating pod judged otherwise")
			}
			if c.setup.Nodes > 0 || c.setup.Services {
				return // (node mode's servers are Nodes; many Services name backends by annotation)
			}
			bes, _, err := desired.Compute(in, desired.Options{Mode: desired.PodMode, Backends: []desired.PortBackend{{Backend: backend}}})
			if err != nil || len(bes) != 1 {
				t.Fatalf("compute: %v, %d backends", err, len(bes))
			}
			states := map[string]model.State{}
			for _, s := range bes[0].Servers {
				states[s.Name] = s.State
			}
			want := model.Maint
			if c.want {
				want = model.Ready
			}
			if states[podName(2)] != want || states[podName(3)] != model.Drain {
				t.Errorf("the service's view %v: want p-2 %v, p-3 drain", states, want)
			}
		})
	}
}
