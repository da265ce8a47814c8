package runtimeapi_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

const inter = 200 * time.Millisecond

var chk = model.Check{Inter: inter, Rise: 1, Fall: 1}

func want(servers ...model.Server) model.Backend {
	return model.Backend{Name: "be", Settings: model.Settings{Balance: "roundrobin", TCPCheck: true}, Servers: servers}
}

func srv(name, addr string, port int, st model.State) model.Server {
	return model.Server{Name: name, Address: addr, Port: port, Weight: 1, State: st, Check: chk}
}

func syncOnce(t *testing.T, c *runtimeapi.Client, w model.Backend) (plan.Plan, plan.Applied) {
	t.Helper()
	cur, err := c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	p := plan.CalculateWith(cur, w, c.Policy())
	a, err := c.Apply(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return p, a
}

// converge reconciles every 50ms, as the service's follow-up pokes do, until
// nothing is left to do or pending.
func converge(t *testing.T, c *runtimeapi.Client, w model.Backend, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		p, _ := syncOnce(t, c, w)
		if !p.HasChanges() && !p.Pending() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not converged within %s: %+v", within, p)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// eventually polls cond for up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRuntimeDriverAgainstHAProxy(t *testing.T) {
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check"}})
	c, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, chk)
	if err != nil {
		t.Fatal(err)
	}
	ports := haproxytest.FreePorts(t, "127.0.0.1", 2)
	p1, p2 := ports[0], ports[1]
	a := haproxytest.Listen(t, "a", fmt.Sprintf("127.0.0.1:%d", p1))
	haproxytest.Listen(t, "b", fmt.Sprintf("127.0.0.1:%d", p2))

	// Initial sync into an empty backend: both servers get traffic once
	// their checks pass.
	converge(t, c, want(srv("a", "127.0.0.1", p1, model.Ready), srv("b", "127.0.0.1", p2, model.Ready)), 3*time.Second)
	s := h.Servers(t, "be")
	if len(s) != 2 || !s["a"].CheckRunning() || s["a"].Maint() || s["b"].Port != p2 {
		t.Fatalf("servers %+v", s)
	}
	eventually(t, 3*time.Second, "both servers take traffic", func() bool {
		got := haproxytest.Spread(h.Frontends["be"], 10)
		return got["a"] > 0 && got["b"] > 0
	})

	// Idempotent: nothing to do the second time.
	if _, a := syncOnce(t, c, want(srv("a", "127.0.0.1", p1, model.Ready), srv("b", "127.0.0.1", p2, model.Ready))); a.Writes != 0 {
		t.Errorf("second sync sent %d commands", a.Writes)
	}

	// A dead backend is marked DOWN by its running check within 3 intervals.
	a.Close()
	eventually(t, 3*inter+500*time.Millisecond, "server a DOWN after its listener died", func() bool { return !h.Servers(t, "be")["a"].Up() })
	if got := haproxytest.Spread(h.Frontends["be"], 6); got["b"] != 6 {
		t.Errorf("traffic after a died: %v", got)
	}

	// Drain, then delete: b drains, a is removed.
	converge(t, c, want(srv("b", "127.0.0.1", p2, model.Drain)), 3*time.Second)
	s = h.Servers(t, "be")
	if _, ok := s["a"]; ok || !s["b"].Drain() {
		t.Errorf("after drain+delete: %+v", s)
	}
	if h.Reloads(t) != 0 {
		t.Errorf("HAProxy reloaded %d times", h.Reloads(t))
	}
}

func TestRuntimeDriverOverTCP(t *testing.T) {
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check"}})
	c, err := runtimeapi.New("tcp://"+h.AdminTCP, model.Settings{Balance: "roundrobin", TCPCheck: true}, chk)
	if err != nil {
		t.Fatal(err)
	}
	port := haproxytest.FreePort(t, "127.0.0.1")
	haproxytest.Listen(t, "a", fmt.Sprintf("127.0.0.1:%d", port))
	converge(t, c, want(srv("a", "127.0.0.1", port, model.Ready)), 3*time.Second)
	eventually(t, 3*time.Second, "server a takes traffic", func() bool {
		return haproxytest.Spread(h.Frontends["be"], 2)["a"] == 2
	})
	cur, err := c.Read(context.Background(), "be")
	if err != nil || len(cur.Servers) != 1 || cur.Servers[0].Port != port {
		t.Fatalf("read over tcp: %v %+v", err, cur)
	}
}

