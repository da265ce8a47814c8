package reconcile

import "strings"

// warnMissingLines logs, once per target and backend, the recommended lines
// the backend lacks: at the first reconcile that reads them, and again only
// when what is missing changes (a line added or removed in haproxy.cfg). The
// result and the metric say it on every reconcile.
func (r *Reconciler) warnMissingLines(target, backend string, missing []string) {
	now := strings.Join(missing, "; ")
	before, seen := r.warned.Swap(target+"\x00"+backend, now)
	if len(missing) == 0 || seen && before.(string) == now {
		return
	}
	r.log().Warn("backend lacks recommended lines: a node that dies abruptly fails client requests, which HAProxy retries on the same dead server or not at all; add the lines to the backend or its defaults section",
		"target", target, "backend", backend, "missing", missing)
}

// warnUnexpectedReload logs once per target and reason why HAProxy's API
// reloaded for writes it applies at runtime (plan.Applied.UnexpectedReason):
// each reload would have loaded servers that no check passed for, had
// they not been written parked, and each costs a new server its quick
// entry; the operator can remove the cause.
func (r *Reconciler) warnUnexpectedReload(target, backend, why string, n int) {
	if _, seen := r.warned.LoadOrStore(target+"\x00reload\x00"+why, true); seen {
		return
	}
	r.log().Warn("unexpected reload", "target", target, "backend", backend, "writes", n, "why", why)
}
