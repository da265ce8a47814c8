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
