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

// TestNodesCheckedOnTheHealthPort: in node mode, HAProxy checks each Node on the
// Service's healthCheckNodePort with GET /healthz (externalTrafficPolicy
// Local), which the Node's kube-proxy answers 503 once Kubernetes holds
// none of its pods ready: the Node leaves and comes back with its pods,
// through both drivers (the Data Plane driver writes the HTTP check,
// HAPROXY_BALANCE set; the runtime driver's haproxy.cfg says it). With
// HAPROXY_SEND_PROXY_V2 the servers' connections carry the PROXY header
// and their checks must not: kube-proxy answers one 400, and every Node
// was DOWN (history seed 1, nodes, runtime: health-port-spoken).
//
// With HAPROXY_CHECK_KUBE_PROXY_PORT (kube-proxy), on a NodePort Service
// without healthCheckNodePort, Nodes are checked on kube-proxy's own port
// instead, which answers 200 whatever the pods and 503 for a Node the
// autoscaler marked for deletion: the Node's pods leave through the
// service, the tainted Node through the service and its check, and it
// comes back once untainted.
func TestNodesCheckedOnTheHealthPort(t *testing.T) {
	if testing.Short() {
		t.Skip("real HAProxy histories")
	}
	for _, v := range []struct {
		d         Driver
		kubeProxy bool
	}{{Runtime, false}, {Dataplane, false}, {Runtime, true}, {Dataplane, true}} {
		d := v.d
		name := string(d)
		if v.kubeProxy {
			name += "-kube-proxy"
		}
		t.Run(name, func(t *testing.T) {
			c := Config{SendProxy: true}
			if d == Dataplane {
				c.Balance = "leastconn"
			}
			// Node 2 holds p-1 and p-4 of pods 1..6 (nodeOf), Node 1 p-3
			// and p-6.
			steps := []Step{
				{Kind: NotReady, Pods: []int{1}, Wait: time.Second},
				{Kind: NotReady, Pods: []int{4}, Wait: time.Second},
				{Kind: Ready, Pods: []int{1, 4}, Wait: 3 * time.Second},
				{Kind: Terminate, Pods: []int{3}, Wait: 3 * time.Second},
				{Kind: Gone, Pods: []int{3}, Wait: 3 * time.Second},
			}
			if v.kubeProxy {
				steps = append(steps,
					Step{Kind: NodeTaint, Node: 2, Fault: "autoscaler", Wait: 2 * time.Second},
					Step{Kind: NodeUntaint, Node: 2, Wait: 3 * time.Second})
			}
			r := RunSteps(t, Setup{Seed: 1, Driver: d, Nodes: 3, HealthPort: true, KubeProxy: v.kubeProxy, Config: c}, 6, steps)
			expectNone(t, r)
			if r.Requests < 1000 {
				t.Fatalf("%d requests: the clients did not run", r.Requests)
			}
		})
	}
}
