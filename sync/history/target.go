package history

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// sources are the addresses each target's HAProxy connects from (its
// backend's "source" line), so that a pod tells whose check or client
// connection it took.
var sources = []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}

// target is one HAProxy instance the service keeps in sync: an HA pair's
// member. The second one's admin socket and Data Plane API can be made to
// hang (a second HAProxy that hangs).
type target struct {
	i     int
	h     *haproxytest.HAProxy
	api   *dataplanetest.Server // Dataplane only
	front string
	// runtimeURL is what the service is given: the unix socket, or for a
	// target that can hang, a TCP relay to it.
	runtimeURL string
	relay      *relay
	// apiRelay stands before the Data Plane API in serve histories (it can
	// go down: APIDown); apiURL is where the service reaches the API.
	apiRelay *relay
	apiURL   string

	reloadMu sync.Mutex // one reload at a time: the API's and the history's
	rec      *recorder
	// backends are haproxy.cfg's backends the service writes: be, and be2
	// in many-Services histories.
	backends []string
	// othersReloads and reloads count the starts and ends of reloads by
	// others, and of every reload (the API's too): a monitor that sees
	// them change between two reads knows HAProxy may have reloaded.
	othersReloads, reloads atomic.Int64
	// slots are be's slots (slot histories); saveDraw draws, reload by
	// reload, whether one saves the state first (saveDrawn).
	slots    SlotSetup
	saveDraw *rand.Rand
}

// startTarget starts target i's HAProxy and, for the Data Plane driver, its
// test API, which reloads that HAProxy with what it wrote.
func startTarget(t testing.TB, i int, s Setup, port int, rec *recorder, tls *adminTLS) *target {
	t.Helper()
	lines := append([]string{"balance roundrobin", "source " + sources[i]}, checkLines...)
	if s.httpChecksInCfg() && s.Driver == Runtime {
		// The operator's check of kube-proxy's health ports (the later
		// option wins over the tcp-check lines, on 2.6 to 3.4).
		lines = append(lines, "option "+httpCheckLine)
	}
	if s.DefaultServer {
		lines = append(lines, "default-server send-proxy-v2")
	}
	tg := &target{i: i, rec: rec, backends: []string{backend}, slots: s.Slots,
		saveDraw: rand.New(rand.NewPCG(s.Seed^0x5a7e, uint64(i)))}
	var opts haproxytest.Options
	if s.Slots.N > 0 {
		// The slots themselves are written once the service's check is
		// known (world.declareSlots).
		opts.StateFile = true
		lines = append(lines, "load-server-state-from-file global")
	}
	bes := []haproxytest.Backend{{Name: backend, Lines: lines, FrontendLines: haproxytest.LogAbnormal}}
	if s.Services || s.ports() {
		tg.backends = append(tg.backends, backend2)
		bes = append(bes, haproxytest.Backend{Name: backend2, Lines: lines})
	}
	if tls != nil {
		opts.AdminTLS = tls.haproxy()
	}
	tg.h = haproxytest.StartWith(t, opts, bes...)
	tg.front = tg.h.Frontends[backend]
	tg.runtimeURL = tg.h.RuntimeURL()
	if tls != nil {
		tg.runtimeURL = "tls://" + tg.h.AdminTLS
	}
	if i > 0 || s.Config.Refused > 0 || s.Serve {
		var rewrite func(string) string
		if n := s.Config.Refused; n > 0 {
			rewrite = tg.refuseOnSocket(podAddr(n))
		}
		if tls != nil {
			tg.relay = startRelay(t, "tcp", tg.h.AdminTLS, nil)
			tg.runtimeURL = "tls://" + tg.relay.addr
		} else {
			tg.relay = startRelay(t, "unix", tg.h.AdminSocket, rewrite)
			tg.runtimeURL = "tcp://" + tg.relay.addr
		}
	}
	static := fmt.Sprintf("server static %s:%d check", podAddr(staticPod), port)
	if s.Driver == Dataplane {
		tg.api = dataplanetest.New(t, dataplanetest.Options{RuntimeSocket: tg.h.AdminSocket, ReloadDelay: s.ReloadDelay, Reload: tg.apiReload, RuntimeFails: s.RuntimeFails,
			OnWrite:       func(refused bool) { tg.rec.add(obs{kind: obsAPIWrite, target: tg.i, refused: refused}) },
			OnReloadAsked: func(why string) { tg.rec.add(obs{kind: obsReloadAsked, target: tg.i, err: why}) }})
		if n := s.Config.Refused; n > 0 {
			tg.api.Intercept(tg.refuseOnAPI(podAddr(n)))
		}
		rr, on, one, three := "roundrobin", "enabled", int64(1), int64(3)
		tg.api.AddDefaults(models.Defaults{DefaultsBase: models.DefaultsBase{Name: "base", Mode: "tcp",
			Redispatch: &models.Redispatch{Enabled: &on, Interval: &one}, Retries: &three}})
		var servers []models.Server
		if s.Static {
			p := int64(port)
			servers = append(servers, models.Server{Name: "static", Address: podAddr(staticPod), Port: &p,
				ServerParams: models.ServerParams{Check: "enabled"}})
		}
		be := models.BackendBase{Name: backend, Mode: "tcp", From: "base", AdvCheck: "tcp-check", Balance: &models.Balance{Algorithm: &rr}}
		if s.httpChecksInCfg() {
			be.AdvCheck, be.HttpchkParams = "httpchk", &models.HttpchkParams{Method: "GET", URI: desired.HealthPath}
		}
		if s.DefaultServer {
			be.DefaultServer = &models.DefaultServer{ServerParams: models.ServerParams{SendProxyV2: "enabled"}}
		}
		tg.api.AddBackend(models.Backend{BackendBase: be}, servers...)
		if s.Services || s.ports() {
			be.Name = backend2
			tg.api.AddBackend(models.Backend{BackendBase: be})
		}
		if err := tg.writeAPIConfig(); err != nil {
			t.Fatal(err)
		}
		tg.h.Reload(t)
		tg.apiURL = tg.api.URL
		if s.Serve {
			u, err := url.Parse(tg.api.URL)
			if err != nil {
				t.Fatal(err)
			}
			tg.apiRelay = startRelay(t, "tcp", u.Host, nil)
			tg.apiURL = "http://" + tg.apiRelay.addr
		}
	} else if s.Static && s.Slots.N == 0 {
		tg.h.SetServers(t, backend, []string{static})
		tg.h.Reload(t)
	}
	return tg
}

