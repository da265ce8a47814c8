package runtimeapi_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// slotLines are a backend with n slots as docs/haproxy.md declares them,
// behind "default-server send-proxy-v2": what HAProxy never gives a server
// added with "add server".
func slotLines(n int) []string {
	return []string{"balance roundrobin", "option tcp-check", "load-server-state-from-file global",
		"default-server send-proxy-v2 check-send-proxy inter 200ms rise 1 fall 1",
		fmt.Sprintf("server-template k8s 1-%d k8s.invalid:1 check init-addr last,0.0.0.0", n)}
}

// syncSlots is one reconcile as the service runs it: read, name the
// desired servers after their slots, plan, apply.
func syncSlots(t *testing.T, c *runtimeapi.Client, w model.Backend) (plan.Plan, plan.SlotUse) {
	t.Helper()
	cur, err := c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	named, use := plan.AssignSlots(cur, w, "")
	p := plan.CalculateWith(cur, named, c.Policy())
	if _, err := c.Apply(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p, use
}

func convergeSlots(t *testing.T, c *runtimeapi.Client, w model.Backend) plan.SlotUse {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, use := syncSlots(t, c, w)
		if !p.HasChanges() && !p.Pending() {
			return use
		}
		if time.Now().After(deadline) {
			t.Fatalf("not converged: %+v", p)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type slotWorld struct {
	h         *haproxytest.HAProxy
	c         *runtimeapi.Client
	eps       []model.Server
	listeners []*haproxytest.ProxyListener
}

// newSlotWorld starts HAProxy with n slots and nEps endpoints that answer
// only the PROXY protocol v2.
func newSlotWorld(t *testing.T, n, nEps int) *slotWorld {
	h := haproxytest.StartWith(t, haproxytest.Options{StateFile: true}, haproxytest.Backend{Name: "be", Lines: slotLines(n)})
	c, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, chk)
	if err != nil {
		t.Fatal(err)
	}
	w := &slotWorld{h: h, c: c}
	for i, port := range haproxytest.FreePorts(t, "127.0.0.1", nEps) {
		name := fmt.Sprintf("node-%d", i)
		w.listeners = append(w.listeners, haproxytest.ListenProxyV2(t, name, fmt.Sprintf("127.0.0.1:%d", port)))
		w.eps = append(w.eps, srv(name, "127.0.0.1", port, model.Ready))
	}
	return w
}

// spread sends n connections through the frontend: answers by endpoint.
func (w *slotWorld) spread(n int) map[string]int { return haproxytest.Spread(w.h.Frontends["be"], n) }

// idleLook: parked (its check paused), at the placeholder address.
func idleLook(s haproxytest.Server) bool {
	return s.Maint() && !s.CheckRunning() && s.Address == "0.0.0.0" && s.Port == 1
}

// TestSlotsServeWithDefaultServer: endpoints fill the slots of a backend
// with "default-server send-proxy-v2"; clients through the frontend reach
// every endpoint with the PROXY header (an added server would send none,
// and be answered nothing); no server is added; the slot left over has the
// idle look, as do slots fresh from haproxy.cfg.
func TestSlotsServeWithDefaultServer(t *testing.T) {
	w := newSlotWorld(t, 4, 3)
	use := convergeSlots(t, w.c, want(w.eps...))
	if use.Filled != 3 || use.Idle != 1 || len(use.Overflow) != 0 {
		t.Fatalf("slot use %+v", use)
	}
	s := w.h.Servers(t, "be")
	if len(s) != 4 {
		t.Fatalf("servers %v: want the 4 slots and nothing added", s)
	}
	for i := 1; i <= 3; i++ {
		if got := s[fmt.Sprintf("k8s%d", i)]; !got.Up() || got.Maint() || got.Drain() || got.Address != "127.0.0.1" {
			t.Errorf("k8s%d not in service: %+v", i, got)
		}
	}
	if !idleLook(s["k8s4"]) {
		t.Errorf("k8s4 does not look idle: %+v", s["k8s4"])
	}
	got := w.spread(30)
	for _, l := range w.listeners {
		if got[l.Name] == 0 {
			t.Errorf("no client reached %s through the frontend: %v", l.Name, got)
		}
	}
	if got[""] != 0 {
		t.Errorf("%d of 30 connections failed: %v", got[""], got)
	}
	t.Logf("30 connections through the frontend: %v", got)
}

// TestSlotsSurviveAReload: a reload by others, done as the documented
// drop-in does (state dumped, then the reload), under client load, fails
// no request and keeps every filled slot's address, port and state; the
// next reconcile has nothing to do.
func TestSlotsSurviveAReload(t *testing.T) {
	w := newSlotWorld(t, 4, 3)
	convergeSlots(t, w.c, want(w.eps...))
	before := w.h.Servers(t, "be")

	load := haproxytest.StartLoad(w.h.Frontends["be"], 2)
	load.WaitSent(50)
	w.h.DumpState(t)
	w.h.Reload(t)
	load.WaitSent(200) // well past the new worker's first checks
	load.Stop()
	t.Logf("%d requests, %d failed, across one reload", load.Sent(), load.Failed())
	if load.Failed() != 0 {
		t.Errorf("%d of %d requests failed across the reload", load.Failed(), load.Sent())
	}
	after := w.h.Servers(t, "be")
	for name, b := range before {
		a := after[name]
		if a.Address != b.Address || a.Port != b.Port || a.Admin != b.Admin || a.Up() != b.Up() || a.Weight != b.Weight {
			t.Errorf("%s before the reload %+v, after %+v", name, b, a)
		}
	}
	if p, _ := syncSlots(t, w.c, want(w.eps...)); p.HasChanges() {
		t.Errorf("the reconcile after the reload changes %+v", p.Changes)
	}

	// Without the state saved, the same reload loses every slot's
	// endpoint: what the drop-in is for.
	if err := os.Remove(w.h.StateFile); err != nil {
		t.Fatal(err)
	}
	w.h.Reload(t)
	if s := w.h.Servers(t, "be")["k8s1"]; s.Address != "0.0.0.0" {
		t.Errorf("k8s1 after a reload with no state file: %+v, want back at the placeholder", s)
	}
}

// TestSlotExhaustionAddsTheRest: more endpoints than slots; the rest is
// added with "add server" as without slots, and said (SlotUse.Overflow).
func TestSlotExhaustionAddsTheRest(t *testing.T) {
	w := newSlotWorld(t, 2, 3)
	use := convergeSlots(t, w.c, want(w.eps...))
	if use.Filled != 2 || use.Idle != 0 || len(use.Overflow) != 1 || use.Overflow[0] != "node-2" {
		t.Fatalf("slot use %+v: want 2 filled and node-2 over", use)
	}
	s := w.h.Servers(t, "be")
	if _, ok := s["node-2"]; !ok || len(s) != 3 {
		t.Fatalf("servers %v: want k8s1, k8s2 and node-2 added", s)
	}
	if s["node-2"].ID < 1<<24 {
		t.Errorf("node-2 has id %d: not one this driver adds with", s["node-2"].ID)
	}
	// The slots send the PROXY header default-server gives them; the
	// added server, bare, does not and is answered nothing: what slots
	// are for, and why the overflow is said.
	got := w.spread(30)
	t.Logf("30 connections through the frontend: %v", got)
	if got["node-0"] == 0 || got["node-1"] == 0 || got[""] == 0 || got["node-2"] != 0 {
		t.Errorf("through the frontend %v: want the slots served and the bare server answered nothing", got)
	}
}

// TestFreedSlotIsReused: an endpoint gone frees its slot, which takes the
// idle look and is the next endpoint's.
func TestFreedSlotIsReused(t *testing.T) {
	w := newSlotWorld(t, 2, 3)
	convergeSlots(t, w.c, want(w.eps[0], w.eps[1]))
	s := w.h.Servers(t, "be")
	if s["k8s1"].Port != w.eps[0].Port || s["k8s2"].Port != w.eps[1].Port {
		t.Fatalf("slots %+v", s)
	}
	convergeSlots(t, w.c, want(w.eps[1]))
	s = w.h.Servers(t, "be")
	if !idleLook(s["k8s1"]) || s["k8s2"].Port != w.eps[1].Port || len(s) != 2 {
		t.Fatalf("after node-0 left: %+v", s)
	}
	use := convergeSlots(t, w.c, want(w.eps[1], w.eps[2]))
	s = w.h.Servers(t, "be")
	if s["k8s1"].Port != w.eps[2].Port || !s["k8s1"].Up() || s["k8s1"].Maint() || len(use.Overflow) != 0 || len(s) != 2 {
		t.Fatalf("node-2 not in the freed slot: %+v, use %+v", s, use)
	}
	if got := w.spread(20); got["node-2"] == 0 || got[""] != 0 {
		t.Errorf("through the frontend: %v", got)
	}
}

// TestSlotsGoToReadyEndpoints (the history checker, seed 12, slots): with
// more ready endpoints than slots, those added with "add server" move into
// the slots as they free up — one slot freed by an endpoint gone, one given
// up by a not-ready endpoint parked in it — each slot gated before it takes
// traffic and each added server removed only once its slot serves. Under
// client load: never fewer than the two ready endpoints' servers in
// traffic, no request failed during the move, and none across a reload
// with the state saved, which drops only what is outside the slots (before,
// the slots stayed with the gone and not-ready endpoints, and that reload
// dropped every server in traffic).
func TestSlotsGoToReadyEndpoints(t *testing.T) {
	// Plain endpoints (no PROXY header), so that the added servers serve.
	h := haproxytest.StartWith(t, haproxytest.Options{StateFile: true}, haproxytest.Backend{Name: "be", Lines: []string{
		"balance roundrobin", "option tcp-check", "load-server-state-from-file global",
		"default-server inter 200ms rise 1 fall 1",
		"server-template k8s 1-2 k8s.invalid:1 check init-addr last,0.0.0.0"}})
	c, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, chk)
	if err != nil {
		t.Fatal(err)
	}
	var eps []model.Server
	for i, port := range haproxytest.FreePorts(t, "127.0.0.1", 4) {
		name := fmt.Sprintf("node-%d", i)
		haproxytest.Listen(t, name, fmt.Sprintf("127.0.0.1:%d", port))
		eps = append(eps, srv(name, "127.0.0.1", port, model.Ready))
	}
	use := convergeSlots(t, c, want(eps[0], eps[1]))
	if use = convergeSlots(t, c, want(eps...)); use.Filled != 2 || len(use.Overflow) != 2 {
		t.Fatalf("slot use %+v: want node-2 and node-3 beyond the slots", use)
	}

	load := haproxytest.StartLoad(h.Frontends["be"], 2)
	defer load.Stop()
	waitSent := load.WaitSent
	inTraffic := func() (n int) {
		for _, s := range h.Servers(t, "be") {
			if s.Up() && !s.Maint() && !s.Drain() {
				n++
			}
		}
		return n
	}
	waitSent(50)

	// node-0 goes (its slot k8s1 is freed), node-1 turns not ready (its
	// slot k8s2 parked): reconciles as the service's follow-ups run them.
	notReady := eps[1]
	notReady.State = model.Maint
	w := want(notReady, eps[2], eps[3])
	least, reconciles := 4, 0
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, u := syncSlots(t, c, w)
		reconciles++
		least = min(least, inTraffic())
		use = u
		if !p.HasChanges() && !p.Pending() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not converged: %+v", p)
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitSent(50)
	moved := load.Failed()
	s := h.Servers(t, "be")
	t.Logf("the move: %d reconciles, at least %d servers in traffic, %d of %d requests failed; slots %+v", reconciles, least, moved, load.Sent(), use)
	// Which slot each takes depends on when node-0's slot is freed (its
	// sessions end): node-1's parked one may be taken first.
	inSlots := slices.Sorted(maps.Values(use.Names))
	if !reflect.DeepEqual(inSlots, []string{"node-2", "node-3"}) || !reflect.DeepEqual(use.Overflow, []string{"node-1"}) {
		t.Errorf("slot use %+v: want node-2 and node-3 in the slots, node-1 beyond", use)
	}
	port := map[string]int{"node-2": eps[2].Port, "node-3": eps[3].Port}
	for slot, ep := range use.Names {
		if got := s[slot]; got.Port != port[ep] || !got.Up() || got.Maint() || got.Drain() {
			t.Errorf("%s: %+v, want %s in service", slot, got, ep)
		}
	}
	if _, ok := s["node-2"]; ok {
		t.Errorf("node-2's added server is still there: %+v", s["node-2"])
	}
	if _, ok := s["node-3"]; ok {
		t.Errorf("node-3's added server is still there: %+v", s["node-3"])
	}
	if got := s["node-1"]; !got.Maint() {
		t.Errorf("node-1, not ready, beyond the slots: %+v, want parked", got)
	}
	if least < 2 {
		t.Errorf("%d servers in traffic at some point of the move: want both ready endpoints' at all times", least)
	}
	if moved != 0 {
		t.Errorf("%d requests failed during the move", moved)
	}

	// A reload by others, the state saved: it drops only node-1's added
	// server, out of traffic.
	h.DumpState(t)
	h.Reload(t)
	waitSent(200) // well past the new worker's first checks
	t.Logf("across a reload with the state saved: %d of %d requests failed", load.Failed()-moved, load.Sent())
	if n := load.Failed() - moved; n != 0 {
		t.Errorf("%d requests failed across the reload", n)
	}
}