// TestDeleteWithOpenConnections: a server with a live connection is parked
// (no new traffic) and listed as draining, not deleted; once the connection
// ends, a later reconcile deletes it. On 2.6 "del server" with live streams
// can crash HAProxy: the test would lose its HAProxy.
func TestDeleteWithOpenConnections(t *testing.T) {
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check"}})
	c, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, chk)
	if err != nil {
		t.Fatal(err)
	}
	ports := haproxytest.FreePorts(t, "127.0.0.1", 2)
	pa, pb := ports[0], ports[1]
	holder := haproxytest.ListenHold(t, "a", fmt.Sprintf("127.0.0.1:%d", pa))
	haproxytest.Listen(t, "b", fmt.Sprintf("127.0.0.1:%d", pb))
	converge(t, c, want(srv("a", "127.0.0.1", pa, model.Ready)), 3*time.Second)

	// A long-lived client connection through HAProxy to a.
	conn, err := net.Dial("tcp", h.Frontends["be"])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 2)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "a\n" {
		t.Fatalf("connection through a: %q %v", buf, err)
	}

	w := want(srv("b", "127.0.0.1", pb, model.Ready))
	for range 10 { // reconciles while the connection lives: a is never deleted
		p, _ := syncOnce(t, c, w)
		if len(p.Names(plan.Delete)) > 0 {
			t.Fatalf("plan deletes a server with a live connection: %+v", p)
		}
		// In service until b is (make-before-break), then parked.
		if s, ok := h.Servers(t, "be")["a"]; !ok || !s.Maint() && !slices.Contains(p.HandingOver, "a") {
			t.Fatalf("a should stay, in maintenance once b serves: %+v, plan %+v", h.Servers(t, "be"), p)
		}
		time.Sleep(50 * time.Millisecond)
	}
	eventually(t, 3*time.Second, "new traffic only to b", func() bool { return haproxytest.Spread(h.Frontends["be"], 4)["b"] == 4 })
	if _, err := conn.Write([]byte("x")); err != nil {
		t.Fatalf("the live connection through a was cut: %v", err)
	}

	conn.Close()
	holder.Close() // the server side ends too
	converge(t, c, w, 5*time.Second)
	if _, still := h.Servers(t, "be")["a"]; still {
		t.Fatal("a not deleted after its connection ended")
	}
}

// TestGatedEntry: a server whose address answers nothing is never put in
// service, however many reconciles run; once it answers, it is in service
// within check interval × rise, plus the reconcile period.
func TestGatedEntry(t *testing.T) {
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check"}})
	gchk := model.Check{Inter: inter, Rise: 2, Fall: 2}
	c, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, gchk)
	if err != nil {
		t.Fatal(err)
	}
	ports := haproxytest.FreePorts(t, "127.0.0.1", 2)
	pa, pdead := ports[0], ports[1]
	haproxytest.Listen(t, "a", fmt.Sprintf("127.0.0.1:%d", pa))
	live := model.Server{Name: "a", Address: "127.0.0.1", Port: pa, Weight: 1, State: model.Ready, Check: gchk}
	dead := model.Server{Name: "dead", Address: "127.0.0.1", Port: pdead, Weight: 1, State: model.Ready, Check: gchk}
	converge(t, c, want(live), 3*time.Second)

	w := want(live, dead)
	for i := range 30 { // 1.5 s: several check intervals
		p, _ := syncOnce(t, c, w)
		if i > 0 && (len(p.Waiting) != 1 || p.Waiting[0] != "dead") {
			t.Fatalf("waiting = %v, want dead", p.Waiting)
		}
		s := h.Servers(t, "be")["dead"]
		if s.Up() || !s.Drain() && !s.Maint() {
			t.Fatalf("dead server in service: %+v", s)
		}
		if got := haproxytest.Spread(h.Frontends["be"], 3); got["a"] != 3 {
			t.Fatalf("a client connection failed while dead was being added: %v", got)
		}
	}
	if !h.Servers(t, "be")["dead"].CheckRunning() {
		t.Fatal("the gated server's check is not running")
	}

	haproxytest.Listen(t, "dead", fmt.Sprintf("127.0.0.1:%d", pdead))
	start := time.Now()
	converge(t, c, w, time.Duration(gchk.Rise)*inter+time.Second)
	t.Logf("in service %s after its address answered", time.Since(start))
	eventually(t, time.Second, "the revived server takes traffic", func() bool { return haproxytest.Spread(h.Frontends["be"], 6)["dead"] > 0 })
}

