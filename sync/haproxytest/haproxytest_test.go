package haproxytest

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStartSaysWhenAPortIsTaken: HAProxy exits when a port it is given is
// taken; start says so (Start then picks others), and tells it apart from
// another failure, which it does not wait 10 s for.
func TestStartSaysWhenAPortIsTaken(t *testing.T) {
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	free := FreePorts(t, "127.0.0.1", 2)

	h := &HAProxy{Dir: t.TempDir(), Frontends: map[string]string{}, backends: []Backend{{Name: "be"}}}
	h.AdminSocket, h.MasterSocket = h.Dir+"/admin.sock", h.Dir+"/master.sock"
	if err := h.start(bin, []int{free[0], port}); !errors.Is(err, errPortTaken) {
		t.Errorf("frontend on a taken port: %v, want %v", err, errPortTaken)
	}

	h = &HAProxy{Dir: t.TempDir(), Frontends: map[string]string{}, backends: []Backend{{Name: "be", Lines: []string{"no-such-keyword"}}}}
	h.AdminSocket, h.MasterSocket = h.Dir+"/admin.sock", h.Dir+"/master.sock"
	err = h.start(bin, free)
	if err == nil || errors.Is(err, errPortTaken) || !strings.Contains(err.Error(), "exited") {
		t.Errorf("bad configuration: %v, want an exit that is not a taken port", err)
	}
}

