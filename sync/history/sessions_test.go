package history

import (
	"slices"
	"testing"
	"time"
)

// TestSessionsEvaluate: a session is cut only by its pod's exit, its
// HAProxy's death or the drain timeout, and (drain above 0) it does not
// outlive its pod's removal by the timeout and drainSlack unless its
// HAProxy reloaded meanwhile. Each excuse has a row that breaks it.
func TestSessionsEvaluate(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s := time.Second
	gone := obs{at: at(2 * s), kind: obsK8s, pod: 3, state: absent}
	session := func(from, to time.Duration, cut string) obs {
		return obs{at: at(to), began: at(from), kind: obsSession, pod: 3, target: 0, err: cut}
	}
	// Pod 4 has been ready and answering for long: the guard holds
	// nothing for it.
	base := []obs{{at: at(-10 * s), kind: obsListen, pod: 4}, {at: at(-10 * s), kind: obsK8s, pod: 4, state: live}}
	deadReady := []obs{{at: at(1 * s), kind: obsK8s, pod: 5, state: live}} // ready, nothing listens
	rezone := obs{at: at(1 * s), kind: obsLocalZone}
	for _, c := range []struct {
		name  string
		drain time.Duration
		all   []obs
		want  Invariant // empty: none
		guard bool      // the deletion guard on
		bare  bool      // without base
	}{
		{"cut while its pod is in Kubernetes", 0, []obs{session(0, 3*s, "EOF")}, SessionsKept, false, false},
		{"cut as its pod exits", 0, []obs{{at: at(3 * s), kind: obsStop, pod: 3}, session(0, 3*s+time.Millisecond, "EOF")}, "", false, false},
		{"another pod's exit excuses nothing", 0, []obs{{at: at(3 * s), kind: obsStop, pod: 4}, session(0, 3*s, "EOF")}, SessionsKept, false, false},
		{"cut as its HAProxy is killed", 0, []obs{{at: at(3 * s), kind: obsRestart, target: 0, hung: true}, session(0, 3*s, "EOF")}, "", false, false},
		{"another HAProxy's death excuses nothing", 0, []obs{{at: at(3 * s), kind: obsRestart, target: 1, hung: true}, session(0, 3*s, "EOF")}, SessionsKept, false, false},
		{"a reload by others does not cut", 0, []obs{{at: at(1 * s), kind: obsReloadStart, target: 0}, {at: at(2 * s), kind: obsReload, target: 0}, session(0, 3*s, "EOF")}, SessionsKept, false, false},
		{"removed, no drain timeout: waited for", 0, []obs{gone, session(0, 6*s, "EOF")}, SessionsKept, false, false},
		{"removed, cut before the drain timeout", 2 * s, []obs{gone, session(0, 3*s, "EOF")}, SessionsKept, false, false},
		{"removed, cut once the drain timeout ran out", 2 * s, []obs{gone, session(0, 4*s, "EOF")}, "", false, false},
		{"back in Kubernetes, then cut", 2 * s, []obs{gone, {at: at(3 * s), kind: obsK8s, pod: 3, state: live}, session(0, 6*s, "EOF")}, SessionsKept, false, false},
		{"terminating, not removed: kept", 2 * s, []obs{{at: at(2 * s), kind: obsK8s, pod: 3, state: terminating}, session(0, 6*s, "EOF")}, SessionsKept, false, false},
		{"removed, ended by its client within the timeout and slack", 2 * s, []obs{gone, session(0, 2*s+2*s+drainSlack, "")}, "", false, false},
		{"removed, outlived the timeout and slack", 2 * s, []obs{gone, session(0, 2*s+2*s+drainSlack+time.Second, "")}, DrainBounded, false, false},
		{"removed, outlived them until its pod exited", 2 * s, []obs{gone, {at: at(10 * s), kind: obsStop, pod: 3}, session(0, 10*s, "EOF")}, DrainBounded, false, false},
		{"removed, outlived them in an old worker", 2 * s, []obs{{at: at(1 * s), kind: obsAPIReload, target: 0}, gone, session(0, 12*s, "")}, "", false, false},
		{"another HAProxy's reload keeps nothing here", 2 * s, []obs{{at: at(1 * s), kind: obsAPIReload, target: 1}, gone, session(0, 12*s, "")}, DrainBounded, false, false},
		{"a reload before the session began keeps nothing", 2 * s, []obs{{at: at(1 * s), kind: obsReload, target: 0}, gone, session(1500*time.Millisecond, 12*s, "")}, DrainBounded, false, false},
		{"removed, no drain timeout: lasts as long as it likes", 0, []obs{gone, session(0, 30*s, "")}, "", false, false},
		{"a rezone replaced its server, cut once the drain timeout ran out", 2 * s, []obs{rezone, session(0, 4*s, "EOF")}, "", false, false},
		{"a rezone replaced its server, cut before the drain timeout", 2 * s, []obs{rezone, session(0, 2*s, "EOF")}, SessionsKept, false, false},
		{"a rezone long before excuses nothing", 2 * s, []obs{rezone, session(70*s, 72*s, "EOF")}, SessionsKept, false, false},
		{"a rezone without a drain timeout waits for the session", 0, []obs{rezone, session(0, 9*s, "EOF")}, SessionsKept, false, false},
		{"a rezone excuses no session younger than the drain timeout", 2 * s, []obs{rezone, session(30*s+500*time.Millisecond, 31*s, "EOF")}, SessionsKept, false, false},
		{"a rezone's hand-over ends within 20 s where its target did not hang", 2 * s, []obs{rezone, session(45*s, 56*s, "EOF")}, SessionsKept, false, false},
		{"a rezone's hand-over waits for a target that hung", 2 * s, []obs{rezone, {at: at(2 * s), kind: obsHang, target: 0, hung: true}, session(45*s, 56*s, "EOF")}, "", false, false},
		{"another target's hang delays nothing here", 2 * s, []obs{rezone, {at: at(2 * s), kind: obsHang, target: 1, hung: true}, session(45*s, 56*s, "EOF")}, SessionsKept, false, false},
		{"removed, cut by the drain timeout yet younger than it", 2 * s, []obs{gone, session(4*s, 5*s, "EOF")}, SessionsKept, false, false},
		{"removed, outlived them while the guard held (a ready pod that does not answer)", 2 * s, append(deadReady, gone, session(0, 12*s, "")), "", true, false},
		{"the guard off holds nothing for a pod that does not answer", 2 * s, append(deadReady, gone, session(0, 12*s, "")), DrainBounded, false, false},
		{"the guard holds nothing while every ready pod answers", 2 * s, []obs{gone, session(0, 12*s, "")}, DrainBounded, true, false},
		{"no pod ready: nothing is deleted", 2 * s, []obs{gone, session(0, 12*s, "")}, "", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			all := c.all
			if !c.bare {
				all = append(slices.Clone(base), c.all...)
			}
			v, _, n := sessionsEvaluate(all, c.drain, c.guard)
			if n != 1 {
				t.Errorf("%d sessions judged, want 1", n)
			}
			switch {
			case c.want == "" && len(v) > 0:
				t.Errorf("want none, got %v", v)
			case c.want != "" && (len(v) != 1 || v[0].Invariant != c.want):
				t.Errorf("want one %s, got %v", c.want, v)
			}
		})
	}
}
