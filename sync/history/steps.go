// Package history is the history checker: from a seed it generates a random
// history of what the field does to a backend — pods that come, go, flap
// and die, HAProxy reloads nobody asked for — runs it against a real HAProxy
// and the service's own reconcile loop (reconciler, coalescer, follow-up),
// or the binary's own serve against a real kube-apiserver (serve.go),
// with clients sending traffic through HAProxy's frontend the whole time, and
// checks the guarantees of docs/guarantees.md as invariants, from outside:
// what the clients and the pods saw, and what HAProxy runs.
//
// A history is a list of Steps, a pure function of its seed (Generate), so a
// failed one replays from its seed alone. The invariants are in check.go;
// docs/guarantees.md names which guarantee each one checks.
package history

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Kind is what a step does.
type Kind string

const (
	// Add starts new pods: each one's process listens, then its endpoint
	// is ready (what a scale-up or a rollout's new pod does).
	Add Kind = "add"
	// Terminate makes a pod's endpoint serving and terminating (a graceful
	// removal: the pod keeps answering until Gone).
	Terminate Kind = "terminate"
	// Gone removes a pod's endpoint and stops its process.
	Gone Kind = "gone"
	// Kill stops a pod's process at once; its endpoint stays ready until
	// Notice (a node that dies: Kubernetes notices it late).
	Kill Kind = "kill"
	// Notice makes a killed pod's endpoint not ready.
	Notice Kind = "notice"
	// Revive starts a noticed pod's process again and makes it ready.
	Revive Kind = "revive"
	// NotReady makes a live pod's endpoint not ready (its process keeps
	// answering): a readiness probe that fails for a while.
	NotReady Kind = "not-ready"
	// Ready makes a not-ready live pod ready again.
	Ready Kind = "ready"
	// Reload reloads HAProxy the way others do (a certificate renewal,
	// config management): nobody tells the service.
	Reload Kind = "reload"
	// AddDead adds a pod whose endpoint is ready and whose address never
	// answers (a node HAProxy cannot reach, that Kubernetes sees as
	// healthy): its server waits for a check that never passes, until the
	// pod is gone (rarely) or the history ends — past the follow-up's
	// patience in a soak.
	AddDead Kind = "add-dead"
	// Recreate replaces a terminating pod by a new one with the same name
	// at a new address, in one EndpointSlice update (a StatefulSet's pod
	// recreated): in pod mode, the same server moves.
	Recreate Kind = "recreate"
	// AddReused adds Pods[0] at the address of Pods[1], a pod gone before
	// (Shape.Reuse): as a busy cluster hands a freed pod IP to a new pod,
	// while HAProxy may still hold the old pod's server, parked or
	// draining.
	AddReused Kind = "add-reused"
	// Rollout replaces every live pod at once (a rolling update with a
	// surge of 100%): new pods listen, then one update makes them ready
	// and the old ones terminating. Pods: the old ones, then as many new.
	Rollout Kind = "rollout"
	// Hang makes the second target's admin socket and API accept and never
	// answer (an HAProxy that hangs); Unhang ends it.
	Hang   Kind = "hang"
	Unhang Kind = "unhang"
	// APIFault makes a target's Data Plane API fail its next Times writes
	// (Fault: "409", a version mismatch; "503"; or "drop", the connection
	// closed without an answer, as a crashing API or a proxy does). The
	// runtime driver has no API: nothing happens.
	APIFault Kind = "api-fault"
	// ServiceJoin annotates the second Service (web2) with the backend
	// be2: its pods' servers enter be2 (many-Services histories).
	ServiceJoin Kind = "service-join"
	// ServiceLeave removes web2's annotation: be2 is handed over as left,
	// its servers parked, never deleted while no Service names it.
	ServiceLeave Kind = "service-leave"
	// Duplicate creates a third Service (web3) whose annotation names be,
	// as web's does: web holds be and keeps it, web3 is refused while it
	// lasts (HolderKeeps). DuplicateEnd deletes web3.
	Duplicate    Kind = "duplicate"
	DuplicateEnd Kind = "duplicate-end"
	// Crash kills the service (its first writer) wherever it is, a
	// reconcile's writes cut between any two, and starts a fresh process
	// in its place, as a pod restarted by Kubernetes (Sieve's intermediate
	// states). Fault "rezone": the fresh process runs with the other zone
	// as HAPROXY_LOCAL_ZONE (an operator's change; every server's role
	// changes, histories with zones).
	Crash Kind = "crash"
	// Node steps (node mode): NodeTaint puts the autoscaler's or
	// Karpenter's taint on Node (Fault), NodeCordon cordons it, NodePin
	// pins its server's state with the annotation (Fault: drain or maint),
	// NodeExclude labels it out of load balancers; each has its undoing.
	// NodeDown: the Node dies, its kube-proxy and every pod process on it
	// (Pods) at once, Kubernetes noticing late (Notice); NodeUp: it comes
	// back, and its pods that died with it (Pods) with it. NodeDelete and
	// NodeJoin are the same with the Node object deleted (the instance is
	// gone, as a cloud controller or an autoscaler deletes it) and created
	// again (its replacement joins, under the same name).
	NodeTaint    Kind = "node-taint"
	NodeUntaint  Kind = "node-untaint"
	NodeCordon   Kind = "node-cordon"
	NodeUncordon Kind = "node-uncordon"
	NodePin      Kind = "node-pin"
	NodeUnpin    Kind = "node-unpin"
	NodeExclude  Kind = "node-exclude"
	NodeInclude  Kind = "node-include"
	NodeDown     Kind = "node-down"
	NodeUp       Kind = "node-up"
	NodeDelete   Kind = "node-delete"
	NodeJoin     Kind = "node-join"
	// Kubernetes as the service reaches it (serve histories): KubeCut
	// closes every connection of the service's to the API server (its
	// watches end mid-stream); KubeDown makes the API unreachable from the
	// service (connections reset) while Kubernetes goes on; KubeUp ends it.
	KubeCut  Kind = "kube-cut"
	KubeDown Kind = "kube-down"
	KubeUp   Kind = "kube-up"
	// TargetRestart kills a target's HAProxy, master and workers at once,
	// and starts it again from haproxy.cfg (serve histories); ReloadBroken
	// asks it to reload a haproxy.cfg it cannot load (the reload fails,
	// the running worker goes on).
	TargetRestart Kind = "target-restart"
	ReloadBroken  Kind = "reload-broken"
	// SocketDown makes a target's admin socket refuse every connection
	// (those open cut) while its HAProxy serves on, as a runtime listener
	// or a relay that went away; APIDown does it to its Data Plane API
	// (the dataplaneapi process stopped); SocketUp and APIUp end it.
	SocketDown Kind = "socket-down"
	SocketUp   Kind = "socket-up"
	APIDown    Kind = "api-down"
	APIUp      Kind = "api-up"
)

