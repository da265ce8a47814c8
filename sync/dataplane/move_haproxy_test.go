package dataplane_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// moveRig is a real HAProxy behind the test API, which answers every server
// write with a reload (dataplanetest.Options.RuntimeFails) and runs it
// ReloadDelay later on that HAProxy with what it wrote (ServerLines). The
// backend holds "s" in service at 127.0.0.1:port (listener "a") and "t" in
// service elsewhere (listener "t"), so that clients always have a server;
// with no redispatch, a connection sent to an address where nothing
// listens fails.
type moveRig struct {
	h      *haproxytest.HAProxy
	api    *dataplanetest.Server
	c      *dataplane.Client
	check  model.Check
	port   int // s's port, at 127.0.0.1 (A) and at 127.0.0.2 (B)
	t      model.Server
	mu     sync.Mutex
	reload []string // errors of the API's reloads
}

const reloadDelay = 2 * time.Second

func newMoveRig(t *testing.T) *moveRig {
	t.Helper()
	// Checked every second while steadily UP, every 100 ms otherwise: a
	// server a reload loads UP (at the top of its health with fall 1) waits
	// for its first check, as with the shipped inter 5s, while a gate's
	// checks take 100 ms each.
	r := &moveRig{check: model.Check{Inter: time.Second, FastInter: 100 * time.Millisecond, DownInter: 100 * time.Millisecond, Rise: 2, Fall: 1}}
	// The check waits for the listener's answer, so that each check is an
	// accepted connection that Listener.Hits counts (a bare connect is
	// reset before Go's accept returns it).
	r.h = haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check",
		"tcp-check connect", "tcp-check expect rstring ^[a-z]", "no option redispatch"}})
	r.api = dataplanetest.New(t, dataplanetest.Options{RuntimeSocket: r.h.AdminSocket, RuntimeFails: true, ReloadDelay: reloadDelay, Reload: func() {
		err := r.h.TrySetServers("be", r.api.ServerLines("be"))
		if err == nil {
			err = r.h.TryReload()
		}
		if err != nil {
			r.mu.Lock()
			r.reload = append(r.reload, err.Error())
			r.mu.Unlock()
		}
	}})
	rr, on, one, three := "roundrobin", "enabled", int64(1), int64(3)
	r.api.AddDefaults(models.Defaults{DefaultsBase: models.DefaultsBase{Name: "base", Mode: "tcp",
		Redispatch: &models.Redispatch{Enabled: &on, Interval: &one}, Retries: &three}})
	ports := haproxytest.FreePorts(t, "127.0.0.1", 2)
	r.port = ports[0]
	haproxytest.Listen(t, "a", fmt.Sprintf("127.0.0.1:%d", r.port))
	haproxytest.Listen(t, "t", fmt.Sprintf("127.0.0.1:%d", ports[1]))
	r.t = r.server("t", "127.0.0.1", ports[1])
	// As the service writes them: the first sync changes nothing.
	cfg := func(s model.Server) models.Server {
		ms := func(d time.Duration) *int64 { v := d.Milliseconds(); return &v }
		p, w, rise, fall := int64(s.Port), int64(1), int64(s.Check.Rise), int64(s.Check.Fall)
		return models.Server{Name: s.Name, Address: s.Address, Port: &p, ServerParams: models.ServerParams{
			Weight: &w, Maintenance: "disabled", Check: "enabled", Inter: ms(s.Check.Inter), Fastinter: ms(s.Check.FastInter),
			Downinter: ms(s.Check.DownInter), Rise: &rise, Fall: &fall}}
	}
	r.api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "be", Mode: "tcp", From: "base", AdvCheck: "tcp-check", Balance: &models.Balance{Algorithm: &rr}}},
		cfg(r.t), cfg(r.server("s", "127.0.0.1", r.port)))
	r.h.SetServers(t, "be", r.api.ServerLines("be"))
	r.h.Reload(t)
	socket, err := runtimeapi.New(r.h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, r.check)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(r.api.URL)
	r.c = dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: 5 * time.Second}, dataplane.WithRuntime(socket))

	at := want(r.server("s", "127.0.0.1", r.port), r.t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := r.sync(at)
		if err == nil && !p.HasChanges() && !p.Pending() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("s not in service at A within 5 s: %v, %+v", err, p)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := r.api.Reloads(); n != 0 {
		t.Fatalf("setting up wrote %d reloading changes, want none", n)
	}
	return r
}

func (r *moveRig) server(name, addr string, port int) model.Server {
	return model.Server{Name: name, Address: addr, Port: port, Weight: 1, State: model.Ready, Check: r.check}
}

// sync reads, plans and applies once, as the reconciler does.
func (r *moveRig) sync(w model.Backend) (plan.Plan, error) { return readPlanApply(r.c, w) }

// watch records, until stop is closed, every sample of "show servers
// state" (every 10 ms) that shows s in service at addr, with the hits
// check counts (the new address's listener: checks reach it before any
// client does) at the first such sample; and sends a client connection
// through the frontend every 20 ms, counting answers by name ("" failed).
type watch struct {
	mu        sync.Mutex
	inService []string
	hitsFirst int
	answers   map[string]int
	done      sync.WaitGroup
}