// apiReload is the test API's reload: HAProxy loads what the API wrote.
func (tg *target) apiReload() {
	tg.reloadMu.Lock()
	defer tg.reloadMu.Unlock()
	tg.reloads.Add(1)
	defer tg.reloads.Add(1)
	tg.rec.add(obs{kind: obsAPIReloadStart, target: tg.i})
	if err := tg.writeAPIConfig(); err != nil {
		tg.rec.add(obs{kind: obsReload, target: tg.i, err: err.Error()})
		return
	}
	if err := tg.h.TryReload(); err != nil {
		tg.rec.add(obs{kind: obsReload, target: tg.i, err: err.Error()})
		return
	}
	tg.rec.add(obs{kind: obsAPIReload, target: tg.i})
}

// reloadByOthers reloads HAProxy with haproxy.cfg as it is: what the API
// wrote (Dataplane), or the static lines alone (Runtime); in slot
// histories the state saved first when this reload does (prepareReload).
// started is told, just before HAProxy is signalled, what it kept.
func (tg *target) reloadByOthers(started func(slotReload)) error {
	tg.reloadMu.Lock()
	defer tg.reloadMu.Unlock()
	started(tg.prepareReload())
	tg.reloads.Add(1)
	tg.othersReloads.Add(1)
	defer func() { tg.reloads.Add(1); tg.othersReloads.Add(1) }()
	if err := tg.writeAPIConfig(); err != nil {
		return err
	}
	return tg.h.TryReload()
}

// writeAPIConfig writes into haproxy.cfg what the Data Plane API holds of
// each backend the service writes: its servers, its balance and its HTTP
// check (which HAPROXY_BALANCE has the service write; the later balance
// line of a section is the one HAProxy runs). The backend's tcp-check rules are
// kept, as the real API keeps a section's rules when its settings are
// replaced. Nothing without an API.
func (tg *target) writeAPIConfig() error {
	if tg.api == nil {
		return nil
	}
	for _, b := range tg.backends {
		var lines []string
		be := tg.api.Backend(b)
		if be.Balance != nil && be.Balance.Algorithm != nil && *be.Balance.Algorithm != "" {
			lines = append(lines, "balance "+*be.Balance.Algorithm)
		}
		if be.AdvCheck == "httpchk" && be.HttpchkParams != nil {
			// After the tcp-check lines, which the API keeps: the later
			// option is the check HAProxy runs (2.6 to 3.4).
			lines = append(lines, "option httpchk "+cmp.Or(be.HttpchkParams.Method, "GET")+" "+be.HttpchkParams.URI)
		}
		if err := tg.h.TrySetServers(b, append(lines, tg.api.ServerLines(b)...)); err != nil {
			return err
		}
	}
	return nil
}