// nodeKind says whether k is a step on a Node.
func nodeKind(k Kind) bool { return strings.HasPrefix(string(k), "node-") }

// Step is one thing that happens, after Wait.
type Step struct {
	Wait time.Duration
	Kind Kind
	// Pods are the pods it concerns, by number (pod N is named "p-N" and
	// listens on its own address, see podAddr). Recreate: the pod that
	// goes, then the one that takes its name.
	Pods []int
	// Target is the target a Reload, Hang, Unhang or APIFault concerns.
	Target int
	// Fault and Times say what an APIFault does.
	Fault string
	Times int
	// Node is the Node a node step concerns (node mode).
	Node int
}

func (s Step) String() string {
	var ps []string
	for _, p := range s.Pods {
		ps = append(ps, fmt.Sprintf("p-%d", p))
	}
	switch s.Kind {
	case Reload, Hang, Unhang, TargetRestart, ReloadBroken, SocketDown, SocketUp, APIDown, APIUp:
		ps = append(ps, fmt.Sprintf("target %d", s.Target))
	case APIFault:
		ps = append(ps, fmt.Sprintf("target %d %s x%d", s.Target, s.Fault, s.Times))
	case ServiceJoin, ServiceLeave:
		ps = append(ps, service2)
	case Duplicate, DuplicateEnd:
		ps = append(ps, service3+" names "+backend)
	case Crash:
		ps = append(ps, s.Fault)
	}
	if classKind(s.Kind) {
		ps = append(ps, classString(s))
	}
	if nodeKind(s.Kind) {
		ps = append(ps, nodeName(s.Node))
		if s.Fault != "" {
			ps = append(ps, s.Fault)
		}
	}
	return fmt.Sprintf("+%v %s %s", s.Wait.Round(time.Millisecond), s.Kind, strings.Join(ps, ","))
}

