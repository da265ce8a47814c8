package reconcile

import (
	"log/slog"
	"time"
)

// Contested servers. A waiting server that a poll finds gone (or parked: in
// maintenance, no check running) was deleted or parked by someone else, or
// dropped or loaded parked by a reload: the first time, a reconcile at once
// adds it again (a reload by others drops every server added through the
// socket where haproxy.cfg has no slots). Gone again within contestWindow,
// it is contested: another writer deletes it, a second instance or a
// CronJob's run started with another configuration (during a rollout of a
// change of HAPROXY_LOCAL_ZONE both run, and each deletes the other's
// servers, which have not served yet). Asking again at once made two such
// writers delete each other's servers every poll, before any could pass
// its check, and the backend stayed empty (history checker, seed
// 179255428: 1,811 deletions in a minute, 995 failed requests). Now a
// contested server is held back: it is asked for again after a backoff
// (Retry, doubling, up to contestMax), while the checks of the others
// waiting beside it are still read every Poll; the other writer's servers
// pass their checks and serve meanwhile, and what follows is a hand-over,
// make-before-break. The one-shot command stops following a target at its
// first contested server (Settler, OnContested): a run with an older
// configuration yields to the writer that runs on.
//
// Only the polls of the checks hold a contested server back: the other
// timers (a hand-over, sessions, the readiness gate) ask for reconciles at
// their own pace, a second apart at most often.

const (
	contestWindow = 10 * time.Second // gone twice within it: contested
	contestMax    = 4 * time.Second  // the longest backoff
)

// vanish is how often in a row a waiting server was found gone, and when
// last.
type vanish struct {
	n    int
	last time.Time
}

// contested records gone (backend → servers, each found gone for the first
// time by this watch) on target, and returns those found gone before
// (within contestWindow), as backend/server, and how long to hold them
// back: Retry, doubling with each vanish, up to contestMax.
func (f *FollowUp) contested(target string, gone map[string][]string) (again []string, wait time.Duration) {
	if len(gone) == 0 {
		return nil, 0
	}
	f.mu.Lock()
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
			if v.n > 0 && now.Sub(v.last) > contestWindow {
				v.n = 0
			}
			if v.n > 0 {
				again = append(again, backend+"/"+n)
				most = max(most, v.n+1)
			}
			v.n++
			v.last = now
			f.vanished[k] = v
			if v.n == 2 {
				first = append(first, backend+"/"+n)
			}
		}
	}
	log, tell := f.Log, f.OnContested
	f.mu.Unlock()
	if len(again) == 0 {
		return nil, 0
	}
	ceiling := min(f.dur(f.MaxRetry, 30*time.Second), contestMax)
	wait = f.dur(f.Retry, time.Second)
	for i := 2; i < most && wait < ceiling; i++ {
		wait *= 2
	}
	wait = min(wait, ceiling)
	if len(first) > 0 && log != nil {
		log.Warn("servers this instance added were deleted or parked again before their check passed: another writer undoes them (a second instance or a CronJob run with another configuration?); adding them again after a backoff",
			slog.String("target", target), slog.Any("servers", first), slog.Duration("after", wait))
	}
	if tell != nil {
		tell(target, again)
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