// hang makes the target's socket and API accept and never answer, or
// answer again.
func (tg *target) hang(on bool) {
	tg.relay.hang(on)
	if tg.api == nil {
		return
	}
	if on {
		tg.api.InjectFault(dataplanetest.Fault{Hang: true})
	} else {
		tg.api.ClearFault()
	}
}

// relay is a TCP port in front of an admin socket that can hang: while it
// does, it accepts connections and holds them without a byte either way;
// when it stops, the held connections are closed (the hung process went
// away) and new ones go through again.
type relay struct {
	addr string
	to   string
	ln   net.Listener
	// network is to's: "unix" (an admin socket) or "tcp" (a Data Plane API).
	network string

	// rewrite, when set, rewrites each line sent to the socket.
	rewrite func(string) string

	mu      sync.Mutex
	hanging bool
	held    []net.Conn
	// down: the process behind it is gone (refuse): every connection is
	// reset as it comes, and those open were cut.
	down bool
	open map[net.Conn]struct{}
	wg   sync.WaitGroup
}

func startRelay(t testing.TB, network, socket string, rewrite func(string) string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{addr: ln.Addr().String(), to: socket, ln: ln, rewrite: rewrite, network: network, open: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.serve()
	t.Cleanup(func() { _ = ln.Close(); r.hang(false); r.wg.Wait() })
	return r
}

func (r *relay) serve() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.down {
			r.mu.Unlock()
			_ = c.(*net.TCPConn).SetLinger(0) // a reset, as from a port nothing listens on
			c.Close()
			continue
		}
		if r.hanging {
			r.held = append(r.held, c)
			r.mu.Unlock()
			continue
		}
		r.open[c] = struct{}{}
		r.mu.Unlock()
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer func() {
				r.mu.Lock()
				delete(r.open, c)
				r.mu.Unlock()
				c.Close()
			}()
			up, err := net.Dial(r.network, r.to)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{})
			go func() {
				r.copyTo(up, c)
				if cw, ok := up.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				}
				close(done)
			}()
			_, _ = io.Copy(c, up)
			_ = c.(*net.TCPConn).CloseWrite()
			<-done
		}()
	}
}

// refuse takes the process behind r away (on: connections open are cut,
// new ones reset) or back.
func (r *relay) refuse(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = on
	if on {
		for c := range r.open {
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}
}

// copyTo copies what the service sends to the socket, line by line
// through rewrite when it is set.
func (r *relay) copyTo(up io.Writer, c io.Reader) {
	if r.rewrite == nil {
		_, _ = io.Copy(up, c)
		return
	}
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			if _, werr := io.WriteString(up, r.rewrite(line)); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// refuseOnSocket makes HAProxy refuse every "add server" of a server at
// addr: the line gets a keyword HAProxy does not know, so the refusal is
// HAProxy's own, in its place among the replies.
func (tg *target) refuseOnSocket(addr string) func(string) string {
	re := regexp.MustCompile(`(add server \S+ ` + regexp.QuoteMeta(addr) + `:\d+)`)
	return func(line string) string {
		if !re.MatchString(line) {
			return line
		}
		tg.rec.add(obs{kind: obsRefused, target: tg.i})
		return re.ReplaceAllString(line, "$1 "+refusedKeyword)
	}
}

// refuseOnAPI makes the Data Plane API refuse every write of a server at
// addr with a 400, as the real API answers a server HAProxy would not load.
func (tg *target) refuseOnAPI(addr string) func(http.ResponseWriter, *http.Request) bool {
	return func(w http.ResponseWriter, r *http.Request) bool {
		if (r.Method != http.MethodPost && r.Method != http.MethodPut) || !strings.Contains(r.URL.Path, "/servers") {
			return false
		}
		body, err := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil {
			return false
		}
		var srv struct {
			Address string `json:"address"`
		}
		if json.Unmarshal(body, &srv) != nil || srv.Address != addr {
			return false
		}
		tg.rec.add(obs{kind: obsRefused, target: tg.i})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"code":400,"message":"[ALERT] parsing [haproxy.cfg]: 'server' : unknown keyword '`+refusedKeyword+`'"}`)
		return true
	}
}

func (r *relay) hang(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hanging = on
	if !on {
		for _, c := range r.held {
			c.Close()
		}
		r.held = nil
	}
}

// faultOf is the test API's fault for an APIFault step: its next writes
// fail as the real API, or what stands in front of it, fails them.
func faultOf(st Step) dataplanetest.Fault {
	f := dataplanetest.Fault{Writes: true, Times: st.Times}
	switch st.Fault {
	case "409":
		f.Status, f.Message = 409, "version mismatch: the configuration changed meanwhile"
	case "503":
		f.Status = 503
	default:
		f.Drop = true
	}
	return f
}