// Shape bounds what Generate makes.
type Shape struct {
	// Name names the shape for make replay (SHAPE=).
	Name string
	// Start is the number of pods before the first step.
	Start int
	// Steps is the number of steps.
	Steps int
	// MaxPods bounds the live pods at any time.
	MaxPods int
	// MaxWait bounds the wait before a step.
	MaxWait time.Duration
	// Grace is the least time a terminating pod keeps answering before
	// Gone: its termination grace period, as the history sees it.
	Grace time.Duration
	// Targets is the number of HAProxy targets (1 or 2); with 2 the
	// second may hang, for HangFor at least.
	Targets int
	HangFor time.Duration
	// Faults adds APIFault steps (withFaults).
	Faults bool
	// Services adds the many-Services steps (withServices).
	Services bool
	// Crashes adds, in one history of two, Crash steps (withCrashes).
	Crashes bool
	// Kube adds steps on the service's reach of Kubernetes (withKube) and
	// targets that restart or fail a reload (withTargetFaults): serve
	// histories'.
	Kube bool
	// API says the targets have a Data Plane API (the Data Plane
	// driver): withTargetFaults may take it down. Run sets it.
	API bool
	// Reuse makes about one single-pod Add in three, when a pod is gone
	// whose address no pod holds, an AddReused of that address (a stream
	// of its own: the other steps are the seed's as before).
	Reuse bool
	// Nodes, when not 0, runs the pods on that many Nodes (node mode) and
	// draws steps on the Nodes too, one draw in three; Zones places them
	// (nodeOf). Run sets both from the setup.
	Nodes int
	Zones bool
}

// podState is a pod as the generator tracks it.
type podState int

const (
	live        podState = iota // listening, endpoint ready
	notReady                    // listening, endpoint not ready
	terminating                 // listening, endpoint serving and terminating
	dead                        // not listening, endpoint still ready
	noticed                     // not listening, endpoint not ready
	unreachable                 // never listening, endpoint ready for good (AddDead)
	absent                      // no endpoint (the history's observations only)
)

