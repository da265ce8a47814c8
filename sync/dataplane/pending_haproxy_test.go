package dataplane_test

import (
	"fmt"
	"net/http"
	"net/url"
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

// pendingCheck is the shipped check (config.ShippedCheck), and entryBound
// the history checker's entry bound for it (history.BoundsOf): downinter,
// rise-1 fast checks, and 1.5 s for the service and a loaded machine.
var pendingCheck = model.Check{Inter: 1500 * time.Millisecond, FastInter: 100 * time.Millisecond, DownInter: 200 * time.Millisecond, Rise: 2, Fall: 2}

const entryBound = 1800 * time.Millisecond

// TestGateWhileReloadPendingEntersWithinTheBound is the history checker's
// finding on seed 904145503 (ready-pod-in-service): the API reloads for
// adds (it answered one with 202) and answers a write with a reload it runs
// reload_delay later (its runtime command failed); meanwhile a parked
// server's endpoint becomes ready. The server is gated through the socket,
// and the pending reload loads haproxy.cfg, where it is parked, before its
// check passed: the gate is undone, and the next reconcile gates it again.
// Before, while the API reloaded for adds, that gate was in place, and its
// first check came at the server's place in the new worker's start-up
// spread (up to the longest steady inter of any server, 2 s here): it
// entered service after the entry bound. Now it is renewed (deleted and
// added again through the socket, with what default-server gives it), its
// first check downinter later: within the bound, never in service (UP,
// weight > 0) without a passed check in the running worker, and with no
// reload of the service's own beyond those the API does for its writes.
func TestGateWhileReloadPendingEntersWithinTheBound(t *testing.T) {
	const delay = time.Second
	ports := haproxytest.FreePorts(t, "127.0.0.1", 3)
	// Another backend with a server checked on HAProxy's defaults (inter
	// 2 s, no fastinter), as the soak's static server: a worker a reload
	// starts spreads its first checks over that interval by the servers'
	// order (HAProxy's start_checks), so a server near the end of "be"
	// has its first check there up to 2 s after the reload, and a gate in
	// place does not bring it forward.
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin", "option tcp-check",
		"tcp-check connect", "tcp-check expect rstring ^[a-z]", "no option redispatch"}},
		haproxytest.Backend{Name: "other", Lines: []string{"balance roundrobin", fmt.Sprintf("server static 127.0.0.1:%d check", ports[1])}})
	var mu sync.Mutex
	var reloaded []time.Time
	var reloadErrs []string
	var api *dataplanetest.Server
	api = dataplanetest.New(t, dataplanetest.Options{RuntimeSocket: h.AdminSocket, RuntimeFails: true, ReloadDelay: delay, Reload: func() {
		err := h.TrySetServers("be", api.ServerLines("be"))
		if err == nil {
			err = h.TryReload()
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			reloadErrs = append(reloadErrs, err.Error())
			return
		}
		reloaded = append(reloaded, time.Now())
	}})
	rr, on, one, three := "roundrobin", "enabled", int64(1), int64(3)
	api.AddDefaults(models.Defaults{DefaultsBase: models.DefaultsBase{Name: "base", Mode: "tcp",
		Redispatch: &models.Redispatch{Enabled: &on, Interval: &one}, Retries: &three}})
	haproxytest.Listen(t, "s", fmt.Sprintf("127.0.0.1:%d", ports[0]))
	haproxytest.Listen(t, "t", fmt.Sprintf("127.0.0.1:%d", ports[1]))
	haproxytest.Listen(t, "u", fmt.Sprintf("127.0.0.1:%d", ports[2]))
	server := func(name string, port int, st model.State) model.Server {
		return model.Server{Name: name, Address: "127.0.0.1", Port: port, Weight: 1, State: st, Check: pendingCheck}
	}
	cfg := func(s model.Server) models.Server {
		ms := func(d time.Duration) *int64 { v := d.Milliseconds(); return &v }
		p, w, rise, fall := int64(s.Port), int64(1), int64(s.Check.Rise), int64(s.Check.Fall)
		m := models.Server{Name: s.Name, Address: s.Address, Port: &p, ServerParams: models.ServerParams{
			Weight: &w, Maintenance: "disabled", Check: "enabled", Inter: ms(s.Check.Inter), Fastinter: ms(s.Check.FastInter),
			Downinter: ms(s.Check.DownInter), Rise: &rise, Fall: &fall}}
		if s.State == model.Maint {
			m.Maintenance = "enabled"
		}
		return m
	}
	parked, ready, tIn := server("s", ports[0], model.Maint), server("s", ports[0], model.Ready), server("t", ports[1], model.Ready)
	// Servers declared before s (at t's listener), as in a soak's backend.
	others := []model.Server{tIn}
	for i := range 12 {
		others = append(others, server(fmt.Sprint("f-", i), ports[1], model.Ready))
	}
	var lines []models.Server
	for _, o := range others {
		lines = append(lines, cfg(o))
	}
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "be", Mode: "tcp", From: "base", AdvCheck: "tcp-check", Balance: &models.Balance{Algorithm: &rr}}},
		append(lines, cfg(parked))...)
	h.SetServers(t, "be", api.ServerLines("be"))
	h.Reload(t)
	socket, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, pendingCheck)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: 5 * time.Second}, dataplane.WithRuntime(socket))
	sync1 := func(w model.Backend) (plan.Plan, error) { return readPlanApply(c, w) }
	settle := func(w model.Backend, what string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if p, err := sync1(w); err == nil && !p.HasChanges() && !p.Pending() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not settled within 5 s", what)
			}
		}
	}
	// u, added by the service: the API answers the add with a reload, as
	// in the finding (a default-server line there), and the driver
	// remembers that adds reload.
	uIn := server("u", ports[2], model.Ready)
	backend := func(t model.Server, s model.Server) model.Backend {
		return want(append([]model.Server{t, s, uIn}, others[1:]...)...)
	}
	settle(backend(tIn, parked), "setting up")
	// Past any reload setting up asked for.
	time.Sleep(delay + 300*time.Millisecond)
	settle(backend(tIn, parked), "setting up")

	// Watch s: the first sample in service, and any in service without a
	// passed check in the worker that runs it. Clients ask throughout.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var firstIn time.Time
	var unchecked []string
	failed, answered := 0, 0
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			reply, err := h.Command("show servers state be")
			if err != nil {
				continue // reloading
			}
			servers, err := runtimeapi.ParseServersState(reply, "be", pendingCheck.Rise, pendingCheck.Fall)
			if err != nil {
				continue
			}
			for _, s := range servers {
				if s.Name != "s" || s.State != model.Ready || !s.Up || s.Weight == 0 {
					continue
				}
				mu.Lock()
				if firstIn.IsZero() {
					firstIn = time.Now()
				}
				if !s.Runtime.CheckPassed {
					unchecked = append(unchecked, time.Now().Format("15:04:05.000"))
				}
				mu.Unlock()
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			_, err := haproxytest.Ask(h.Frontends["be"])
			mu.Lock()
			if err != nil {
				failed++
			} else {
				answered++
			}
			mu.Unlock()
		}
	}()

	// A write the API answers with a reload it runs delay later: t's
	// weight (the runtime command fails).
	reloadsBefore := api.ReloadsRun()
	tHeavier := tIn
	tHeavier.Weight = 2
	if _, err := sync1(backend(tHeavier, parked)); err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	// s ready shortly before that reload runs: its gate's first checks
	// are still to come when the reload loads haproxy.cfg.
	time.Sleep(delay * 85 / 100)
	readyAt := time.Now()
	var errs []string
	for deadline := readyAt.Add(6 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		p, err := sync1(backend(tHeavier, ready))
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		mu.Lock()
		in := !firstIn.IsZero()
		mu.Unlock()
		if in && !p.HasChanges() && !p.Pending() {
			break
		}
	}
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(reloadErrs) > 0 {
		t.Fatalf("reloads: %v", reloadErrs)
	}
	ranBetween := false
	for _, at := range reloaded {
		ranBetween = ranBetween || at.After(readyAt) && (firstIn.IsZero() || at.Before(firstIn))
	}
	if !ranBetween {
		t.Fatalf("the reload asked at %s did not run between s ready (%s) and s in service (%s), reloads at %v: the test did not try what it is for",
			asked.Format("15:04:05.000"), readyAt.Format("15:04:05.000"), firstIn.Format("15:04:05.000"), reloaded)
	}
	if firstIn.IsZero() {
		t.Fatalf("s never in service (sync errors %v)", errs)
	}
	t.Logf("s ready %s, in service %v later; reloads at %v", readyAt.Format("15:04:05.000"), firstIn.Sub(readyAt).Round(time.Millisecond), reloaded)
	if took := firstIn.Sub(readyAt); took > entryBound {
		t.Errorf("s in service %v after it was ready, want within %v (the pending reload undid its gate)", took.Round(time.Millisecond), entryBound)
	}
	if len(unchecked) > 0 {
		t.Errorf("s in service without a passed check in the running worker in %d samples, first at %s", len(unchecked), unchecked[0])
	}
	if failed > 0 || answered == 0 {
		t.Errorf("%d client connections failed, %d answered", failed, answered)
	}
	// The weight's reload, and the entry's (the API reloads for every
	// write here): none of the service's own beyond them.
	if n := api.ReloadsRun() - reloadsBefore; n > 2 {
		t.Errorf("%d reloads ran, want at most 2 (the weight's and the entry's)", n)
	}
	for _, s := range api.Servers("be") {
		if s.Name == "s" && (s.Maintenance == "enabled" || s.Weight == nil || *s.Weight != 1) {
			t.Errorf("haproxy.cfg holds s maintenance %q weight %v, want in service", s.Maintenance, s.Weight)
		}
	}
	if len(errs) > 0 {
		t.Logf("sync errors (retried): %v", errs)
	}
}
