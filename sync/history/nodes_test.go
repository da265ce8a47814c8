package history

import (
	"testing"
	"time"
)

// TestNodeTakenOutTakesNoNewClient: in node mode, a Node the autoscaler or
// Karpenter taints, one cordoned with CORDONED_NODES=drain, one pinned to
// drain or maint, and one labelled out of load balancers take no new
// client while the other Nodes serve (out-of-traffic), each in turn on one
// Node, each undone 4 s later; the history ends with the autoscaler's taint
// on, so that converges judges a Node held out too.
func TestNodeTakenOutTakesNoNewClient(t *testing.T) {
	if testing.Short() {
		t.Skip("real HAProxy histories")
	}
	undo := map[Kind]Kind{NodeTaint: NodeUntaint, NodeCordon: NodeUncordon, NodePin: NodeUnpin, NodeExclude: NodeInclude}
	var steps []Step
	for _, st := range []Step{
		{Kind: NodeTaint, Fault: "autoscaler"},
		{Kind: NodeTaint, Fault: "karpenter"},
		{Kind: NodeCordon},
		{Kind: NodePin, Fault: "drain"},
		{Kind: NodePin, Fault: "maint"},
		{Kind: NodeExclude},
	} {
		// Node 2 holds p-1 and p-4 of pods 1..6 (nodeOf): the others serve.
		st.Node, st.Wait = 2, time.Second
		steps = append(steps, st, Step{Kind: undo[st.Kind], Node: 2, Wait: 4 * time.Second})
	}
	steps = append(steps, Step{Kind: NodeTaint, Node: 2, Fault: "autoscaler", Wait: time.Second})
	r := RunSteps(t, Setup{Seed: 1, Driver: Runtime, Nodes: 3, Config: Config{DrainCordoned: true}}, 6, steps)
	expectNone(t, r)
	if r.Requests < 1000 {
		t.Fatalf("%d requests: the clients did not run", r.Requests)
	}
}