// TestFailureBetweenAddAndCheck: a server was added but the line that starts
// its check never arrived (the service died in between, or the Data Plane
// API added it). Reconciles must start its check before it takes traffic,
// and never put it in service while its address answers nothing.
func TestFailureBetweenAddAndCheck(t *testing.T) {
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check"}})
	gchk := model.Check{Inter: inter, Rise: 2, Fall: 2}
	c, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, gchk)
	if err != nil {
		t.Fatal(err)
	}
	ports := haproxytest.FreePorts(t, "127.0.0.1", 2)
	pa, px := ports[0], ports[1]
	haproxytest.Listen(t, "a", fmt.Sprintf("127.0.0.1:%d", pa))
	live := model.Server{Name: "a", Address: "127.0.0.1", Port: pa, Weight: 1, State: model.Ready, Check: gchk}
	x := model.Server{Name: "x", Address: "127.0.0.1", Port: px, Weight: 1, State: model.Ready, Check: gchk}
	converge(t, c, want(live), 3*time.Second)
	for _, st := range []string{"maint", "ready"} {
		// The half-done add: in maintenance, or even put in service,
		// with a check configured but never started.
		if _, err := h.Command(fmt.Sprintf("add server be/x 127.0.0.1:%d check inter 200ms rise 2 fall 2", px)); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Command("set server be/x state " + st); err != nil {
			t.Fatal(err)
		}
		for range 10 {
			syncOnce(t, c, want(live, x))
			s := h.Servers(t, "be")["x"]
			if !s.Maint() && !s.CheckRunning() {
				t.Fatalf("%s: x can take traffic with no running check: %+v", st, s)
			}
			if got := haproxytest.Spread(h.Frontends["be"], 3); got["a"] != 3 {
				t.Fatalf("%s: a client connection failed: %v", st, got)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := h.Command("set server be/x state maint"); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Command("del server be/x"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPipelinedBurst: a burst of adds goes on one pipelined connection and
// is judged server by server: 60 new servers are gated on their checks, each
// with its own id, while one HAProxy refuses (its name is taken by a server
// another writer added since the read) ends the apply in a conflict after
// the others went; the next reconcile puts
// the 60 in service, pipelined as well, and traffic reaches them.
func TestPipelinedBurst(t *testing.T) {
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check"}})
	conns := countConns(t, h.AdminSocket)
	c, err := runtimeapi.New("unix://"+conns.path, model.Settings{Balance: "roundrobin", TCPCheck: true}, chk)
	if err != nil {
		t.Fatal(err)
	}
	port := haproxytest.FreePort(t, "127.0.0.1")
	var ws []model.Server
	for i := range 60 {
		ip := fmt.Sprintf("127.0.9.%d", i+1)
		haproxytest.Listen(t, fmt.Sprintf("s%02d", i), fmt.Sprintf("%s:%d", ip, port))
		ws = append(ws, srv(fmt.Sprintf("s%02d", i), ip, port, model.Ready))
	}
	cur, err := c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	p := plan.CalculateWith(cur, want(append(ws, srv("taken", "127.0.9.99", port, model.Ready))...), c.Policy())
	// Another writer adds "taken" between this reconcile's read and apply.
	if out, err := h.Command("add server be/taken 127.0.9.99:1"); err != nil || out != "New server registered." {
		t.Fatalf("%q %v", out, err)
	}
	before := conns.n.Load()
	_, err = c.Apply(context.Background(), p)
	if n := conns.n.Load() - before; n > 2 { // the ids in use, then the burst
		t.Errorf("the burst took %d connections to the socket, want 2", n)
	}
	// Another writer's add is no refusal of the server: a conflict, which
	// the reconcile retries from a fresh read (nameTaken).
	if !errors.As(err, new(*failure.ConflictError)) || !strings.Contains(err.Error(), "taken") {
		t.Fatalf("apply: %v, want a conflict naming server taken", err)
	}
	ids := map[int]bool{}
	got := h.Servers(t, "be")
	for _, s := range ws {
		hs, ok := got[s.Name]
		switch {
		case !ok:
			t.Fatalf("server %s not added", s.Name)
		case !hs.Drain() || !hs.CheckRunning():
			t.Errorf("server %s not gated: %+v", s.Name, hs)
		}
		ids[hs.ID] = true
	}
	if len(ids) != len(ws) {
		t.Errorf("%d distinct ids for %d servers", len(ids), len(ws))
	}
	if _, err := h.Command("del server be/taken"); err != nil {
		t.Fatal(err)
	}
	converge(t, c, want(ws...), 5*time.Second)
	for _, s := range h.Servers(t, "be") {
		if !s.Up() || s.Drain() || s.Maint() {
			t.Errorf("server %s not in service: %+v", s.Name, s)
		}
	}
	// Every server answers through the frontend, nothing fails.
	eventually(t, 5*time.Second, "traffic to every server", func() bool {
		hits := haproxytest.Spread(h.Frontends["be"], 4*len(ws))
		return len(hits) == len(ws) && hits[""] == 0
	})
}

// TestBurstOf200: 200 new servers in one apply go through one interactive
// connection, at most a window of commands in flight. HAProxy 3.2.0's
// worker aborted in such a burst ("A bogus APPCTX ... is spinning",
// taking the master down with it) before the client kept at most 16 in
// flight (without it, 3.2.0 stops answering mid-burst and aborts once the
// client gives up). HAProxy keeps running with the same worker, all 200
// are added with their own ids and gated on their checks, and the
// reconciles that follow put all 200 in service (another 200 commands),
// HAProxy running still.
func TestBurstOf200(t *testing.T) {
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check"}})
	bchk := model.Check{Inter: time.Second, DownInter: inter, Rise: 1, Fall: 1} // 200 checks a second once UP
	c, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, bchk)
	if err != nil {
		t.Fatal(err)
	}
	worker, err := h.Alive()
	if err != nil {
		t.Fatal(err)
	}
	port := haproxytest.FreePort(t, "127.0.0.1")
	var ws []model.Server
	for i := range 200 {
		name, ip := fmt.Sprintf("s%03d", i), fmt.Sprintf("127.0.10.%d", i+1)
		haproxytest.Listen(t, name, fmt.Sprintf("%s:%d", ip, port))
		ws = append(ws, model.Server{Name: name, Address: ip, Port: port, Weight: 1, State: model.Ready, Check: bchk})
	}
	cur, err := c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	p := plan.CalculateWith(cur, want(ws...), c.Policy())
	if n := len(p.Names(plan.Add)); n != len(ws) {
		t.Fatalf("plan adds %d servers, want %d", n, len(ws))
	}
	_, applyErr := c.Apply(context.Background(), p)
	if err := stillRunning(h, worker, 2*time.Second); err != nil {
		t.Fatalf("HAProxy after the burst (apply: %v): %v", applyErr, err)
	}
	if applyErr != nil {
		t.Fatalf("apply: %v", applyErr)
	}
	got := h.Servers(t, "be")
	ids := map[int]bool{}
	for _, s := range ws {
		hs, ok := got[s.Name]
		switch {
		case !ok:
			t.Fatalf("server %s not added (%d of %d are)", s.Name, len(got), len(ws))
		case !hs.Drain() || !hs.CheckRunning():
			t.Errorf("server %s not gated: %+v", s.Name, hs)
		}
		ids[hs.ID] = true
	}
	if len(got) != len(ws) || len(ids) != len(ws) {
		t.Errorf("%d servers with %d distinct ids, want %d", len(got), len(ids), len(ws))
	}
	converge(t, c, want(ws...), 20*time.Second)
	for _, s := range h.Servers(t, "be") {
		if !s.Up() || s.Drain() || s.Maint() {
			t.Errorf("server %s not in service: %+v", s.Name, s)
		}
	}
	if err := stillRunning(h, worker, 2*time.Second); err != nil {
		t.Fatalf("HAProxy after the servers entered service: %v", err)
	}
}

// stillRunning checks for d that HAProxy runs with the same worker: when
// 3.2.0's CLI applet spun, the watchdog aborted the worker about a second
// after the client closed its connection.
func stillRunning(h *haproxytest.HAProxy, worker int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		now, err := h.Alive()
		switch {
		case err != nil:
			return err
		case now != worker:
			return fmt.Errorf("worker %d, was %d", now, worker)
		case time.Now().After(deadline):
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// connCounter forwards a unix socket to HAProxy's and counts connections.
type connCounter struct {
	path string
	n    atomic.Int64
}

func countConns(t *testing.T, target string) *connCounter {
	t.Helper()
	c := &connCounter{path: filepath.Join(t.TempDir(), "count.sock")}
	ln, err := net.Listen("unix", c.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			c.n.Add(1)
			go func() {
				defer in.Close()
				up, err := net.Dial("unix", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() {
					_, _ = io.Copy(up, in)
					_ = up.(*net.UnixConn).CloseWrite()
				}()
				_, _ = io.Copy(in, up)
			}()
		}
	}()
	return c
}

// TestPipelinedBurstStaticAlgorithm: a burst into a backend that cannot take
// runtime servers is the whole backend's error, as one add is.
func TestPipelinedBurstStaticAlgorithm(t *testing.T) {
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance static-rr"}})
	c, err := runtimeapi.New(h.RuntimeURL(), model.Settings{}, chk)
	if err != nil {
		t.Fatal(err)
	}
	var ws []model.Server
	for i := range 10 {
		ws = append(ws, srv(fmt.Sprintf("s%02d", i), fmt.Sprintf("127.0.9.%d", i+1), 80, model.Ready))
	}
	cur, err := c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Apply(context.Background(), plan.CalculateWith(cur, want(ws...), c.Policy()))
	var be *failure.BackendError
	var se plan.ServerErrors
	if !errors.As(err, &be) || errors.As(err, &se) {
		t.Fatalf("err = %v, want the backend's error", err)
	}
	if got := h.Servers(t, "be"); len(got) != 0 {
		t.Errorf("%d servers added", len(got))
	}
}

// TestStaticServerWithoutCheckStaysInService: a desired server whose name
// matches one written in haproxy.cfg without "check" (a static config being
// migrated) cannot be gated, since its check cannot be enabled. The refusal
// is reported for that server, and the server stays as it was: in service,
// taking traffic (a gate sent as one ';' line drained it and forced its
// health down for good, since HAProxy runs a line's later commands after
// one failed).
func TestStaticServerWithoutCheckStaysInService(t *testing.T) {
	port := haproxytest.FreePort(t, "127.0.0.1")
	haproxytest.Listen(t, "static", fmt.Sprintf("127.0.0.1:%d", port))
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", fmt.Sprintf("server static 127.0.0.1:%d", port)}})
	c, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin"}, chk)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		cur, err := c.Read(context.Background(), "be")
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Apply(context.Background(), plan.CalculateWith(cur, want(srv("static", "127.0.0.1", port, model.Ready)), c.Policy()))
		var se plan.ServerErrors
		if !errors.As(err, &se) || len(se) != 1 || se[0].Server != "static" || !strings.Contains(err.Error(), "enable health") {
			t.Fatalf("err = %v, want static's check refused", err)
		}
		if s := h.Servers(t, "be")["static"]; !s.Up() || s.Drain() || s.Maint() {
			t.Fatalf("static knocked out of service: %+v", s)
		}
		if got := haproxytest.Spread(h.Frontends["be"], 3); got["static"] != 3 {
			t.Fatalf("traffic %v, want all to static", got)
		}
	}
}

// twoAndADeadPort starts an HAProxy whose backend "be" is driven through
// direct, with servers a and b (check gchk) listening, and a port where
// nothing answers.
func twoAndADeadPort(t *testing.T, gchk model.Check) (h *haproxytest.HAProxy, direct *runtimeapi.Client, a, b model.Server, pdead int) {
	t.Helper()
	h = haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check"}})
	ports := haproxytest.FreePorts(t, "127.0.0.1", 3)
	pa, pb := ports[0], ports[1]
	haproxytest.Listen(t, "a", fmt.Sprintf("127.0.0.1:%d", pa))
	haproxytest.Listen(t, "b", fmt.Sprintf("127.0.0.1:%d", pb))
	a = model.Server{Name: "a", Address: "127.0.0.1", Port: pa, Weight: 1, State: model.Ready, Check: gchk}
	b = model.Server{Name: "b", Address: "127.0.0.1", Port: pb, Weight: 1, State: model.Ready, Check: gchk}
	direct, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, gchk)
	if err != nil {
		t.Fatal(err)
	}
	return h, direct, a, b, ports[2]
}

// TestMovedServerNeverServesUnchecked: a server in service moves to an
// address where nothing answers, and the connection to HAProxy dies after
// k lines, for every k. Whatever ran, the server never takes traffic at its
// new address before a check passed there (it used to be moved on its own
// line while ready and UP, and gated on a second one).
func TestMovedServerNeverServesUnchecked(t *testing.T) {
	gchk := model.Check{Inter: inter, Rise: 2, Fall: 2}
	h, direct, a, b, pdead := twoAndADeadPort(t, gchk)
	converge(t, direct, want(a, b), 5*time.Second)
	moved := a
	moved.Port = pdead
	for k := 1; k <= 5; k++ {
		err := applyCut(t, h, direct, gchk, want(moved, b), k)
		if k >= 4 && err != nil { // the move's 4 lines all went through
			t.Fatalf("cut after %d lines: %v", k, err)
		}
		if s := h.Servers(t, "be")["a"]; s.Port == pdead && !s.Drain() && !s.Maint() {
			t.Fatalf("cut after %d lines: a in service at its new, unchecked address: %+v", k, s)
		}
		if got := haproxytest.Spread(h.Frontends["be"], 4); got[""] != 0 {
			t.Fatalf("cut after %d lines: client connections failed: %v", k, got)
		}
		// Put a back where it was, in service.
		for _, cmd := range []string{fmt.Sprintf("set server be/a addr 127.0.0.1 port %d", a.Port), "set server be/a state ready", "set server be/a health up"} {
			if _, err := h.Command(cmd); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// applyCut applies the plan from direct's read to w through a connection
// that dies after k command lines (cutAfter), and returns Apply's error.
func applyCut(t *testing.T, h *haproxytest.HAProxy, direct *runtimeapi.Client, gchk model.Check, w model.Backend, k int) error {
	t.Helper()
	c, _ := runtimeapi.New("unix://"+cutAfter(t, h.AdminSocket, k), model.Settings{Balance: "roundrobin", TCPCheck: true}, gchk)
	cur, err := direct.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Apply(context.Background(), plan.CalculateWith(cur, w, c.Policy()))
	t.Logf("cut after %d lines: %v", k, err)
	return err
}

// cutAfter forwards a unix socket to HAProxy's and ends each connection
// once k command lines went through (the interactive mode's "prompt" is not
// counted), a moment after the last, as a connection that dies would.
func cutAfter(t *testing.T, target string, k int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), fmt.Sprintf("cut%d.sock", k))
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var sent atomic.Int64 // lines through, over every connection
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				up, err := net.Dial("unix", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(in, up) }()
				r := bufio.NewReader(in)
				for sent.Load() < int64(k) {
					line, err := r.ReadString('\n')
					if err != nil {
						_ = up.(*net.UnixConn).CloseWrite()
						time.Sleep(100 * time.Millisecond)
						return
					}
					if strings.TrimSpace(line) != "prompt" {
						sent.Add(1)
					}
					if _, err := io.WriteString(up, line); err != nil {
						return
					}
				}
				time.Sleep(100 * time.Millisecond) // HAProxy runs the last line
			}()
		}
	}()
	return path
}

// TestParkedServerMovedNeedsAFreshCheck: a server in service is parked,
// moves (while parked) to an address where nothing answers, and is wanted
// ready again. Its gate is cut after each of its command lines in turn; the
// reconciles that follow (every 50 ms, as the follow-up's) must never put
// it in service on the check result it earned at its old address, which
// HAProxy shows as "UP, passed" once it leaves maintenance.
func TestParkedServerMovedNeedsAFreshCheck(t *testing.T) {
	gchk := model.Check{Inter: time.Second, Rise: 2, Fall: 2} // a steady check long after the gate
	h, direct, a, b, pdead := twoAndADeadPort(t, gchk)
	parked, moved := a, a
	parked.State = model.Maint
	moved.Port = pdead
	movedParked := moved
	movedParked.State = model.Maint
	for k := 1; k <= 5; k++ {
		converge(t, direct, want(a, b), 10*time.Second) // in service at pa, its check passed there
		converge(t, direct, want(parked, b), 5*time.Second)
		converge(t, direct, want(movedParked, b), 5*time.Second)
		_ = applyCut(t, h, direct, gchk, want(moved, b), k) // a cut session fails; what matters is what follows
		for range 20 {
			syncOnce(t, direct, want(moved, b))
			if s := h.Servers(t, "be")["a"]; s.Up() && !s.Drain() && !s.Maint() {
				t.Fatalf("cut after %d lines: a in service at an address no check passed at: %+v", k, s)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestReturningServerIsAddedAgain: a server this driver added, parked with
// no sessions and wanted again, is deleted and added again with its id, so
// its check starts afresh (HAProxy keeps a parked server's check timer on
// its steady inter); it enters service only once its check passed. A server
// of haproxy.cfg in the same spot, its id given or not, keeps its own
// keywords (maxconn here):
// it comes back through the ordinary gate.
func TestReturningServerIsAddedAgain(t *testing.T) {
	ports := haproxytest.FreePorts(t, "127.0.0.1", 2)
	pa, ps := ports[0], ports[1]
	haproxytest.Listen(t, "a", fmt.Sprintf("127.0.0.1:%d", pa))
	haproxytest.Listen(t, "static", fmt.Sprintf("127.0.0.1:%d", ps))
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check",
		fmt.Sprintf("server static 127.0.0.1:%d id 5 maxconn 7 check inter 200ms rise 1 fall 1", ps)}})
	c, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, chk)
	if err != nil {
		t.Fatal(err)
	}
	a, static := srv("a", "127.0.0.1", pa, model.Ready), srv("static", "127.0.0.1", ps, model.Ready)
	converge(t, c, want(a, static), 5*time.Second)
	if got := haproxytest.Spread(h.Frontends["be"], 4); got["a"] == 0 || got["static"] == 0 {
		t.Fatalf("traffic %v, want both in service", got)
	}
	id := h.Servers(t, "be")["a"].ID
	parkedA, parkedS := a, static
	parkedA.State, parkedS.State = model.Maint, model.Maint
	converge(t, c, want(parkedA, parkedS), 5*time.Second)

	p, _ := syncOnce(t, c, want(a, static))
	if fmt.Sprint(p.Waiting) != "[a static]" {
		t.Fatalf("waiting %v, want both gated", p.Waiting)
	}
	got := h.Servers(t, "be")["a"]
	if got.ID != id || !got.Drain() || got.Up() {
		t.Errorf("a after its return: %+v, want id %d, drained, not UP before a check", got, id)
	}
	// A server added again starts with no session counted; one that only
	// left maintenance keeps its count.
	stat, err := h.Command("show stat be 4 -1")
	if err != nil {
		t.Fatal(err)
	}
	if haproxytest.StatField(stat, "a", "stot") != "0" || haproxytest.StatField(stat, "static", "stot") == "0" {
		t.Errorf("session totals a %s, static %s: want a added again (0), static not", haproxytest.StatField(stat, "a", "stot"), haproxytest.StatField(stat, "static", "stot"))
	}
	converge(t, c, want(a, static), 5*time.Second)
	if got := haproxytest.Spread(h.Frontends["be"], 4); got["a"] == 0 || got["static"] == 0 {
		t.Errorf("traffic %v, want both in service", got)
	}
	if stat, err = h.Command("show stat be 4 -1"); err != nil {
		t.Fatal(err)
	}
	if slim := haproxytest.StatField(stat, "static", "slim"); slim != "7" {
		t.Errorf("static's maxconn is %q, want 7 (kept from haproxy.cfg)", slim)
	}
}

// TestDeleteWithIdleConnections: servers with idle, reusable server-side
// connections in HAProxy's pool (http mode, http-reuse always) are deleted
// all the same, and on 3.0+ by the reconcile that parks them: 3.3+ refuses
// "del server" while idle connections remain, and purges them in the
// background once the server is parked, which "wait srv-removable" waits
// for. Server a is added by the driver; c is written in haproxy.cfg, since
// on 2.6 a server added at runtime keeps no idle connection (pool-max-conn
// and pool-purge-delay default to 0 there), so that every version deletes
// one with idle connections. HAProxy keeps running, with the same worker,
// and traffic goes to b alone.
func TestDeleteWithIdleConnections(t *testing.T) {
	a := serveHTTP(t, "a", "127.0.0.2")
	b := serveHTTP(t, "b", "127.0.0.3")
	cs := serveHTTP(t, "c", "127.0.0.4")
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Mode: "http", Lines: []string{
		"balance roundrobin", "option tcp-check", "http-reuse always",
		fmt.Sprintf("server c 127.0.0.4:%d check inter 200ms rise 1 fall 1", cs.Port)}})
	c, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, chk)
	if err != nil {
		t.Fatal(err)
	}
	converge(t, c, want(a, b, cs), 5*time.Second)
	version, err := c.Version(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	worker, err := h.Alive()
	if err != nil {
		t.Fatal(err)
	}

	// Concurrent requests through the frontend on keep-alive connections,
	// then closed: the connections HAProxy opened to the servers stay in its
	// pool, tens of them (the more there are, the longer 3.3+ takes to purge
	// them once a server is parked).
	tr := &http.Transport{MaxIdleConnsPerHost: 100}
	hits := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 90 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name, err := haproxytest.AskHTTP(&http.Client{Transport: tr, Timeout: 3 * time.Second}, h.Frontends["be"])
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			hits[name]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	tr.CloseIdleConnections()
	if hits["a"] == 0 || hits["b"] == 0 || hits["c"] == 0 {
		t.Fatalf("requests went to %v, want every server", hits)
	}
	withIdle := []string{"c"}
	if version.AtLeast(3, 0) {
		withIdle = append(withIdle, "a")
	}
	idle := map[string]int{}
	eventually(t, 2*time.Second, fmt.Sprintf("idle connections to %v", withIdle), func() bool {
		idle = idleConns(t, h)
		for _, name := range withIdle {
			if idle[name] == 0 {
				return false
			}
		}
		return true
	})
	conns, _ := h.Command("show servers conn be")
	t.Logf("HAProxy %d.%d: idle connections %v\n%s", version.Major, version.Minor, idle, conns)

	p, applied := syncOnce(t, c, want(b))
	if got := fmt.Sprint(p.Names(plan.Delete)); got != "[a c]" {
		t.Fatalf("plan deletes %s, want [a c]", got)
	}
	if version.AtLeast(3, 0) && len(applied.Deferred) > 0 {
		t.Errorf("deferred %v, want a and c deleted by the reconcile that parked them", applied.Deferred)
	}
	converge(t, c, want(b), 5*time.Second)
	if got := h.Servers(t, "be"); len(got) != 1 || !got["b"].Up() {
		t.Fatalf("servers %+v, want b alone", got)
	}
	if now, err := h.Alive(); err != nil || now != worker {
		t.Fatalf("HAProxy after the deletes: worker %d (was %d), %v", now, worker, err)
	}
	hits = map[string]int{}
	for range 6 {
		name, err := haproxytest.AskHTTP(&http.Client{Transport: tr, Timeout: 3 * time.Second}, h.Frontends["be"])
		if err != nil {
			t.Fatal(err)
		}
		hits[name]++
	}
	if hits["b"] != 6 {
		t.Errorf("requests went to %v, want all to b", hits)
	}
}

