package reconcile

import (
	"time"
)

// LastingEvery is how often a warning whose cause lasts is said again: the
// follow-up reconciles every second while a server drains or waits for its
// check, and each of those reconciles sees the same skipped endpoints, the
// same guard holding, the same backend without slots. Package alarm's rate.
const LastingEvery = 5 * time.Minute

// said is what a lasting warning last said, and when.
type said struct {
	what string
	at   time.Time
}

// sayAgain decides whether a warning the reconciles repeat while its cause
// lasts is logged now: when it is new (nothing said since its cause was
// last gone), when what it says changed, or when it was last said every
// ago or longer.
func sayAgain(prev said, seen bool, what string, now time.Time, every time.Duration) bool {
	return !seen || prev.what != what || now.Sub(prev.at) >= every
}

// warnLasting logs msg with args at warn unless sayAgain says it was said
// already: key names the warning and where (target, backend), what is what
// it says (the args that matter: counts, names).
func (r *Reconciler) warnLasting(key, what, msg string, args ...any) {
	now := r.now()
	r.lastingMu.Lock()
	prev, seen := r.lasting[key]
	say := sayAgain(prev, seen, what, now, LastingEvery)
	if say {
		if r.lasting == nil {
			r.lasting = map[string]said{}
		}
		r.lasting[key] = said{what: what, at: now}
	}
	r.lastingMu.Unlock()
	if say {
		r.log().Warn(msg, args...)
	}
}

// lastingGone forgets a lasting warning whose cause is gone, so that it is
// said at once when it comes back.
func (r *Reconciler) lastingGone(key string) {
	r.lastingMu.Lock()
	delete(r.lasting, key)
	r.lastingMu.Unlock()
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}
