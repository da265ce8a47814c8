package history

import (
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
	for _, c := range []struct {
		name  string
		drain time.Duration
		all   []obs
		want  Invariant // empty: none
	}{
		{"cut while its pod is in Kubernetes", 0, []obs{session(0, 3*s, "EOF")}, SessionsKept},
		{"cut as its pod exits", 0, []obs{{at: at(3 * s), kind: obsStop, pod: 3}, session(0, 3*s+time.Millisecond, "EOF")}, ""},
		{"another pod's exit excuses nothing", 0, []obs{{at: at(3 * s), kind: obsStop, pod: 4}, session(0, 3*s, "EOF")}, SessionsKept},
		{"cut as its HAProxy is killed", 0, []obs{{at: at(3 * s), kind: obsRestart, target: 0, hung: true}, session(0, 3*s, "EOF")}, ""},
		{"another HAProxy's death excuses nothing", 0, []obs{{at: at(3 * s), kind: obsRestart, target: 1, hung: true}, session(0, 3*s, "EOF")}, SessionsKept},
		{"a reload by others does not cut", 0, []obs{{at: at(1 * s), kind: obsReloadStart, target: 0}, {at: at(2 * s), kind: obsReload, target: 0}, session(0, 3*s, "EOF")}, SessionsKept},
		{"removed, no drain timeout: waited for", 0, []obs{gone, session(0, 6*s, "EOF")}, SessionsKept},
		{"removed, cut before the drain timeout", 2 * s, []obs{gone, session(0, 3*s, "EOF")}, SessionsKept},
		{"removed, cut once the drain timeout ran out", 2 * s, []obs{gone, session(0, 4*s, "EOF")}, ""},
		{"back in Kubernetes, then cut", 2 * s, []obs{gone, {at: at(3 * s), kind: obsK8s, pod: 3, state: live}, session(0, 6*s, "EOF")}, SessionsKept},
		{"terminating, not removed: kept", 2 * s, []obs{{at: at(2 * s), kind: obsK8s, pod: 3, state: terminating}, session(0, 6*s, "EOF")}, SessionsKept},
		{"removed, ended by its client within the timeout and slack", 2 * s, []obs{gone, session(0, 2*s+2*s+drainSlack, "")}, ""},
		{"removed, outlived the timeout and slack", 2 * s, []obs{gone, session(0, 2*s+2*s+drainSlack+time.Second, "")}, DrainBounded},
		{"removed, outlived them until its pod exited", 2 * s, []obs{gone, {at: at(10 * s), kind: obsStop, pod: 3}, session(0, 10*s, "EOF")}, DrainBounded},
		{"removed, outlived them in an old worker", 2 * s, []obs{{at: at(1 * s), kind: obsAPIReload, target: 0}, gone, session(0, 12*s, "")}, ""},
		{"another HAProxy's reload keeps nothing here", 2 * s, []obs{{at: at(1 * s), kind: obsAPIReload, target: 1}, gone, session(0, 12*s, "")}, DrainBounded},
		{"a reload before the session began keeps nothing", 2 * s, []obs{{at: at(1 * s), kind: obsReload, target: 0}, gone, session(1500*time.Millisecond, 12*s, "")}, DrainBounded},
		{"removed, no drain timeout: lasts as long as it likes", 0, []obs{gone, session(0, 30*s, "")}, ""},
		{"a rezone replaced its server, cut once the drain timeout ran out", 2 * s, []obs{{at: at(1 * s), kind: obsLocalZone}, session(0, 4*s, "EOF")}, ""},
		{"a rezone replaced its server, cut before the drain timeout", 2 * s, []obs{{at: at(1 * s), kind: obsLocalZone}, session(0, 2*s, "EOF")}, SessionsKept},
		{"a rezone long before excuses nothing", 2 * s, []obs{{at: at(1 * s), kind: obsLocalZone}, session(70*s, 72*s, "EOF")}, SessionsKept},
		{"a rezone without a drain timeout waits for the session", 0, []obs{{at: at(1 * s), kind: obsLocalZone}, session(0, 9*s, "EOF")}, SessionsKept},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, _, n := sessionsEvaluate(c.all, c.drain)
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
