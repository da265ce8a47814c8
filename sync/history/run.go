package history

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// HangFor is the least a target hangs: longer than the shipped
// RECONCILE_TIMEOUT (30 s), so that a reconcile fails on it and leaves
// its timers while the next one waits behind it.
const HangFor = 40 * time.Second

// Report is what one history did and found.
type Report struct {
	Setup Setup
	// Shape names the shape its steps were drawn with; empty for steps
	// someone wrote (a named test).
	Shape    string
	Steps    []Step
	Requests int
	Failed   int
	// Expired counts the watches of serve's the API server answered 410
	// Gone (serve histories): each listed again.
	Expired int
	Evaluation
}

// Run runs one history: shape's steps drawn from the setup's seed, with
// clients sending requests through HAProxy's frontend from the first step
// to the end, then waits for HAProxy to converge, reloads it once more the
// way others do, and waits again.
func Run(t testing.TB, s Setup, shape Shape) Report {
	t.Helper()
	shape.Targets, shape.HangFor, shape.API = max(s.Targets, 1), HangFor, s.Driver == Dataplane
	shape.Nodes, shape.Zones = s.Nodes, s.Zones
	r := RunSteps(t, s, shape.Start, Generate(s.Seed, shape))
	r.Shape = shape.Name
	return r
}

// RunSteps is Run with the given steps, after pods 1..start are in
// service: a history someone wrote, a named regression test's.
func RunSteps(t testing.TB, s Setup, start int, steps []Step) Report {
	t.Helper()
	w := newWorld(t, s)
	b := BoundsOf(w.check)
	w.startPods(start)
	if why := w.waitConverged(b.Converge); why != "" {
		w.rec.add(obs{kind: obsViolation, inv: Converges, err: fmt.Sprintf("the first %d pods, not within %v: %s", start, b.Converge, why)})
	}

	ctx, stop := context.WithCancel(context.Background())
	var waits []func()
	for _, tg := range w.targets {
		n := 4
		if tg.i > 0 {
			n = 2
		}
		waits = append(waits, clients(ctx, tg.i, tg.front, n, 8*time.Millisecond, w.rec), w.monitor(ctx, tg))
		if s.ports() {
			// be2 runs the same pods (the Service's second port): its
			// clients are judged as be's, by every traffic invariant.
			waits = append(waits, clients(ctx, tg.i, tg.h.Frontends[backend2], 2, 8*time.Millisecond, w.rec))
		}
		if s.Nodes == 0 {
			waits = append(waits, sessionClients(ctx, tg.i, tg.front, 3, w.rec))
		}
	}
	waitClients := func() {
		for _, f := range waits {
			f()
		}
	}
	waitMonitor := func() {}
	for i, st := range steps {
		time.Sleep(st.Wait)
		traceNote("step %d %s", i, st)
		if err := w.apply(st, i); err != nil {
			stop()
			waitClients()
			waitMonitor()
			t.Fatalf("seed %d step %d (%s): %v", s.Seed, i, st, err)
		}
	}
	last := len(steps)
	w.rec.add(obs{kind: obsStep, step: last})
	if why := w.waitConverged(b.Converge); why != "" {
		w.rec.add(obs{kind: obsViolation, inv: Converges, err: fmt.Sprintf("not within %v of the last step: %s", b.Converge, why)})
	} else {
		// Once more: a reload by others must cost nothing lasting.
		for _, tg := range w.targets {
			if err := w.apply(Step{Kind: Reload, Target: tg.i}, last+1); err != nil {
				t.Fatalf("seed %d: final reload: %v", s.Seed, err)
			}
		}
		if why := w.waitConverged(b.Converge); why != "" {
			w.rec.add(obs{kind: obsViolation, inv: Converges, err: fmt.Sprintf("not within %v of a reload by others: %s", b.Converge, why)})
		}
		time.Sleep(b.Reload + 500*time.Millisecond) // the clients see the end of it too
	}
	stop()
	waitClients()
	waitMonitor()
	w.stopAll()

	all := w.rec.snapshot()
	rep := Report{Setup: s, Steps: steps, Evaluation: evaluate(all, evalOptions{Bounds: b, RuntimeOnly: s.Driver == Runtime, Slots: s.Slots.N > 0, Targets: len(w.targets), Zones: s.Zones,
		Refused: s.Config.Refused, RefusedName: w.refusedName(), MaxServers: s.Config.MaxServers, Nodes: s.Nodes, Weight: s.Config.Weight, HealthPort: s.HealthPort, BlackHoles: s.BlackHoles,
		Reloads: s.Driver == Dataplane && !s.DefaultServer && !s.RuntimeFails, SettingsWrites: settingsWrites(s, len(w.targets[0].backends)), Drain: s.Config.DrainTimeout, Guard: s.Config.Guard != GuardOff, TargetOf: func(name string) int {
			if i, ok := w.targetOf[name]; ok {
				return i
			}
			return -1
		}})}
	rep.Expired = int(w.expired.Load())
	if s.Serve && len(all) > 0 {
		ups := 0
		for _, st := range steps {
			if st.Kind == KubeUp {
				ups++
			}
		}
		if most := expiredBound(int(w.serveStarts.Load()), ups, all[len(all)-1].at.Sub(all[0].at)); rep.Expired > most {
			rep.Violations = append(rep.Violations, Violation{Invariant: WatchResumes, At: all[len(all)-1].at, Step: len(steps) - 1,
				What: fmt.Sprintf("serve's watches were answered 410 Gone %d times, more than %d: a watch resumed from a version etcd compacted away again instead of listing", rep.Expired, most)})
		}
	}
	for i, v := range rep.Violations {
		switch {
		case v.Target >= len(w.targets):
		case v.Invariant == NoFailedRequest:
			rep.Violations[i].HAProxy = haproxySaw(w.targets[v.Target].h.Logs(), v.At)
		case v.Invariant == Converges:
			rep.Violations[i].HAProxy = w.targets[v.Target].stateNow()
		}
		if v.Target < len(w.targets) && (v.Invariant == NoFailedRequest || v.Invariant == Converges) {
			// An HAProxy that stopped answering, or failed a reload, says
			// why, if it did.
			h := w.targets[v.Target].h
			if d := h.Died(); d != "" {
				rep.Violations[i].HAProxy = append(rep.Violations[i].HAProxy, "the master exited: "+d)
			}
			rep.Violations[i].HAProxy = append(rep.Violations[i].HAProxy, h.Alerts(5)...)
		}
	}
	for _, o := range all {
		if o.kind == obsRequest {
			rep.Requests++
			if o.err != "" {
				rep.Failed++
			}
		}
	}
	return rep
}

