package history

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// The invariants of many-Services histories (Setup.Services), checked by
// each target's monitor from "show servers state".
const (
	// LeftParked: the servers of a backend no Service names any more (be2
	// after ServiceLeave) are parked in maintenance within Bounds.Converge
	// and none is deleted on the read that saw it leave: a server is
	// deleted only once it was seen out of traffic (parked by an earlier
	// reconcile, then deleted by the follow-up's, which reads the Services
	// again; a reload by others drops the runtime driver's servers, which
	// is not a deletion).
	LeftParked Invariant = "left-parked"
	// OthersUntouchedAcross: a step concerning one Service never changes
	// another Service's backend: be never runs a server at another
	// Service's pod, nor be2 one at a pod that is not web2's, no client of
	// be reaches another Service's pod, and once be2 is as web2's last
	// step left it, it stays so until web2's next step (or a reload).
	OthersUntouchedAcross Invariant = "others-untouched-across-services"
	// HolderKeeps: while web3, created later, names be too (Duplicate
	// until DuplicateEnd), web keeps it: be never runs web3's pod, and
	// web's steps on be are judged by every invariant as at any other time
	// (out-of-traffic included: the window's not-ready pod leaves traffic).
	HolderKeeps Invariant = "holder-keeps"
)

// svcWatch is what a target's monitor remembers of its last read of be2.
type svcWatch struct {
	read            bool // prev holds a read
	prev            map[string]string
	phase           phase
	epoch           int64
	reloads, others int64
	settled         bool // be2 was as web2's last step leaves it, since
	// reported holds what was reported, by invariant, server, web2's step
	// and duplicate: each once, not every 100ms while it lasts.
	reported map[string]bool
}

// check reads tg's backends once and records what breaks the invariants
// of many-Services histories.
func (s *services) check(tg *target, sw *svcWatch) {
	type state struct {
		phase           phase
		epoch           int64
		window          bool
		windows         int
		since           time.Time
		reloads, others int64
	}
	now := func() state {
		s.mu.Lock()
		defer s.mu.Unlock()
		return state{s.phase, s.epoch.Load(), s.window, s.windows, s.since, tg.reloads.Load(), tg.othersReloads.Load()}
	}
	a := now()
	reply, err := tg.h.Command("show servers state")
	b := now()
	if err != nil || a.epoch != b.epoch {
		sw.read = false // a reload under way, or web2 changed during the read
		return
	}
	if sw.reported == nil {
		sw.reported = map[string]bool{}
	}
	viol := func(inv Invariant, server string, format string, args ...any) {
		key := fmt.Sprintf("%s|%s|%d|%d", inv, server, a.epoch, a.windows)
		if sw.reported[key] {
			return
		}
		sw.reported[key] = true
		s.w.rec.add(obs{kind: obsViolation, target: tg.i, inv: inv, err: fmt.Sprintf(format, args...)})
	}
	be, be2 := haproxytest.ParseServers(reply, backend), haproxytest.ParseServers(reply, backend2)
	for _, sv := range be {
		if n, ok := podOfAddr(sv.Address); ok && n >= otherPods {
			if slices.Contains(web3Pods, n) {
				viol(HolderKeeps, sv.Name, "%s runs %s at %s, a pod of %s, which named it after %s held it", backend, sv.Name, sv.Address, service3, service)
				continue
			}
			viol(OthersUntouchedAcross, sv.Name, "%s runs %s at %s, a pod of another Service", backend, sv.Name, sv.Address)
		}
	}
	for _, sv := range be2 {
		if n, ok := podOfAddr(sv.Address); !ok || !slices.Contains(web2Pods, n) {
			viol(OthersUntouchedAcross, sv.Name, "%s runs %s at %s, not a pod of %s", backend2, sv.Name, sv.Address, service2)
		}
	}
	v2 := view(be2)
	reloaded := a.reloads != b.reloads || a.reloads%2 == 1 || a.reloads != sw.reloads
	byOthers := a.others != b.others || a.others%2 == 1 || a.others != sw.others
	if a.epoch != sw.epoch || reloaded {
		sw.settled = false
	}
	if a.phase == left && sw.read && sw.phase == left && sw.epoch == a.epoch {
		for name, was := range sw.prev {
			// The runtime driver's servers live in the running HAProxy
			// alone: a reload by others drops them, parked or not.
			// Seen in traffic, then gone: deleted without being parked first.
			if _, ok := v2[name]; !ok && strings.HasSuffix(was, " in") && !(tg.api == nil && byOthers) {
				viol(LeftParked, name, "%s (%s) was deleted from %s, in traffic, on the read that saw no Service name it", name, was, backend2)
			}
		}
	}
	if bound := BoundsOf(config.ShippedCheck()).Converge; a.phase == left && time.Since(a.since) > bound {
		for name, v := range v2 {
			if strings.HasSuffix(v, " in") {
				viol(LeftParked, name, "%s (%s) still takes traffic %v after %s stopped naming %s", name, v, time.Since(a.since).Round(time.Millisecond), service2, backend2)
			}
		}
	}
	if sw.settled {
		// A left backend's deletions are left-parked's to report.
		if d := diffView(sw.prev, v2, a.phase == left); d != "" {
			viol(OthersUntouchedAcross, "", "%s changed though no step concerned %s since it was as %s's last step leaves it: %s", backend2, service2, service2, d)
		}
	}
	if !sw.settled && settledFor(a.phase, v2) {
		sw.settled = true
	}
	sw.read, sw.prev, sw.phase, sw.epoch, sw.reloads, sw.others = true, v2, a.phase, a.epoch, b.reloads, b.others
}