// TestStart: a started HAProxy answers on its admin socket and frontends
// get distinct ports.
func TestStart(t *testing.T) {
	h := Start(t, Backend{Name: "a"}, Backend{Name: "b"})
	if _, err := h.Command("show info"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Alive(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{h.AdminTCP: true}
	for _, addr := range h.Frontends {
		if seen[addr] {
			t.Errorf("port %s handed out twice: admin %s, frontends %v", addr, h.AdminTCP, h.Frontends)
		}
		seen[addr] = true
	}
}

// TestBalance: the balance a backend runs, read back after a reload that
// loads a later balance line (what the histories' Data Plane API writes).
func TestBalance(t *testing.T) {
	h := Start(t, Backend{Name: "a", Lines: []string{"balance roundrobin"}})
	if got, err := h.Balance("a"); err != nil || got != "roundrobin" {
		t.Fatalf("before: %q, %v; want roundrobin", got, err)
	}
	h.SetServers(t, "a", []string{"balance leastconn", "server s 127.0.0.1:1"})
	h.Reload(t)
	if got, err := h.Balance("a"); err != nil || got != "leastconn" {
		t.Fatalf("after: %q, %v; want leastconn", got, err)
	}
	if _, err := h.Balance("nope"); err == nil {
		t.Error("a backend that is not there: no error")
	}
	h.SetServers(t, "a", []string{"balance random", "server s 127.0.0.1:1"})
	h.Reload(t)
	got, err := h.Balance("a")
	if err != nil || !BalanceIs(got, "random") || BalanceIs(got, "roundrobin") || BalanceIs(got, "leastconn") {
		t.Fatalf("random: %q, %v; want what BalanceIs takes for random alone", got, err)
	}
	if BalanceIs("roundrobin", "random") || BalanceIs("unknown", "roundrobin") {
		t.Error("BalanceIs takes another algorithm for random")
	}
}

// TestCurrentWorkers: the workers a reload leaves are not current.
func TestCurrentWorkers(t *testing.T) {
	reply := `#<PID>          <type>          <reloads>       <uptime>        <version>
19153           master          1 [failed: 0]   0d00h00m02s     2.6.12-1+deb12u4
# workers
19160           worker          0               0d00h00m01s     2.6.12-1+deb12u4
# old workers
19156           worker          1               0d00h00m02s     2.6.12-1+deb12u4
# programs
`
	if got := currentWorkers(reply); len(got) != 1 || got[0] != 19160 {
		t.Errorf("current workers %v, want [19160]", got)
	}
	if got := workersIn(reply, "# old workers"); len(got) != 1 || got[0] != 19156 {
		t.Errorf("old workers %v, want [19156]", got)
	}
}

// TestReloadWaitsForTheNewWorker: once Reload returns, the admin socket
// answers from the worker that loaded the new haproxy.cfg. From HAProxy
// 3.1 the master's reload counter moves before that worker has loaded,
// and the old one still answered (seen on 3.4.0: no server listed).
func TestReloadWaitsForTheNewWorker(t *testing.T) {
	h := Start(t, Backend{Name: "be"})
	for i := range 3 {
		h.SetServers(t, "be", []string{"server s1 127.0.0.1:1", fmt.Sprintf("server n%d 127.0.0.1:2", i)})
		h.Reload(t)
		if _, ok := h.Servers(t, "be")[fmt.Sprintf("n%d", i)]; !ok {
			t.Fatalf("reload %d: the admin socket does not list the server the new haproxy.cfg has", i)
		}
	}
}

// TestDiedSaysWhyHAProxyStopped: a worker killed by a signal takes the
// master down (exit-on-failure); Died says how the master exited and
// Alerts what it printed, so a history whose clients all failed at once
// tells a crash from a refusal. While HAProxy runs, and after a stop
// someone asked for, Died says nothing.
func TestDiedSaysWhyHAProxyStopped(t *testing.T) {
	h := Start(t, Backend{Name: "be"})
	if d := h.Died(); d != "" {
		t.Fatalf("Died() = %q while HAProxy runs", d)
	}
	workers, err := h.masterCommand("show proc")
	if err != nil {
		t.Fatal(err)
	}
	pids := currentWorkers(workers)
	if len(pids) != 1 {
		t.Fatalf("workers %v in %q", pids, workers)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.cur.Load().exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("the master did not exit after its worker was killed; logs:\n%s", h.Logs())
	}
	if d := h.Died(); d == "" || d == "exit status 0" {
		t.Errorf("Died() = %q, want the master's failed exit", d)
	}
	alerts := h.Alerts(5)
	if !slices.ContainsFunc(alerts, func(l string) bool { return strings.Contains(l, fmt.Sprintf("(%d) exited with code", pids[0])) }) {
		t.Errorf("Alerts(5) = %q, want the worker %d that exited; logs:\n%s", alerts, pids[0], h.Logs())
	}

	stopped := Start(t, Backend{Name: "be"})
	stopped.stop()
	if d := stopped.Died(); d != "" {
		t.Errorf("Died() = %q after a stop that was asked for", d)
	}
}

// TestRestartAndBrokenReload: Restart gives a new master and worker from
// haproxy.cfg alone (a server added at runtime is gone), on the same
// frontend; a reload of a haproxy.cfg HAProxy cannot load is said failed
// and leaves the worker, and what was added to it, running.
func TestRestartAndBrokenReload(t *testing.T) {
	h := Start(t, Backend{Name: "be"})
	if out, err := h.Command("add server be/extra 127.0.0.1:9"); err != nil || !strings.Contains(out, "New server registered") {
		t.Fatalf("add server: %q %v", out, err)
	}
	before, err := h.Alive()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.TryReloadBroken(); err != nil {
		t.Fatal(err)
	}
	if pid, err := h.Alive(); err != nil || pid != before {
		t.Fatalf("after a broken reload: worker %d (%v), want %d still", pid, err, before)
	}
	if _, ok := h.Servers(t, "be")["extra"]; !ok {
		t.Fatal("a broken reload dropped a server added at runtime")
	}
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	after, err := h.Alive()
	if err != nil || after == before {
		t.Fatalf("after a restart: worker %d (%v), want a new one (was %d)", after, err, before)
	}
	if _, ok := h.Servers(t, "be")["extra"]; ok {
		t.Fatal("a restart kept a server added at runtime")
	}
	if d := h.Died(); d != "" {
		t.Fatalf("Died() = %q after a restart", d)
	}
	h.Reload(t) // and it reloads as before
}