func (r *moveRig) watch(addr string, port int, hits func() int, stop <-chan struct{}) *watch {
	w := &watch{answers: map[string]int{}, hitsFirst: -1}
	w.done.Add(2)
	go func() {
		defer w.done.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			reply, err := r.h.Command("show servers state be")
			if err != nil {
				continue // reloading
			}
			s, ok := haproxytest.ParseServers(reply, "be")["s"]
			if ok && s.Address == addr && s.Port == port && s.Up() && !s.Drain() && !s.Maint() {
				w.mu.Lock()
				if w.hitsFirst < 0 && hits != nil {
					w.hitsFirst = hits()
				}
				w.inService = append(w.inService, time.Now().Format("15:04:05.000"))
				w.mu.Unlock()
			}
		}
	}()
	go func() {
		defer w.done.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			name, err := haproxytest.Ask(r.h.Frontends["be"])
			if err != nil {
				name = ""
			}
			w.mu.Lock()
			w.answers[name]++
			w.mu.Unlock()
		}
	}()
	return w
}

func (r *moveRig) reloadErrors() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.reload, "; ")
}

// TestMoveWithReloadNeverServesTheUncheckedAddress: s, in service at A, moves
// to B where nothing listens (a StatefulSet pod recreated at a new IP on a
// dead node), and the Data Plane API answers the move's PUT with a reload
// (its runtime command failed). s must never be in service at B: not through
// the socket while the reload is pending, nor loaded UP by the reload, and
// no client connection may fail. Before, s was gated and checked at A through
// the socket, put in service there by a PUT that wrote it ready at B, and the
// reload loaded it UP at B, where no check had run.
func TestMoveWithReloadNeverServesTheUncheckedAddress(t *testing.T) {
	r := newMoveRig(t)
	before := r.h.Reloads(t)
	stop := make(chan struct{})
	w := r.watch("127.0.0.2", r.port, nil, stop)
	moved := want(r.server("s", "127.0.0.2", r.port), r.t)
	var errs []string
	for end := time.Now().Add(reloadDelay + 3*time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if _, err := r.sync(moved); err != nil {
			errs = append(errs, err.Error())
		}
	}
	close(stop)
	w.done.Wait()
	if r.h.Reloads(t) == before {
		t.Fatalf("the API's reload never ran (%s): the test did not try what it is for", r.reloadErrors())
	}
	if e := r.reloadErrors(); e != "" {
		t.Fatalf("reloads: %s", e)
	}
	if len(w.inService) > 0 {
		t.Errorf("s in service at the dead address B in %d samples of show servers state, first at %s", len(w.inService), w.inService[0])
	}
	if w.answers[""] > 0 {
		t.Errorf("%d client connections failed (sent to B, where nothing listens); answers %v", w.answers[""], w.answers)
	}
	if w.answers["t"] == 0 {
		t.Errorf("no connection answered: %v", w.answers)
	}
	for _, s := range r.api.Servers("be") {
		if s.Name == "s" && (s.Address != "127.0.0.2" || s.Maintenance != "enabled") {
			t.Errorf("haproxy.cfg holds s at %s maintenance %q, want parked at B until its check passes there", s.Address, s.Maintenance)
		}
	}
	if len(errs) > 0 {
		t.Logf("sync errors (retried): %s", strings.Join(errs, "; "))
	}
}

// TestMoveWithReloadEntersOnceCheckedThere: the same move to a B where a
// server listens: s ends in service at B, written so in haproxy.cfg, with
// its checks at B before any traffic (B's listener saw at least rise
// connections when s was first in service there), and no client
// connection fails on the way.
func TestMoveWithReloadEntersOnceCheckedThere(t *testing.T) {
	r := newMoveRig(t)
	b := haproxytest.Listen(t, "b", fmt.Sprintf("127.0.0.2:%d", r.port))
	stop := make(chan struct{})
	w := r.watch("127.0.0.2", r.port, b.Hits, stop)
	moved := want(r.server("s", "127.0.0.2", r.port), r.t)
	written := func() bool {
		for _, s := range r.api.Servers("be") {
			if s.Name == "s" {
				return s.Address == "127.0.0.2" && s.Maintenance != "enabled"
			}
		}
		return false
	}
	var last plan.Plan
	var errs []string
	deadline := time.Now().Add(reloadDelay + 8*time.Second)
	for {
		p, err := r.sync(moved)
		if err != nil {
			errs = append(errs, err.Error())
		} else {
			last = p
		}
		w.mu.Lock()
		in := len(w.inService) > 0
		w.mu.Unlock()
		if err == nil && !p.HasChanges() && !p.Pending() && in && written() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("s not in service at B and written so: last plan %+v, errors %v", last, errs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Past any reload the last writes asked for.
	time.Sleep(reloadDelay + 500*time.Millisecond)
	if p, err := r.sync(moved); err != nil || p.HasChanges() || p.Pending() {
		t.Errorf("after the reloads: plan %+v, %v", p, err)
	}
	close(stop)
	w.done.Wait()
	if e := r.reloadErrors(); e != "" {
		t.Fatalf("reloads: %s", e)
	}
	if w.hitsFirst < r.check.Rise {
		t.Errorf("s first in service at B after %d connections to B, want at least rise (%d) checks there first", w.hitsFirst, r.check.Rise)
	}
	if w.answers[""] > 0 || w.answers["b"] == 0 {
		t.Errorf("answers %v: want none failed and some from b", w.answers)
	}
	if s := r.h.Servers(t, "be")["s"]; s.Address != "127.0.0.2" || !s.Up() || s.Drain() || s.Maint() {
		t.Errorf("s in HAProxy: %+v, want in service at B", s)
	}
}
