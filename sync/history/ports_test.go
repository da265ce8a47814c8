package history

import (
	"testing"
	"time"
)

// TestTwoPortsTwoBackends: with HAPROXY_BACKENDS, a Service's two ports
// fill two backends, each judged by Converges as be is (the pods answer
// on both ports: the same targetPort), through both drivers; a pod that
// goes not ready, comes back, terminates and goes leaves and returns in
// both.
func TestTwoPortsTwoBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("real HAProxy histories")
	}
	for _, d := range []Driver{Runtime, Dataplane} {
		t.Run(string(d), func(t *testing.T) {
			steps := []Step{
				{Kind: NotReady, Pods: []int{1}, Wait: time.Second},
				{Kind: Ready, Pods: []int{1}, Wait: 3 * time.Second},
				{Kind: Terminate, Pods: []int{2}, Wait: 2 * time.Second},
				{Kind: Gone, Pods: []int{2}, Wait: 3 * time.Second},
			}
			s := Setup{Seed: 3, Driver: d, Targets: 2, Config: Config{Ports: true}}
			if !s.ports() {
				t.Fatal("the setup draws no second port")
			}
			r := RunSteps(t, s, 4, steps)
			expectNone(t, r)
		})
	}
}
