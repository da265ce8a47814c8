package history

import (
	"reflect"
	"testing"
	"time"
)

// TestGenerateKeepsTime: a history is a pure function of its seed, its steps
// wait in all what its clock says, and a terminating pod is gone no sooner
// than Grace after it began to terminate (a draw that made no step once
// let its wait vanish, and a graceful removal came 96 ms after it began).
func TestGenerateKeepsTime(t *testing.T) {
	shape := Shape{Start: 4, Steps: 300, MaxPods: 12, MaxWait: 1200 * time.Millisecond, Grace: time.Second, Targets: 2, HangFor: 40 * time.Second}
	for seed := uint64(0); seed < 50; seed++ {
		a, b := Generate(seed, shape), Generate(seed, shape)
		if len(a) != len(b) {
			t.Fatalf("seed %d: %d steps, then %d", seed, len(a), len(b))
		}
		var now time.Duration
		began := map[int]time.Duration{}
		for i, st := range a {
			if st.String() != b[i].String() {
				t.Fatalf("seed %d step %d: %s, then %s", seed, i, st, b[i])
			}
			now += st.Wait
			switch st.Kind {
			case Terminate:
				began[st.Pods[0]] = now
			case Rollout:
				for _, p := range st.Pods[:len(st.Pods)/2] {
					began[p] = now
				}
			case Gone, Recreate:
				if at, ok := began[st.Pods[0]]; ok && now-at < shape.Grace {
					t.Errorf("seed %d step %d: %s %v after it began to terminate, want %v at least", seed, i, st, now-at, shape.Grace)
				}
			}
		}
	}
}

// TestFaultsLeaveTheHistory: API faults are inserted into the seed's
// history, taking no time, and change nothing else of it; their targets
// exist.
func TestFaultsLeaveTheHistory(t *testing.T) {
	shape := Shape{Start: 5, Steps: 200, MaxPods: 16, MaxWait: 1500 * time.Millisecond, Grace: time.Second, Targets: 2, HangFor: HangFor}
	for seed := range uint64(20) {
		plain := Generate(seed, shape)
		shape.Faults = true
		with := Generate(seed, shape)
		shape.Faults = false
		var rest []Step
		n := 0
		for _, st := range with {
			if st.Kind != APIFault {
				rest = append(rest, st)
				continue
			}
			n++
			if st.Wait != 0 || st.Target < 0 || st.Target >= shape.Targets || st.Times < 1 {
				t.Errorf("seed %d: %v", seed, st)
			}
		}
		if !reflect.DeepEqual(rest, plain) {
			t.Fatalf("seed %d: the history with faults is not the history without them plus faults", seed)
		}
		if n == 0 {
			t.Errorf("seed %d: no fault in %d steps", seed, len(plain))
		}
	}
}

// TestServicesLeaveTheHistory: the many-Services steps are inserted into
// the seed's history and change nothing else of it; a duplicate's window
// holds no step of the history's own but one NotReady, undone right after
// it; web2 joins, leaves no sooner than joinedFor after, and each history
// has every one of the four steps.
func TestServicesLeaveTheHistory(t *testing.T) {
	shape := Shape{Start: 4, Steps: 90, MaxPods: 12, MaxWait: 1200 * time.Millisecond, Grace: time.Second}
	for seed := range uint64(30) {
		plain := Generate(seed, shape)
		shape.Services = true
		with := Generate(seed, shape)
		if again := Generate(seed, shape); !reflect.DeepEqual(with, again) {
			t.Fatalf("seed %d: two histories from one seed", seed)
		}
		shape.Services = false
		var rest []Step
		count := map[Kind]int{}
		var now, joinedAt time.Duration
		joinedNow, inWindow := false, false
		flapped := -1
		for i, st := range with {
			now += st.Wait
			switch st.Kind {
			case ServiceJoin:
				if joinedNow {
					t.Errorf("seed %d step %d: joins twice", seed, i)
				}
				joinedNow, joinedAt = true, now
			case ServiceLeave:
				if !joinedNow || now-joinedAt < joinedFor {
					t.Errorf("seed %d step %d: leaves %v after it joined (joined=%v)", seed, i, now-joinedAt, joinedNow)
				}
				joinedNow = false
			case Duplicate:
				inWindow = true
			case DuplicateEnd:
				inWindow = false
			default:
				switch {
				case inWindow && st.Kind == NotReady && flapped < 0:
					flapped = st.Pods[0]
				case inWindow:
					t.Errorf("seed %d step %d: %s inside a duplicate's window", seed, i, st)
				case flapped >= 0:
					if st.Kind != Ready || st.Pods[0] != flapped || with[i-1].Kind != DuplicateEnd {
						t.Errorf("seed %d step %d: %s, want the window's not-ready pod p-%d ready again", seed, i, st, flapped)
					}
					flapped = -1
				default:
					rest = append(rest, st)
				}
			}
			count[st.Kind]++
		}
		if !reflect.DeepEqual(rest, plain) {
			t.Fatalf("seed %d: the history with Services is not the history without them plus theirs", seed)
		}
		for _, k := range []Kind{ServiceJoin, ServiceLeave, Duplicate, DuplicateEnd} {
			if count[k] == 0 {
				t.Errorf("seed %d: no %s in %d steps", seed, k, len(with))
			}
		}
	}
}