// monitor reads HAProxy's servers every 100ms until ctx ends and records a
// violation when a server the service does not own changed.
func (w *world) monitor(ctx context.Context, tg *target) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		reported := false
		var sw svcWatch
		crashes := 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if n := workerCrashes(tg.h.Logs()); n > crashes {
				crashes = n
				w.rec.add(obs{kind: obsWorkerCrash, target: tg.i})
			}
			if w.svc != nil {
				w.svc.check(tg, &sw)
			}
			if !w.setup.Static || reported {
				continue
			}
			reply, err := tg.h.Command("show servers state " + backend)
			if err != nil {
				continue // a reload under way
			}
			st, ok := haproxytest.ParseServers(reply, backend)["static"]
			switch {
			case !ok:
				w.rec.add(obs{kind: obsViolation, target: tg.i, inv: OthersUntouched, err: "the static server is gone"})
			case st.Maint() || st.Drain() || st.Weight != 1 || st.Address != podAddr(staticPod):
				w.rec.add(obs{kind: obsViolation, target: tg.i, inv: OthersUntouched, err: fmt.Sprintf("the static server changed: %+v", st)})
			default:
				continue
			}
			reported = true
		}
	}()
	return func() { <-done }
}

// settingsWrites is evalOptions.SettingsWrites: with HAPROXY_BALANCE and
// the Data Plane driver, one write of each backend's settings per writer.
func settingsWrites(s Setup, backends int) int {
	if s.Config.Balance == "" || s.Driver != Dataplane {
		return 0
	}
	if s.Config.Writer2 != "" {
		return 2 * backends
	}
	return backends
}

