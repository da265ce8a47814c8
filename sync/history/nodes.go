package history

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
)

// Node mode (TARGET_ADDRESS=node, the shipped default). The history's pods
// run on Nodes; each Node is a kube-proxy of its own: a listener at the
// Node's address on the Service's nodePort that hands every connection to
// one of its own pods Kubernetes holds ready (externalTrafficPolicy Local;
// terminating ones when it has no ready one), round robin over those that
// answer (a pod that refuses is skipped). HAProxy's servers are the Nodes; its checks and clients go
// through them. What moves a Node's server beside its pods — a taint, a
// cordon, the state annotation, the exclude label, the Node dying — is
// drawn as steps of their own (NodeSetupOf, nodesShape).

// nodeBase numbers a Node's observations: Node k's are pod nodeBase+k.
const nodeBase = 9000

func nodeName(k int) string { return fmt.Sprintf("n-%d", k) }

// nodeAddr is Node k's InternalIP, apart from every pod's (podAddr).
func nodeAddr(k int) string {
	return fmt.Sprintf("%d.%d.%d.%d", nodeNet[0], nodeNet[1], nodeNet[2], k)
}

// nodeOf is the Node pod n runs on, among nodes; with zones, the pods of
// the other zone run on the last Node, the only one of that zone.
func nodeOf(n, nodes int, zones bool) int {
	switch {
	case nodes == 0 || n == staticPod:
		return 0
	case zones && zoneOf(n) != localZone:
		return nodes
	case zones:
		return 1 + n%(nodes-1)
	}
	return 1 + n%nodes
}

// nodeZone is Node k's zone label in histories with zones.
func nodeZone(k, nodes int) string {
	if k == nodes {
		return "zone-b"
	}
	return localZone
}

// nodeFlags is what the history did to a Node, beside its pods.
type nodeFlags struct {
	down     bool   // it died: its kube-proxy and pods are gone
	deleted  bool   // down, and its Node object deleted
	taint    string // the autoscaler's or Karpenter's taint; empty: none
	cordoned bool
	pin      string // the state annotation: drain or maint; empty: none
	excluded bool   // the exclude-from-external-load-balancers label
}

// serving says whether the service should send new clients to the Node's
// pods: nothing but its pods' states holds its server back.
func (f nodeFlags) serving(drainCordoned bool) bool {
	return !f.down && f.taint == "" && !(f.cordoned && drainCordoned) && f.pin == "" && !f.excluded
}

// nodeProxy is Node k's kube-proxy.
type nodeProxy struct {
	k int
	w *world

	l  listener
	hl listener // the health check port (nodes_health.go)
	mu sync.Mutex
	// rr is the round robin's place, one per target: each HAProxy's
	// connections go round the pods by themselves, as the judge's share
	// of requests a pod takes through one HAProxy assumes.
	rr [3]int // (len(sources))
}

func (np *nodeProxy) start() error {
	addr := net.JoinHostPort(nodeAddr(np.k), strconv.Itoa(np.w.port))
	if err := np.l.open(addr, func() { np.w.rec.add(obs{kind: obsListen, pod: nodeBase + np.k}) }, np.handle); err != nil {
		return fmt.Errorf("node %s: %w", nodeName(np.k), err)
	}
	return np.openHealth()
}

func (np *nodeProxy) stop() {
	np.hl.close(func(time.Time) {})
	np.l.close(func(at time.Time) { np.w.rec.add(obs{at: at, kind: obsStop, pod: nodeBase + np.k}) })
}

// handle reads what the connection is (a check or a client, after a PROXY
// v2 header if it has one), records it as Node k's, and hands it, bytes
// read included, to a pod of the Node from the same source address, so that
// the pod tells whose it is too.
func (np *nodeProxy) handle(c net.Conn, at time.Time) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	from, src := sourceOf(c)
	r := bufio.NewReader(c)
	var head bytes.Buffer
	if b, err := r.Peek(1); err != nil {
		return
	} else if b[0] == proxyV2Sig[0] {
		fixed, err := r.Peek(16)
		if err != nil {
			return
		}
		all := make([]byte, 16+int(binary.BigEndian.Uint16(fixed[14:16])))
		if _, err := io.ReadFull(r, all); err != nil {
			return
		}
		head.Write(all)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return
	}
	head.WriteString(line)
	check := strings.TrimSpace(line) == "hc"
	if strings.TrimSpace(line) == "q" {
		np.w.rec.add(obs{at: at, kind: obsClient, pod: nodeBase + np.k, target: from})
	}
	pods := np.w.localEndpoints(np.k)
	np.mu.Lock()
	start := np.rr[from]
	np.mu.Unlock()
	d := net.Dialer{Timeout: time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	for i := range pods {
		n := pods[(start+i)%len(pods)]
		pc, err := d.Dial("tcp", net.JoinHostPort(np.w.addrOf(n), strconv.Itoa(np.w.port)))
		if err != nil {
			continue // kube-proxy would send it on; the judge waits for no readiness probe
		}
		defer pc.Close()
		if check {
			// A check of the Node counts once a pod took it: one that
			// finds no pod fails in HAProxy.
			np.w.rec.add(obs{at: at, kind: obsCheck, pod: nodeBase + np.k, target: from})
		}
		// The next connection starts past this pod: the round robin goes
		// through the pods that answer, each its share (one after a pod
		// that refuses would take that pod's share too).
		np.mu.Lock()
		np.rr[from] = start + i + 1
		np.mu.Unlock()
		_ = pc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := pc.Write(head.Bytes()); err != nil {
			return
		}
		go func() { _, _ = io.Copy(pc, r) }()
		_, _ = io.Copy(c, pc)
		return
	}
	if strings.TrimSpace(line) == "q" {
		// A client kube-proxy had no pod for: the one failure
		// ExcuseUnnoticed may excuse, through this target.
		np.w.rec.add(obs{at: at, kind: obsNodeEmpty, pod: nodeBase + np.k, target: from})
	}
}

