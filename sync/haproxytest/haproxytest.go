// Package haproxytest starts private HAProxy processes for tests: a temp dir,
// master-worker mode, an admin stats socket (with StartWith, also behind
// HAProxy's own TLS listener), a frontend per backend (tcp, or
// http with Backend.Mode) on a free loopback port. It needs Debian's haproxy
// package (make test installs it).
package haproxytest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// Backend is one backend and the raw lines of its section after "backend NAME".
type Backend struct {
	Name  string
	Lines []string
	// Mode is the mode of the backend and of its frontend: "http", or
	// empty for the defaults' tcp.
	Mode string
	// FrontendLines go into its frontend (e.g. logging, see LogAbnormal).
	FrontendLines []string
}

// LogAbnormal are frontend lines that log, to HAProxy's output (Logs), each
// connection that ended abnormally or was retried or redispatched, with
// its server and termination state, and nothing else.
var LogAbnormal = []string{"log stderr format raw local0", "option tcplog", "option dontlog-normal"}

// HAProxy is a running HAProxy.
type HAProxy struct {
	Dir         string
	AdminSocket string
	// AdminTCP is the same admin socket on a loopback TCP port.
	AdminTCP string
	// StateFile is where Options.StateFile has HAProxy load server state
	// from at each reload.
	StateFile string
	// AdminTLS is the address of the TLS listener in front of the admin
	// socket (Options.AdminTLS), or empty.
	AdminTLS     string
	opts         Options
	MasterSocket string
	// Frontends maps each backend to the address of the frontend that uses it.
	Frontends map[string]string
	// cur is the running master process: Restart replaces it.
	cur      atomic.Pointer[proc]
	stopping atomic.Bool // stop was called (or Restart): an exit is asked for
	backends []Backend
	mu       sync.Mutex          // guards servers and the writes of haproxy.cfg
	servers  map[string][]string // server lines written by SetServers
	sections string              // written by SetSections
}

// FreePort returns a free TCP port on host.
func FreePort(t testing.TB, host string) int {
	t.Helper()
	return FreePorts(t, host, 1)[0]
}

// FreePorts returns n distinct free TCP ports on host. They are held open
// until all are picked: two picks closed in between can return the same
// port, and HAProxy binds every listener with SO_REUSEPORT, so a frontend
// and the stats socket on one port would share its connections silently.
func FreePorts(t testing.TB, host string, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// BinaryEnv names the HAProxy binary the tests run; empty means "haproxy"
// on PATH (Debian's 2.6). The version matrix (make test) sets it to the
// HAProxy 3.0 LTS that hack/build-haproxy.sh builds.
const BinaryEnv = "HKS_HAPROXY"

// Binary returns the path of the HAProxy binary under test.
func Binary() (string, error) {
	if b := os.Getenv(BinaryEnv); b != "" {
		if abs, err := filepath.Abs(b); err == nil {
			b = abs
		}
		if _, err := os.Stat(b); err != nil {
			return "", fmt.Errorf("%s=%s: %w", BinaryEnv, b, err)
		}
		return b, nil
	}
	b, err := exec.LookPath("haproxy")
	if err != nil {
		return "", fmt.Errorf("haproxy not found: run `make test`, which installs Debian's haproxy package")
	}
	return b, nil
}

// Options are what StartWith sets up beyond the backends.
type Options struct {
	// AdminTLS, when set, adds a listen section in which HAProxy
	// terminates TLS with client certificates in front of its own unix
	// admin socket (AdminTLSLines): the way docs/drivers.md recommends to
	// reach the admin socket across a network.
	AdminTLS *AdminTLS
	// StateFile adds "server-state-file" to the global section, at
	// HAProxy.StateFile: a backend with "load-server-state-from-file
	// global" loads what was dumped there before a reload (DumpState).
	StateFile bool
}

// AdminTLS is the TLS listener's material, PEM-encoded.
type AdminTLS struct {
	// ServerCert and ServerKey are HAProxy's certificate and key (written
	// into one crt file).
	ServerCert, ServerKey []byte
	// ClientCA is the CA that client certificates must chain to.
	ClientCA []byte
}

// AdminTLSLines is the listen section that puts TLS with client
// certificates in front of the unix admin socket sock: bind on addr with
// HAProxy's certificate crt, only clients whose certificate chains to ca.
// A TCP "stats socket" line with ssl is no substitute: 2.6 accepts the
// keywords there and answers in clear.
func AdminTLSLines(addr, crt, ca, sock string) []string {
	return []string{
		"listen admin_tls",
		"    mode tcp",
		"    no log", // a connection per command: the reload watch asks 4 times a second
		"    bind " + addr + " ssl crt " + crt + " ca-file " + ca + " verify required",
		"    server admin unix@" + sock,
	}
}

// Start runs HAProxy with the given backends until the test ends. A port
// taken between its pick and HAProxy's bind (any process's outgoing
// connection may take a free port) makes HAProxy exit at once: Start then
// picks other ports, three times at most.
func Start(t testing.TB, backends ...Backend) *HAProxy {
	t.Helper()
	return StartWith(t, Options{}, backends...)
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options, backends ...Backend) *HAProxy {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		h := &HAProxy{
			Dir:          dir,
			AdminSocket:  filepath.Join(dir, "admin.sock"),
			MasterSocket: filepath.Join(dir, "master.sock"),
			StateFile:    filepath.Join(dir, "server-state"),
			Frontends:    map[string]string{},
			backends:     backends,
			opts:         opts,
		}
		n := 1 + len(backends)
		if opts.AdminTLS != nil {
			n++
			if err := h.writeAdminTLS(); err != nil {
				t.Fatal(err)
			}
		}
		err := h.start(bin, FreePorts(t, "127.0.0.1", n))
		if err == nil {
			t.Cleanup(h.stop)
			return h
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			t.Fatal(err)
		}
	}
}