// idleConns returns the idle connections of each server of backend be in
// HAProxy's pool: the unsafe and the safe ones ("show stat" idle_conn_cur
// and safe_conn_cur, 2.6 to 3.4).
func idleConns(t *testing.T, h *haproxytest.HAProxy) map[string]int {
	t.Helper()
	stat, err := h.Command("show stat be 4 -1")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, s := range h.Servers(t, "be") {
		for _, field := range []string{"idle_conn_cur", "safe_conn_cur"} {
			v := haproxytest.StatField(stat, s.Name, field)
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("show stat: %s of %s is %q", field, s.Name, v)
			}
			out[s.Name] += n
		}
	}
	return out
}

// serveHTTP starts a keep-alive HTTP server on host, answering every
// request with name, and returns it as a server of the backend.
func serveHTTP(t *testing.T, name, host string) model.Server {
	t.Helper()
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	s := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, name) })}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Close() })
	return srv(name, host, ln.Addr().(*net.TCPAddr).Port, model.Ready)
}

// TestAMoveAlreadyMadeIsNoRefusal: a move planned from a read older than
// the address HAProxy has (an attempt that was cut after its "set server
// addr", a second replica) is done, not refused. HAProxy 3.0 and later
// answer "nothing changed" where 2.6 said "no need to change the addr";
// the history checker found it on 3.4.0 (seed 490652228, Data Plane
// driver), where the refusal left the moved server out of traffic.
func TestAMoveAlreadyMadeIsNoRefusal(t *testing.T) {
	h, direct, a, b, _ := twoAndADeadPort(t, chk)
	converge(t, direct, want(a, b), 5*time.Second)
	pc := haproxytest.FreePorts(t, "127.0.0.1", 1)[0]
	haproxytest.Listen(t, "c", fmt.Sprintf("127.0.0.1:%d", pc))
	cur, err := direct.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Command(fmt.Sprintf("set server be/a addr 127.0.0.1 port %d", pc)); err != nil {
		t.Fatal(err)
	}
	moved := a
	moved.Port = pc
	if _, err := direct.Apply(context.Background(), plan.CalculateWith(cur, want(moved, b), direct.Policy())); err != nil {
		t.Fatalf("a move HAProxy had made already was refused: %v", err)
	}
	converge(t, direct, want(moved, b), 5*time.Second)
}