// localEndpoints are the pods kube-proxy of Node k sends to: its ready
// ones, else its terminating ones (externalTrafficPolicy Local).
func (w *world) localEndpoints(k int) []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ready, term []int
	for n, st := range w.k8s {
		if nodeOf(n, w.setup.Nodes, w.setup.Zones) != k {
			continue
		}
		switch st {
		case live:
			ready = append(ready, n)
		case terminating:
			term = append(term, n)
		}
	}
	if len(ready) == 0 {
		ready = term
	}
	sort.Ints(ready) // the round robin goes through them in one order
	return ready
}

// startNodes starts every Node's kube-proxy.
func (w *world) startNodes() {
	w.nodes = map[int]*nodeProxy{}
	w.nflags = map[int]*nodeFlags{}
	for k := 1; k <= w.setup.Nodes; k++ {
		np := &nodeProxy{k: k, w: w}
		if err := np.start(); err != nil {
			w.t.Fatal(err)
		}
		w.t.Cleanup(np.stop)
		w.nodes[k] = np
		w.nflags[k] = &nodeFlags{}
	}
}

// nodeObjects are the cluster's Nodes as Kubernetes holds them.
func (w *world) nodeObjects() []corev1.Node {
	var out []corev1.Node
	for k := 1; k <= w.setup.Nodes; k++ {
		f := w.nflags[k]
		if f.deleted {
			continue
		}
		n := corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: nodeName(k), Labels: map[string]string{}, Annotations: map[string]string{}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeAddr(k)}},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		}
		if w.setup.Zones {
			n.Labels[corev1.LabelTopologyZone] = nodeZone(k, w.setup.Nodes)
		}
		if f.down {
			n.Status.Conditions[0].Status = corev1.ConditionUnknown
		}
		switch f.taint {
		case "autoscaler":
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: desired.TaintToBeDeleted, Effect: corev1.TaintEffectNoSchedule})
		case "karpenter":
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: desired.TaintKarpenterDisrupted, Effect: corev1.TaintEffectNoSchedule})
		}
		n.Spec.Unschedulable = f.cordoned
		if f.pin != "" {
			n.Annotations[desired.AnnotationState] = f.pin
		}
		if f.excluded {
			n.Labels[desired.LabelExcludeFromLB] = ""
		}
		out = append(out, n)
	}
	return out
}

// nodeStep carries out a step on Node st.Node: its flags, its kube-proxy
// and pods when it dies or comes back, Kubernetes' view, the watch's poke.
func (w *world) nodeStep(st Step) error {
	k := st.Node
	w.mu.Lock()
	f := w.nflags[k]
	switch st.Kind {
	case NodeTaint:
		f.taint = st.Fault
	case NodeUntaint:
		f.taint = ""
	case NodeCordon:
		f.cordoned = true
	case NodeUncordon:
		f.cordoned = false
	case NodePin:
		f.pin = st.Fault
	case NodeUnpin:
		f.pin = ""
	case NodeExclude:
		f.excluded = true
	case NodeInclude:
		f.excluded = false
	case NodeDown:
		f.down = true
	case NodeUp:
		f.down = false
	case NodeDelete:
		f.down, f.deleted = true, true
	case NodeJoin:
		f.down, f.deleted = false, false
	}
	flags := *f
	w.mu.Unlock()
	switch st.Kind {
	case NodeDown, NodeDelete:
		// It dies at once: its kube-proxy and its pods' processes, while
		// Kubernetes holds its endpoints as they were (Notice comes later).
		w.nodes[k].stop()
		for _, n := range st.Pods {
			w.mu.Lock()
			p := w.pods[n]
			w.mu.Unlock()
			if p != nil {
				p.stop()
			}
		}
	case NodeUp, NodeJoin:
		for _, n := range st.Pods {
			if err := w.startReady(n); err != nil {
				return err
			}
		}
	}
	w.rec.add(obs{kind: obsNode, pod: k, gate: flags.serving(w.setup.Config.DrainCordoned), excluded: flags.excluded})
	if st.Kind == NodeUp || st.Kind == NodeJoin {
		// After Kubernetes' view: a client it takes finds the Node back.
		if err := w.nodes[k].start(); err != nil {
			return err
		}
	}
	w.publish()
	return nil
}