// waitConverged waits until HAProxy runs what Kubernetes says (converged),
// at most d, and returns why it did not.
func (w *world) waitConverged(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		why := w.converged()
		if why == "" || time.Now().After(deadline) && !(onlySessions(why) && time.Now().Before(deadline.Add(sessionMax))) {
			return why
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sessionWait marks a difference that a session still open explains: a
// server parked for a pod's sessions to end (HAPROXY_DRAIN_TIMEOUT 0).
// Such differences are waited for sessionMax more, the longest a session
// lasts (sessionClients), then reported as any other.
const (
	sessionWait = "(its pod holds a session open)"
	sessionMax  = 18 * time.Second
)

// onlySessions says whether every difference of why is a sessionWait.
func onlySessions(why string) bool {
	for _, d := range strings.Split(why, "; ") {
		if !strings.HasSuffix(d, sessionWait) {
			return false
		}
	}
	return true
}

// converged says how HAProxy differs from what Kubernetes holds: every ready
// pod that answers in service and UP, every not-ready one in maintenance,
// every terminating one draining, none for a pod that is gone; the static
// server as configured; with the Data Plane driver, haproxy.cfg as running.
// Empty: no difference.
func (w *world) converged() string {
	diffs := w.gateDiffs()
	for _, tg := range w.targets {
		d := w.convergedOn(tg)
		if w.setup.ports() {
			for _, d2 := range w.convergedOnBackend(tg, backend2) {
				d = append(d, backend2+": "+d2)
			}
		}
		if w.svc != nil {
			d = append(d, w.svc.convergedOn(tg)...)
		}
		for _, d := range d {
			diffs = append(diffs, fmt.Sprintf("target %d: %s", tg.i, d))
		}
	}
	return strings.Join(diffs, "; ")
}

func (w *world) convergedOn(tg *target) []string {
	return append(w.convergedOnBackend(tg, backend), w.balanceDiffs(tg)...)
}

// convergedOnBackend is convergedOn for one backend: be, or be2 when the
// Service's second port fills it (Setup.ports), the same servers but for
// the static one, which haproxy.cfg gives be alone.
func (w *world) convergedOnBackend(tg *target, be string) []string {
	reply, err := tg.h.Command("show servers state " + be)
	if err != nil {
		return []string{"show servers state: " + err.Error()}
	}
	all := haproxytest.ParseServers(reply, be)
	diffs := w.idleSlotDiffs(all)
	if w.setup.Config.Writer2 == "cluster" {
		// Two instances, each with its own server for every pod: each
		// instance's servers are judged by themselves.
		rest, west := splitWest(all)
		diffs = append(diffs, w.convergedServers(tg, be, rest, be == backend)...)
		for _, d := range w.convergedServers(tg, be, west, false) {
			diffs = append(diffs, cluster2+": "+d)
		}
	} else {
		diffs = append(diffs, w.convergedServers(tg, be, all, be == backend)...)
	}
	if tg.api != nil {
		diffs = append(diffs, persistedDiffs(tg, be, all)...)
	}
	return diffs
}

// splitWest parts a backend's servers between the second instance's
// (Config.Writer2 "cluster": named cluster2-…) and the rest.
func splitWest(all map[string]haproxytest.Server) (rest, west map[string]haproxytest.Server) {
	rest, west = map[string]haproxytest.Server{}, map[string]haproxytest.Server{}
	for name, s := range all {
		if strings.HasPrefix(name, cluster2+"-") {
			west[name] = s
		} else {
			rest[name] = s
		}
	}
	return rest, west
}

// balanceDiffs: each backend runs the balance haproxy.cfg gives it, or
// with the Data Plane driver and HAPROXY_BALANCE set, that one (the
// runtime API writes no backend setting).
func (w *world) balanceDiffs(tg *target) []string {
	want := "roundrobin"
	if c := w.setup.Config; c.Balance != "" && tg.api != nil {
		want = c.Balance
	}
	var diffs []string
	for _, b := range tg.backends {
		got, err := tg.h.Balance(b)
		if err != nil {
			return append(diffs, err.Error())
		}
		switch {
		case b == backend2 && w.svc != nil && w.svc.phaseNow() != joined:
			// be2 is this instance's only while web2 names it (soak
			// seed 610116642 on 3.4.0: the judge asked leastconn of it
			// before web2 ever did): haproxy.cfg's before, and what the
			// instance wrote, or not, after it left.
			if w.svc.phaseNow() == never && got != "roundrobin" {
				diffs = append(diffs, fmt.Sprintf("%s runs balance %s though %s never named it", b, got, service2))
			}
		case !haproxytest.BalanceIs(got, want):
			diffs = append(diffs, fmt.Sprintf("%s runs balance %s, want %s", b, got, want))
		}
	}
	return diffs
}

// convergedServers judges running, one instance's servers (and the static
// one's, when withStatic), against Kubernetes.
func (w *world) convergedServers(tg *target, be string, running map[string]haproxytest.Server, withStatic bool) []string {
	// A pod's address may be reused (AddReused) while the gone pod's
	// server waits parked: each unit takes the server named after it.
	atAddr := map[string][]haproxytest.Server{}
	for _, s := range running {
		atAddr[s.Address] = append(atAddr[s.Address], s)
	}
	var roles map[string]bool
	if w.setup.Zones {
		var err error
		if roles, err = backupRoles(tg, be); err != nil {
			return []string{"show stat: " + err.Error()}
		}
	}
	units := w.units()
	var diffs []string
	anyReady := false
	for _, u := range units {
		anyReady = anyReady || u.st == live && u.alive && !u.refused
	}
	// The servers that hold room for pods Kubernetes has: leftovers of
	// gone pods (parked for their batch, kept by the guard) do not count,
	// or a backend full of them would excuse every pod left out.
	own := 0
	for _, u := range units {
		if _, ok := w.serverOf(atAddr, u); ok {
			own++
		}
	}
	// MAX_SERVERS counts this instance's servers (the static one is not),
	// and the plan keeps room for the refused pod's server, which
	// HAProxy then refuses: the cap binds past that many pods, and then the
	// backend is full less that room.
	capRoom := w.setup.Config.MaxServers
	full := capRoom
	for _, u := range units {
		if u.refused {
			full--
		}
	}
	capped := w.setup.Config.MaxServers > 0 && len(units) > capRoom
	if capped && own < full {
		diffs = append(diffs, fmt.Sprintf("%d pods or Nodes, %d servers, though MAX_SERVERS is %d", len(units), own, w.setup.Config.MaxServers))
	}
	for _, u := range units {
		s, ok := w.serverOf(atAddr, u)
		if ok {
			atAddr[u.addr] = slices.DeleteFunc(atAddr[u.addr], func(o haproxytest.Server) bool { return o.Name == s.Name })
		} else if len(atAddr[u.addr]) > 0 && !u.refused {
			// A server at its address, named after none of it: another
			// pod's (a reused address), or a name this instance does not
			// give (CLUSTER_NAME's prefix lost).
			diffs = append(diffs, fmt.Sprintf("%s: no server named after it; at its address %s: %s", u.name, u.addr, atAddr[u.addr][0].Name))
		}
		switch {
		case !ok && u.refused:
			// HAProxy refuses its server: no server is what it gets.
		case ok && u.refused:
			diffs = append(diffs, u.name+": HAProxy refused its server, yet one runs")
		case !ok && capped:
			// MAX_SERVERS binds: the backend is full of this instance's
			// servers (checked above), and some pod has none.
		case !ok:
			diffs = append(diffs, u.name+": no server")
		case u.st == live && u.alive && (s.Maint() || s.Drain() || !s.Up()):
			diffs = append(diffs, fmt.Sprintf("%s: ready and answering, server maint=%v drain=%v up=%v", u.name, s.Maint(), s.Drain(), s.Up()))
		case roles != nil && u.st == live && u.alive && roles[s.Name] != (u.zone != w.local):
			diffs = append(diffs, fmt.Sprintf("%s (%s, HAPROXY_LOCAL_ZONE %s): server %s backup=%v", u.name, u.zone, w.local, s.Name, roles[s.Name]))
		case u.st == live && u.alive && s.Weight != u.weight:
			diffs = append(diffs, fmt.Sprintf("%s: weight %d, server %s has %d", u.name, u.weight, s.Name, s.Weight))
		case s.Port != w.port:
			diffs = append(diffs, fmt.Sprintf("%s: port %d, server %s has %d", u.name, w.port, s.Name, s.Port))
		case u.st == live && u.alive && !s.CheckRunning():
			// In service without its check, a death would never take it out.
			diffs = append(diffs, fmt.Sprintf("%s: in service, server %s's check not running (check state %#x)", u.name, s.Name, s.CheckState))
		case (u.st == notReady || u.st == noticed) && !s.Maint() && (anyReady || withStatic && w.setup.Static):
			// Kept in traffic only while no other server could serve
			// (make-before-break): not beside a ready pod, nor beside the
			// static server (be's alone: be2 has none, second reader).
			diffs = append(diffs, u.name+": not ready, server not in maintenance")
		case u.st == terminating && s.Maint():
			diffs = append(diffs, fmt.Sprintf("%s: terminating, server in maintenance", u.name))
		case u.st == terminating && !s.Drain() && s.Weight != 0 && anyReady:
			// Kept in traffic only while no other pod of this instance
			// could serve (make-before-break).
			diffs = append(diffs, fmt.Sprintf("%s: terminating, server in traffic beside a ready pod", u.name))
		}
	}
	if w.setup.Static && withStatic {
		static := atAddr[podAddr(staticPod)]
		if i := slices.IndexFunc(static, func(s haproxytest.Server) bool { return s.Name == "static" }); i < 0 || static[i].Maint() || static[i].Drain() {
			diffs = append(diffs, "the static server is not as configured")
		}
		atAddr[podAddr(staticPod)] = slices.DeleteFunc(static, func(s haproxytest.Server) bool { return s.Name == "static" })
	}
	batch := cmp.Or(w.setup.Config.DeleteBatch, 10)
	var waiting []string
	var left []haproxytest.Server
	for _, ss := range atAddr {
		left = append(left, ss...)
	}
	for _, s := range left {
		addr := s.Address
		// The guard keeps what it parked while no pod could replace it
		// (plan: no replacement to wait for): out of traffic either way.
		guardKeeps := s.Maint() && !anyReady && w.setup.Config.Guard != GuardOff
		switch {
		case guardKeeps:
		case s.Maint() && w.sessionAt(addr) && w.setup.Config.DrainTimeout == 0:
			// Parked, waiting for its pod's sessions to end (seed 420,
			// short: one began just before the last step): waited for
			// as long as a session lasts (waitConverged), not excused.
			diffs = append(diffs, fmt.Sprintf("server %s (%s) parked for no pod %s", s.Name, addr, sessionWait))
		case tg.api != nil && s.Maint():
			// The Data Plane driver deletes in batches (a reload each): a
			// server of a pod that is gone waits in maintenance for its
			// batch, fewer than HAPROXY_DELETE_BATCH of them.
			waiting = append(waiting, s.Name)
		default:
			diffs = append(diffs, fmt.Sprintf("server %s (%s) runs for no pod (maint=%v drain=%v)", s.Name, addr, s.Maint(), s.Drain()))
		}
	}
	if len(waiting) >= batch {
		sort.Strings(waiting)
		diffs = append(diffs, fmt.Sprintf("%d servers of gone pods parked (%s), a batch is %d", len(waiting), strings.Join(waiting, " "), batch))
	}
	return diffs
}

// serverOf is unit u's server among those at its address: the one named
// after it ([CLUSTER_NAME-]name[_bk]; in slot histories any, slots have
// their own names), false when none is.
//
// With zones, a pod may have two servers a while, one of each role (the
// old one parked, or draining its sessions, after a rezone): the one of
// the role its zone gives now is its own. It was taken in the order
// HAProxy listed them, and the other reported as running for no pod
// (seed 420, short: p-8_bk, a rezone back and forth).
func (w *world) serverOf(atAddr map[string][]haproxytest.Server, u unit) (haproxytest.Server, bool) {
	var found []haproxytest.Server
	for _, s := range atAddr[u.addr] {
		if w.setup.Slots.N > 0 || namedAfter(s.Name, u.base) {
			found = append(found, s)
		}
	}
	if len(found) == 0 {
		return haproxytest.Server{}, false
	}
	if w.setup.Zones && u.zone != "" {
		role := slices.DeleteFunc(slices.Clone(found), func(s haproxytest.Server) bool { return backupName(s.Name, w.setup.Slots.N > 0) != (u.zone != w.local) })
		if len(role) > 0 {
			found = role
		}
	}
	// Of those, one not parked: in slot histories a pod moved into a slot
	// while the server added for it beyond the slots waits parked for its
	// sessions (slot soak seed 374419966 on 2.6.12: the parked one was
	// taken for its server, in map order); the parked one is judged with
	// what runs for no pod.
	if i := slices.IndexFunc(found, func(s haproxytest.Server) bool { return !s.Maint() }); i >= 0 {
		return found[i], true
	}
	return found[0], true
}

// backupName says whether a server's name is a backup's: "_bk" at the end,
// or (slot histories) a backup slot's k8sbN.
func backupName(name string, slots bool) bool {
	return strings.HasSuffix(name, "_bk") || slots && backupSlot.MatchString(name)
}

// namedAfter says whether server name is one the service gives what is
// called base: base, after a CLUSTER_NAME's "prefix-", "_bk" after a
// backup's.
func namedAfter(name, base string) bool {
	n := strings.TrimSuffix(name, "_bk")
	return n == base || strings.HasSuffix(n, "-"+base)
}

// unit is what one of the service's servers stands for, as Kubernetes and
// the history say it should be: a pod, or in node mode a Node.
type unit struct {
	name, addr string
	// base is the name its server is named after: the pod's name in
	// Kubernetes, or the Node's.
	base    string
	st      podState // live: ready; terminating: drain; notReady: maintenance
	alive   bool     // it answers: a check of its server passes
	refused bool     // HAProxy refuses its server (Config.Refused)
	zone    string
	weight  int // the weight its server must have in service
}

// units are the servers Kubernetes asks for now: one per pod, or in node
// mode one per Node hosting pods (not labelled out), its state the best of
// its pods' (ready, else terminating, else not ready) lowered by what the
// Node has (a taint or a drained cordon: drain at most; a pin: that state).
func (w *world) units() []unit {
	w.mu.Lock()
	defer w.mu.Unlock()
	alive := func(n int) bool {
		p := w.pods[n]
		if p == nil {
			return false
		}
		return p.l.up()
	}
	var out []unit
	if w.setup.Nodes == 0 {
		for n, st := range w.k8s {
			out = append(out, unit{name: podName(n), base: cmp.Or(w.names[n], podName(n)), addr: w.addrOf(n), st: w.setup.asJudged(st), alive: alive(n),
				refused: n == w.setup.Config.Refused && n > 0, zone: zoneOf(n), weight: 1})
		}
		return out
	}
	type acc struct{ ready, term, any, answering int }
	by := map[int]*acc{}
	for n, st := range w.k8s {
		k := nodeOf(n, w.setup.Nodes, w.setup.Zones)
		a := by[k]
		if a == nil {
			a = &acc{}
			by[k] = a
		}
		a.any++
		switch st {
		case live:
			a.ready++
			if alive(n) {
				a.answering++
			}
		case terminating:
			a.term++
		}
	}
	rank := map[podState]int{live: 2, terminating: 1, notReady: 0}
	for k, a := range by {
		f := w.nflags[k]
		if f.excluded || f.deleted {
			continue // (a deleted Node: its endpoints name a Node the service cannot find)
		}
		st := notReady
		switch {
		case a.ready > 0:
			st = live
		case a.term > 0:
			st = terminating
		}
		lower := func(to podState) {
			if rank[st] > rank[to] {
				st = to
			}
		}
		if f.taint != "" || f.cordoned && w.setup.Config.DrainCordoned {
			lower(terminating)
		}
		switch f.pin {
		case "drain":
			st = terminating
		case "maint":
			st = notReady
		}
		u := unit{name: "Node " + nodeName(k), base: nodeName(k), addr: nodeAddr(k), st: st, alive: !f.down && a.answering > 0, zone: nodeZone(k, w.setup.Nodes)}
		if !w.setup.Zones {
			u.zone = ""
		}
		u.weight = 1
		if w.setup.Config.Weight {
			u.weight = min(max(a.ready, 1), 256)
		}
		out = append(out, u)
	}
	return out
}

// persistedDiffs says how haproxy.cfg, as the Data Plane API wrote it,
// differs from what runs in backend be, in or out of traffic.
func persistedDiffs(tg *target, be string, running map[string]haproxytest.Server) []string {
	var diffs []string
	// In traffic or out of it: a server drained at runtime and written
	// in maintenance (a gated server that never served) loses nothing
	// to a reload.
	persisted := tg.api.StatesByName(be)
	for _, s := range running {
		st := "ready"
		if s.Maint() || s.Drain() || s.Weight == 0 { // a written drain is weight 0
			st = "out"
		}
		switch p, ok := persisted[s.Name]; {
		case !ok && st == "ready":
			diffs = append(diffs, fmt.Sprintf("server %s (%s) runs in traffic, haproxy.cfg lacks it", s.Name, s.Address))
		case !ok:
			// Out of traffic and never written: a server whose check
			// never passed, added through the socket alone. A reload
			// drops it; out of traffic either way.
		case (p == "ready") != (st == "ready"):
			diffs = append(diffs, fmt.Sprintf("server %s (%s) runs %s, haproxy.cfg has it %s", s.Name, s.Address, st, p))
		}
		delete(persisted, s.Name)
	}
	for name := range persisted {
		diffs = append(diffs, fmt.Sprintf("haproxy.cfg holds %s, HAProxy does not run it", name))
	}
	return diffs
}

// Replay is the command that runs a history again.
func (r Report) Replay() string {
	if r.Shape == "" {
		return "its named test, by go test -run"
	}
	return fmt.Sprintf("make replay SEED=%d DRIVER=%s SHAPE=%s", r.Setup.Seed, r.Setup.Driver, r.Shape)
}

// Shortened lists the steps up to the one after the last violation.
func (r Report) Shortened() string {
	last := len(r.Steps) - 1
	if len(r.Violations) > 0 {
		worst := 0
		for _, v := range r.Violations {
			worst = max(worst, v.Step)
		}
		last = min(last, worst+1)
	}
	var b strings.Builder
	for i := 0; i <= last && i < len(r.Steps); i++ {
		fmt.Fprintf(&b, "  %3d %s\n", i, r.Steps[i])
	}
	return b.String()
}

// backupRoles reads which of backend be's servers are backups, by name,
// from HAProxy's "show stat" (the bck column).
func backupRoles(tg *target, be string) (map[string]bool, error) {
	reply, err := tg.h.Command("show stat")
	if err != nil {
		return nil, err
	}
	lines := strings.Split(reply, "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "# ") {
		return nil, fmt.Errorf("no header: %.100q", reply)
	}
	col := map[string]int{}
	for i, h := range strings.Split(strings.TrimPrefix(lines[0], "# "), ",") {
		col[h] = i
	}
	px, sv, bck := col["pxname"], col["svname"], col["bck"]
	out := map[string]bool{}
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		if len(f) <= max(px, sv, bck) || f[px] != be || f[sv] == "BACKEND" || f[sv] == "FRONTEND" {
			continue
		}
		out[f[sv]] = f[bck] == "1"
	}
	return out, nil
}

// refusedName is the refused pod's name (its server's, less a prefix and
// "_bk"), empty when none.
func (w *world) refusedName() string {
	n := w.setup.Config.Refused
	if n <= 0 {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return cmp.Or(w.names[n], podName(n))
}

// expiredBound is how many times serve's watches may be answered 410 Gone
// in a history: each of the two that read etcd itself (EndpointSlices,
// Nodes), in each serve process started, once per compaction — each KubeUp
// and the API server's own every 5 minutes — and once more for a
// compaction before it started.
func expiredBound(starts, kubeUps int, span time.Duration) int {
	return 2 * starts * (kubeUps + int(span/(5*time.Minute)) + 1)
}
