package reconcile

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// TestFollowUpKeepsPollingWhileAnotherTargetHangs: the retry left by the
// last whole result fires while the next whole reconcile hangs on one
// target (until RECONCILE_TIMEOUT). The whole reconcile it asks for waits
// behind the hung one, and the healthy target's check polls go on: its
// passed check asks for its own entry at once. When the hung reconcile ends
// at last, what it says of the healthy target is older than what that
// target's own reconcile said since: it neither asks for that entry again
// nor stops the polls of the server that waits there now.
func TestFollowUpKeepsPollingWhileAnotherTargetHangs(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)}
	live := &checks{passed: map[string]bool{"n1": false}}
	hung := &checks{err: errors.New("read: i/o timeout")}
	f := newFollowUp(clock, map[string]CheckReader{"live": live, "hung": hung})
	var entered []string
	f.Enter = func(target string) { entered = append(entered, target) }
	var p pokes
	timedOut := TargetResult{Target: "hung", Backend: "be", Error: "context deadline exceeded", ErrorClass: "unreachable"}
	// The coalescer tells each target's part as that target is done
	// (WithTargetDone), then the whole result.
	whole := func(liveWaits ...string) {
		f.ObserveTarget("hung", Result{Targets: []TargetResult{timedOut}}, nil)
		f.Observe(Result{Targets: []TargetResult{waiting("live", liveWaits...), timedOut}}, ErrTargets, p.poke)
	}
	f.ObserveTarget("live", Result{Targets: []TargetResult{waiting("live", "n1")}}, nil)
	whole("n1") // the last whole reconcile: n1 waits on live, hung timed out

	clock.advance(500 * time.Millisecond) // a Kubernetes change: the next whole reconcile starts
	f.ObserveTarget("live", Result{Targets: []TargetResult{waiting("live", "n1")}}, nil)
	// ... and hangs on hung. At 1 s the retry after the last failure fires.
	clock.advance(500 * time.Millisecond)
	if want := []string{"retry after a failure"}; !reflect.DeepEqual(p.got(), want) {
		t.Fatalf("pokes %v, want %v", p.got(), want)
	}
	live.set("n1", true)
	clock.advance(50 * time.Millisecond)
	if !reflect.DeepEqual(entered, []string{"live"}) {
		t.Fatalf("n1 passed its check on live while hung hangs: entered %v, want live within a poll", entered)
	}

	// live's own reconcile puts n1 in service; n2, new, waits there.
	f.ObserveTarget("live", Result{Targets: []TargetResult{waiting("live", "n2")}}, nil)
	live.set("n2", false)
	clock.advance(29 * time.Second) // RECONCILE_TIMEOUT: the hung reconcile ends
	whole("n1")                     // with live's part as it was when it started
	clock.advance(50 * time.Millisecond)
	if !reflect.DeepEqual(entered, []string{"live"}) {
		t.Errorf("the hung reconcile's old word on live asked for its entry again: entered %v", entered)
	}
	live.set("n2", true)
	clock.advance(50 * time.Millisecond)
	if !reflect.DeepEqual(entered, []string{"live", "live"}) {
		t.Errorf("n2 passed its check on live: entered %v, want live again within a poll", entered)
	}
}
