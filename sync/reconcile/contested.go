package reconcile

import (
	"log/slog"
	"time"
)

// Contested servers. A waiting server that a poll finds gone was deleted by
// someone else or dropped by a reload: the first time, a reconcile at once
// adds it again (a reload by others drops every server added through the
// socket where haproxy.cfg has no slots). Gone again since, it is
// contested: another writer deletes it, a second instance or a CronJob's
// run started with another configuration (during a rollout of a change of
// HAPROXY_LOCAL_ZONE both run, and each deletes the other's servers, which
// have not served yet). Asking again at once made two such writers delete
// each other's servers every poll, before any could pass its check, and
// the backend stayed empty (history checker, seed 179255428: 124 reconciles
// in 8 s, 3,000 failed requests). It is asked for again after a backoff
// instead: meanwhile the other writer's servers pass their checks and
// serve, and what follows is a hand-over, make-before-break.

// vanish is how often in a row a waiting server was found gone, and when
// last.
type vanish struct {
	n    int
	last time.Time
}

// contested records gone (backend → servers) on target, and returns how
// many of them vanished before (within Patience), and how long to wait
// before asking again for them: Retry, doubling with each vanish, up to
// MaxRetry.
func (f *FollowUp) contested(target string, gone map[string][]string) (again int, wait time.Duration) {
	if len(gone) == 0 {
		return 0, 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if f.vanished == nil {
		f.vanished = map[serverKey]vanish{}
	}
	most := 0
	var first []string // contested for the first time
	for backend, names := range gone {
		for _, n := range names {
			k := serverKey{target, backend, n}
			v := f.vanished[k]
			if v.n > 0 && now.Sub(v.last) > f.dur(f.Patience, 2*time.Minute) {
				v.n = 0
			}
			if v.n > 0 {
				again++
			}
			v.n++
			v.last = now
			f.vanished[k] = v
			most = max(most, v.n)
			if v.n == 2 {
				first = append(first, backend+"/"+n)
			}
		}
	}
	if again == 0 {
		return 0, 0
	}
	ceiling := f.dur(f.MaxRetry, 30*time.Second)
	wait = f.dur(f.Retry, time.Second)
	for i := 2; i < most && wait < ceiling; i++ {
		wait *= 2
	}
	wait = min(wait, ceiling)
	f.contestUntil = now.Add(wait)
	if len(first) > 0 && f.Log != nil {
		f.Log.Warn("servers this instance added were deleted again before their check passed: another writer deletes them (a second instance or a CronJob run with another configuration?); adding them again after a backoff",
			slog.String("target", target), slog.Any("servers", first), slog.Duration("after", wait))
	}
	return again, wait
}

// forget drops the vanish counts of servers no longer waiting (they
// entered service, or are not wanted any more); f.mu is held.
func (f *FollowUp) forget() {
	for k := range f.vanished {
		if _, ok := f.waitingSince[k]; !ok {
			delete(f.vanished, k)
		}
	}
}

// ContestedFor is how long the follow-up still holds back a reconcile that
// contested servers ask for (zero: none): a caller with its own timer (the
// Settler) waits for it too.
func (f *FollowUp) ContestedFor() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return max(0, f.contestUntil.Sub(f.now()))
}
