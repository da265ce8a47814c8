package history

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// Invariant names one guarantee as the checker checks it; docs/guarantees.md
// says which guarantee each one stands for.
type Invariant string

const (
	// CheckedFirst (a): no client connection reaches a pod's process that
	// no health check reached since it began to listen.
	CheckedFirst Invariant = "checked-before-traffic"
	// NoFailedRequest (b, c): a request fails only while no ready pod has
	// answered for Bounds.Entry, within Bounds.Abrupt of a pod's death, or
	// (runtime driver) within Bounds.Reload of a reload by others that lost
	// servers (reloadExcuse: in slot histories, one that saved the state
	// with every server in a slot loses none).
	NoFailedRequest Invariant = "no-failed-request"
	// InService (c, h): a ready pod that answers takes traffic within
	// Bounds.Entry of becoming so (and of a reload by others), and keeps
	// taking its share while requests flow.
	InService Invariant = "ready-pod-in-service"
	// LocalFirst: with HAPROXY_LOCAL_ZONE, a pod of another zone (a
	// backup server) takes no client while a pod of the local zone has been
	// ready and answering for its entry bound.
	LocalFirst Invariant = "local-zone-first"
	// DefaultServerKept: every connection a server makes, check or client,
	// carries what haproxy.cfg's default-server line gives it (PROXY v2).
	DefaultServerKept Invariant = "default-server-kept"
	// HealthPortSpoken (Setup.HealthPort): every check of a Node's health
	// check port is a plain HTTP request, which kube-proxy answers; a PROXY
	// header first (check-send-proxy) is answered 400 and takes the Node
	// out though it serves.
	HealthPortSpoken Invariant = "health-port-spoken"
	// OthersUntouched (d): a server the service does not own (static,
	// another CLUSTER_NAME's) is never changed.
	OthersUntouched Invariant = "others-untouched"
	// Converges (e): once the history is quiet, HAProxy runs what
	// Kubernetes says within Bounds.Converge, haproxy.cfg holds what runs
	// (Data Plane driver), and again after one more reload by others.
	Converges Invariant = "converges"
	// FailuresExplained: a reconcile fails on a target only for what the
	// history did to it, each excuse bounded (failureExcuse): the target
	// hung, its API refused a write, it reloaded, or HAProxy refused the
	// refused pod's server and nothing else. Two writers colliding, or one
	// bad server failing the others', are not excused.
	FailuresExplained Invariant = "failures-explained"
	// GateTruthful (POD_READINESS_GATE): once the history is quiet every
	// ready pod that answers has its gate True (Converges waits for it),
	// and a pod whose server HAProxy refused never has it True.
	GateTruthful Invariant = "gate-truthful"
	// OneBadItem: a client never reaches the pod whose server HAProxy
	// refused (there is no server for it).
	OneBadItem Invariant = "one-bad-item"
	// OutOfTraffic (make-before-break, from its other side): a pod
	// Kubernetes holds terminating or not ready — in node mode a Node with
	// no ready pod, or drained by a taint, a cordon, a pin or the exclude
	// label — takes no new client once Bounds.Entry passed, while another
	// pod of this instance has been ready and answering past its own entry.
	OutOfTraffic Invariant = "out-of-traffic"
	// ReloadsAsPromised (Data Plane driver with a working socket and no
	// default-server line): the API reloads HAProxy only for what the
	// runtime cannot carry — a deletion, or a burst of more than
	// dataplane.MaxRuntimeAdds servers in one transaction, or a backend's
	// settings (HAPROXY_BALANCE: once per backend and writer,
	// evalOptions.SettingsWrites); churn within that (adds, moves,
	// weights, states) costs no reload. A forced reload is never the
	// service's.
	ReloadsAsPromised Invariant = "reloads-as-promised"
	// WatchResumes (serve histories): a watch answered 410 Gone lists
	// again and resumes from the list, so each is answered 410 at most
	// once per compaction of etcd (expiredBound); one resumed from the
	// version it lost is answered 410 at every restart, a poke each.
	WatchResumes Invariant = "watch-resumes"
	// SessionsKept (pod mode): a long-lived session is cut only when its
	// pod's process exits, its HAProxy is killed, or its pod has been out
	// of Kubernetes for HAPROXY_DRAIN_TIMEOUT (above 0); parking, draining,
	// reloads and the service's own restarts keep it (sessionsEvaluate).
	SessionsKept Invariant = "sessions-kept"
	// DrainBounded (HAPROXY_DRAIN_TIMEOUT above 0): a session through a pod
	// out of Kubernetes is shut within the timeout and drainSlack, unless
	// its HAProxy reloaded meanwhile (the old worker keeps it).
	DrainBounded Invariant = "drain-bounded"
)

