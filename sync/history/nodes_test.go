package history

import (
	"testing"
	"time"
)

// TestNodeTakenOutTakesNoNewClient: in node mode, a Node the autoscaler
// taints, one cordoned with CORDONED_NODES=drain, one pinned to drain or
// maint, and one labelled out of load balancers take no new client while
// the other Nodes serve (out-of-traffic), and their servers are as each
// rule says once quiet (converges); then each comes back.
func TestNodeTakenOutTakesNoNewClient(t *testing.T) {
	if testing.Short() {
		t.Skip("real HAProxy histories")
	}
	for _, st := range []Step{
		{Kind: NodeTaint, Fault: "autoscaler"},
		{Kind: NodeTaint, Fault: "karpenter"},
		{Kind: NodeCordon},
		{Kind: NodePin, Fault: "drain"},
		{Kind: NodePin, Fault: "maint"},
		{Kind: NodeExclude},
	} {
		t.Run(string(st.Kind)+"-"+st.Fault, func(t *testing.T) {
			s := Setup{Seed: 1, Driver: Runtime, Nodes: 3, Config: Config{DrainCordoned: true}}
			out, back := st, Step{Kind: map[Kind]Kind{NodeTaint: NodeUntaint, NodeCordon: NodeUncordon, NodePin: NodeUnpin, NodeExclude: NodeInclude}[st.Kind]}
			out.Node, back.Node, out.Wait, back.Wait = 2, 2, time.Second, 4*time.Second
			// Pods 1..6: two on each Node (nodeOf); the step's Node holds p-1 and p-4.
			r := RunSteps(t, s, 6, []Step{out, back, {Kind: NodeTaint, Node: 2, Fault: "autoscaler", Wait: 4 * time.Second}})
			expectNone(t, r)
			if r.Requests < 1000 {
				t.Fatalf("%d requests: the clients did not run", r.Requests)
			}
		})
	}
}
