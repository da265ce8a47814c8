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
