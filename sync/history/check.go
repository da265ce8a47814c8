package history

import (
	"fmt"
	"sort"
	"time"

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
	// (runtime driver) within Bounds.Reload of a reload by others.
	NoFailedRequest Invariant = "no-failed-request"
	// InService (c, h): a ready pod that answers takes traffic within
	// Bounds.Entry of becoming so (and of a reload by others), and keeps
	// taking its share while requests flow.
	InService Invariant = "ready-pod-in-service"
	// OthersUntouched (d): a server the service does not own (static,
	// another CLUSTER_NAME's) is never changed.
	OthersUntouched Invariant = "others-untouched"
	// Converges (e): once the history is quiet, HAProxy runs what
	// Kubernetes says within Bounds.Converge, haproxy.cfg holds what runs
	// (Data Plane driver), and again after one more reload by others.
	Converges Invariant = "converges"
)

// Violation is one invariant that did not hold.
type Violation struct {
	Invariant Invariant
	At        time.Time
	// Step is the index of the last step applied before At (-1: none).
	Step int
	What string
	// Count is how many more like it followed, each within a second of
	// the one before (a burst of failed requests).
	Count int
}

func (v Violation) String() string {
	more := ""
	if v.Count > 0 {
		more = fmt.Sprintf(" (and %d more within a second of each other)", v.Count)
	}
	return fmt.Sprintf("%s after step %d at %s: %s%s", v.Invariant, v.Step, v.At.Format("15:04:05.000"), v.What, more)
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
	entry := c.DownInter + time.Duration(c.Rise-1)*c.FastInter + time.Second
	return Bounds{
		Entry: entry,
		// A server that moves was UP: HAProxy's next check of it is the
		// one already scheduled, up to inter away, whatever the gate does
		// (seen on 2.6.12: disable and enable health do not bring it
		// forward).
		Move:     c.Inter + time.Duration(c.Rise-1)*c.FastInter + time.Second,
		Abrupt:   c.Inter + time.Duration(c.Fall)*c.FastInter + 300*time.Millisecond,
		Reload:   entry,
		Converge: 10 * time.Second,
	}
}

// Why a failed request breaks no invariant.
const (
	ExcuseDeath      = "a pod died"         // within Bounds.Abrupt of a ready pod's death
	ExcuseNoReadyPod = "no ready pod"       // no pod ready and answering for Bounds.Entry
	ExcuseReload     = "a reload by others" // runtime driver, within Bounds.Reload of one
)

// Evaluation is what the invariants found in one history.
type Evaluation struct {
	Violations []Violation
	// Excused counts the failed requests by the excuse that allowed them.
	Excused map[string]int
	// ReloadCost is the longest a reload by others made requests fail,
	// from its start to the last failed request it excused.
	ReloadCost time.Duration
}

// podTrack is one pod as the evaluation walks through the observations.
type podTrack struct {
	state    podState
	inK8s    bool
	alive    bool
	checked  bool      // a check reached it since it began to listen
	since    time.Time // when it became ready and alive; zero when not
	lastHit  time.Time
	hitCount int  // answered requests in all when it was last hit (or became available)
	reported bool // an InService violation was reported for this availability
	moved    bool // its server moved to it (Bounds.Move applies)
}

// entry is how long p may take to enter service.
func (p *podTrack) entry(b Bounds) time.Duration {
	if p.moved {
		return b.Move
	}
	return b.Entry
}

func (p *podTrack) available() bool { return p.inK8s && p.state == live && p.alive }

