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

// TestDeletedNodeLeavesAndJoinsAgain: in node mode, a Node whose instance
// died and whose Node object was deleted (a cloud controller, the
// autoscaler) while Kubernetes still lists its pods' endpoints: the
// service finds no Node for them, so the Node's server leaves (converges
// judges it gone at the end of the first history); the replacement that
// joins under the same name, its pods started again, takes clients only
// after a check (checked-before-traffic) and its share of them
// (ready-pod-in-service).
func TestDeletedNodeLeavesAndJoinsAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("real HAProxy histories")
	}
	for _, d := range []Driver{Runtime, Dataplane} {
		// Node 2 holds p-1 and p-4 of pods 1..6 (nodeOf): the others serve.
		gone := Step{Kind: NodeDelete, Node: 2, Pods: []int{1, 4}, Wait: time.Second}
		back := Step{Kind: NodeJoin, Node: 2, Pods: []int{1, 4}, Wait: 4 * time.Second}
		for name, steps := range map[string][]Step{"deleted": {gone}, "joins again": {gone, back, {Kind: NotReady, Pods: []int{2}, Wait: 4 * time.Second}}} {
			t.Run(string(d)+"/"+name, func(t *testing.T) {
				r := RunSteps(t, Setup{Seed: 1, Driver: d, Nodes: 3}, 6, steps)
				expectNone(t, r)
			})
		}
	}
}