// Generate returns the history of seed, the pods that exist before its first
// step (numbered 1..shape.Start), and is a pure function of both arguments.
func Generate(seed uint64, shape Shape) []Step {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	pods := map[int]podState{}
	termAt := map[int]time.Duration{} // when a pod began terminating
	next := 1
	for ; next <= shape.Start; next++ {
		pods[next] = live
	}
	var now, pending time.Duration
	var steps []Step
	hungAt := time.Duration(-1) // when the second target began to hang; -1: it does not
	// Address reuse (Shape.Reuse): each pod's address is its own podAddr
	// or, by AddReused, a gone pod's (addrOwner: whose podAddr it is);
	// free are the gone pods whose address no pod holds now.
	reuse := rand.New(rand.NewPCG(seed^0xadd4e55, seed+11))
	addrOwner := map[int]int{}
	var free []int
	owner := func(p int) int {
		if o, ok := addrOwner[p]; ok {
			return o
		}
		return p
	}
	var ng *nodeGen
	if shape.Nodes > 0 {
		ng = newNodeGen(shape.Nodes, shape.Zones, seed)
	}
	// alloc is the next new pod's number: none lands on a Node that is down.
	alloc := func() int {
		for ng.downAt(next) {
			next++
		}
		n := next
		next++
		return n
	}
	in := func(states ...podState) []int {
		var out []int
		for n := 1; n < next; n++ {
			st, ok := pods[n]
			if !ok {
				continue
			}
			for _, want := range states {
				if st == want {
					out = append(out, n)
				}
			}
		}
		return out
	}
	pick := func(from []int) int { return from[r.IntN(len(from))] }
	// transition moves a pod picked among those in state from to state to.
	transition := func(kind Kind, from, to podState) (Step, bool) {
		c := in(from)
		if len(c) == 0 {
			return Step{}, false
		}
		p := pick(c)
		pods[p] = to
		return Step{Kind: kind, Pods: []int{p}}, true
	}
	for len(steps) < shape.Steps {
		wait := time.Duration(r.Int64N(int64(shape.MaxWait))) + 20*time.Millisecond
		// Short waits most of the time: changes that overlap are where the
		// service's reconciles and HAProxy's checks race.
		if r.IntN(3) > 0 {
			wait /= 4
		}
		// The waits of draws that make no step count toward the next
		// step's: the history's clock (now) is what the steps wait in all.
		now += wait
		pending += wait
		var st Step
		var ok bool
		if ng != nil && r.IntN(3) == 0 {
			if st, ok = ng.step(r, pods); ok {
				st.Wait, pending = pending, 0
				steps = append(steps, st)
			}
			continue
		}
		if shape.Targets > 1 {
			// The second target hangs now and then, for HangFor at least:
			// longer than RECONCILE_TIMEOUT, so that a reconcile fails on
			// it while another waits behind it. Meanwhile nothing is
			// removed: a removal waits for the whole reconcile, which
			// waits for the hung target (only entries go alone).
			switch {
			case hungAt < 0 && r.IntN(60) == 0:
				hungAt = now
				steps = append(steps, Step{Wait: pending, Kind: Hang, Target: 1})
				pending = 0
				continue
			case hungAt >= 0 && now-hungAt >= shape.HangFor:
				hungAt = -1
				steps = append(steps, Step{Wait: pending, Kind: Unhang, Target: 1})
				pending = 0
				continue
			}
		}
		switch roll := r.IntN(100); {
		case roll < 22 && len(pods) < shape.MaxPods:
			n := 1
			if r.IntN(8) == 0 {
				n = 2 + r.IntN(min(8, shape.MaxPods-len(pods)+1))
			}
			n = min(n, shape.MaxPods-len(pods))
			if n < 1 {
				continue
			}
			st = Step{Kind: Add}
			for range n {
				p := alloc()
				pods[p] = live
				st.Pods = append(st.Pods, p)
			}
			if shape.Reuse && n == 1 && len(free) > 0 && reuse.IntN(3) == 0 {
				i := reuse.IntN(len(free))
				last := free[i] // the gone pod that held it last
				free = append(free[:i], free[i+1:]...)
				addrOwner[st.Pods[0]] = owner(last)
				st = Step{Kind: AddReused, Pods: []int{st.Pods[0], last}}
			}
		case roll < 38:
			if hungAt >= 0 {
				continue
			}
			c := in(live)
			if len(c) == 0 {
				continue
			}
			p := pick(c)
			pods[p], termAt[p] = terminating, now
			st = Step{Kind: Terminate, Pods: []int{p}}
		case roll < 52:
			if hungAt >= 0 {
				continue
			}
			var c []int
			for _, p := range in(terminating) {
				if now-termAt[p] >= shape.Grace {
					c = append(c, p)
				}
			}
			c = append(c, in(noticed)...)
			if u := in(unreachable); len(u) > 0 && r.IntN(10) == 0 {
				c = append(c, u...)
			}
			if len(c) == 0 {
				continue
			}
			p := pick(c)
			delete(pods, p)
			free = append(free, p) // its address, whoever's podAddr it is
			st = Step{Kind: Gone, Pods: []int{p}}
		case roll < 58:
			if st, ok = transition(Kill, live, dead); !ok {
				continue
			}
		case roll < 66:
			if st, ok = transition(Notice, dead, noticed); !ok {
				continue
			}
		case roll < 71:
			// A pod of a Node that is down comes back with it (NodeUp).
			var c []int
			for _, p := range in(noticed) {
				if !ng.downAt(p) {
					c = append(c, p)
				}
			}
			if len(c) == 0 {
				continue
			}
			p := pick(c)
			pods[p] = live
			st = Step{Kind: Revive, Pods: []int{p}}
		case roll < 80:
			if st, ok = transition(NotReady, live, notReady); !ok {
				continue
			}
		case roll < 90:
			if st, ok = transition(Ready, notReady, live); !ok {
				continue
			}
		case roll < 95:
			st = Step{Kind: Reload}
			if shape.Targets > 1 {
				st.Target = r.IntN(shape.Targets)
			}
		case roll < 97 && len(pods) < shape.MaxPods:
			p := alloc()
			pods[p] = unreachable
			st = Step{Kind: AddDead, Pods: []int{p}}
		case roll == 97:
			old := in(live)
			if hungAt >= 0 || len(old) == 0 || len(pods)+len(old) > shape.MaxPods {
				continue
			}
			st = Step{Kind: Rollout, Pods: old}
			for _, p := range old {
				pods[p], termAt[p] = terminating, now
			}
			for range old {
				p := alloc()
				pods[p] = live
				st.Pods = append(st.Pods, p)
			}
		case roll >= 98 && len(pods) < shape.MaxPods:
			if hungAt >= 0 {
				continue
			}
			var c []int
			for _, p := range in(terminating) {
				if now-termAt[p] >= shape.Grace {
					c = append(c, p)
				}
			}
			if len(c) == 0 {
				continue
			}
			p := pick(c)
			delete(pods, p)
			n := alloc()
			pods[n] = live
			st = Step{Kind: Recreate, Pods: []int{p, n}}
		default:
			continue
		}
		st.Wait, pending = pending, 0
		steps = append(steps, st)
	}
	if hungAt >= 0 {
		steps = append(steps, Step{Wait: 20 * time.Millisecond, Kind: Unhang, Target: 1})
	}
	if shape.Services {
		steps = withServices(seed, shape, steps)
	}
	if shape.Faults {
		steps = withFaults(seed, shape, steps)
	}
	if shape.Crashes {
		steps = withCrashes(seed, steps)
	}
	if shape.Kube {
		steps = withKube(seed, steps)
		steps = withTargetFaults(seed, shape, steps)
	}
	return steps
}

