package history

import (
	"cmp"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// podTrack is one pod as the evaluation walks through the observations:
// what Kubernetes and its process say, the same for every target.
type podTrack struct {
	state podState
	inK8s bool
	alive bool
	since time.Time // when it became ready and alive; zero when not
	moved bool      // its server moved to it (Bounds.Move applies)
	// nodeOut (node mode): its Node takes no new clients for something
	// beside its pods (a taint, a cordon drained, a pin, the exclude label).
	nodeOut bool
	// outSince: since when Kubernetes holds it terminating or not ready
	// (zero: ready or absent); outSaid: OutOfTraffic was reported for it.
	outSince time.Time
	outSaid  bool
}

func (p *podTrack) available() bool { return p.inK8s && p.state == live && p.alive && !p.nodeOut }

// entry is how long p may take to enter service.
func (p *podTrack) entry(b Bounds) time.Duration {
	if p.moved {
		return b.Move
	}
	return b.Entry
}

// seen is one pod as one target's traffic reached it.
type seen struct {
	checked  bool      // a check of this target reached it since it began to listen
	lastHit  time.Time // its last client connection through this target
	hitCount int       // the target's answered requests when it was last hit, or became available
	reported bool      // an InService violation was reported for this availability
	// everChecked: a check of this target reached it once, whenever: its
	// server has been in service, haproxy.cfg may hold it so.
	everChecked bool
}

// targetTrack is one target as the evaluation walks.
type targetTrack struct {
	pods map[int]*seen
	// crashes: when its master was seen saying a former worker crashed
	// (read ahead: a request that crash cut ended before).
	crashes     []time.Time
	reloadEnds  []time.Time // when each of its reloads (by others, by the API) or restarts ended
	answered    int
	reloads     [][2]time.Time // start and end of each reload by others
	reloadStart time.Time
	// reloadWhy is what each reload by others excuses (reloadExcuse),
	// startWhy the one under way's.
	reloadWhy []string
	startWhy  string
	// reloadOverflow and startOverflow are the pods whose servers each
	// had outside the slots (slot histories: ExcuseOverflow).
	reloadOverflow [][]int
	startOverflow  []int
	hungSince      time.Time // zero when not hung
	unhungAt       time.Time
	lastFail       time.Time
	lastBackup     time.Time      // the last LocalFirst violation
	lastSeen       time.Time      // the last violation a pod or monitor saw
	lastReload     time.Time      // the end of its last reload, by others or by the API
	apiReload      time.Time      // the start of a reload by the API under way; zero when none
	outages        [][2]time.Time // its API refused every write from [0] to [1] (apiOutages)
	refusals       []refusal      // its API's runs of refused writes, however short
	lastFault      time.Time      // its API's last refused write (an injected fault)
	// restartSince: its HAProxy was killed to restart and does not listen
	// yet (TargetRestart); restarts: from each kill until it listened.
	restartSince time.Time
	restarts     [][2]time.Time
	// downParts: its socket or API refusing connections now (obsDown);
	// downs: each span in which one of them did, the last one open
	// (zero end) while it lasts.
	downParts map[string]bool
	downs     [][2]time.Time
}

// downAt is tt's socket-or-API outage that at falls in, or whose
// downRecovery and after at falls within; nil when none.
func (tt *targetTrack) downAt(at time.Time, after time.Duration) *[2]time.Time {
	for i := len(tt.downs) - 1; i >= 0; i-- {
		d := tt.downs[i]
		if at.Before(d[0]) {
			continue
		}
		if d[1].IsZero() {
			return &[2]time.Time{d[0], at}
		}
		if !at.After(d[1].Add(downRecovery(d) + after)) {
			return &tt.downs[i]
		}
	}
	return nil
}

// recoverableFrom is when the service could first restore what a reload by
// others ending at end dropped: then, or, the target's socket or API down
// at the time, once it is back and noticed (downRecovery); never while it
// is still down.
func (tt *targetTrack) recoverableFrom(end time.Time) time.Time {
	for _, d := range tt.downs {
		if end.Before(d[0]) || !d[1].IsZero() && end.After(d[1]) {
			continue
		}
		if d[1].IsZero() {
			return end.Add(365 * 24 * time.Hour)
		}
		return d[1].Add(downRecovery(d))
	}
	return end
}

// hitSince says whether a client reached a pod, the static server aside,
// through the target after end: what a reload by others dropped was back.
func (tt *targetTrack) hitSince(end time.Time) bool {
	for n, sn := range tt.pods {
		if n != staticPod && sn.lastHit.After(end) {
			return true
		}
	}
	return false
}

// apiOutages are the spans, per target, in which a Data Plane API refused
// every write for at least least: from its first refused write to the
// service's next write, which the retry schedule bounds (retryAfter: the
// judge's figure, not the time the service took, so a service slow to try
// again is not excused for it).
func apiOutages(all []obs, targets int, least time.Duration) [][][2]time.Time {
	out := make([][][2]time.Time, targets)
	for i, rr := range refusals(all, targets) {
		for _, r := range rr {
			if end := r.last.Add(retryAfter(r.n)); end.Sub(r.first) >= least {
				out[i] = append(out[i], [2]time.Time{r.first, end})
			}
		}
	}
	return out
}

// refusal is a run of writes one target's Data Plane API refused (injected
// faults), ended by a write it took or by the history's end.
type refusal struct {
	first, last time.Time
	n           int // writes refused
}

// refusals are, per target, its API's runs of refused writes, however
// short: each delays what the service writes by its retries.
func refusals(all []obs, targets int) [][]refusal {
	out := make([][]refusal, targets)
	open := make([]bool, targets)
	for _, o := range all {
		if o.kind != obsAPIWrite {
			continue
		}
		i := min(o.target, targets-1)
		switch {
		case o.refused && open[i]:
			r := &out[i][len(out[i])-1]
			r.last, r.n = o.at, r.n+1
		case o.refused:
			out[i] = append(out[i], refusal{first: o.at, last: o.at, n: 1})
			open[i] = true
		default:
			open[i] = false
		}
	}
	return out
}

// retryAfter is the longest the service may wait to try again after n
// writes in a row were refused: the documented retry schedule
// (docs/faults.md: 50 ms doubling at each failure, 2 s at most, 20 %
// jitter). The judge keeps its own figures: a slower schedule in the
// service is a delay the invariants still see.
func retryAfter(n int) time.Duration {
	d := 2 * time.Second
	if n >= 1 && n <= 6 {
		d = min(d, 50*time.Millisecond<<(n-1))
	}
	return d + d/5
}

// apiRefusing says whether at falls in one of tt's API outages or within
// after of its end.
func (tt *targetTrack) apiRefusing(at time.Time, after time.Duration) bool {
	for _, o := range tt.outages {
		if !at.Before(o[0]) && !at.After(o[1].Add(after)) {
			return true
		}
	}
	return false
}

// reloadedWithin says whether a reload of tt (by others or by its API)
// was under way at at or ended within d before it.
func (tt *targetTrack) reloadedWithin(at time.Time, d time.Duration) bool {
	return !tt.reloadStart.IsZero() || !tt.apiReload.IsZero() || !tt.lastReload.IsZero() && at.Sub(tt.lastReload) <= d
}

// restarting says whether tt's HAProxy was down at at for a restart: from
// its kill until it listened again, and restartMargin after (a request
// under way when it came back).
func (tt *targetTrack) restarting(at time.Time) bool {
	if !tt.restartSince.IsZero() && !at.Before(tt.restartSince) {
		return true
	}
	for _, r := range tt.restarts {
		if !at.Before(r[0]) && !at.After(r[1].Add(restartMargin)) {
			return true
		}
	}
	return false
}

func (tt *targetTrack) pod(n int) *seen {
	if tt.pods[n] == nil {
		tt.pods[n] = &seen{}
	}
	return tt.pods[n]
}

// HungAfter is how long after a target stopped hanging it may still lag:
// the retry after failed reconciles (1 s, then 2 s) and one reconcile.
const HungAfter = 10 * time.Second

// evalOptions is what evaluate needs to know of the history's setup.
type evalOptions struct {
	Bounds Bounds
	// RuntimeOnly: the servers live in the running HAProxy alone (runtime
	// driver): a reload by others empties the backend until the service
	// adds them again, and Bounds.Reload allows for it.
	RuntimeOnly bool
	// Slots: be's servers are slots (slot histories): a reload that
	// saved the state drops only the servers beyond them (reloadExcuse).
	Slots   bool
	Targets int
	// Zones: pods outside the local zone are backups (zoneOf).
	Zones bool
	// Refused is the pod whose server HAProxy refuses (Config.Refused);
	// RefusedName its name (a Recreate may have given it an older pod's).
	Refused     int
	RefusedName string
	// MaxServers is MAX_SERVERS when it may bind (Config.MaxServers): it
	// counts this instance's servers (the plan's, owned by its prefix).
	MaxServers int
	// TargetOf names a target by its index, from a driver's name (-1:
	// unknown).
	TargetOf func(name string) int
	// Nodes, when not 0, is node mode: the pods run on that many Nodes
	// (nodeOf), HAProxy's servers are the Nodes; Weight is
	// HAPROXY_WEIGHT=endpoints.
	Nodes  int
	Weight bool
	// HealthPort: HAProxy checks Nodes on the Service's
	// healthCheckNodePort, which kube-proxy answers from Kubernetes' view:
	// a Node whose pods died unnoticed takes clients until Kubernetes
	// holds none of them ready (ExcuseUnnoticed).
	HealthPort bool
	// BlackHoles (Setup.BlackHoles): a killed pod of even number dies as
	// a black hole, which a Node's checks through kube-proxy may reach.
	BlackHoles bool
	// Reloads: the Data Plane API's reloads are judged (ReloadsAsPromised).
	Reloads bool
	// SettingsWrites is how many reloads for a backend's settings each
	// target may have: with HAPROXY_BALANCE set, one per backend the
	// service writes and per writer (two that read the old settings at
	// once may both write them); else 0, none is the service's.
	SettingsWrites int
	// Drain is HAPROXY_DRAIN_TIMEOUT and Guard the deletion guard on
	// (sessionsEvaluate).
	Drain time.Duration
	Guard bool
}

// evaluate checks the observations of a history against the invariants.
func evaluate(all []obs, opt evalOptions) Evaluation {
	b, targets := opt.Bounds, opt.Targets
	// local is the service's local zone; a Crash with "rezone" changes it,
	// and every server's role with it: the old roles serve until their
	// replacements do (a hand-over), Bounds.Converge at most (rezonedAt).
	local := localZone
	var rezonedAt time.Time
	// The static server is haproxy.cfg's, active whatever the zones: never
	// a backup, and while it answers no backup serves (soak seed
	// 971962119: after a rezone its clients were judged a backup's).
	backup := func(n int) bool { return opt.Zones && n != staticPod && zoneOf(n) != local }
	ev := Evaluation{Excused: map[string]int{}, SlotReloads: map[string]int{}}
	// capUntil: MAX_SERVERS binds (more pods, or Nodes, in Kubernetes than
	// it), or did within Bounds.Converge before: a pod may have no server
	// meanwhile.
	var capUntil time.Time
	inK8s := 0
	var deaths []time.Time
	// blackDeaths: the deaths of pods that died as black holes
	// (opt.BlackHoles: the even ones), a Node's in node mode.
	var blackDeaths []time.Time
	blackHole := func(n int) bool { return opt.BlackHoles && n != staticPod && n%2 == 0 }
	var stops []time.Time // every pod's process stopping, ready or not
	sort.SliceStable(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	pods := map[int]*podTrack{}
	// Node mode: whether each Node serves and is labelled out (obsNode).
	nodeOut, excluded := map[int]bool{}, map[int]bool{}
	settingsWrites := map[int]int{} // by target (SettingsWrites)
	nodeOf := func(n int) int { return nodeOf(n, opt.Nodes, opt.Zones) }
	track := func(n int) *podTrack {
		if pods[n] == nil {
			pods[n] = &podTrack{state: absent, nodeOut: opt.Nodes > 0 && n != staticPod && nodeOut[nodeOf(n)]}
		}
		return pods[n]
	}
	// servers counts what the servers are for among what Kubernetes holds:
	// pods, or in node mode the Nodes hosting them that are not labelled
	// out (MAX_SERVERS counts servers).
	// answering (node mode) says whether Node k's kube-proxy has a pod to
	// hand a connection to: a ready one that answers, else (none ready) a
	// terminating one. When it loses the last one while Kubernetes still
	// holds a ready pod there, the Node dies for HAProxy as a pod does in
	// pod mode: its server takes clients until its check fails (deaths).
	answering := func(k int) bool {
		ready, readyAlive, termAlive := false, false, false
		for n, p := range pods {
			if n == staticPod || nodeOf(n) != k || !p.inK8s {
				continue
			}
			switch p.state {
			case live:
				ready = true
				readyAlive = readyAlive || p.alive
			case terminating:
				termAlive = termAlive || p.alive
			}
		}
		if ready {
			return readyAlive
		}
		return termAlive
	}
	// outSince (node mode): since when each Node takes no new client,
	// for its flags or for having no ready pod; outSaid: reported.
	outSince, outSaid := map[int]time.Time{}, map[int]bool{}
	nodeTraffic := func(k int, at time.Time) {
		out := nodeOut[k]
		if !out {
			out = true
			for n, p := range pods {
				if n != staticPod && nodeOf(n) == k && p.inK8s && p.state == live {
					out = false
				}
			}
		}
		switch {
		case !out:
			outSince[k], outSaid[k] = time.Time{}, false
		case outSince[k].IsZero():
			outSince[k] = at
		}
	}
	nodeAnswered := map[int]bool{}
	// deadReadyAt (node mode): by Node, the last answered request while a
	// pod Kubernetes held ready there was dead (ready-pod-in-service).
	deadReadyAt := map[int]time.Time{}
	nodeStopped := map[int]time.Time{} // when each Node's kube-proxy last stopped
	// unnoticed (HealthPort): each death of a Node HAProxy's check cannot
	// see, from the death to when Kubernetes held no ready pod there or
	// one answered again (zero: not yet).
	type unnoticedDeath struct {
		k           int
		from, until time.Time
	}
	var unnoticed []unnoticedDeath
	readyInK8s := func(k int) bool {
		for n, p := range pods {
			if n != staticPod && nodeOf(n) == k && p.inK8s && p.state == live {
				return true
			}
		}
		return false
	}
	nodeDeath := func(n int, at time.Time) {
		if opt.Nodes == 0 || n == staticPod {
			return
		}
		k := nodeOf(n)
		now := answering(k)
		if nodeAnswered[k] && !now {
			deaths = append(deaths, at)
			if blackHole(n) {
				blackDeaths = append(blackDeaths, at)
			}
			if opt.HealthPort {
				unnoticed = append(unnoticed, unnoticedDeath{k: k, from: at})
			}
		}
		nodeAnswered[k] = now
		for i := range unnoticed {
			if u := &unnoticed[i]; u.k == k && u.until.IsZero() && (now || !readyInK8s(k)) {
				u.until = at
			}
		}
	}
	// inUnnoticed says whether Node k's pods had died unnoticed at at:
	// until Kubernetes noticed, and Bounds.Abrupt more for HAProxy's
	// check to fail on the 503 (or the service to park the server).
	inUnnoticed := func(k int, at time.Time) bool {
		for _, u := range unnoticed {
			if u.k == k && !at.Before(u.from) && (u.until.IsZero() || !at.After(u.until.Add(b.Abrupt))) {
				return true
			}
		}
		return false
	}
	// emptied are, by target, when a Node in such a window had no pod
	// for a client of it (obsNodeEmpty): the failures ExcuseUnnoticed
	// may excuse are those of that target and moment, no others.
	emptied := map[int][]time.Time{}
	unnoticedAt := func(target int, began, at time.Time) bool {
		for _, e := range emptied[target] {
			if !e.Before(began.Add(-50*time.Millisecond)) && !e.After(at) {
				return true
			}
		}
		return false
	}
	servers := func() int {
		if opt.Nodes == 0 {
			return inK8s
		}
		hosting := map[int]bool{}
		for n, p := range pods {
			if k := nodeOf(n); p.inK8s && n != staticPod && !excluded[k] {
				hosting[k] = true
			}
		}
		return len(hosting)
	}
	capNow := func(at time.Time) {
		if opt.MaxServers > 0 && servers() > opt.MaxServers {
			capUntil = at.Add(time.Hour)
		} else if capUntil.After(at.Add(b.Converge)) {
			capUntil = at.Add(b.Converge)
		}
	}
	kubeOut := kubeOutages(all)
	// kubeDown says whether at falls in a Kubernetes outage or within
	// after of its recovery.
	kubeDown := func(at time.Time, after time.Duration) bool {
		return kubeOutageAt(kubeOut, at, after) != nil
	}
	tts := make([]*targetTrack, max(targets, 1))
	outages := apiOutages(all, len(tts), b.Entry)
	refused := refusals(all, len(tts))
	for i := range tts {
		tts[i] = &targetTrack{pods: map[int]*seen{}, outages: outages[i], refusals: refused[i]}
	}
	for _, o := range all {
		tt := tts[min(o.target, len(tts)-1)]
		switch {
		case o.kind == obsWorkerCrash:
			tt.crashes = append(tt.crashes, o.at)
		case o.kind == obsReload, o.kind == obsAPIReload, o.kind == obsRestart && !o.hung:
			tt.reloadEnds = append(tt.reloadEnds, o.at)
		}
	}
	// crashCut says whether a former worker's crash on tt may have cut a
	// request sent at began that failed at at: the crash was said within
	// workerCrashMargin after, and the request was sent before the last
	// reload before the crash ended (the worker it reached became former).
	crashCut := func(tt *targetTrack, began, at time.Time) bool {
		for _, c := range tt.crashes {
			if at.After(c) || c.Sub(at) > workerCrashMargin {
				continue
			}
			var last time.Time
			for _, r := range tt.reloadEnds {
				if !r.After(c) {
					last = r
				}
			}
			if !last.IsZero() && !began.After(last) {
				return true
			}
		}
		return false
	}
	step := -1
	reachedOther := map[[2]int]bool{} // target, pod: reported once
	add := func(inv Invariant, target int, at time.Time, format string, args ...any) {
		what := fmt.Sprintf(format, args...)
		if targets > 1 {
			what = fmt.Sprintf("target %d: %s", target, what)
		}
		ev.Violations = append(ev.Violations, Violation{Invariant: inv, Target: target, At: at, Step: step, What: what})
	}
	becomes := func(n int, p *podTrack, at time.Time, was bool) {
		now := p.available()
		switch {
		case now && !was:
			p.since = at
			for _, tt := range tts {
				sn := tt.pod(n)
				sn.hitCount, sn.reported = tt.answered, false
			}
		case !now:
			p.since = time.Time{}
		}
	}
	// lags says whether target tt may lag behind at at, and why, each
	// reason that holds, first first: it hangs (or just stopped), its API
	// refuses, a reload by others dropped its servers, its socket or API
	// is down, Kubernetes is unreachable from the service. lagging is the
	// first.
	lags := func(tt *targetTrack, at time.Time) []string {
		var out []string
		if !tt.hungSince.IsZero() || !tt.unhungAt.IsZero() && at.Sub(tt.unhungAt) <= HungAfter {
			out = append(out, ExcuseHung)
		}
		if tt.apiRefusing(at, b.Entry) {
			out = append(out, ExcuseAPIRefused)
		}
		// A reload's lag first: it has its own bound, beside an outage too
		// (an outage's excuse is restricted where its pods still serve).
		if why, _, _ := tt.reloadLag(at, b.Reload); why != "" {
			out = append(out, why)
		}
		if tt.downAt(at, b.Entry) != nil {
			out = append(out, ExcuseDown)
		}
		if kubeDown(at, b.Entry) {
			out = append(out, ExcuseKubeDown)
		}
		return out
	}
	lagging := func(tt *targetTrack, at time.Time) string {
		if l := lags(tt, at); len(l) > 0 {
			return l[0]
		}
		return ""
	}
	// excuse says why a failed request through tt at at breaks no
	// invariant; empty when nothing does.
	excuse := func(tt *targetTrack, at time.Time) string {
		if tt.restarting(at) {
			return ExcuseRestart
		}
		if out := kubeOutageAt(kubeOut, at, b.Entry); out != nil {
			// The runtime driver re-adds what a reload dropped only from
			// a Kubernetes read: not before the service reads again. A
			// reload while the target's socket was down counts from its
			// return, noticed (serve-soak seed 280120534 on 2.6.12: the
			// socket came back as Kubernetes became unreachable). So
			// does one whose recovery (b.Reload) the outage cut: the
			// servers re-added wait in drain for a reconcile to put them
			// in service (serve-soak seed 772009266 on 3.0.11: a reload
			// 0.35 s before the outage).
			if end, ok := tt.lastDropped(); ok && !tt.recoverableFrom(end).Add(b.Reload).Before(out[0]) && !end.After(at) && !tt.hitSince(end) {
				return ExcuseKubeDownReload
			}
		}
		// A pod in service before an outage of the target's socket or
		// API serves through it, unless a reload by others dropped its
		// server meanwhile, or just before, the outage cutting the
		// reload's recovery (b.Reload; serve-soak seed 374419966 on
		// 2.6.12, runtime: a reload 0.2 s before the socket went):
		// nothing restores it before the target is back.
		dropped := func(out *[2]time.Time) bool {
			end, ok := tt.lastDropped()
			return ok && out != nil && !tt.recoverableFrom(end).Add(b.Reload).Before(out[0]) && !end.After(at) && !tt.hitSince(end)
		}
		// Each reason with its own restriction: one refused does not
		// hide the next (serve-soak seed 374419966 on 2.6.12, Data Plane:
		// a pod Kubernetes readied while unreachable, the target's socket
		// down 0.2 s after Kubernetes came back; the socket's excuse,
		// refused for that pod, hid Kubernetes').
		for _, why := range lags(tt, at) {
			if (why != ExcuseOverflow || !tt.keptServing(pods, b, at)) &&
				(why != ExcuseKubeDown || !servedThrough(pods, b, kubeOutageAt(kubeOut, at, b.Entry), at)) &&
				(why != ExcuseDown || !servedThrough(pods, b, tt.downAt(at, b.Entry), at) || dropped(tt.downAt(at, b.Entry))) {
				return why
			}
		}
		for _, d := range deaths {
			if !at.Before(d) && at.Sub(d) <= b.Abrupt {
				return ExcuseDeath
			}
		}
		// A reload loads every server haproxy.cfg has in service UP, a
		// dead node's too (Kubernetes still says ready), until its first
		// check: retries can all land on dead ones.
		// The new worker takes clients before its reload is over.
		reloading := !tt.reloadStart.IsZero() || !tt.apiReload.IsZero()
		if reloading || !tt.lastReload.IsZero() && at.Sub(tt.lastReload) <= b.Abrupt {
			for n, p := range pods {
				// Node mode: a Node's server is dead only when its
				// kube-proxy has no pod to hand a connection to.
				if p.inK8s && p.state == live && !p.alive && (opt.Nodes == 0 || n == staticPod || !answering(nodeOf(n))) {
					return ExcuseReloadLoadsUp
				}
			}
		}
		deadReady := false // a pod Kubernetes holds ready does not answer
		for n, p := range pods {
			deadReady = deadReady || n != staticPod && p.inK8s && p.state == live && !p.alive
		}
		for n, p := range pods {
			// A rezone starts a fresh process that hands every role over:
			// a pod not past its entry then, and not in service through
			// this target yet, enters as ready-pod-in-service allows after
			// a rezone (slots-soak seed 280120534 on 2.6.12: the only live
			// pod, gated at the rezone, took its check again under its
			// new role). One in service is handed over: counted.
			if due := p.since.Add(p.entry(b)); !rezonedAt.IsZero() && due.After(rezonedAt) && at.Before(rezonedAt.Add(b.Entry+time.Second)) &&
				(tt.pods[n] == nil || tt.pods[n].lastHit.Before(p.since)) {
				continue
			}
			// At a binding cap a ready pod beyond it waits until a server
			// in the cap is found dead (its check failing for
			// plan.DeadReplacement) and gives it room (seed 280120534 on
			// 2.6.12: five servers of pods Kubernetes still held ready,
			// dead, and a draining one filled MAX_SERVERS=6).
			entry := p.entry(b)
			if at.Before(capUntil) && deadReady {
				entry += plan.DeadReplacement
			}
			if p.available() && at.Sub(p.since) >= entry {
				return ""
			}
		}
		return ExcuseNoReadyPod
	}
	// outTaken says why a client that reached what has been out of traffic
	// since since, through tt at at, breaks OutOfTraffic: another pod, not
	// on skip's side, ready and answering well past its entry; empty when
	// nothing does or the target may lag (a hang, an API outage, a reload
	// under way or just done, a rezone, a binding cap).
	outTaken := func(tt *targetTrack, at, since time.Time, skip func(n int) bool) string {
		if since.IsZero() || at.Sub(since) < b.Entry || lagging(tt, at) != "" || !tt.reloadStart.IsZero() || !tt.apiReload.IsZero() ||
			!tt.lastReload.IsZero() && at.Sub(tt.lastReload) <= b.Entry || !rezonedAt.IsZero() && at.Sub(rezonedAt) <= b.Converge || at.Before(capUntil) {
			return ""
		}
		// The static server is another instance's: make-before-break
		// keeps a terminating pod's server in traffic beside it (only
		// this instance's pods replace one).
		for n, q := range pods {
			if n != staticPod && !skip(n) && q.available() && at.Sub(q.since) >= q.entry(b)+time.Second {
				return fmt.Sprintf("%s ready and answering since %s", podName(n), q.since.Format("15:04:05.000"))
			}
		}
		return ""
	}
	for _, o := range all {
		tt := tts[min(o.target, len(tts)-1)]
		if o.pod >= nodeBase {
			// A Node's kube-proxy (node mode): HAProxy's servers are the
			// Nodes, and a Node's server takes a client only after a check
			// of it passed since its kube-proxy began to listen.
			switch o.kind {
			case obsStop:
				nodeStopped[o.pod] = o.at
				// A Node that dies (NodeDown) stops its kube-proxy before
				// its pods: for HAProxy that is the death, a client the
				// closing listener had taken is reset (soak seed 188303918
				// on 3.0.11, nodes-soak runtime: an SD 0.1 s into a
				// node-down, before its pods' processes had stopped).
				if nodeAnswered[o.pod-nodeBase] {
					deaths = append(deaths, o.at)
				}
			case obsListen:
				// Back before HAProxy's checks could fail (Bounds.Abrupt),
				// its server may still be UP: a check is owed only by a
				// Node that was away longer, or listens for the first time.
				if at := nodeStopped[o.pod]; at.IsZero() || o.at.Sub(at) >= b.Abrupt {
					for _, t := range tts {
						t.pod(o.pod).checked = false
					}
				}
			case obsCheck:
				tt.pod(o.pod).checked = true
			case obsNodeEmpty:
				if k := o.pod - nodeBase; opt.HealthPort && inUnnoticed(k, o.at) {
					emptied[o.target] = append(emptied[o.target], o.at)
				}
			case obsClient:
				k := o.pod - nodeBase
				if sn := tt.pod(o.pod); !sn.checked {
					add(CheckedFirst, o.target, o.at, "a client connection reached Node %s before any health check since its kube-proxy began to listen", nodeName(k))
					sn.checked = true
				}
				if !outSaid[k] {
					if who := outTaken(tt, o.at, outSince[k], func(n int) bool { return nodeOf(n) == k && n != staticPod }); who != "" {
						add(OutOfTraffic, o.target, o.at, "a new client reached Node %s, out of traffic since %s, while %s", nodeName(k), outSince[k].Format("15:04:05.000"), who)
						outSaid[k] = true
					}
				}
			}
			continue
		}
		if o.pod >= otherPods {
			// Another Service's pod (many-Services histories): its checks
			// and its life are none of web's; a client of be reaching it is
			// a Service's traffic sent to another's pods.
			switch o.kind {
			case obsListen, obsStop, obsCheck:
				continue
			case obsClient:
				if reachedOther[[2]int{o.target, o.pod}] {
					continue
				}
				reachedOther[[2]int{o.target, o.pod}] = true
				add(OthersUntouchedAcross, o.target, o.at, "a client of %s reached %s, a pod of another Service", backend, podName(o.pod))
				continue
			}
		}
		switch o.kind {
		case obsStep:
			step = o.step
		case obsListen:
			p := track(o.pod)
			was := p.available()
			p.alive = true
			for _, t := range tts {
				t.pod(o.pod).checked = false
			}
			if o.pod == staticPod {
				p.inK8s, p.state = true, live
			}
			becomes(o.pod, p, o.at, was)
			nodeDeath(o.pod, o.at)
		case obsStop:
			stops = append(stops, o.at)
			p := track(o.pod)
			was := p.available()
			if was {
				deaths = append(deaths, o.at) // the pod was ready: clients may still be sent there
				if blackHole(o.pod) {
					blackDeaths = append(blackDeaths, o.at)
				}
			}
			p.alive = false
			becomes(o.pod, p, o.at, was)
			nodeDeath(o.pod, o.at)
		case obsK8s:
			p := track(o.pod)
			was := p.available()
			if p.inK8s {
				inK8s--
			}
			p.state, p.inK8s, p.moved = o.state, o.state != absent, o.moved
			if p.inK8s {
				inK8s++
			}
			// Out of Kubernetes counts as out of traffic: a gone pod's
			// process may linger (goneStop).
			switch {
			case o.state == live:
				p.outSince, p.outSaid = time.Time{}, false
			case p.outSince.IsZero():
				p.outSince = o.at
			}
			capNow(o.at)
			becomes(o.pod, p, o.at, was)
			nodeDeath(o.pod, o.at)
			if opt.Nodes > 0 && o.pod != staticPod {
				nodeTraffic(nodeOf(o.pod), o.at)
			}
		case obsCheck:
			sn := tt.pod(o.pod)
			sn.checked, sn.everChecked = true, true
		case obsClient:
			if o.pod == opt.Refused && opt.Refused > 0 {
				add(OneBadItem, o.target, o.at, "a client reached %s, whose server HAProxy refused", podName(o.pod))
			}
			if p := track(o.pod); opt.Nodes == 0 && !p.outSaid {
				if who := outTaken(tt, o.at, p.outSince, func(n int) bool { return n == o.pod }); who != "" {
					add(OutOfTraffic, o.target, o.at, "a new client reached %s, out of traffic since %s (%s), while %s", podName(o.pod), p.outSince.Format("15:04:05.000"), stateName(p.state), who)
					p.outSaid = true
				}
			}
			sn := tt.pod(o.pod)
			// Node mode: kube-proxy hands a client to any of a Node's
			// pods, a check to one of them; checks are judged per Node.
			if !sn.checked && opt.Nodes == 0 {
				// A reload loads every server haproxy.cfg has in service
				// UP until its first check (HAProxy's default): one that
				// had been in service, its pod back just then, takes a
				// client before that check. Not a server never checked:
				// haproxy.cfg holds it out of traffic until its check
				// passed (seed 430577631 on 3.4.0, p-35 revived 0.6 s
				// after a reload by others).
				if sn.everChecked && tt.reloadedWithin(o.at, b.Abrupt) {
					ev.Excused["checked-before-traffic: "+ExcuseReloadLoadsUp]++
				} else {
					add(CheckedFirst, o.target, o.at, "a client connection reached %s before any health check since it began to listen", podName(o.pod))
				}
				sn.checked = true // once per listening period
			}
			// Judged when the client reached the backup, not when its
			// request began: HAProxy's retries (a turn-around of up to
			// timeout connect each, redispatch) can land a request begun
			// before a local pod died on a backup seconds later.
			// MAX_SERVERS binding leaves some pods without a server, a
			// local one's too: local-first is not promised then.
			if backup(o.pod) && lagging(tt, o.at) == "" && !o.at.Before(capUntil) && (rezonedAt.IsZero() || o.at.Sub(rezonedAt) > b.Converge) {
				// A backup serves only while no server of the local zone
				// can: none has been ready and answering for its entry.
				for n, q := range pods {
					if !backup(n) && q.available() && o.at.Sub(q.since) >= q.entry(b) {
						if k := len(ev.Violations); k > 0 && ev.Violations[k-1].Invariant == LocalFirst && o.at.Sub(tt.lastBackup) < time.Second {
							ev.Violations[k-1].Count++
						} else {
							add(LocalFirst, o.target, o.at, "%s (another zone) took a client while %s (the local zone) was ready and answering since %s",
								podName(o.pod), podName(n), q.since.Format("15:04:05.000"))
						}
						tt.lastBackup = o.at
						break
					}
				}
			}
		case obsReloadStart:
			tt.reloadStart, tt.startWhy, tt.startOverflow = o.at, reloadExcuse(opt, o), o.overflow
			if opt.Slots {
				ev.SlotReloads[reloadKind(o)]++
			}
		case obsReload:
			tt.apiReload = time.Time{}
			if o.err != "" {
				add(Converges, o.target, o.at, "HAProxy reload failed: %s", o.err)
				continue
			}
			if !tt.reloadStart.IsZero() {
				tt.reloads = append(tt.reloads, [2]time.Time{tt.reloadStart, o.at})
				tt.reloadWhy = append(tt.reloadWhy, tt.startWhy)
				tt.reloadOverflow = append(tt.reloadOverflow, tt.startOverflow)
				tt.reloadStart = time.Time{}
			}
			tt.lastReload = o.at
		case obsAPIReloadStart:
			tt.apiReload = o.at
		case obsAPIReload:
			tt.lastReload, tt.apiReload = o.at, time.Time{}
		case obsDown:
			if tt.downParts == nil {
				tt.downParts = map[string]bool{}
			}
			if o.hung {
				if len(tt.downParts) == 0 {
					tt.downs = append(tt.downs, [2]time.Time{o.at, {}})
				}
				tt.downParts[o.err] = true
			} else if tt.downParts[o.err] {
				delete(tt.downParts, o.err)
				if len(tt.downParts) == 0 {
					tt.downs[len(tt.downs)-1][1] = o.at
				}
			}
		case obsHang:
			if o.hung {
				tt.hungSince = o.at
			} else {
				tt.hungSince, tt.unhungAt = time.Time{}, o.at
			}
		case obsRestart:
			if o.hung {
				tt.restartSince = o.at
			} else if !tt.restartSince.IsZero() {
				tt.restarts = append(tt.restarts, [2]time.Time{tt.restartSince, o.at})
				tt.restartSince = time.Time{}
			}
		case obsRequest:
			if o.err != "" {
				why := excuse(tt, o.at)
				if why == "" && !o.began.IsZero() && heldPastDeath(o.err) {
					for _, d := range deaths {
						if d.After(o.began) && !d.After(o.at) {
							why = ExcuseDeathInFlight
						}
					}
				}
				if why == "" && crashCut(tt, cmp.Or(o.began, o.at), o.at) {
					why = ExcuseWorkerCrash
				}
				if why == "" && !o.began.IsZero() {
					// Sent within Bounds.Abrupt of a black hole's death:
					// HAProxy may still route it there, and it waits
					// out its connect timeouts (serve-soak seed 374419967
					// on 2.6.12: sent 0.1 s after, failed 2 s after).
					for _, d := range blackDeaths {
						if !o.began.Before(d) && o.began.Sub(d) <= b.Abrupt && o.at.Sub(o.began) >= connectTimeout {
							why = ExcuseBlackHoleSent
						}
					}
				}
				if why == "" && opt.HealthPort && unnoticedAt(o.target, cmp.Or(o.began, o.at), o.at) {
					why = ExcuseUnnoticed
				}
				if why == "" && !o.began.IsZero() && tt.downAt(o.at, b.Entry) != nil {
					for _, d := range stops {
						if d.After(o.began) && !d.After(o.at) {
							why = ExcuseDownInFlight
						}
					}
				}
				if why == "" {
					// One violation per burst of failures.
					if n := len(ev.Violations); n > 0 && ev.Violations[n-1].Invariant == NoFailedRequest && o.at.Sub(tt.lastFail) < time.Second {
						ev.Violations[n-1].Count++
					} else {
						who := ""
						for n, p := range pods {
							if p.available() && o.at.Sub(p.since) >= p.entry(b) {
								who = fmt.Sprintf(" (%s, since %s)", podName(n), p.since.Format("15:04:05.000"))
								break
							}
						}
						add(NoFailedRequest, o.target, o.at, "a request failed (%s) while a ready pod answered%s", o.err, who)
					}
					tt.lastFail = o.at
					continue
				}
				ev.Excused[why]++
				if r, start, _ := tt.reloadLag(o.at, b.Reload); r == why {
					ev.ReloadCost = max(ev.ReloadCost, o.at.Sub(start))
				}
				continue
			}
			tt.answered++
			if opt.Nodes > 0 && opt.BlackHoles && !opt.HealthPort {
				// Only a black hole fails a Node's check (kube-proxy
				// skips a pod that refuses; a health port answers from
				// Kubernetes' view); killed pods of even number die so.
				for m, q := range pods {
					if m != staticPod && m%2 == 0 && q.inK8s && q.state == live && !q.alive {
						deadReadyAt[nodeOf(m)] = o.at
					}
				}
			}
			if p := track(o.pod); p.available() {
				sn := tt.pod(o.pod)
				sn.lastHit, sn.hitCount = o.at, tt.answered
			}
			if lagging(tt, o.at) != "" {
				continue
			}
			// Every pod that has been ready and answering for its entry
			// bound, and took none of the requests this target answered
			// since (each pod's share three times over), is not in service
			// there.
			// share bounds how many requests go round before a pod's turn:
			// every available pod's in pod mode; in node mode (equal weights
			// the worse case) the Nodes with one times the pods on its own.
			// With HAPROXY_WEIGHT=endpoints a Node weighs its ready pods
			// (those Kubernetes holds ready, answering or not): a pod's
			// share is then at least one in the sum of the weights of the
			// Nodes in service.
			avail, onNode, nodesUp := 0, map[int]int{}, 0
			for n, q := range pods {
				if q.available() {
					avail++
					if onNode[nodeOf(n)]++; onNode[nodeOf(n)] == 1 {
						nodesUp++
					}
				}
			}
			weights := 0
			if opt.Weight {
				readyOn := map[int]int{}
				for n, q := range pods {
					if q.inK8s && q.state == live {
						readyOn[nodeOf(n)]++
					}
				}
				for k := range onNode {
					weights += max(readyOn[k], 1)
				}
			}
			share := func(n int) int {
				switch {
				case opt.Nodes == 0:
					return avail
				case opt.Weight:
					return weights
				}
				return nodesUp * onNode[nodeOf(n)]
			}
			for n, q := range pods {
				sn := tt.pod(n)
				if !q.available() || sn.reported || backup(n) || n == opt.Refused || o.at.Before(capUntil) {
					continue
				}
				// A reload restarts every check: a server not in service
				// yet passes its checks again after it, whoever reloaded,
				// the first one spread over inter (HAProxy's
				// start_check_task: srvpos/nbcheck of the longest
				// interval), as a moved server's next one (Bounds.Move;
				// soak seed 534110162, inter 2 s and rise 3: 2.4 s was short).
				due := q.since.Add(q.entry(b))
				if after := tt.lastReload.Add(max(q.entry(b), b.Move)); sn.lastHit.Before(q.since) && after.After(due) {
					due = after
				}
				if end, ok := tt.lastLossy(); ok && end.Add(b.Reload).After(due) {
					due = end.Add(b.Reload)
				}
				if !rezonedAt.IsZero() && rezonedAt.Add(b.Entry+time.Second).After(due) {
					due = rezonedAt.Add(b.Entry + time.Second) // a fresh process, every role handed over
				}
				if !tt.unhungAt.IsZero() && tt.unhungAt.Add(HungAfter).After(due) {
					due = tt.unhungAt.Add(HungAfter)
				}
				// Node mode: kube-proxy sends a Node's checks to every pod
				// Kubernetes holds ready there, a black hole too (until
				// noticed): the Node's server, gated again after a reload
				// by others dropped it (the pod not reached since), fails
				// such checks and its pods wait for the notice (serve-soak
				// seed 772009266 on 3.0.11: p-4, a black hole beside p-19
				// on n-5, kept n-5 out 2.3 s). Not a server the service
				// took out by itself (the second reader's row).
				if at, ok := deadReadyAt[nodeOf(n)]; ok && n != staticPod && at.Add(q.entry(b)).After(due) {
					if end, lossy := tt.lastLossy(); lossy && !sn.lastHit.After(end) {
						due = at.Add(q.entry(b))
					}
				}
				// A pod readied while the service could not reach the
				// target waits for the follow-up's next try.
				for _, d := range tt.downs {
					if back := d[1].Add(downRecovery(d) + q.entry(b)); !d[1].IsZero() && !d[0].After(due) && !d[1].Before(q.since) && back.After(due) {
						due = back
					}
				}
				// A write the API refused while the pod waited (an outage,
				// or seed 703835231's three 409s and a dropped connection
				// in 0.7 s) is tried again after the retry's backoff: the
				// pod's entry counts from there.
				for _, r := range tt.refusals {
					if back := r.last.Add(retryAfter(r.n) + q.entry(b)); !r.first.After(due) && !r.last.Before(q.since) && back.After(due) {
						due = back
					}
				}
				// A pod Kubernetes readied while the service could not
				// read it waits for the service's watch to come back.
				for _, out := range kubeOut {
					// (readied before the watch was back: after the outage too)
					if back := out[1].Add(kubeRecovery(out) + q.entry(b)); !out[0].After(due) && !out[1].Add(kubeRecovery(out)).Before(q.since) && back.After(due) {
						due = back
					}
				}
				if o.at.After(due) && tt.answered-sn.hitCount > 3*share(n)+10 && sn.lastHit.Before(due) {
					add(InService, o.target, o.at, "%s has been ready and answering since %s; %d requests answered since, none by it",
						podName(n), q.since.Format("15:04:05.000"), tt.answered-sn.hitCount)
					sn.reported = true
				}
			}
		case obsLocalZone:
			local, rezonedAt = o.err, o.at
		case obsNode:
			nodeOut[o.pod], excluded[o.pod] = !o.gate, o.excluded
			for n, p := range pods {
				if n != staticPod && nodeOf(n) == o.pod {
					was := p.available()
					p.nodeOut = !o.gate
					becomes(n, p, o.at, was)
				}
			}
			nodeTraffic(o.pod, o.at)
			capNow(o.at)
		case obsReloadAsked:
			if strings.HasPrefix(o.err, "fallback ") {
				// The API's fallback when HAProxy refused a runtime write:
				// excused only beside a reload (a write that raced it).
				near := !tt.reloadStart.IsZero() || !tt.apiReload.IsZero() || !tt.lastReload.IsZero() && o.at.Sub(tt.lastReload) <= b.Entry
				if opt.Reloads && !near {
					add(ReloadsAsPromised, o.target, o.at, "HAProxy refused a runtime write outside any reload, and the Data Plane API reloaded for it (%s)", o.err)
				}
				continue
			}
			why, settings := reloadBroken(o.err)
			if settings {
				settingsWrites[o.target]++
				if n := settingsWrites[o.target]; n > opt.SettingsWrites {
					why = fmt.Sprintf("a backend's settings written again (%d times, at most %d)", n, opt.SettingsWrites)
				}
			}
			if opt.Reloads && why != "" {
				add(ReloadsAsPromised, o.target, o.at, "the Data Plane API reloaded HAProxy for %s (%s)", why, o.err)
			}
		case obsAPIWrite:
			if o.refused {
				tt.lastFault = o.at
			}
		case obsGate:
			if o.gate && o.pod == opt.Refused && opt.Refused > 0 {
				add(GateTruthful, o.target, o.at, "the gate of %s turned True, though HAProxy refused its server", podName(o.pod))
			}
		case obsReconcile:
			for _, f := range o.failures {
				i := -1
				if opt.TargetOf != nil {
					i = opt.TargetOf(f.target)
				}
				why := failureExcuse(tts, i, o, f, opt.RefusedName)
				if why == "" && kubeFailure(kubeOut, o, f.err) {
					why = ExcuseKubeDown // each target's result carries the read's error
				}
				if why != "" {
					ev.Excused["reconcile: "+why]++
					continue
				}
				what := fmt.Sprintf("replica %d: a reconcile failed on %s for nothing the history did: %s", o.target, f.target, f.err)
				add(FailuresExplained, max(i, 0), o.at, "%s", what)
			}
			if o.err != "" && len(o.failures) == 0 {
				// Failed, and no target says why: a hang explains it (a
				// reconcile that ran out of RECONCILE_TIMEOUT on one).
				hung := false
				for _, t := range tts {
					hung = hung || !t.hungSince.IsZero() || !t.unhungAt.IsZero() && t.unhungAt.After(o.began.Add(-HungAfter)) ||
						downDuring(t, o.began.Add(-failureBound), o.at)
				}
				// Or Kubernetes unreachable during the reconcile (less
				// failureBound before it began): its read failed.
				kube := kubeFailure(kubeOut, o, o.err)
				switch {
				case hung:
					ev.Excused["reconcile: "+ExcuseHung]++
				case kube:
					ev.Excused["reconcile: "+ExcuseKubeDown]++
				default:
					add(FailuresExplained, 0, o.at, "replica %d: a reconcile failed, no target saying why: %s", o.target, o.err)
				}
			}
		case obsViolation:
			if k := len(ev.Violations); k > 0 && ev.Violations[k-1].Invariant == o.inv && o.at.Sub(tt.lastSeen) < time.Second {
				ev.Violations[k-1].Count++
			} else {
				add(o.inv, o.target, o.at, "%s", o.err)
			}
			tt.lastSeen = o.at
		}
	}
	sv, sx, sn := sessionsEvaluate(all, opt.Drain, opt.Guard)
	ev.Sessions = sn
	ev.Violations = append(ev.Violations, sv...)
	for k, n := range sx {
		ev.Excused[k] += n
	}
	return ev
}

// heldPastDeath says whether a failed request's error is a read that timed
// out once connected: what a connection a black hole held gives, the one
// failure ExcuseDeathInFlight is for (a refused or reset connection, an
// early end, a wrong answer are judged as ever).
func heldPastDeath(err string) bool {
	return strings.HasPrefix(err, "read ") && strings.HasSuffix(err, "i/o timeout")
}