// Violation is one invariant that did not hold.
type Violation struct {
	Invariant Invariant
	Target    int // the HAProxy it was seen through
	At        time.Time
	// Step is the index of the last step applied before At (-1: none).
	Step int
	What string
	// Count is how many more like it followed, each within a second of
	// the one before (a burst of failed requests).
	Count int
	// HAProxy is what HAProxy logged of the connections around a failed
	// request (see haproxySaw).
	HAProxy []string
}

func (v Violation) String() string {
	more := ""
	if v.Count > 0 {
		more = fmt.Sprintf(" (and %d more within a second of each other)", v.Count)
	}
	s := fmt.Sprintf("%s after step %d at %s: %s%s", v.Invariant, v.Step, v.At.Format("15:04:05.000"), v.What, more)
	for _, l := range v.HAProxy {
		s += "\n      haproxy: " + l
	}
	return s
}

// Bounds are the times the invariants allow, from the shipped check settings.
type Bounds struct {
	Entry, Move, Abrupt, Reload, Converge time.Duration
}

// BoundsOf returns the bounds for check c. A server enters service after
// rise passed checks, the first one downinter after it is added, the next
// fastinter later; a dead one leaves after at most inter plus fall fast
// checks. The rest is the service's reaction and scheduling on a loaded
// machine.
func BoundsOf(c model.Check) Bounds {
	// 1.5 s for the service's reaction and a loaded machine (make test
	// runs this under the race detector on 2 cores): the defects this
	// bound is for cost 10 s and more.
	entry := c.DownInter + time.Duration(c.Rise-1)*c.FastInter + 1500*time.Millisecond
	return Bounds{
		Entry: entry,
		// A server that moves was UP: HAProxy's next check of it is the
		// one already scheduled, up to inter away, whatever the gate does
		// (seen on 2.6.12: disable and enable health do not bring it
		// forward).
		Move:     c.Inter + time.Duration(c.Rise-1)*c.FastInter + 1500*time.Millisecond,
		Abrupt:   c.Inter + time.Duration(c.Fall)*c.FastInter + 300*time.Millisecond,
		Reload:   entry,
		Converge: 10 * time.Second,
	}
}