// TestReadSeesTheBackupRole: a backup server reads as one, from the
// running HAProxy. Before, every server read through the socket was
// active: the Data Plane driver wrote a backup that the running HAProxy
// alone held (added through the socket), kept in service by
// make-before-break, to haproxy.cfg without "backup", and after the reload
// it took traffic beside the local zone's servers (the history checker's
// seed 87532989 on 3.0.11, local-zone-first).
func TestReadSeesTheBackupRole(t *testing.T) {
	h, direct, a, b, _ := twoAndADeadPort(t, chk)
	b.Name, b.Backup = "b_bk", true
	converge(t, direct, want(a, b), 5*time.Second)
	cur, err := direct.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]bool{}
	for _, s := range cur.Servers {
		roles[s.Name] = s.Backup
	}
	if !roles["b_bk"] || roles["a"] {
		t.Fatalf("roles read %v, want b_bk backup and a active", roles)
	}
	if got := haproxytest.Spread(h.Frontends["be"], 4); got["b"] != 0 {
		t.Fatalf("the backup took traffic beside an active server: %v", got)
	}
}

// TestAddRetriesWhenAnotherWriterTookTheID: two writers add different
// servers to one backend at once (two replicas of the service, or two
// instances with different CLUSTER_NAMEs): both read the same next id, and
// HAProxy refuses the second add ("custom id 16777216 already used"). That
// failed the reconcile though nothing was wrong. The refused add is sent
// again with the next id read afresh, in the same apply.
func TestAddRetriesWhenAnotherWriterTookTheID(t *testing.T) {
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check"}})
	settings := model.Settings{Balance: "roundrobin", TCPCheck: true}
	first, err := runtimeapi.New(h.RuntimeURL(), settings, chk)
	if err != nil {
		t.Fatal(err)
	}
	ports := haproxytest.FreePorts(t, "127.0.0.1", 2)
	mine, theirs := srv("mine", "127.0.0.1", ports[0], model.Ready), srv("theirs", "127.0.0.1", ports[1], model.Ready)
	// The other writer adds its server between this one's read of the next
	// id and its add: this one's socket holds its first add line until
	// the other's apply is done.
	var once sync.Once
	relay := beforeFirstAdd(t, h.AdminSocket, func() {
		once.Do(func() {
			if _, err := first.Apply(context.Background(), plan.CalculateWith(want(), want(theirs), first.Policy())); err != nil {
				t.Errorf("the other writer's apply: %v", err)
			}
		})
	})
	second, err := runtimeapi.New("unix://"+relay, settings, chk)
	if err != nil {
		t.Fatal(err)
	}
	p := plan.CalculateWith(want(), want(mine), second.Policy())
	if _, err := second.Apply(context.Background(), p); err != nil {
		t.Fatalf("apply beside another writer: %v (class %s)", err, failure.Of(err))
	}
	s := h.Servers(t, "be")
	if len(s) != 2 || s["mine"].ID == s["theirs"].ID || s["mine"].ID < 1<<24 || s["theirs"].ID < 1<<24 {
		t.Fatalf("servers %+v, want mine and theirs with their own ids from 2^24", s)
	}
}

