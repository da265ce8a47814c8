package history

import (
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