// withTargetFaults inserts, before about one step in 20, a TargetRestart,
// a ReloadBroken, or a target's socket or (Shape.API) Data Plane API going
// down, back 2 to 4 steps later (one at a time). Drawn from a stream of its
// own.
func withTargetFaults(seed uint64, shape Shape, steps []Step) []Step {
	r := rand.New(rand.NewPCG(seed^0x7a29, seed+17))
	kinds := []Kind{TargetRestart, ReloadBroken, SocketDown}
	if shape.API {
		kinds = append(kinds, APIDown)
	}
	up := map[Kind]Kind{SocketDown: SocketUp, APIDown: APIUp}
	out := make([]Step, 0, len(steps)+len(steps)/10)
	upIn, pending := -1, Step{} // steps until pending (an up) is due; -1: none
	for _, st := range steps {
		switch {
		case upIn == 0:
			out = append(out, pending)
			upIn = -1
		case upIn > 0:
			upIn--
		}
		if r.IntN(20) == 0 {
			k, tg := kinds[r.IntN(len(kinds))], r.IntN(max(shape.Targets, 1))
			if u, ok := up[k]; ok {
				if upIn >= 0 {
					k = TargetRestart // one down at a time
				} else {
					upIn, pending = 2+r.IntN(3), Step{Kind: u, Target: tg}
				}
			}
			out = append(out, Step{Kind: k, Target: tg})
		}
		out = append(out, st)
	}
	if upIn >= 0 {
		out = append(out, pending)
	}
	return out
}

// withKube inserts, before about one step in ten, a KubeCut (two in
// three) or a KubeDown, which a KubeUp ends 2 to 5 steps later. Drawn from
// a stream of its own, so the steps are those of the seed without them.
func withKube(seed uint64, steps []Step) []Step {
	r := rand.New(rand.NewPCG(seed^0x6b75, seed+11))
	out := make([]Step, 0, len(steps)+len(steps)/8)
	upIn := -1 // steps until the KubeUp; -1: the API is reachable
	for _, st := range steps {
		switch {
		case upIn == 0:
			out = append(out, Step{Kind: KubeUp})
			upIn = -1
		case upIn > 0:
			upIn--
		case r.IntN(10) == 0:
			if r.IntN(3) > 0 {
				out = append(out, Step{Kind: KubeCut})
			} else {
				out = append(out, Step{Kind: KubeDown})
				upIn = 2 + r.IntN(4)
			}
		}
		out = append(out, st)
	}
	if upIn >= 0 {
		out = append(out, Step{Wait: 20 * time.Millisecond, Kind: KubeUp})
	}
	return out
}

// withCrashes inserts, in one history of two, a Crash before about one step
// in twelve, a third of them with a zone flip ("rezone"), at a moment of
// its own (0 to 300 ms after the step before: inside a reconcile's writes
// or between them). Drawn from a stream of its own, so the steps are those
// of the seed without crashes.
func withCrashes(seed uint64, steps []Step) []Step {
	r := rand.New(rand.NewPCG(seed^0xc4a5, seed+3))
	if r.IntN(2) == 0 {
		return steps
	}
	out := make([]Step, 0, len(steps)+len(steps)/10)
	for _, st := range steps {
		out = append(out, st)
		if r.IntN(12) == 0 {
			c := Step{Kind: Crash, Wait: time.Duration(r.IntN(300)) * time.Millisecond}
			if r.IntN(3) == 0 {
				c.Fault = "rezone"
			}
			out = append(out, c)
		}
	}
	return out
}

// faults are what an APIFault step does.
var faults = []string{"409", "503", "drop"}

// withFaults inserts, before about one step in ten, an APIFault that takes
// no time: the history is the same, with the Data Plane API failing a few
// writes now and then. Drawn from a stream of its own, so the steps are
// those of the seed without faults.
func withFaults(seed uint64, shape Shape, steps []Step) []Step {
	r := rand.New(rand.NewPCG(seed^0xfa017, seed))
	out := make([]Step, 0, len(steps)+len(steps)/8)
	for _, st := range steps {
		if r.IntN(10) == 0 {
			out = append(out, Step{Kind: APIFault, Target: r.IntN(max(shape.Targets, 1)), Fault: faults[r.IntN(len(faults))], Times: 1 + r.IntN(3)})
		}
		out = append(out, st)
	}
	return out
}