// errPortTaken: HAProxy could not bind a port it was given.
var errPortTaken = errors.New("a port was taken")

// start runs HAProxy on ports (the admin socket's, then a frontend's per
// backend) and waits until its admin and master sockets answer.
func (h *HAProxy) start(bin string, ports []int) error {
	h.AdminTCP = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	for i, b := range h.backends {
		h.Frontends[b.Name] = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1+i]))
	}
	if h.opts.AdminTLS != nil {
		h.AdminTLS = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1+len(h.backends)]))
	}
	cfgPath := filepath.Join(h.Dir, "haproxy.cfg")
	if err := h.writeConfig(); err != nil {
		return err
	}
	logs, err := os.OpenFile(filepath.Join(h.Dir, "haproxy.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p := &proc{logs: logs, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, "-W", "-db", "-S", h.MasterSocket, "-p", filepath.Join(h.Dir, "haproxy.pid"), "-f", cfgPath)
	p.cmd.Stdout, p.cmd.Stderr = logs, logs
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		logs.Close()
		return err
	}
	go func() { p.waitErr = p.cmd.Wait(); close(p.exited) }()
	h.cur.Store(p)
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Both sockets: the master's may listen a moment after the worker's.
		if _, err := h.Command("show info"); err == nil {
			if _, err := h.masterCommand("show proc"); err == nil {
				return nil
			}
		}
		select {
		case <-p.exited:
			logs := h.Logs()
			p.logs.Close()
			if strings.Contains(logs, "cannot bind") {
				return fmt.Errorf("%w: haproxy exited: %s", errPortTaken, logs)
			}
			return fmt.Errorf("haproxy exited: %s", logs)
		default:
		}
		if time.Now().After(deadline) {
			logs := h.Logs()
			h.stop()
			return fmt.Errorf("haproxy did not start: %s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// proc is one run of HAProxy's master and its workers.
type proc struct {
	cmd     *exec.Cmd
	exited  chan struct{} // closed once cmd has exited
	waitErr error         // cmd's exit status, once exited is closed
	logs    *os.File
}

func (h *HAProxy) stop() {
	if h.stopping.Swap(true) {
		return // stopped already
	}
	h.cur.Load().end(syscall.SIGTERM)
}

// end signals the process group and waits for the master to exit (killing
// it after 5 s).
func (p *proc) end(sig syscall.Signal) {
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
	p.logs.Close()
}

// Restart kills HAProxy, its master and every worker at once (a crash, an
// OOM kill, a host's reboot), and starts it again from haproxy.cfg on the
// same ports and sockets: a new master and a new worker, no old one, and
// nothing kept that the runtime API set.
func (h *HAProxy) Restart() error {
	bin, err := Binary()
	if err != nil {
		return err
	}
	if h.stopping.Swap(true) {
		return errors.New("haproxy is stopping")
	}
	h.cur.Load().end(syscall.SIGKILL)
	ports := []int{portOf(h.AdminTCP)}
	for _, b := range h.backends {
		ports = append(ports, portOf(h.Frontends[b.Name]))
	}
	if h.AdminTLS != "" {
		ports = append(ports, portOf(h.AdminTLS))
	}
	err = h.start(bin, ports)
	h.stopping.Store(false)
	return err
}

func portOf(hostport string) int {
	_, p, _ := net.SplitHostPort(hostport)
	n, _ := strconv.Atoi(p)
	return n
}

// Died says how HAProxy's master exited when nobody stopped it ("exit
// status 139", "signal: killed"), or "" while it runs: a history whose
// clients all failed at once tells an HAProxy that died from one that
// refused.
func (h *HAProxy) Died() string {
	p := h.cur.Load()
	select {
	case <-p.exited:
	default:
		return ""
	}
	if h.stopping.Load() || h.cur.Load() != p {
		return ""
	}
	if p.waitErr == nil {
		return "exit status 0"
	}
	return p.waitErr.Error()
}

// Alerts returns the last n lines HAProxy's own processes printed as
// alerts, or about a process that exited with a failure (a worker that
// crashed, a reload that failed; not a former worker that finished its
// sessions after a reload), oldest first.
func (h *HAProxy) Alerts(n int) []string {
	var out []string
	for line := range strings.Lines(h.Logs()) {
		failed := strings.Contains(line, "exited with code") && !(strings.Contains(line, "Former worker") && strings.Contains(line, "exited with code 0 "))
		if strings.HasPrefix(line, "[ALERT]") || failed || strings.Contains(line, "exit-on-failure") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out[max(0, len(out)-n):]
}

// Logs returns what HAProxy printed.
func (h *HAProxy) Logs() string {
	b, _ := os.ReadFile(filepath.Join(h.Dir, "haproxy.log"))
	return string(b)
}

// RuntimeURL is the admin socket as HAPROXY_RUNTIME_URL takes it.
func (h *HAProxy) RuntimeURL() string { return "unix://" + h.AdminSocket }

// settledMaster asks the master "show proc", for up to 10 s while its
// socket refuses: from HAProxy 3.1 the master re-executes itself once the
// new worker is up, and its socket is closed meanwhile (seen on 3.4.0: a
// reload asked 138 ms after another found it refusing; in a 30-minute
// soak on 2 busy cores, refusing for over 3 s).
func (h *HAProxy) settledMaster() (string, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		reply, err := h.masterCommand("show proc")
		if err == nil || time.Now().After(deadline) {
			return reply, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// masterCommand runs a command on the master socket.
func (h *HAProxy) masterCommand(cmd string) (string, error) {
	return runtimeapi.Socket{Network: "unix", Address: h.MasterSocket}.Command(context.Background(), cmd)
}

// Command runs a command on the admin socket.
func (h *HAProxy) Command(cmd string) (string, error) {
	return runtimeapi.Socket{Network: "unix", Address: h.AdminSocket}.Command(context.Background(), cmd)
}

// Server is one line of "show servers state".
type Server struct {
	Name, Address string
	// ID is the server's id (srv_id).
	ID           int
	Port, Weight int
	// Op is the operational state: 0 down, 1 starting, 2 up, 3 stopping.
	Op int
	// Admin is the admin state bit field (SRV_ADMF_*): 0x01 forced maint,
	// 0x02/0x20/0x40 inherited/resolver/hostname maint, 0x04 "disabled" in
	// the configuration (kept after the server is set ready), 0x08 forced drain.
	Admin int
	// CheckState holds HAProxy's CHK_ST_* bits: 0x02 configured, 0x04 enabled, 0x08 paused.
	CheckState int
}

// Maint, Drain and Up read the state fields.
func (s Server) Maint() bool { return s.Admin&0x63 != 0 } // 0x04 (config "disabled") alone is not maintenance
func (s Server) Drain() bool { return s.Admin&0x18 != 0 }
func (s Server) Up() bool    { return s.Op == 2 }

// CheckRunning reports whether the server's health check is enabled and running.
func (s Server) CheckRunning() bool { return s.CheckState&0x06 == 0x06 && s.CheckState&0x08 == 0 }

// Servers returns the backend's servers from "show servers state", by name.
func (h *HAProxy) Servers(t testing.TB, backend string) map[string]Server {
	t.Helper()
	reply, err := h.Command("show servers state " + backend)
	if err != nil {
		t.Fatal(err)
	}
	return ParseServers(reply, backend)
}

// ParseServers reads backend's servers from a "show servers state" reply,
// by name (for a goroutine that cannot fail a test).
func ParseServers(reply, backend string) map[string]Server {
	out := map[string]Server{}
	sc := bufio.NewScanner(strings.NewReader(reply))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 19 || f[1] != backend {
			continue
		}
		n := func(i int) int { v, _ := strconv.Atoi(f[i]); return v }
		out[f[3]] = Server{Name: f[3], ID: n(2), Address: f[4], Op: n(5), Admin: n(6), Weight: n(7), CheckState: n(13), Port: n(18)}
	}
	return out
}

// Balance returns the balance algorithm backend runs ("show stat"'s algo
// field of its BACKEND row), for a goroutine that cannot fail a test.
func (h *HAProxy) Balance(backend string) (string, error) {
	all, err := h.Balances()
	if err != nil {
		return "", err
	}
	algo, ok := all[backend]
	if !ok {
		return "", fmt.Errorf("show stat: no backend %s", backend)
	}
	return algo, nil
}

// BalanceIs says whether algo, as Balance reads it, is balance want.
// "show stat" names no algorithm for random (every HAProxy from 2.6 to
// 3.4: backend_lb_algo_str has no case for it): it says "unknown", which
// no other algorithm a history writes gives (soak seed 188303918 on
// 3.0.11 drew HAPROXY_BALANCE=random).
func BalanceIs(algo, want string) bool {
	return algo == want || want == "random" && algo == "unknown"
}

// Balances returns the balance algorithm of every backend, by name.
func (h *HAProxy) Balances() (map[string]string, error) {
	reply, err := h.Command("show stat")
	if err != nil {
		return nil, err
	}
	return balancesIn(reply)
}

func balancesIn(reply string) (map[string]string, error) {
	lines := strings.Split(reply, "\n")
	if !strings.HasPrefix(lines[0], "# ") {
		return nil, fmt.Errorf("show stat: no header in %q", cutReply(reply))
	}
	col := slices.Index(strings.Split(strings.TrimPrefix(lines[0], "# "), ","), "algo")
	if col < 0 {
		return nil, fmt.Errorf("show stat: no algo field")
	}
	out := map[string]string{}
	for _, l := range lines[1:] {
		if f := strings.Split(l, ","); len(f) > col && f[1] == "BACKEND" {
			out[f[0]] = f[col]
		}
	}
	return out, nil
}

func cutReply(s string) string {
	if len(s) > 200 {
		return s[:200]
	}
	return s
}

// Reloads returns the master's reload counter ("show proc" on the master socket).
func (h *HAProxy) Reloads(t testing.TB) int {
	t.Helper()
	reply, err := runtimeapi.Socket{Network: "unix", Address: h.MasterSocket}.Command(context.Background(), "show proc")
	if err != nil {
		t.Fatal(err)
	}
	n, ok := reloadCount(reply)
	if !ok {
		t.Fatalf("show proc: no master line with a reload count in %q", reply)
	}
	return n
}

// reloadCount reads the master's reload counter from "show proc".
func reloadCount(reply string) (int, bool) {
	for _, line := range strings.Split(reply, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[1] == "master" {
			n, err := strconv.Atoi(f[2])
			return n, err == nil
		}
	}
	return 0, false
}

// RecommendedLines are the backend lines the project recommends for a tcp
// backend (see model.RetryLines): a connection that fails on a server whose
// node died is retried on another one. Every test HAProxy has them in its
// defaults section, as users are told to; a backend that gives "no option
// redispatch" among its Lines runs without.
var RecommendedLines = []string{"option redispatch 1", "retries 3"}

// writeConfig writes haproxy.cfg: the sockets, a defaults section with
// RecommendedLines, a frontend per backend, and each backend's lines and
// server lines.
func (h *HAProxy) writeConfig() error {
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global\n    stats socket %s mode 600 level admin expose-fd listeners\n", h.AdminSocket)
	fmt.Fprintf(&cfg, "    stats socket ipv4@%s level admin\n    stats timeout 1m\n", h.AdminTCP)
	if h.opts.StateFile {
		fmt.Fprintf(&cfg, "    server-state-file %s\n", h.StateFile)
	}
	cfg.WriteString("defaults base\n    mode tcp\n    timeout connect 1s\n    timeout client 10s\n    timeout server 10s\n")
	for _, l := range RecommendedLines {
		fmt.Fprintf(&cfg, "    %s\n", l)
	}
	if h.opts.AdminTLS != nil {
		crt, ca := h.adminTLSFiles()
		for _, l := range AdminTLSLines(h.AdminTLS, crt, ca, h.AdminSocket) {
			fmt.Fprintf(&cfg, "%s\n", l)
		}
	}
	for _, b := range h.backends {
		mode := ""
		if b.Mode != "" {
			mode = "    mode " + b.Mode + "\n"
		}
		fmt.Fprintf(&cfg, "frontend fe_%s\n%s    bind %s\n    default_backend %s\n", b.Name, mode, h.Frontends[b.Name], b.Name)
		for _, l := range b.FrontendLines {
			fmt.Fprintf(&cfg, "    %s\n", l)
		}
		fmt.Fprintf(&cfg, "backend %s\n%s", b.Name, mode)
		for _, l := range append(slices.Clone(b.Lines), h.servers[b.Name]...) {
			fmt.Fprintf(&cfg, "    %s\n", l)
		}
	}
	cfg.WriteString(h.sections)
	return os.WriteFile(filepath.Join(h.Dir, "haproxy.cfg"), []byte(cfg.String()), 0o600)
}

// adminTLSFiles are the paths of the TLS listener's crt and ca files.
func (h *HAProxy) adminTLSFiles() (crt, ca string) {
	return filepath.Join(h.Dir, "admin-server.pem"), filepath.Join(h.Dir, "admin-ca.pem")
}

// writeAdminTLS writes the TLS listener's crt file (certificate, then key)
// and ca file.
func (h *HAProxy) writeAdminTLS() error {
	crt, ca := h.adminTLSFiles()
	a := h.opts.AdminTLS
	if err := os.WriteFile(crt, append(slices.Clone(a.ServerCert), a.ServerKey...), 0o600); err != nil {
		return err
	}
	return os.WriteFile(ca, a.ClientCA, 0o600)
}

// SetServers writes lines ("server NAME ADDR:PORT ...") into backend's
// section of haproxy.cfg, for the next Reload: what a Data Plane API
// writes before it reloads.
func (h *HAProxy) SetServers(t testing.TB, backend string, lines []string) {
	t.Helper()
	if err := h.TrySetServers(backend, lines); err != nil {
		t.Fatal(err)
	}
}

// TrySetServers is SetServers for a goroutine that cannot fail a test.
func (h *HAProxy) TrySetServers(backend string, lines []string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.servers == nil {
		h.servers = map[string][]string{}
	}
	h.servers[backend] = lines
	return h.writeConfig()
}

// Reload reloads HAProxy (SIGUSR2 to the master, which every version takes)
// and waits until the new worker answers on the admin socket.
func (h *HAProxy) Reload(t testing.TB) {
	t.Helper()
	if err := h.TryReload(); err != nil {
		t.Fatal(err)
	}
}

// TryReload is Reload for a goroutine that cannot fail a test: what went
// wrong is its error.
func (h *HAProxy) TryReload() error {
	reply, err := h.settledMaster()
	if err != nil {
		return fmt.Errorf("master socket: %w", err)
	}
	before, ok := reloadCount(reply)
	if !ok {
		return fmt.Errorf("show proc: no master line with a reload count in %q", reply)
	}
	if err := h.cur.Load().cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	current := 0
	for {
		// The master socket may drop a connection while it reloads. From
		// HAProxy 3.1 the counter moves before the new worker has loaded
		// and the old one still answers the admin socket: wait until the
		// worker that answers is the current one. The old worker accepts
		// on the shared socket until it has handled its stop signal, so
		// one answer from the new one is not enough (CI: a runtime change
		// sent right after a reload went to the old worker and was lost);
		// three in a row, 20 ms apart, are, or one once the old worker
		// has exited.
		reply, err := h.masterCommand("show proc")
		n, ok := reloadCount(reply)
		info, infoErr := h.Command("show info")
		if err == nil && ok && n > before && infoErr == nil && answeredBy(info, currentWorkers(reply)) {
			if current++; current == 3 || len(workersIn(reply, "# old workers")) == 0 {
				return nil
			}
		} else {
			current = 0
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("haproxy did not answer after its reload: %s", h.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TryReloadBroken asks HAProxy to reload a haproxy.cfg it cannot load (a
// keyword it does not know, as a bad edit or a missing certificate gives
// it), then puts the file back: the master says the reload failed and the
// worker that ran goes on, with what the runtime API set on it.
func (h *HAProxy) TryReloadBroken() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	path := filepath.Join(h.Dir, "haproxy.cfg")
	good, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	defer os.WriteFile(path, good, 0o644)
	if err := os.WriteFile(path, append(good, []byte("    hks-broken-by-test\n")...), 0o644); err != nil {
		return err
	}
	reply, err := h.settledMaster()
	if err != nil {
		return fmt.Errorf("master socket: %w", err)
	}
	before, ok := failedReloads(reply)
	if !ok {
		return fmt.Errorf("show proc: no failed reload count in %q", reply)
	}
	// 3.1 and later load the configuration in a new worker: its failure
	// is also said in the master's log ("Failed to load worker").
	said := strings.Count(h.Logs(), "Failed to load worker")
	if err := h.cur.Load().cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		reply, err := h.masterCommand("show proc")
		if n, ok := failedReloads(reply); err == nil && ok && n > before || strings.Count(h.Logs(), "Failed to load worker") > said {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the broken reload was never said failed: %s", h.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// failedReloads reads the master's "[failed: N]" of "show proc".
func failedReloads(reply string) (int, bool) {
	_, rest, ok := strings.Cut(reply, "[failed: ")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "]", 2)[0]))
	return n, err == nil
}

// Alive returns the pid of HAProxy's current worker once it has checked
// that HAProxy still runs: the master has not exited, "show proc" on the
// master socket lists one current worker, and the admin socket answers
// "show info". A worker that died (an abort) fails it, as does a master
// that exited with it.
func (h *HAProxy) Alive() (int, error) {
	select {
	case <-h.cur.Load().exited:
		return 0, fmt.Errorf("haproxy exited: %s", h.Logs())
	default:
	}
	reply, err := h.settledMaster()
	if err != nil {
		return 0, fmt.Errorf("master socket: %w", err)
	}
	workers := currentWorkers(reply)
	if len(workers) != 1 {
		return 0, fmt.Errorf("show proc lists %d current workers, want 1: %q", len(workers), reply)
	}
	if _, err := h.Command("show info"); err != nil {
		return 0, fmt.Errorf("admin socket: %w", err)
	}
	return workers[0], nil
}

// answeredBy says whether "show info" came from the only current worker.
func answeredBy(info string, workers []int) bool {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, "Pid: "); ok {
			pid, err := strconv.Atoi(strings.TrimSpace(v))
			return err == nil && len(workers) == 1 && workers[0] == pid
		}
	}
	return false
}

// currentWorkers reads the pids of the "# workers" section of "show proc"
// (not the "# old workers" a reload leaves).
func currentWorkers(reply string) []int { return workersIn(reply, "# workers") }

// workersIn reads the worker pids of one section of "show proc".
func workersIn(reply, want string) []int {
	var pids []int
	section := ""
	for _, line := range strings.Split(reply, "\n") {
		if strings.HasPrefix(line, "# ") {
			section = strings.TrimSpace(line)
			continue
		}
		f := strings.Fields(line)
		if section == want && len(f) >= 2 && f[1] == "worker" {
			if pid, err := strconv.Atoi(f[0]); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
