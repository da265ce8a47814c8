package history

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// drainSlack is how long past HAPROXY_DRAIN_TIMEOUT a removed server's
// sessions may last: HAProxy counts a server's time in maintenance in
// whole seconds, the follow-up looks at draining servers every second, and
// the service's reaction on a loaded machine.
const drainSlack = 5 * time.Second

// Why a session cut breaks no invariant.
const (
	ExcuseSessionPodExited = "its pod exited"                // a stop of the pod within the session
	ExcuseSessionRestart   = "its HAProxy was restarted"     // the target killed within the session
	ExcuseSessionDrained   = "HAPROXY_DRAIN_TIMEOUT ran out" // removed from Kubernetes for the drain timeout
	// ExcuseSessionRezoned: a rezone (Crash "rezone") changed every
	// server's role, and a role is not changed at runtime: the old
	// server is removed once its replacement serves, its sessions shut
	// after the drain timeout. Bounded: at least the drain timeout after
	// the rezone, and within rezoneHandOver of it (a hung target delays
	// the hand-over there by its hang).
	ExcuseSessionRezoned = "a rezone replaced its server and HAPROXY_DRAIN_TIMEOUT ran out"
	// ExcuseSessionGuarded (drain-bounded): the deletion guard keeps a
	// removed server, sessions and all, while a ready replacement is not
	// UP, and nothing is deleted while no pod is ready (plan: the guard
	// overrules the drain timeout). Bounded: only while, within the
	// session's due window, some pod Kubernetes holds ready did not answer
	// (or had answered for less than guardUp), or none was ready.
	ExcuseSessionGuarded = "the guard held its removed server"
)

// guardUp is how long a ready pod that answers may take to be UP, for
// ExcuseSessionGuarded: its check's entry and the service's reaction.
const guardUp = 2 * time.Second

// rezoneHandOver bounds how long after a rezone its hand-over may shut a
// session: 20 s, and HangFor more where the session's target hung.
const rezoneHandOver = HangFor + 20*time.Second

// sessionsEvaluate judges the long-lived sessions of a history (pod mode):
//
//   - SessionsKept: a session is cut only when its pod's process exited,
//     its HAProxy was killed, or, with HAPROXY_DRAIN_TIMEOUT above 0, its
//     pod had been out of Kubernetes for that long (the server removed and
//     its sessions shut). A server parked (not ready, terminating, removed
//     within the timeout, the guard's, a batch's) keeps its sessions, and so
//     does a reload (the old worker keeps them).
//   - DrainBounded (drain above 0): a session through a pod out of
//     Kubernetes for the drain timeout plus drainSlack is shut, unless its
//     HAProxy reloaded since the session began (the session lives in the
//     old worker, which the service no longer speaks to).
func sessionsEvaluate(all []obs, drain time.Duration, guard bool) (violations []Violation, excused map[string]int, sessions int) {
	excused = map[string]int{}
	stops := map[int][]time.Time{}
	type change struct {
		at     time.Time
		absent bool
	}
	k8s := map[int][]change{}
	restarts := map[int][]time.Time{}
	var rezones []time.Time
	hangs := map[int][]time.Time{}
	reloads := map[int][]time.Time{}
	var steps []time.Time // steps[i]: when step i was applied
	for _, o := range all {
		switch o.kind {
		case obsStop:
			stops[o.pod] = append(stops[o.pod], o.at)
		case obsK8s:
			k8s[o.pod] = append(k8s[o.pod], change{o.at, o.state == absent})
		case obsRestart:
			if o.hung {
				restarts[o.target] = append(restarts[o.target], o.at)
				reloads[o.target] = append(reloads[o.target], o.at)
			}
		case obsLocalZone:
			rezones = append(rezones, o.at)
		case obsHang:
			if o.hung {
				hangs[o.target] = append(hangs[o.target], o.at)
			}
		case obsReloadStart, obsReload, obsAPIReloadStart, obsAPIReload:
			reloads[o.target] = append(reloads[o.target], o.at)
		case obsStep:
			for len(steps) <= o.step {
				steps = append(steps, o.at)
			}
		}
	}
	within := func(ts []time.Time, from, to time.Time) bool {
		return slices.ContainsFunc(ts, func(t time.Time) bool { return !t.Before(from) && !t.After(to) })
	}
	// absentSince is when pod n last left Kubernetes, if it is out of it at
	// at (zero: it is in).
	absentSince := func(n int, at time.Time) time.Time {
		var since time.Time
		for _, c := range k8s[n] {
			if c.at.After(at) {
				break
			}
			switch {
			case !c.absent:
				since = time.Time{}
			case since.IsZero():
				since = c.at
			}
		}
		return since
	}
	stepAt := func(at time.Time) int {
		i := -1
		for k, t := range steps {
			if !t.After(at) {
				i = k
			}
		}
		return i
	}
	for _, o := range all {
		if o.kind != obsSession {
			continue
		}
		sessions++
		out := absentSince(o.pod, o.at)
		if drain > 0 && !out.IsZero() {
			if due := out.Add(drain + drainSlack); o.at.After(due) && !within(reloads[o.target], o.began, due) {
				if guarded(all, out, due, guard) {
					excused["session: "+ExcuseSessionGuarded]++
					continue
				}
				violations = append(violations, Violation{Invariant: DrainBounded, Target: o.target, At: due, Step: stepAt(due),
					What: fmt.Sprintf("a session through %s, out of Kubernetes since %s, lasted until %s: past HAPROXY_DRAIN_TIMEOUT %v (and %v)", podName(o.pod), out.Format("15:04:05.000"), o.at.Format("15:04:05.000"), drain, drainSlack)})
				continue
			}
		}
		if o.err == "" {
			continue
		}
		switch {
		case within(stops[o.pod], o.began.Add(-time.Second), o.at):
			excused["session: "+ExcuseSessionPodExited]++
		case within(restarts[o.target], o.began, o.at):
			excused["session: "+ExcuseSessionRestart]++
		// A server is shut for the drain timeout only once parked that
		// long, and a parked server takes no new session: the session is
		// at least that old.
		case drain > 0 && !out.IsZero() && !o.at.Before(out.Add(drain)) && o.at.Sub(o.began) >= drain:
			excused["session: "+ExcuseSessionDrained]++
		case drain > 0 && o.at.Sub(o.began) >= drain && slices.ContainsFunc(rezones, func(z time.Time) bool {
			// The hand-over ends within 20 s of the rezone, or of a hang
			// of the session's target that delays it there.
			handOver := rezoneHandOver - HangFor
			if within(hangs[o.target], z.Add(-HangFor), o.at) {
				handOver = rezoneHandOver
			}
			return !o.at.Before(z.Add(drain)) && !o.at.After(z.Add(handOver))
		}):
			excused["session: "+ExcuseSessionRezoned]++
		default:
			why := "in Kubernetes"
			if !out.IsZero() {
				why = fmt.Sprintf("out of Kubernetes for %v only (HAPROXY_DRAIN_TIMEOUT %v)", o.at.Sub(out).Round(time.Millisecond), drain)
			}
			violations = append(violations, Violation{Invariant: SessionsKept, Target: o.target, At: o.at, Step: stepAt(o.at),
				What: fmt.Sprintf("a session through %s, open since %s, was cut (%s) while its pod answered, %s", podName(o.pod), o.began.Format("15:04:05.000"), o.err, why)})
		}
	}
	return violations, excused, sessions
}