// settledFor says whether be2 (its view) is as web2's phase leaves it.
func settledFor(ph phase, v2 map[string]string) bool {
	switch ph {
	case never:
		return len(v2) == 0
	case joined:
		if len(v2) != len(web2Pods) {
			return false
		}
		for _, v := range v2 {
			if !strings.HasSuffix(v, " in") {
				return false
			}
		}
		return true
	default:
		for _, v := range v2 {
			if strings.HasSuffix(v, " in") {
				return false
			}
		}
		return true
	}
}

// convergedServices says how be2 differs from what web2's phase asks for
// once the history is quiet: its pods in service and UP while it names be2,
// every server parked once it left, none before it ever named it.
func (s *services) convergedOn(tg *target) []string {
	reply, err := tg.h.Command("show servers state " + backend2)
	if err != nil {
		return []string{"show servers state: " + err.Error()}
	}
	running := haproxytest.ParseServers(reply, backend2)
	s.mu.Lock()
	ph := s.phase
	s.mu.Unlock()
	var diffs []string
	byAddr := map[string]haproxytest.Server{}
	for _, sv := range running {
		byAddr[sv.Address] = sv
	}
	switch ph {
	case never:
		for _, sv := range running {
			diffs = append(diffs, fmt.Sprintf("%s: server %s (%s) though %s never named it", backend2, sv.Name, sv.Address, service2))
		}
	case joined:
		for _, n := range web2Pods {
			if sv, ok := byAddr[podAddr(n)]; !ok || sv.Maint() || sv.Drain() || !sv.Up() {
				diffs = append(diffs, fmt.Sprintf("%s: %s of %s not in service (present=%v maint=%v drain=%v up=%v)", backend2, podName(n), service2, ok, sv.Maint(), sv.Drain(), sv.Up()))
			}
		}
	case left:
		for _, sv := range running {
			if !sv.Maint() {
				diffs = append(diffs, fmt.Sprintf("%s: %s (%s) not parked though no Service names it", backend2, sv.Name, sv.Address))
			}
		}
	}
	if tg.api != nil {
		diffs = append(diffs, persistedDiffs(tg, backend2, running)...)
	}
	return diffs
}

// diffView says how backend views a and b differ ("" when they do not);
// with ignoreGone, servers of a that b lacks are not differences.
func diffView(a, b map[string]string, ignoreGone bool) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(a)) {
		switch w, ok := b[name]; {
		case !ok && !ignoreGone:
			out = append(out, fmt.Sprintf("%s (%s) removed", name, a[name]))
		case ok && w != a[name]:
			out = append(out, fmt.Sprintf("%s %s -> %s", name, a[name], w))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(b)) {
		if _, ok := a[name]; !ok {
			out = append(out, fmt.Sprintf("%s (%s) added", name, b[name]))
		}
	}
	return strings.Join(out, "; ")
}

// podOfAddr is the pod whose address addr is (podAddr's inverse).
func podOfAddr(addr string) (int, bool) {
	ip := net.ParseIP(addr).To4()
	if ip == nil || ip[0] != podNet[0] || ip[1] != podNet[1] || ip[2] < 1 || ip[3] < 1 {
		return 0, false
	}
	return int(ip[2]-1)*250 + int(ip[3]-1), true
}
