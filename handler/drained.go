package handler

import (
	"cmp"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/trigger"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/drained"
)

// defaultDrainWait caps ?wait= when Config.Wait is not set.
const defaultDrainWait = 30 * time.Second

// drained answers GET /drained?node=NAME|ip=ADDR[&wait=DURATION][&missingOk=true]:
// 200 {"status":"drained"} once the server is out of rotation with no
// sessions on every target, else 503 {"status":"waiting"} with Retry-After,
// after waiting up to wait (at most Config.Wait) for it. A server no target
// has at the first look is 404 (a misspelt name, a pod IP in node mode: a
// preStop hook must not take that for drained), or drained with
// missingOk=true. It only reads HAProxy.
func (a *api) drained(w http.ResponseWriter, r *http.Request) {
	limit := cmp.Or(a.cfg.Wait, defaultDrainWait)
	q, wait, missingOK, err := drainedQuery(r.URL.Query(), a.cfg.NodeMode, limit)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	select {
	case a.drainWaiters <- struct{}{}:
		defer func() { <-a.drainWaiters }()
	default:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "too many callers waiting for a drain; try again")
		return
	}
	start := time.Now()
	ans := a.cfg.Drained.Wait(r.Context(), q, wait)
	if r.Context().Err() != nil {
		return // the caller is gone
	}
	a.log.Info("drained", "node", r.URL.Query().Get("node"), "ip", r.URL.Query().Get("ip"), "status", ans.Status,
		"waitedMs", time.Since(start).Milliseconds(), "targets", ans.Targets)
	if ans.Status == drained.StatusAbsent {
		if missingOK {
			ans.Status = drained.StatusDrained
			writeJSON(w, http.StatusOK, ans)
			return
		}
		writeJSON(w, http.StatusNotFound, absentAnswer{Status: "error", Error: absentMessage(q, a.cfg.NodeMode), Targets: ans.Targets})
		return
	}
	if !ans.Drained() {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, ans)
		return
	}
	writeJSON(w, http.StatusOK, ans)
}

// absentAnswer is the 404 of GET /drained: the error, and what each target
// showed.
type absentAnswer struct {
	Status  string                `json:"status"`
	Error   string                `json:"error"`
	Targets []drained.TargetState `json:"targets"`
}

// absentMessage says that no target has the server asked for, and what is
// most likely wrong.
func absentMessage(q drained.Query, nodeMode bool) string {
	const ok = "; add missingOk=true (wait-drained --missing-ok) if a server that is gone counts as drained"
	switch {
	case q.Server != "":
		return fmt.Sprintf("no target has a server for node %q: is the Node name right?%s", q.Server, ok)
	case nodeMode:
		return fmt.Sprintf("no target has a server at %s: servers are Nodes here (TARGET_ADDRESS=node): give node=NAME or a Node's InternalIP, not a pod IP%s", q.Address, ok)
	default:
		return fmt.Sprintf("no target has a server at %s: is it the IP of a pod of the followed Service?%s", q.Address, ok)
	}
}

// drainedQuery reads and checks the parameters of GET /drained; wait is
// capped at limit.
func drainedQuery(v url.Values, nodeMode bool, limit time.Duration) (q drained.Query, wait time.Duration, missingOK bool, err error) {
	q, wait, err = drainedServer(v, nodeMode, limit)
	if err != nil {
		return q, 0, false, err
	}
	switch s := v.Get("missingOk"); s {
	case "", "false":
	case "true":
		missingOK = true
	default:
		return q, 0, false, fmt.Errorf("missingOk %q: want true or false", trigger.Short(s))
	}
	return q, wait, missingOK, nil
}

// drainedServer reads which server GET /drained asks for, and the wait.
func drainedServer(v url.Values, nodeMode bool, limit time.Duration) (drained.Query, time.Duration, error) {
	for k, vals := range v {
		if k != "node" && k != "ip" && k != "wait" && k != "missingOk" {
			return drained.Query{}, 0, fmt.Errorf("unknown parameter %q: want node, ip, wait, missingOk", trigger.Short(k))
		}
		if len(vals) > 1 {
			return drained.Query{}, 0, fmt.Errorf("parameter %q given %d times", k, len(vals))
		}
	}
	node, ip := v.Get("node"), v.Get("ip")
	var q drained.Query
	switch {
	case (node == "") == (ip == ""):
		return q, 0, fmt.Errorf("give exactly one of node= (node mode) and ip= (a pod's or a Node's address)")
	case node != "" && !nodeMode:
		return q, 0, fmt.Errorf("node= needs TARGET_ADDRESS=node; in pod mode give the pod's ip=")
	case node != "":
		if errs := validation.IsDNS1123Subdomain(node); len(errs) > 0 {
			return q, 0, fmt.Errorf("node %q: not a Node name", trigger.Short(node))
		}
		q.Server = node // its server's names are the checker's to know (drained.Checker.Names)
	default:
		addr, err := netip.ParseAddr(ip)
		if err != nil || addr.Zone() != "" || addr.String() != ip {
			return q, 0, fmt.Errorf("ip %q: not an IP address in canonical form", trigger.Short(ip))
		}
		q.Address = addr
	}
	wait := time.Duration(0)
	if s := v.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return q, 0, fmt.Errorf("wait %q: want a duration such as 20s", trigger.Short(s))
		}
		wait = min(d, limit)
	}
	return q, wait, nil
}