// Why a failed request breaks no invariant.
const (
	ExcuseDeath = "a pod died" // within Bounds.Abrupt of a ready pod's death
	// ExcuseDeathInFlight: a ready pod died while the request was under
	// way (sent before, failed after): it may have been the pod's, and a
	// black hole keeps it waiting for the client's whole timeout, past
	// Bounds.Abrupt. Bounded by the request's own life (the client's
	// dial and read timeouts): one request per client at most.
	ExcuseDeathInFlight = "a pod died under it"
	// ExcuseBlackHoleSent: a request sent within Bounds.Abrupt after a
	// pod died as a black hole (Setup.BlackHoles), before HAProxy's check
	// could find it down: routed there, it waits out HAProxy's connect
	// timeouts and retries past Bounds.Abrupt. Bounded by when it was sent,
	// and it lasted a connect timeout at least (connectTimeout).
	ExcuseBlackHoleSent = "sent to a black hole not yet found down"
	// ExcuseUnnoticed (Setup.HealthPort): the request began while a Node's
	// pods had died and Kubernetes still held one of them ready, or within
	// Bounds.Abrupt after it noticed: kube-proxy answers the health check
	// port from Kubernetes' view, so HAProxy's check passes meanwhile, as
	// a cloud load balancer's does.
	ExcuseUnnoticed  = "a pod died unnoticed behind a Node's health check port"
	ExcuseNoReadyPod = "no ready pod"       // no pod ready and answering for Bounds.Entry
	ExcuseReload     = "a reload by others" // runtime driver, within Bounds.Reload of one that lost the state
	ExcuseHung       = "its target hung"    // the target hangs, or did within HungAfter
	// ExcuseReloadLoadsUp: within Bounds.Abrupt of a reload, while a pod
	// Kubernetes says is ready does not answer (HAProxy loads it UP until
	// its first check; a server-state-file would keep it DOWN).
	ExcuseReloadLoadsUp = "a reload loaded a dead pod UP"
	// ExcuseAPIRefused: the target's Data Plane API refused every write for
	// longer than a server's entry (an outage, not a refused write now and
	// then), and within Bounds.Entry of the first write it took again.
	// The Data Plane driver waits for its API: it does not carry
	// Kubernetes changes through the socket alone meanwhile.
	ExcuseAPIRefused = "its Data Plane API refused every write"
	// ExcuseKubeDown (serve histories): the API server was unreachable
	// from the service, or was within kubeRecovery and the entry bound of
	// coming back: the service carries no change it cannot read, and its
	// watch comes back after its backoff.
	ExcuseKubeDown = "Kubernetes unreachable"
	// ExcuseKubeDownReload (serve histories, runtime driver, no saved
	// slots): a reload by others dropped the servers while Kubernetes was
	// unreachable from the service; they come back only once it reads
	// Kubernetes again (the outage, kubeRecovery and the entry bound).
	ExcuseKubeDownReload = "a reload by others while Kubernetes was unreachable"
	// ExcuseRestart: the target's HAProxy was down for a restart (killed,
	// then started again from haproxy.cfg), from its kill until it listens
	// again and restartMargin after; then it is judged as after a reload
	// by others.
	ExcuseRestart = "its HAProxy restarted"
	// ExcuseDown (serve histories): the target's admin socket or Data
	// Plane API refused every connection (SocketDown, APIDown) while its
	// HAProxy served on, or came back within downRecovery and the entry
	// bound; a failed request is excused only while no pod the service had
	// in service before it went down still answers.
	ExcuseDown = "its socket or API was down"
	// ExcuseDownInFlight: a request through a target whose socket or API
	// was down (ExcuseDown's window), under way when a pod exited (a
	// terminating one the service could not drain there): nothing may
	// take it over. Bounded by the request's life and the outage.
	ExcuseDownInFlight = "a pod its unreachable target kept exited under it"
	// ExcuseWorkerCrash: a request through a target that ended, failed,
	// within workerCrashMargin before its master said a former worker
	// (one finishing its connections after a reload) crashed, and was
	// sent before that target's last reload (or restart) before the
	// crash ended, so that worker may have held it: HAProxy's own fault
	// (2.6.12, "Former worker exited with code 139", nodes-soak seed
	// 374419967, Data Plane).
	ExcuseWorkerCrash = "HAProxy's former worker crashed"
)

// connectTimeout is haproxy.cfg's timeout connect in the histories
// (haproxytest): a request HAProxy sent to a black hole lasted at least
// that long before it failed (ExcuseBlackHoleSent; the second reader: a
// quick failure is not one).
const connectTimeout = time.Second

// workerCrashMargin bounds how long before the master's word of a former
// worker's crash (polled every 100 ms) a request that crash cut ended.
const workerCrashMargin = time.Second

// crashCodes are the exit codes of a process a fault killed (128 + SIGILL,
// SIGABRT, SIGBUS, SIGFPE, SIGSEGV), not one asked to end (SIGTERM's 143,
// SIGKILL's 137).
var crashCodes = map[int]bool{132: true, 134: true, 135: true, 136: true, 139: true}

// workerCrashes counts the former workers HAProxy's log says crashed (an
// exit with a crash's code), not a plain exit.
func workerCrashes(log string) int {
	n := 0
	for line := range strings.Lines(log) {
		_, rest, ok := strings.Cut(line, "Former worker")
		if !ok {
			continue
		}
		_, code, ok := strings.Cut(rest, "exited with code ")
		if c, err := strconv.Atoi(strings.Fields(code + " x")[0]); ok && err == nil && crashCodes[c] {
			n++
		}
	}
	return n
}

// downRecovery bounds how long after a target's socket or API takes
// connections again the service may wait to try it: a reconcile that
// failed on it is tried again by the follow-up after 1 s, doubled at each
// failure in a row up to 30 s, so the wait under way is at most about
// twice the outage, and a second.
func downRecovery(out [2]time.Time) time.Duration {
	return min(2*out[1].Sub(out[0])+time.Second, 30*time.Second)
}

