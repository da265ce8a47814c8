package reconcile

import "time"

// The follow-up's timing, as pure functions of the clock and the results:
// when each server began to wait (since), and how soon to look again at
// servers that wait (next).

// serverKey is one server of one backend on one target.
type serverKey struct{ target, backend, server string }

// next returns how long the follow-up waits before it looks again at
// servers that wait, each since its own time in since: step while any of
// them has waited patience or less, slow once every one has waited longer.
// Patience is each server's own: a server whose check never passes slows
// the looks down only once it is past its patience alone, and a server that
// begins to wait after it gets its own patience of fast looks (it would
// otherwise wait up to slow for its entry).
func next(now time.Time, since []time.Time, step, slow, patience time.Duration) time.Duration {
	for _, s := range since {
		if now.Sub(s) <= patience {
			return step
		}
	}
	return slow
}

// since returns when each server that trs list (list) began to wait: its
// time in was when it waited already, else now. A server no longer listed
// is dropped. The word of a backend whose reconcile failed (other than by
// HAProxy refusing single servers) says nothing of what waits there (a
// target that timed out lists nothing): its servers keep their times from
// was; so do the servers of the targets kept says trs do not speak for
// (nil: none).
func since(was map[serverKey]time.Time, now time.Time, trs []TargetResult, list func(TargetResult) []string, kept func(target string) bool) map[serverKey]time.Time {
	out := map[serverKey]time.Time{}
	silent := map[[2]string]bool{}
	for _, t := range trs {
		if t.Error != "" && len(t.Failed) == 0 {
			silent[[2]string{t.Target, t.Backend}] = true
		}
	}
	for k, at := range was {
		if kept != nil && kept(k.target) || silent[[2]string{k.target, k.backend}] {
			out[k] = at
		}
	}
	for _, t := range trs {
		if silent[[2]string{t.Target, t.Backend}] || kept != nil && kept(t.Target) {
			continue
		}
		for _, n := range list(t) {
			k := serverKey{t.Target, t.Backend, n}
			if at, ok := was[k]; ok {
				out[k] = at
			} else {
				out[k] = now
			}
		}
	}
	return out
}

// sinceOf returns the times in since of servers; one not in since (which
// since keeps from happening) begins to wait now.
func sinceOf(since map[serverKey]time.Time, now time.Time, servers []serverKey) []time.Time {
	out := make([]time.Time, 0, len(servers))
	for _, k := range servers {
		at, ok := since[k]
		if !ok {
			at = now
		}
		out = append(out, at)
	}
	return out
}

// listed returns the servers trs list (list).
func listed(trs []TargetResult, list func(TargetResult) []string) []serverKey {
	var out []serverKey
	for _, t := range trs {
		for _, n := range list(t) {
			out = append(out, serverKey{t.Target, t.Backend, n})
		}
	}
	return out
}

func waitingOf(t TargetResult) []string  { return t.Waiting }
func drainingOf(t TargetResult) []string { return t.Draining }
