package e2e

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// TestZonePrefersTheLocalZone: HAPROXY_LOCAL_ZONE=z1 on a real HAProxy
// (node mode, the runtime driver, a backend with option allbackups).
// Traffic through the frontend goes only to the local zone's server while
// it is in service, to the other zones' (backup) servers when it is not —
// its node dead, or its endpoint draining — and back once it is; HAProxy
// switches by itself, no reconcile needed for a dead node. A Node that
// moves into the local zone changes role: its server is re-added under its
// active name, the backup one kept in service until then, and no client
// connection fails.
func TestZonePrefersTheLocalZone(t *testing.T) {
	w := newWorldLines(t, []string{"balance roundrobin", "option tcp-check", "option allbackups"}, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}})
	w.rec.Options.LocalZone = "z1"
	a, b, c := w.node("a", "127.0.4.1"), w.node("b", "127.0.4.2"), w.node("c", "127.0.4.3")
	for n, z := range map[string]string{a: "z1", b: "z2", c: "z3"} {
		w.patchNode(n, func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone] = z })
	}
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort
	la := listen(t, a, "127.0.4.1", np)
	listen(t, b, "127.0.4.2", np)
	listen(t, c, "127.0.4.3", np)
	http := map[string]int32{"http": 8080}
	eps := func(aTerminating bool) []endpoint {
		return []endpoint{{ip: "10.244.0.1", node: a, terminating: aTerminating}, {ip: "10.244.0.2", node: b}, {ip: "10.244.0.3", node: c}}
	}
	bk := func(n string) string { return n + desired.BackupSuffix }

	step(t, "other zones are backup: traffic to the local zone only", func(t *testing.T) {
		w.slice("web-1", "web", http, eps(false)...)
		res := w.mustReconcile()
		if z := res.Targets[0].Zones; z["z1"].Servers != 1 || z["z2"].Servers != 1 || !z["z2"].Backup || z["z1"].Backup {
			t.Errorf("zones in the result: %+v", z)
		}
		w.expectServers("be", map[string]server{a: {"127.0.4.1", int(np), "ready"}, bk(b): {"127.0.4.2", int(np), "ready"}, bk(c): {"127.0.4.3", int(np), "ready"}})
		if got := backups(t, w); !got[bk(b)] || !got[bk(c)] || got[a] {
			t.Errorf("HAProxy's backup servers: %v", got)
		}
		w.expectTraffic("be", a)
		reply, _ := w.h.Command("set server be/" + a + " backup")
		t.Logf(`"set server ... backup": %q`, strings.TrimSpace(reply))
		if backups(t, w)[a] {
			t.Error(`"set server ... backup" changed the role`)
		}
	})
	step(t, "the local zone's node dies: HAProxy uses the other zones by itself", func(t *testing.T) {
		la.Close()
		w.expectTraffic("be", b, c)
	})
	tt := t // the listener outlives the step
	step(t, "it comes back: the local zone again", func(t *testing.T) {
		la = listen(tt, a, "127.0.4.1", np)
		w.expectTraffic("be", a)
	})
	step(t, "the local zone's server drains: the other zones take new traffic", func(t *testing.T) {
		w.slice("web-1", "web", http, eps(true)...)
		w.mustReconcile()
		w.expectTraffic("be", b, c)
		w.slice("web-1", "web", http, eps(false)...)
		w.mustReconcile()
		w.expectTraffic("be", a)
	})
	step(t, "a node moves into the local zone: re-added as active, no request fails", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var sent, failed, empty atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ctx.Err() == nil {
				sent.Add(1)
				if _, err := haproxytest.Ask(w.h.Frontends["be"]); err != nil {
					failed.Add(1)
				}
				reply, err := w.h.Command("show servers state be")
				if err == nil && inServiceCount(haproxytest.ParseServers(reply, "be")) == 0 {
					empty.Add(1)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		w.patchNode(b, func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone] = "z1" })
		res := w.mustReconcile()
		w.mustReconcile() // the backup one, parked, goes
		cancel()
		<-done
		if add := res.Targets[0].Add; len(add) != 1 || add[0] != b {
			t.Errorf("added %v, want %s", add, b)
		}
		w.expectServers("be", map[string]server{a: {"127.0.4.1", int(np), "ready"}, b: {"127.0.4.2", int(np), "ready"}, bk(c): {"127.0.4.3", int(np), "ready"}})
		w.expectTraffic("be", a, b)
		if failed.Load() != 0 || empty.Load() != 0 || sent.Load() < 10 {
			t.Errorf("%d of %d connections failed; %d reads without a server in service", failed.Load(), sent.Load(), empty.Load())
		}
	})
	if n := w.h.Reloads(t); n != 0 {
		t.Errorf("HAProxy reloaded %d times", n)
	}
}

// backups reads which servers of be HAProxy has as backup ("show stat":
// the bck column).
func backups(t *testing.T, w *world) map[string]bool {
	t.Helper()
	reply, err := w.h.Command("show stat")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(reply, "\n")
	col := -1
	for i, h := range strings.Split(strings.TrimPrefix(lines[0], "# "), ",") {
		if h == "bck" {
			col = i
		}
	}
	out := map[string]bool{}
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		if col < 0 || len(f) <= col || f[0] != "be" || f[1] == "BACKEND" {
			continue
		}
		out[f[1]] = f[col] == "1"
	}
	return out
}

// inServiceCount counts servers UP and neither drained nor in maintenance.
func inServiceCount(servers map[string]haproxytest.Server) int {
	n := 0
	for _, s := range servers {
		if s.Up() && !s.Drain() && !s.Maint() {
			n++
		}
	}
	return n
}
