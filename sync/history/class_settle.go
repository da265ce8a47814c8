package history

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	svcs "github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// plainConnections counts the connections that reached a pod without the
// PROXY v2 header HAPROXY_SEND_PROXY_V2 gives every class server and its
// check.
func (w *classWorld) plainConnections() int {
	n := 0
	for _, l := range w.proxied {
		_, plain := l.Counts()
		n += plain
	}
	return n
}

// settle waits, up to Bounds.Converge, until through every target that is
// up every port is served by one of its claimants (its holder at that
// target's last settled moment if it still claims it without a break, the
// same on every target), a port nobody claims refuses, the operator's
// frontend answers, and (no target down) each Service's status names the
// VIPs exactly when it holds its port and a claimant refused has a
// Refused Event naming the holder. Then each target's holders are
// recorded for the judge; else what differed is a violation.
func (w *classWorld) settle() {
	deadline := time.Now().Add(w.b.Converge)
	claims := w.model.claims()
	var traffic, status []string
	var holders [][]int
	for {
		traffic, status, holders = w.differences(claims)
		if len(traffic)+len(status) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if w.other && len(traffic) == 0 {
		w.otherSince.CompareAndSwap(0, time.Now().UnixNano())
	}
	if len(traffic) > 0 {
		w.violation(Converges, "not within %v: %s", w.b.Converge, strings.Join(traffic, "; "))
		w.logTargets()
	}
	if len(status) > 0 {
		w.violation(StatusTruthful, "not within %v: %s", w.b.Converge, strings.Join(status, "; "))
	}
	if n := w.plainConnections(); n > w.plainSaid {
		w.violation(DefaultServerKept, "%d connections reached a pod without the PROXY v2 header HAPROXY_SEND_PROXY_V2 gives every server and its check", n-w.plainSaid)
		w.plainSaid = n
	}
	now := time.Now()
	w.mu.Lock()
	step := w.step
	for i, hs := range holders {
		if hs != nil {
			w.holders[i], w.settledAt[i] = hs, now
		}
	}
	w.mu.Unlock()
	for i, hs := range holders {
		if hs != nil {
			w.rec(classObs{at: now, kind: cSettled, target: i, holders: hs})
		}
	}
	w.t.Logf("settled after step %d: claims %v, ports held by %v (per target; nil: down)", step, claims, holders)
}

// logTargets puts the end of each HAProxy's own log (its master's
// reloads, a worker's exit, a bind refused) in the test's output: what a
// CI log needs to tell a target that stopped listening from a service that
// did not write (class seed 7 on 3.0 in CI: both targets refused every
// frontend for a minute, not reproduced since).
func (w *classWorld) logTargets() {
	for i, tg := range w.tgs {
		lines := strings.Split(strings.TrimSpace(tg.h.Logs()), "\n")
		w.t.Logf("target %d's haproxy.log, last %d lines:\n%s", i, min(len(lines), 15), strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
}

// differences says how what runs differs from what Kubernetes says, and
// which Service serves each port through each target that is up (nil: down;
// -1: none, or not one of its claimants).
func (w *classWorld) differences(claims []int) (traffic, status []string, holders [][]int) {
	w.mu.Lock()
	prev, settledAt := make([][]int, len(w.tgs)), slices.Clone(w.settledAt)
	for i := range prev {
		prev[i] = slices.Clone(w.holders[i])
	}
	since := slices.Clone(w.claimSince)
	anyDown := false
	up := make([]bool, len(w.tgs))
	for i, tg := range w.tgs {
		up[i] = !tg.down
		anyDown = anyDown || tg.down
	}
	w.mu.Unlock()
	holders = make([][]int, len(w.tgs))
	for i, tg := range w.tgs {
		if !up[i] {
			continue
		}
		holders[i] = make([]int, classPorts)
		for p, port := range w.ports {
			holders[i][p] = -1
			var claimants []int
			for s, c := range claims {
				if c == p {
					claimants = append(claimants, s)
				}
			}
			h := prev[i][p]
			kept := h >= 0 && claims[h] == p && !since[h].After(settledAt[i])
			seen := map[int]int{}
			for range 4 {
				name, err := haproxytest.Ask(net.JoinHostPort(tg.vip, strconv.Itoa(port)))
				switch {
				case err != nil:
					seen[-2]++
				default:
					seen[classServiceOf(name)]++
				}
			}
			where := fmt.Sprintf("port %d of target %d", p, i)
			switch {
			case len(claimants) == 0:
				if len(seen) != 1 || seen[-2] == 0 {
					traffic = append(traffic, fmt.Sprintf("%s, which no Service claims, answered %v", where, seen))
				}
			case len(seen) != 1 || seen[-2] > 0:
				traffic = append(traffic, fmt.Sprintf("%s (claimed by %v) answered %v", where, claimants, seen))
			default:
				for x := range seen {
					switch {
					case !slices.Contains(claimants, x):
						traffic = append(traffic, fmt.Sprintf("%s (claimed by %v) answered by %s", where, claimants, classNameOr(x)))
					case kept && x != h:
						traffic = append(traffic, fmt.Sprintf("%s, held by %s, answered by %s", where, className(h), className(x)))
					default:
						holders[i][p] = x
					}
				}
			}
		}
		if name, err := haproxytest.Ask(tg.h.Frontends[classOp]); err != nil || name != "op" {
			traffic = append(traffic, fmt.Sprintf("the operator's frontend of target %d answered %q (%v)", i, name, err))
		}
		traffic = append(traffic, w.balanceDiffs(i, tg)...)
		traffic = append(traffic, w.otherDiffs(i, tg)...)
	}
	// Every target that is up serves each port by the same Service.
	var first []int
	for i, hs := range holders {
		switch {
		case hs == nil:
		case first == nil:
			first = hs
		case !slices.Equal(hs, first):
			traffic = append(traffic, fmt.Sprintf("target %d serves the ports by %v, another by %v", i, hs, first))
		}
	}
	if anyDown || first == nil {
		// A Service's status waits for every target.
		return traffic, status, holders
	}
	var vips []string
	for _, tg := range w.tgs {
		vips = append(vips, tg.vip)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	status = append(status, w.otherStatus(ctx, vips)...)
	for s, v := range w.model.svcs {
		if !v.exists {
			continue
		}
		svc, err := w.c.CoreV1().Services(classNS).Get(ctx, className(s), metav1.GetOptions{})
		if err != nil {
			status = append(status, fmt.Sprintf("%s: %v", className(s), err))
			continue
		}
		var ips []string
		mode := corev1.LoadBalancerIPModeVIP
		if w.sendProxy {
			mode = corev1.LoadBalancerIPModeProxy
		}
		for _, in := range svc.Status.LoadBalancer.Ingress {
			ips = append(ips, in.IP)
			if got := ptr.Deref(in.IPMode, corev1.LoadBalancerIPModeVIP); got != mode {
				status = append(status, fmt.Sprintf("%s's status says %s with ipMode %s, HAPROXY_SEND_PROXY_V2=%v asks %s", className(s), in.IP, got, w.sendProxy, mode))
			}
		}
		holds := claims[s] >= 0 && first[claims[s]] == s
		if h := -1; claims[s] >= 0 {
			h = first[claims[s]]
			if h >= 0 && h != s && !w.refusalTold(ctx, s, h) {
				status = append(status, fmt.Sprintf("%s, refused for port %d, has no Refused Event naming its holder %s", className(s), claims[s], className(h)))
			}
		}
		switch {
		case holds && !slices.Equal(ips, vips):
			status = append(status, fmt.Sprintf("%s holds port %d and its status says %v", className(s), claims[s], ips))
		case !holds && len(ips) > 0:
			status = append(status, fmt.Sprintf("%s holds no port (claims %d) and its status says %v", className(s), claims[s], ips))
		}
	}
	return traffic, status, holders
}

// refusalTold says whether Service s has a Refused Event naming h, the
// holder of the port it claims.
func (w *classWorld) refusalTold(ctx context.Context, s, h int) bool {
	evs, err := w.c.CoreV1().Events(classNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + className(s)})
	if err != nil {
		return false
	}
	for _, e := range evs.Items {
		if e.Reason == "Refused" && strings.Contains(e.Message, classNS+"/"+className(h)) {
			return true
		}
	}
	return false
}

// balanceDiffs: every class backend of target i runs HAPROXY_BALANCE (the
// class backend's roundrobin when unset), the operator's backend its own.
func (w *classWorld) balanceDiffs(i int, tg *classTarget) []string {
	all, err := tg.h.Balances()
	if err != nil {
		return []string{fmt.Sprintf("target %d: %v", i, err)}
	}
	var diffs []string
	for name, algo := range all {
		want := ""
		switch {
		case name == classOp:
			want = "roundrobin"
		case strings.HasPrefix(name, "be_"+svcs.ClassPrefix):
			want = cmp.Or(w.balance, "roundrobin")
		}
		if want != "" && !haproxytest.BalanceIs(algo, want) {
			diffs = append(diffs, fmt.Sprintf("%s of target %d runs balance %s, want %s", name, i, algo, want))
		}
	}
	slices.Sort(diffs)
	return diffs
}
