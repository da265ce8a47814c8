package history

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// The steps of class histories (class.go): what happens to three Services
// of the class (c-0, c-1, c-2) and their pods, drawn from a seed. c-2 is
// created first, outside the class: when it joins later, it is the oldest
// claimant of a port another Service serves (issue 54's row 2), and must
// be refused.

const (
	ClassJoin      Kind = "class-join"       // the Service becomes the class's LoadBalancer on a port (created if absent)
	ClassLeave     Kind = "class-leave"      // the Service becomes ClusterIP
	ClassPort      Kind = "class-port"       // the Service's port changes
	ClassDelete    Kind = "class-delete"     // the Service, its slice and pods go
	ClassPodAdd    Kind = "class-pod-add"    // a ready pod joins the Service
	ClassPodTerm   Kind = "class-pod-term"   // a pod terminates (still answering)
	ClassPodGone   Kind = "class-pod-gone"   // a terminating pod exits, its endpoint goes
	ClassPodKill   Kind = "class-pod-kill"   // a ready pod dies; Kubernetes has not noticed
	ClassPodNotice Kind = "class-pod-notice" // the killed pods' endpoints go
	ClassCrash     Kind = "class-crash"      // serve is killed, a new one starts
	// ClassTargetDown: the second HAProxy's Data Plane API and admin
	// socket refuse every connection (its host's control plane is gone;
	// HAProxy serves on), or with Fault "hang" accept them and answer
	// nothing; ClassTargetUp: they answer again.
	ClassTargetDown Kind = "class-target-down"
	ClassTargetUp   Kind = "class-target-up"
)

func classKind(k Kind) bool {
	switch k {
	case ClassJoin, ClassLeave, ClassPort, ClassDelete, ClassPodAdd, ClassPodTerm, ClassPodGone, ClassPodKill, ClassPodNotice, ClassCrash,
		ClassTargetDown, ClassTargetUp:
		return true
	}
	return false
}

const (
	classServices = 3
	classPorts    = 3
)

// A class step's fields: Node is the Service, Target the port (index into
// the history's ports), Pods the pod, Times 1 when the history waits,
// after the step, until what it should be is what runs (settle).

// classPod is a pod's state in the model.
type classPod int

const (
	cReady classPod = iota
	cTerminating
	cKilled // not answering, its endpoint still ready
)

// classSvc is a Service in the model.
type classSvc struct {
	exists, inClass bool
	port            int
	pods            map[int]classPod
	next            int // the next pod's number within the Service
}

// classPodNum is pod k of Service s, apart from every other history's pods.
func classPodNum(s, k int) int { return 600 + 100*s + k%100 }

// classModel is what Kubernetes holds in a class history.
type classModel struct{ svcs [classServices]classSvc }

// claims is the port each Service claims (-1: none).
func (m *classModel) claims() []int {
	out := make([]int, classServices)
	for s, v := range m.svcs {
		out[s] = -1
		if v.exists && v.inClass {
			out[s] = v.port
		}
	}
	return out
}

func (m *classModel) count(s int, st classPod) (n int, any int) {
	any = -1
	for p, x := range m.svcs[s].pods {
		if x == st {
			n++
			if any < 0 || p < any {
				any = p // the lowest: the draw stays the seed's
			}
		}
	}
	return n, any
}

// classStart is the model before the first step: c-2 exists outside the
// class, c-0 and c-1 hold ports 0 and 1; two ready pods each.
func classStart() *classModel {
	m := &classModel{}
	for s := range classServices {
		m.svcs[s] = classSvc{exists: true, inClass: s < 2, port: s, pods: map[int]classPod{}}
		m.addPod(s)
		m.addPod(s)
	}
	return m
}

func (m *classModel) addPod(s int) int {
	v := &m.svcs[s]
	v.next++
	n := classPodNum(s, v.next)
	v.pods[n] = cReady
	return n
}

// apply changes the model as st does.
func (m *classModel) apply(st Step) {
	v := &m.svcs[st.Node]
	switch st.Kind {
	case ClassJoin:
		if !v.exists {
			*v = classSvc{exists: true, pods: map[int]classPod{}, next: v.next}
			m.addPod(st.Node)
			m.addPod(st.Node)
		}
		v.inClass, v.port = true, st.Target
	case ClassLeave:
		v.inClass = false
	case ClassPort:
		v.port = st.Target
	case ClassDelete:
		v.exists, v.inClass, v.pods = false, false, map[int]classPod{}
	case ClassPodAdd:
		v.pods[st.Pods[0]] = cReady
		v.next++
	case ClassPodTerm:
		v.pods[st.Pods[0]] = cTerminating
	case ClassPodGone:
		delete(v.pods, st.Pods[0])
	case ClassPodKill:
		v.pods[st.Pods[0]] = cKilled
	case ClassPodNotice:
		for n, x := range v.pods {
			if x == cKilled {
				delete(v.pods, n)
			}
		}
	}
}