// evaluate checks the observations of a history against the invariants.
// runtimeOnly says the servers live in the running HAProxy alone (runtime
// driver): a reload by others empties the backend until the service adds
// them again, and Bounds.Reload allows for it.
func evaluate(all []obs, b Bounds, runtimeOnly bool) Evaluation {
	ev := Evaluation{Excused: map[string]int{}}
	sort.SliceStable(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	pods := map[int]*podTrack{}
	track := func(n int) *podTrack {
		if pods[n] == nil {
			pods[n] = &podTrack{state: absent}
		}
		return pods[n]
	}
	step := -1
	var lastFail time.Time
	var deaths []time.Time
	var reloads [][2]time.Time // start and end of each reload by others
	reloadStart := time.Time{}
	answered := 0
	add := func(inv Invariant, at time.Time, format string, args ...any) {
		ev.Violations = append(ev.Violations, Violation{Invariant: inv, At: at, Step: step, What: fmt.Sprintf(format, args...)})
	}
	becomes := func(p *podTrack, at time.Time, was bool) {
		now := p.available()
		switch {
		case now && !was:
			p.since, p.hitCount, p.reported = at, answered, false
		case !now:
			p.since = time.Time{}
		}
	}
	// excuse says why a failed request at at breaks no invariant; empty
	// when nothing does.
	excuse := func(at time.Time) string {
		if runtimeOnly {
			if !reloadStart.IsZero() {
				return ExcuseReload // a reload by others is under way
			}
			if n := len(reloads); n > 0 && at.Sub(reloads[n-1][1]) <= b.Reload {
				return ExcuseReload
			}
		}
		for _, d := range deaths {
			if !at.Before(d) && at.Sub(d) <= b.Abrupt {
				return ExcuseDeath
			}
		}
		for _, p := range pods {
			if p.available() && at.Sub(p.since) >= p.entry(b) {
				return ""
			}
		}
		return ExcuseNoReadyPod
	}
	lastReloadEnd := func() time.Time {
		if len(reloads) == 0 {
			return time.Time{}
		}
		return reloads[len(reloads)-1][1]
	}
	for _, o := range all {
		switch o.kind {
		case obsStep:
			step = o.step
		case obsListen:
			p := track(o.pod)
			was := p.available()
			p.alive, p.checked = true, false
			if o.pod == staticPod {
				p.inK8s, p.state = true, live
			}
			becomes(p, o.at, was)
		case obsStop:
			p := track(o.pod)
			was := p.available()
			if was {
				deaths = append(deaths, o.at) // the pod was ready: clients may still be sent there
			}
			p.alive = false
			becomes(p, o.at, was)
		case obsK8s:
			p := track(o.pod)
			was := p.available()
			p.state, p.inK8s, p.moved = o.state, o.state != absent, o.moved
			becomes(p, o.at, was)
		case obsCheck:
			track(o.pod).checked = true
		case obsClient:
			p := track(o.pod)
			if !p.checked {
				add(CheckedFirst, o.at, "a client connection reached %s before any health check since it began to listen", podName(o.pod))
				p.checked = true // once per listening period
			}
		case obsReload:
			if o.err != "" {
				add(Converges, o.at, "HAProxy reload failed: %s", o.err)
				continue
			}
			if !reloadStart.IsZero() {
				reloads = append(reloads, [2]time.Time{reloadStart, o.at})
				reloadStart = time.Time{}
			}
		case obsRequest:
			if o.err != "" {
				why := excuse(o.at)
				if why == "" {
					// One violation per burst of failures.
					if n := len(ev.Violations); n > 0 && ev.Violations[n-1].Invariant == NoFailedRequest && o.at.Sub(lastFail) < time.Second {
						ev.Violations[n-1].Count++
					} else {
						add(NoFailedRequest, o.at, "a request failed (%s) while a ready pod answered", o.err)
					}
					lastFail = o.at
					continue
				}
				ev.Excused[why]++
				if why == ExcuseReload {
					start := reloadStart
					if start.IsZero() {
						start = reloads[len(reloads)-1][0]
					}
					ev.ReloadCost = max(ev.ReloadCost, o.at.Sub(start))
				}
				continue
			}
			answered++
			p := track(o.pod)
			if p.available() {
				p.lastHit, p.hitCount = o.at, answered
			}
			// Every pod that has been ready and answering for Entry, and
			// took none of the requests answered since (each pod's share
			// three times over), is not in service.
			avail := 0
			for _, q := range pods {
				if q.available() {
					avail++
				}
			}
			for n, q := range pods {
				if !q.available() || q.reported {
					continue
				}
				due := q.since.Add(q.entry(b))
				if runtimeOnly {
					if r := lastReloadEnd(); r.Add(b.Reload).After(due) {
						due = r.Add(b.Reload)
					}
				}
				if o.at.After(due) && answered-q.hitCount > 3*avail+10 && q.lastHit.Before(due) {
					add(InService, o.at, "%s has been ready and answering since %s; %d requests answered since, none by it",
						podName(n), q.since.Format("15:04:05.000"), answered-q.hitCount)
					q.reported = true
				}
			}
		case obsReloadStart:
			reloadStart = o.at
		case obsViolation:
			add(o.inv, o.at, "%s", o.err)
		}
	}
	return ev
}
