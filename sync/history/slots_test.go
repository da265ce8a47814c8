package history

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// TestEvaluateSlotReloads: with the runtime driver, a failed request beside
// a reload by others is excused when the reload lost what the service
// added (no slots, or the state not saved), or when the servers it
// dropped (beyond the slots) were all that served; a slot history's reload
// that saved the state with every server in a slot excuses nothing.
func TestEvaluateSlotReloads(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	b := Bounds{Entry: 2 * time.Second, Move: 2 * time.Second, Abrupt: 700 * time.Millisecond, Reload: 2 * time.Second, Converge: 10 * time.Second}
	start := []obs{
		{at: at(0), kind: obsListen, pod: 1}, {at: at(0), kind: obsK8s, pod: 1, state: live}, {at: at(0), kind: obsCheck, pod: 1},
	}
	reload := func(saved bool, overflow ...int) []obs {
		return []obs{
			{at: at(5000), kind: obsReloadStart, saved: saved, overflow: overflow},
			{at: at(5100), kind: obsReload},
			{at: at(6000), kind: obsRequest, err: "unexpected EOF"},
		}
	}
	for _, c := range []struct {
		name   string
		slots  bool
		obs    []obs
		excuse string // empty: a violation
	}{
		{"no slots", false, reload(false), ExcuseReload},
		{"slots, the state lost", true, reload(false), ExcuseReload},
		{"slots, the state saved, the serving pod's server beyond them", true, reload(true, 1), ExcuseOverflow},
		{"slots, the state saved, the servers unknown", true, reload(true, -1), ExcuseOverflow},
		// Pod 1, in a slot, kept serving: another's drop explains nothing.
		{"slots, the state saved, another pod's server beyond them", true, reload(true, 2), ""},
		{"slots, the state saved, every server in one", true, reload(true), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev := evaluate(append(append([]obs{}, start...), c.obs...), evalOptions{Bounds: b, Targets: 1, RuntimeOnly: true, Slots: c.slots})
			if c.excuse == "" {
				if len(ev.Violations) != 1 || ev.Violations[0].Invariant != NoFailedRequest {
					t.Fatalf("violations %+v, excused %v: want one no-failed-request", ev.Violations, ev.Excused)
				}
				return
			}
			if len(ev.Violations) != 0 || ev.Excused[c.excuse] != 1 {
				t.Fatalf("violations %+v, excused %v: want it excused as %q", ev.Violations, ev.Excused, c.excuse)
			}
		})
	}
}

// TestIdleSlotDiffs: converges takes the idle slots out of what it matches
// with pods, and wants each to look idle (maintenance, check paused, at
// 0.0.0.0:1) and every slot of haproxy.cfg there.
func TestIdleSlotDiffs(t *testing.T) {
	w := &world{setup: Setup{Slots: SlotSetup{N: 2}}}
	w.cfg.ClusterName = cluster
	idle := haproxytest.Server{Name: "east-k8s2", Address: "0.0.0.0", Port: 1, Admin: 0x01, CheckState: 0x0e}
	filled := haproxytest.Server{Name: "east-k8s1", Address: podAddr(3), Port: 80, Op: 2, CheckState: 0x06}
	running := map[string]haproxytest.Server{"east-k8s1": filled, "east-k8s2": idle, "east-p-4": {Name: "east-p-4", Address: podAddr(4)}}
	if d := w.idleSlotDiffs(running); len(d) != 0 {
		t.Fatalf("diffs %q", d)
	}
	if _, ok := running["east-k8s2"]; ok || len(running) != 2 {
		t.Fatalf("left %v: want the filled slot and the added server", running)
	}
	idle.Admin, idle.CheckState = 0, 0x06 // fresh from haproxy.cfg: in service, its check failing
	if d := w.idleSlotDiffs(map[string]haproxytest.Server{"east-k8s2": idle}); len(d) != 2 {
		t.Fatalf("diffs %q: want the idle look and a missing slot", d)
	}
}

// TestOverflowReadsThePodsAddresses: the servers beyond the slots are read
// back as the pods at their addresses, in whichever network the pods are
// (the second reader found the addresses fixed at loopback when the
// package loaded: as root, in the private network, no pod matched and
// every pod was taken as dropped by the reload, which excused every
// failed request). Slots and the static server are left out.
func TestOverflowReadsThePodsAddresses(t *testing.T) {
	line := func(id int, name, addr, fqdn string) string {
		// show servers state: be_id be_name srv_id srv_name srv_addr … srv_fqdn (field 17) …
		f := []string{"3", backend, itoa(id), name, addr, "2", "0", "1", "1", "5", "6", "3", "4", "6", "0", "0", "0", fqdn, "80", "-", "0", "0", "-", "-", "0"}
		return strings.Join(f, " ")
	}
	reply := "1\n# be_id …\n" + strings.Join([]string{
		line(1, "static", podAddr(staticPod), "-"),
		line(2, "k8s1", podAddr(2), "k8s.invalid"),
		line(3, "p-3", podAddr(3), "-"),
		line(4, "elsewhere", "192.0.2.9", "-"),
	}, "\n") + "\n"
	if got := overflowOf(reply); len(got) != 1 || got[0] != 3 {
		t.Fatalf("overflow %v, want [3] (p-3 alone: not the static server, the slot, nor an address of no pod)", got)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