// classSteps draws n steps from seed, for targets HAProxies. Every Service
// that exists keeps a ready pod that answers: a holder can always serve.
// The second target, once down, comes back within 4 steps, and before the
// end.
func classSteps(seed uint64, n, targets int) []Step {
	r := rand.New(rand.NewPCG(seed^0xc1a55, seed*5+3))
	m := classStart()
	var out []Step
	down := -1 // the step the second target went down at
	for len(out) < n {
		if down >= 0 && (len(out)-down >= 4 || len(out) == n-1) {
			out = append(out, Step{Kind: ClassTargetUp, Target: 1, Times: 1, Wait: time.Duration(r.IntN(1500)) * time.Millisecond})
			down = -1
			continue
		}
		s := r.IntN(classServices)
		v := m.svcs[s]
		st := Step{Node: s, Wait: time.Duration(r.IntN(1500)) * time.Millisecond}
		ready, _ := m.count(s, cReady)
		switch x := r.IntN(20); {
		case !v.exists || x < 3 && !v.inClass:
			// Mostly a port another Service claims: who keeps it is what
			// is judged.
			st.Kind, st.Target = ClassJoin, r.IntN(classPorts)
			if other := m.claims()[(s+1+r.IntN(classServices-1))%classServices]; other >= 0 && r.IntN(3) > 0 {
				st.Target = other
			}
		case x < 4 && v.inClass:
			st.Kind = ClassLeave
		case x < 7 && v.inClass:
			st.Kind, st.Target = ClassPort, (v.port+1+r.IntN(classPorts-1))%classPorts
			if other := m.claims()[(s+1+r.IntN(classServices-1))%classServices]; other >= 0 && other != v.port && r.IntN(3) > 0 {
				st.Target = other
			}
		case x < 8 && (s != 2 || r.IntN(3) == 0):
			// c-2 rarely: created again, it is no longer the oldest.
			st.Kind = ClassDelete
		case x < 11 && len(v.pods) < 5:
			st.Kind, st.Pods = ClassPodAdd, []int{classPodNum(s, v.next+1)}
		case x < 13 && ready > 1:
			_, p := m.count(s, cReady)
			st.Kind, st.Pods = ClassPodTerm, []int{p}
		case x < 15:
			if _, p := m.count(s, cTerminating); p >= 0 {
				st.Kind, st.Pods = ClassPodGone, []int{p}
			}
		case x < 17 && ready > 1:
			_, p := m.count(s, cReady)
			st.Kind, st.Pods = ClassPodKill, []int{p}
		case x < 19:
			if k, _ := m.count(s, cKilled); k > 0 {
				st.Kind = ClassPodNotice
			}
		case targets > 1 && down < 0 && r.IntN(2) == 0:
			st.Kind, st.Node, st.Target = ClassTargetDown, 0, 1
			if r.IntN(2) == 0 {
				st.Fault = "hang" // it accepts connections and answers nothing
			}
			down = len(out)
		default:
			st.Kind = ClassCrash
		}
		if st.Kind == "" {
			continue
		}
		if r.IntN(3) == 0 {
			st.Times = 1
		}
		if (st.Kind == ClassJoin || st.Kind == ClassPort) && slices.Contains(m.claims(), st.Target) && len(out) > 0 && down < 0 {
			// A claim of a port another Service claims is judged from a
			// settled moment before it and one after.
			out[len(out)-1].Times, st.Times = 1, 1
		}
		m.apply(st)
		out = append(out, st)
	}
	return out
}

// classString is a class step as a history lists it.
func classString(s Step) string {
	what := className(s.Node)
	switch s.Kind {
	case ClassJoin, ClassPort:
		what += fmt.Sprintf(" port %d", s.Target)
	case ClassPodAdd, ClassPodTerm, ClassPodGone, ClassPodKill:
		what += fmt.Sprintf(" p-%d", s.Pods[0])
	case ClassCrash:
		what = "serve"
	case ClassTargetDown, ClassTargetUp:
		what = fmt.Sprintf("target %d", s.Target)
		if s.Fault != "" {
			what += " " + s.Fault
		}
	}
	if s.Times == 1 {
		what += ", then settled"
	}
	return what
}