// taints are the Node taints a NodeTaint step draws from.
var taints = []string{"autoscaler", "karpenter"}

// nodeGen is the Node part of Generate's state (node shapes only).
type nodeGen struct {
	nodes int
	zones bool
	flags map[int]*nodeFlags
	// del draws whether a Node that dies is deleted too: a stream of its
	// own, so the rest of a seed's steps are those it drew before.
	del *rand.Rand
}

func newNodeGen(nodes int, zones bool, seed uint64) *nodeGen {
	g := &nodeGen{nodes: nodes, zones: zones, flags: map[int]*nodeFlags{}, del: rand.New(rand.NewPCG(seed^0xde1e7e, seed+3))}
	for k := 1; k <= nodes; k++ {
		g.flags[k] = &nodeFlags{}
	}
	return g
}

// downAt says whether pod n's Node is down.
func (g *nodeGen) downAt(n int) bool {
	return g != nil && g.flags[nodeOf(n, g.nodes, g.zones)].down
}

// out counts the Nodes that take no new clients for something beside their
// pods (cordons counted whatever CORDONED_NODES says).
func (g *nodeGen) out() int {
	c := 0
	for _, f := range g.flags {
		if !f.serving(true) {
			c++
		}
	}
	return c
}

// step draws a step on a Node, given the pods' states; ok is false when
// the draw makes none. At most all Nodes but two are held out at once, and
// one is down.
func (g *nodeGen) step(r *rand.Rand, pods map[int]podState) (Step, bool) {
	k := 1 + r.IntN(g.nodes)
	f := g.flags[k]
	room := g.out() < g.nodes-2
	on := func(states ...podState) []int {
		var out []int
		for n, st := range pods {
			if nodeOf(n, g.nodes, g.zones) != k {
				continue
			}
			for _, s := range states {
				if st == s {
					out = append(out, n)
				}
			}
		}
		sort.Ints(out)
		return out
	}
	switch r.IntN(5) {
	case 0:
		if f.taint != "" {
			f.taint = ""
			return Step{Kind: NodeUntaint, Node: k}, true
		}
		if !room || f.down {
			return Step{}, false
		}
		f.taint = taints[r.IntN(len(taints))]
		return Step{Kind: NodeTaint, Node: k, Fault: f.taint}, true
	case 1:
		if f.cordoned {
			f.cordoned = false
			return Step{Kind: NodeUncordon, Node: k}, true
		}
		if !room || f.down {
			return Step{}, false
		}
		f.cordoned = true
		return Step{Kind: NodeCordon, Node: k}, true
	case 2:
		if f.pin != "" {
			f.pin = ""
			return Step{Kind: NodeUnpin, Node: k}, true
		}
		if !room || f.down {
			return Step{}, false
		}
		f.pin = []string{"drain", "maint"}[r.IntN(2)]
		return Step{Kind: NodePin, Node: k, Fault: f.pin}, true
	case 3:
		if f.excluded {
			f.excluded = false
			return Step{Kind: NodeInclude, Node: k}, true
		}
		if !room || f.down {
			return Step{}, false
		}
		f.excluded = true
		return Step{Kind: NodeExclude, Node: k}, true
	default:
		if f.down {
			// It comes back: its pods that died with it start again.
			back := on(dead, noticed)
			for _, n := range back {
				pods[n] = live
			}
			kind := NodeUp
			if f.deleted {
				kind = NodeJoin
			}
			f.down, f.deleted = false, false
			return Step{Kind: kind, Node: k, Pods: back}, true
		}
		for _, o := range g.flags {
			if o.down {
				return Step{}, false
			}
		}
		if !room {
			return Step{}, false
		}
		// Every process on it dies; Kubernetes notices its ready pods
		// late (Notice), its not-ready ones are not ready either way.
		gone := on(live, notReady, terminating)
		for _, n := range gone {
			switch pods[n] {
			case live:
				pods[n] = dead
			case notReady:
				pods[n] = noticed
			}
		}
		f.down = true
		if f.deleted = g.del.IntN(2) == 0; f.deleted {
			return Step{Kind: NodeDelete, Node: k, Pods: gone}, true
		}
		return Step{Kind: NodeDown, Node: k, Pods: gone}, true
	}
}