// TestNodeStepsKeepThePodsTrue: in node mode, steps on Nodes come in every
// kind; no pod is added, revived or recreated onto a Node that is down; at
// most one Node is down at once and NodeUp brings back only its own pods;
// and a pod shape (Nodes 0) draws none of them.
func TestNodeStepsKeepThePodsTrue(t *testing.T) {
	kinds := map[Kind]bool{}
	for seed := range uint64(40) {
		for _, zones := range []bool{false, true} {
			shape := soakShape
			shape.Steps, shape.Targets, shape.HangFor = 300, 2, HangFor
			shape.Nodes, shape.Zones = 3+int(seed%3), zones
			if plain := Generate(seed, Shape{Start: 5, Steps: 100, MaxPods: 16, MaxWait: time.Second, Grace: time.Second}); len(plain) == 0 {
				t.Fatal("no steps")
			} else {
				for _, st := range plain {
					if nodeKind(st.Kind) {
						t.Fatalf("seed %d: a pod shape drew %s", seed, st)
					}
				}
			}
			down, deleted := map[int]bool{}, map[int]bool{}
			for i, st := range Generate(seed, shape) {
				kinds[st.Kind] = true
				onDown := func(n int) bool { return down[nodeOf(n, shape.Nodes, shape.Zones)] }
				switch st.Kind {
				case NodeDown, NodeDelete:
					if len(down) > 0 {
						t.Fatalf("seed %d step %d: %s while %v is down", seed, i, st, down)
					}
					down[st.Node] = true
					deleted[st.Node] = st.Kind == NodeDelete
				case NodeUp, NodeJoin:
					if st.Kind == NodeJoin != deleted[st.Node] {
						t.Errorf("seed %d step %d: %s, the Node deleted: %v", seed, i, st, deleted[st.Node])
					}
					delete(deleted, st.Node)
					for _, n := range st.Pods {
						if nodeOf(n, shape.Nodes, shape.Zones) != st.Node {
							t.Errorf("seed %d step %d: %s brings back p-%d of another Node", seed, i, st, n)
						}
					}
					delete(down, st.Node)
				case Add, AddDead, Revive:
					for _, n := range st.Pods {
						if onDown(n) {
							t.Errorf("seed %d step %d: %s puts p-%d on a Node that is down", seed, i, st, n)
						}
					}
				case Recreate:
					if onDown(st.Pods[1]) {
						t.Errorf("seed %d step %d: %s puts p-%d on a Node that is down", seed, i, st, st.Pods[1])
					}
				case Rollout:
					for _, n := range st.Pods[len(st.Pods)/2:] {
						if onDown(n) {
							t.Errorf("seed %d step %d: %s puts p-%d on a Node that is down", seed, i, st, n)
						}
					}
				}
			}
		}
	}
	for _, k := range []Kind{NodeTaint, NodeUntaint, NodeCordon, NodeUncordon, NodePin, NodeUnpin, NodeExclude, NodeInclude, NodeDown, NodeUp, NodeDelete, NodeJoin} {
		if !kinds[k] {
			t.Errorf("no history drew %s", k)
		}
	}
}

// TestAddressesReusedOnlyWhenFree: with Shape.Reuse, an AddReused takes
// the address of a pod gone before, which no pod in Kubernetes holds, and
// every shape that reuses draws some.
func TestAddressesReusedOnlyWhenFree(t *testing.T) {
	reused := 0
	for seed := range uint64(60) {
		shape := soakShape
		shape.Steps, shape.Targets, shape.HangFor = 300, 2, HangFor
		addr := map[int]int{} // pod: whose podAddr it has
		held := map[int]int{} // address (podAddr of): pod in Kubernetes
		for i := 1; i <= shape.Start; i++ {
			addr[i], held[i] = i, i
		}
		for i, st := range Generate(seed, shape) {
			if st.Kind != AddReused {
				// A pod first seen (an Add, a Rollout's or a Recreate's
				// new one) has its own address.
				for _, n := range st.Pods {
					if _, ok := addr[n]; !ok {
						addr[n], held[n] = n, n
					}
				}
			}
			switch st.Kind {
			case AddReused:
				n, last := st.Pods[0], st.Pods[1]
				a := addr[last]
				if p, ok := held[a]; ok {
					t.Fatalf("seed %d step %d: %s takes the address of p-%d, held by p-%d", seed, i, st, a, p)
				}
				addr[n], held[a] = a, n
				reused++
			case Gone:
				for _, n := range st.Pods {
					delete(held, addr[n])
				}
			case Recreate:
				delete(held, addr[st.Pods[0]])
			}
		}
	}
	if reused < 30 {
		t.Errorf("%d addresses reused in 60 soak histories", reused)
	}
	for _, s := range []Shape{shortShape, nodesShape, servicesShape} {
		for seed := range uint64(30) {
			for _, st := range Generate(seed, s) {
				if st.Kind == AddReused {
					t.Fatalf("shape %s (no Reuse) drew %s", s.Name, st)
				}
			}
		}
	}
}