// beforeFirstAdd forwards a unix socket to HAProxy's, and runs hook before
// it passes the first "add server" line on.
func beforeFirstAdd(t *testing.T, target string, hook func()) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "race.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				up, err := net.Dial("unix", target)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{})
				go func() { _, _ = io.Copy(in, up); close(done) }()
				r := bufio.NewReader(in)
				for {
					line, err := r.ReadString('\n')
					if line != "" {
						if strings.HasPrefix(line, "add server ") {
							hook()
						}
						if _, err := io.WriteString(up, line); err != nil {
							return
						}
					}
					if err != nil {
						_ = up.(*net.UnixConn).CloseWrite()
						<-done
						return
					}
				}
			}()
		}
	}()
	return path
}

// TestReadChecksTellsParkedFromLoadedParked: on a real HAProxy, a server
// haproxy.cfg holds "disabled" reads loaded-parked (a reload loads it so,
// the Data Plane driver's own reloads included) and stays so once made
// ready and parked again; one parked at runtime that haproxy.cfg does not
// hold disabled reads parked (another writer); one whose check runs,
// pending or passed. The follow-up counts only parked ones as undone.
func TestReadChecksTellsParkedFromLoadedParked(t *testing.T) {
	port := haproxytest.FreePorts(t, "127.0.0.1", 1)[0]
	haproxytest.Listen(t, "up", fmt.Sprintf("127.0.0.1:%d", port))
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin",
		fmt.Sprintf("server cfgoff 127.0.0.1:%d check inter 100ms disabled", port),
		fmt.Sprintf("server on 127.0.0.1:%d check inter 100ms", port),
		"server dead 127.0.0.1:1 check inter 100ms"}})
	c, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin"}, chk)
	if err != nil {
		t.Fatal(err)
	}
	read := func() map[string]model.CheckState {
		t.Helper()
		got, err := c.ReadChecks(context.Background(), "be")
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	eventually(t, 3*time.Second, "on's check passes", func() bool { return read()["on"] == model.CheckPassed })
	if got := read(); got["cfgoff"] != model.CheckLoadedParked || got["dead"] != model.CheckPending {
		t.Fatalf("as loaded: %v; want cfgoff loaded-parked, dead pending", got)
	}
	for _, cmd := range []string{"set server be/on state maint", "set server be/cfgoff state ready", "set server be/cfgoff state maint"} {
		if _, err := h.Command(cmd); err != nil {
			t.Fatal(err)
		}
	}
	if got := read(); got["on"] != model.CheckParked || got["cfgoff"] != model.CheckLoadedParked {
		t.Errorf("after runtime maint: %v; want on parked, cfgoff loaded-parked still", got)
	}
}