// restartMargin is how long after a restarted HAProxy listens a request
// may still fail for its being down (one sent just before).
const restartMargin = 100 * time.Millisecond

// kubeRecovery bounds how long after the API server is reachable again the
// service's watch may still be waiting to restart: its backoff doubles from
// 0.25 s while it fails, so the wait under way is about as long as the
// outage so far (30 s at most), jitter and a list on top.
func kubeRecovery(out [2]time.Time) time.Duration {
	return min(out[1].Sub(out[0]), 30*time.Second) + 500*time.Millisecond
}

// kubeOutageAt is the outage at falls in, or within kubeRecovery and after
// of its end; nil when none.
func kubeOutageAt(outages [][2]time.Time, at time.Time, after time.Duration) *[2]time.Time {
	for i, o := range outages {
		if !at.Before(o[0]) && !at.After(o[1].Add(kubeRecovery(o)+after)) {
			return &outages[i]
		}
	}
	return nil
}

// servedThrough says whether a pod the service had in service before the
// outage began (available past its entry then) is still available at at:
// HAProxy has a server that answers, whatever the service could not read,
// so a failed request is not the outage's doing.
func servedThrough(pods map[int]*podTrack, b Bounds, out *[2]time.Time, at time.Time) bool {
	if out == nil {
		return false
	}
	for _, p := range pods {
		if p.available() && !p.since.IsZero() && p.since.Add(p.entry(b)).Before(out[0]) && !at.Before(p.since) {
			return true
		}
	}
	return false
}

// kubeOutages are the spans in which the API server was unreachable from
// the service (obsKube): from KubeDown to KubeUp, or the last observation.
func kubeOutages(all []obs) [][2]time.Time {
	var out [][2]time.Time
	var since, last time.Time
	for _, o := range all {
		last = o.at
		if o.kind != obsKube {
			continue
		}
		switch {
		case o.hung && since.IsZero():
			since = o.at
		case !o.hung && !since.IsZero():
			out = append(out, [2]time.Time{since, o.at})
			since = time.Time{}
		}
	}
	if !since.IsZero() {
		out = append(out, [2]time.Time{since, last})
	}
	return out
}

// Evaluation is what the invariants found in one history.
type Evaluation struct {
	Violations []Violation
	// Excused counts the failed requests by the excuse that allowed them.
	Excused map[string]int
	// ReloadCost is the longest a reload by others made requests fail,
	// from its start to the last failed request it excused.
	ReloadCost time.Duration
	// SlotReloads counts a slot history's reloads by others by what they
	// kept (reloadKind).
	SlotReloads map[string]int
	// Sessions counts the long-lived sessions judged (sessionsEvaluate).
	Sessions int
}

// stateName names a pod state in a violation.
func stateName(s podState) string {
	switch s {
	case terminating:
		return "terminating"
	case notReady, noticed:
		return "not ready"
	case absent:
		return "out of Kubernetes"
	}
	return "ready"
}

// reloadBroken says why a reload the Data Plane API was asked for (what
// OnReloadAsked says asked it) breaks ReloadsAsPromised; empty when the
// runtime could not have carried it: a deletion, or a transaction of more
// than dataplane.MaxRuntimeAdds server writes.
//
// settings: the reload carries a backend's settings (HAPROXY_BALANCE's
// balance and check), which the runtime cannot; evaluate bounds how many
// (evalOptions.SettingsWrites).
func reloadBroken(asked string) (why string, settings bool) {
	f := strings.Fields(asked)
	switch {
	case len(f) == 0:
		return "nothing said", false
	case f[0] == "forced":
		return "a forced reload", false
	}
	servers, deletes := 0, false
	for _, op := range f {
		switch {
		case strings.HasPrefix(op, "delete"):
			deletes = true
		case op == "createServerBackend" || op == "replaceServerBackend":
			servers++
		case op == "replaceBackend":
			settings = true
		}
	}
	if deletes || settings || f[0] == "commit" && servers > dataplane.MaxRuntimeAdds {
		return "", settings
	}
	return "churn the runtime carries", false
}