// goneStop stops gone pod n's process: at once, or in pod mode for half the
// pods (drawn from the seed and the step) later, as a pod taken out of its
// Service (relabelled, a selector changed) keeps running: 1 to 6 s, or with
// HAPROXY_DRAIN_TIMEOUT past it and drainSlack, so that its sessions are
// judged both ways.
func (w *world) goneStop(index, n int) {
	w.mu.Lock()
	p := w.pods[n]
	w.mu.Unlock()
	r := rand.New(rand.NewPCG(w.setup.Seed^0x11b6e4, uint64(index)<<16|uint64(n)))
	if w.setup.Nodes > 0 || n == staticPod || r.IntN(2) == 0 {
		p.stop()
		return
	}
	d := time.Second + time.Duration(r.Int64N(int64(5*time.Second)))
	if drain := w.setup.Config.DrainTimeout; drain > 0 {
		d = drain + drainSlack + time.Second + time.Duration(r.Int64N(int64(2*time.Second)))
	}
	w.mu.Lock()
	w.lingering = append(w.lingering, time.AfterFunc(d, p.stop))
	w.mu.Unlock()
}

// guarded says whether, at some moment in [from, to], the deletion guard
// may have held a removed server (ExcuseSessionGuarded): with the guard on,
// a pod Kubernetes held ready did not answer or had answered for less than
// guardUp; guard on or off, no pod was ready (nothing is deleted then).
func guarded(all []obs, from, to time.Time, guard bool) bool {
	ready := map[int]bool{}
	listening := map[int]time.Time{} // since when; absent: not listening
	holds := func(at time.Time) bool {
		if len(ready) == 0 {
			return true
		}
		for n := range ready {
			since, ok := listening[n]
			if guard && (!ok || at.Sub(since) < guardUp) {
				return true
			}
		}
		return false
	}
	for _, o := range all {
		if o.pod == staticPod || o.pod >= nodeBase {
			continue
		}
		if o.at.After(to) {
			break
		}
		if !o.at.Before(from) && holds(o.at) {
			return true
		}
		switch o.kind {
		case obsK8s:
			if o.state == live {
				ready[o.pod] = true
			} else {
				delete(ready, o.pod)
			}
		case obsListen:
			listening[o.pod] = o.at
		case obsStop:
			delete(listening, o.pod)
		}
		if !o.at.Before(from) && holds(o.at) {
			return true
		}
	}
	return holds(to)
}
