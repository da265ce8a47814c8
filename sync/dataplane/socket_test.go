package dataplane_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// healthLog is the runtime socket beside the API: it records Gate calls
// together with the API's requests, so the order of POST, gate and PUT can be
// checked, and shows gated servers' checks running, passed once passed is set.
// Like a running HAProxy, it holds the state the socket set (gated: drain)
// until the API applies a versioned PUT of that server; servers its Apply
// added exist before haproxy.cfg has them.
type healthLog struct {
	api    *dataplanetest.Server
	calls  []string
	at     []int // number of API requests seen at each call
	passed bool
	dead   map[string]bool // servers whose check never passes
	fail   int             // Gate calls to fail first
	// gone: servers a reload took from under the socket since the API
	// added them: Gate is refused with HAProxy's reply
	gone    map[string]string
	applied []plan.Plan
	// appliedAt: the number of API requests seen at each Apply
	appliedAt []int
	running   map[string]runningServer // set through the socket
	// lazy: like a real HAProxy whose API reloads later (reload_delay),
	// the running HAProxy has a configured server only once reload ran
	// (loaded), or once the socket added it.
	lazy   bool
	loaded map[string]bool
	// started: servers whose check StartCheck started (left in maintenance)
	started []string
	// added: servers its Apply added (model.Runtime.Ours), until a reload
	added map[string]bool
	// refuse: servers whose changes its Apply (and ShutdownSessions)
	// refuses, as HAProxy refuses one server's command
	refuse map[string]bool
	// sessions and since: what the socket shows of each server's sessions
	// and of the time since its last state change; shut and shutAt record
	// ShutdownSessions calls (drain_api_test.go)
	sessions map[string]int
	since    time.Duration
	shut     []string
	shutAt   []int
}

// socketAdds names the servers its Apply added (or renewed) through the
// socket.
func (h *healthLog) socketAdds() []string {
	var out []string
	for _, p := range h.applied {
		for _, ch := range p.Changes {
			if ch.Action == plan.Add || ch.Renew {
				out = append(out, ch.Name)
			}
		}
	}
	return out
}

// reload loads haproxy.cfg as the running HAProxy: every configured server,
// in its configured state, with its check running unless it is parked;
// what the socket did is forgotten.
func (h *healthLog) reload() {
	h.loaded, h.added = map[string]bool{}, nil
	h.running, h.calls = map[string]runningServer{}, nil
	at := len(h.api.Requests())
	for _, s := range h.api.Servers("be") {
		h.loaded[s.Name] = true
		h.running[s.Name] = runningServer{model.Server{Name: s.Name, Address: s.Address, State: cfgState(s)}, at}
	}
}

// cfgState is the state haproxy.cfg holds s in.
func cfgState(s models.Server) model.State {
	switch {
	case s.Maintenance == "enabled":
		return model.Maint
	case s.Weight != nil && *s.Weight == 0:
		return model.Drain
	}
	return model.Ready
}

type runningServer struct {
	model.Server
	at int // number of API requests seen when set
}

func (h *healthLog) Gate(_ context.Context, backend, server string) error {
	if h.fail > 0 {
		h.fail--
		return errors.New("runtime socket: connection refused")
	}
	if reply, ok := h.gone[server]; ok {
		return &runtimeapi.CommandError{Command: "enable health " + backend + "/" + server, Reply: reply}
	}
	h.calls = append(h.calls, backend+"/"+server)
	h.at = append(h.at, len(h.api.Requests()))
	h.set(model.Server{Name: server, State: model.Drain})
	return nil
}

func (h *healthLog) set(s model.Server) {
	if h.running == nil {
		h.running = map[string]runningServer{}
	}
	h.running[s.Name] = runningServer{s, len(h.api.Requests())}
}

// Apply applies adds and state changes as the runtime API driver would.
func (h *healthLog) Apply(_ context.Context, p plan.Plan) (plan.Applied, error) {
	h.applied, h.appliedAt = append(h.applied, p), append(h.appliedAt, len(h.api.Requests()))
	var out plan.Applied
	var refused plan.ServerErrors
	for _, ch := range p.Changes {
		if h.refuse[ch.Name] {
			refused = append(refused, plan.ServerError{Server: ch.Name, Error: "refused"})
			continue
		}
		if ch.Renew && !ch.Gate {
			h.started = append(h.started, p.Backend+"/"+ch.Name)
		}
		if ch.Action == plan.Delete {
			delete(h.running, ch.Name)
			out.Count(plan.RuntimeWrite)
			continue
		}
		if ch.Action == plan.Add {
			if h.added == nil {
				h.added = map[string]bool{}
			}
			h.added[ch.Name] = true
		}
		s := *ch.New
		if ch.Gate {
			h.calls = append(h.calls, p.Backend+"/"+ch.Name)
			s.State = model.Drain
		}
		h.set(s)
		out.Count(plan.RuntimeWrite)
	}
	if len(refused) > 0 {
		return out, refused
	}
	return out, nil
}

func (h *healthLog) ReadRuntime(_ context.Context, backend string) ([]model.Server, error) {
	var out []model.Server
	inCfg := map[string]bool{}
	reqs := h.api.Requests()
	for _, s := range h.api.Servers(backend) {
		if _, set := h.running[s.Name]; h.lazy && !h.loaded[s.Name] && !set {
			continue // not loaded yet
		}
		inCfg[s.Name] = true
		st := cfgState(s)
		if r, ok := h.running[s.Name]; ok && !slices.ContainsFunc(reqs[r.at:], func(q dataplanetest.Request) bool {
			return q.Method == http.MethodPut && strings.HasSuffix(q.Path, "/servers/"+s.Name) && strings.Contains(q.Query, "version=")
		}) {
			st = r.State
		}
		out = append(out, h.server(backend, s.Name, s.Address, st))
	}
	for name, r := range h.running {
		if !inCfg[name] && r.Address != "" {
			s := h.server(backend, name, r.Address, r.State)
			s.Runtime.Ours = h.added[name]
			out = append(out, s)
		}
	}
	return out, nil
}

func (h *healthLog) server(backend, name, addr string, st model.State) model.Server {
	passed := h.passed && !h.dead[name]
	running := slices.Contains(h.calls, backend+"/"+name) || slices.Contains(h.started, backend+"/"+name) || h.loaded[name] && st != model.Maint
	// The check and weight the runtime API driver reads for a server
	// haproxy.cfg does not hold: those it adds servers with.
	return model.Server{Name: name, Address: addr, Port: 30080, Weight: 1, Check: chk, State: st, Up: passed,
		Runtime: &model.Runtime{CheckRunning: running, CheckPassed: passed, Sessions: h.sessions[name], Since: h.since}}
}

func TestAddWithoutReloadGatedOnChecks(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	w := want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Drain), srv("node-c", "127.0.1.3", model.Maint))

	p, a := syncOnce(t, c, w)
	if a.Reload || api.Reloads() != 0 {
		t.Errorf("adds reloaded HAProxy (%d reloads)", api.Reloads())
	}
	// node-c is to stay in maintenance: gating would put it in drain; its
	// check is started all the same, so it can enter once it is ready.
	if strings.Join(hl.calls, ",") != "be/node-a,be/node-b" || fmt.Sprint(hl.started) != "[be/node-c]" {
		t.Errorf("gate calls: %v, checks started %v", hl.calls, hl.started)
	}
	if !reflect.DeepEqual(p.Waiting, []string{"node-a"}) {
		t.Errorf("waiting = %v, want node-a", p.Waiting)
	}
	// node-a: POST (in maint), then gate, and no PUT in service.
	reqs := api.Requests()
	if before := reqs[hl.at[0]-1]; before.Method != http.MethodPost || strings.Contains(reqs[hl.at[0]].Path, "node-a") {
		t.Errorf("order: %s %s, then %s %s", before.Method, before.Path, reqs[hl.at[0]].Method, reqs[hl.at[0]].Path)
	}
	persisted := func() map[string]models.Server {
		got := map[string]models.Server{}
		for _, s := range api.Servers("be") {
			got[s.Name] = s
		}
		return got
	}
	got := persisted()
	if got["node-a"].Maintenance != "enabled" || *got["node-b"].Weight != 0 || got["node-b"].Maintenance == "enabled" || got["node-c"].Maintenance != "enabled" {
		t.Errorf("persisted states: a %q, b weight %d %q, c %q", got["node-a"].Maintenance, *got["node-b"].Weight, got["node-b"].Maintenance, got["node-c"].Maintenance)
	}
	// Its check has not passed: nothing to do, still waiting.
	if p, a := syncOnce(t, c, w); p.HasChanges() || a.Writes != 0 || len(p.Waiting) != 1 {
		t.Errorf("sync before the check passed: %+v", p)
	}
	hl.passed = true
	if p, _ := syncOnce(t, c, w); !reflect.DeepEqual(p.Names(plan.Update), []string{"node-a"}) || p.Pending() {
		t.Errorf("sync after the check passed: %+v", p)
	}
	if persisted()["node-a"].Maintenance == "enabled" || api.Reloads() != 0 {
		t.Errorf("node-a not in service, or reloads %d", api.Reloads())
	}
	if p, a := syncOnce(t, c, w); p.HasChanges() || a.Writes != 0 {
		t.Errorf("last sync: %+v", p)
	}
}

// TestGatedServerRemovedIsParkedOnTheSocket: a server gated in the running
// HAProxy (drain) and parked in haproxy.cfg is no longer wanted. Parking it is
// a change haproxy.cfg already holds, so it goes through the socket, as a
// park: the socket must not delete it (the transaction does, in haproxy.cfg).
func TestGatedServerRemovedIsParkedOnTheSocket(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	syncOnce(t, c, want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready)))

	p, _ := syncOnce(t, c, want(srv("node-a", "127.0.1.1", model.Ready)))
	if !reflect.DeepEqual(p.Names(plan.Delete), []string{"node-b"}) || len(hl.applied) != 1 {
		t.Fatalf("plan %+v, socket plans %+v", p, hl.applied)
	}
	for _, ch := range hl.applied[0].Changes {
		if ch.Name != "node-b" || ch.Action == plan.Delete || ch.New.State != model.Maint {
			t.Errorf("socket got %s %s (state %s), want node-b parked", ch.Action, ch.Name, ch.New.State)
		}
	}
	if s := api.Servers("be"); len(s) != 1 || s[0].Name != "node-a" {
		t.Errorf("haproxy.cfg: %+v, want node-a alone", s)
	}
}

// TestFailureBetweenAddAndGate: the POST landed, the gate on the socket
// failed. The server stays in maintenance; the retry gates it and does not
// put it in service until its check passed.
func TestFailureBetweenAddAndGate(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api, fail: 1}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	w := want(srv("node-a", "127.0.1.1", model.Ready))
	if err := applyOnce(t, c, w); err == nil {
		t.Fatal("a failed gate was not reported")
	}
	if s := api.Servers("be"); len(s) != 1 || s[0].Maintenance != "enabled" {
		t.Fatalf("after the failed gate: %+v", s)
	}
	p, _ := syncOnce(t, c, w) // the retry
	if len(hl.calls) != 1 || !reflect.DeepEqual(p.Waiting, []string{"node-a"}) || api.Servers("be")[0].Maintenance != "enabled" {
		t.Errorf("retry: gate calls %v, plan %+v, server %q", hl.calls, p, api.Servers("be")[0].Maintenance)
	}
	if p, _ := syncOnce(t, c, w); p.HasChanges() || api.Servers("be")[0].Maintenance != "enabled" {
		t.Errorf("in service before its check passed: %+v", p)
	}
}

// TestGateOfAServerAReloadDroppedIsAConflict: the API added a server at
// runtime (201), and a reload that began before that add (another
// Service's frontend) left the new process without it, so HAProxy answers
// the gate "No such server". That is a conflict the retry mends by reading
// again, not a permanent refusal that would leave the Service failed until
// the next event: the server stays parked in haproxy.cfg, never in service.
func TestGateOfAServerAReloadDroppedIsAConflict(t *testing.T) {
	// "No such server": the new process lacks it; "Proxy is disabled": the
	// old one, stopping, answered the socket.
	for _, reply := range []string{"No such server.\n", "Proxy is disabled.\n"} {
		api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
		hl := &healthLog{api: api, gone: map[string]string{"node-a": reply}}
		u, _ := url.Parse(api.URL)
		c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
		w := want(srv("node-a", "127.0.1.1", model.Ready))
		err := applyOnce(t, c, w)
		if err == nil || !strings.Contains(err.Error(), strings.TrimSpace(reply)) {
			t.Fatalf("gate refused %q: %v, want HAProxy's refusal reported", reply, err)
		}
		if cls := failure.Of(err); cls != failure.Temporary || !failure.Retryable(err) {
			t.Errorf("gate refused %q: class %q, want temporary (a conflict the retry reads again)", reply, cls)
		}
		if s := api.Servers("be"); len(s) != 1 || s[0].Maintenance != "enabled" {
			t.Fatalf("after the refused gate haproxy.cfg holds %+v, want node-a parked", s)
		}
		delete(hl.gone, "node-a")
		if p, _ := syncOnce(t, c, w); len(hl.calls) != 1 || !reflect.DeepEqual(p.Waiting, []string{"node-a"}) {
			t.Errorf("retry: gate calls %v, plan %+v; want node-a gated, waiting", hl.calls, p)
		}
	}
}

// applyOnce reads be, plans w against it and applies the plan once,
// returning what Apply returned.
func applyOnce(t *testing.T, c *dataplane.Client, w model.Backend) error {
	t.Helper()
	cur, err := c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Apply(context.Background(), plan.CalculateWith(cur, w, c.Policy()))
	return err
}

func TestStaticAlgorithmIsRefused(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient)
	if _, err := c.Read(context.Background(), "be"); err != nil {
		t.Fatal(err)
	}
	api.SetBalance("be", "static-rr")
	_, err := c.Read(context.Background(), "be")
	var be *failure.BackendError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "static-rr") {
		t.Fatalf("err = %v, want a BackendError naming static-rr", err)
	}
}

// TestAddsThatReloadGoThroughTheSocket: the API answers server adds with a
// reload (a default_server line; or dataplaneapi before 3.3.5, which cannot
// read HAProxy 3.2+'s version), which runs later (reload_delay). The first
// add's 202 is reported, the server is added gated through the socket at
// once instead of waiting for the reload, and the other adds of the plan,
// and of the next, go through the socket alone. Once their checks passed
// they are put in service through the socket and written in service by one
// transaction.
func TestAddsThatReloadGoThroughTheSocket(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{DefaultsDefaultServer: true}, dataplane.Auth{})
	hl := &healthLog{api: api, lazy: true}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	w := want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready))

	p, a := syncOnce(t, c, w)
	if a.UnexpectedReloads != 1 || !strings.Contains(a.UnexpectedReason, "default-server") {
		t.Errorf("unexpected reloads %d (%q), want the first add's", a.UnexpectedReloads, a.UnexpectedReason)
	}
	posts := 0
	for _, r := range api.Requests() {
		if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/servers") && strings.Contains(r.Query, "version=") {
			posts++
		}
	}
	if posts != 1 || len(hl.applied) != 2 || fmt.Sprint(hl.calls) != "[be/node-a be/node-b]" {
		t.Errorf("%d versioned adds, runtime plans %d, gated %v; want one add through the API, both on the socket", posts, len(hl.applied), hl.calls)
	}
	if !reflect.DeepEqual(p.Waiting, []string{"node-a", "node-b"}) || api.ReloadsRun() != 1 {
		t.Errorf("waiting %v, reloads run %d", p.Waiting, api.ReloadsRun())
	}
	if in, all := persisted(api); in != 0 || all != 1 {
		t.Errorf("haproxy.cfg: %d servers, %d in service; want node-a, parked (node-b is written once checked)", all, in)
	}
	if p, a := syncOnce(t, c, w); p.HasChanges() || a.Writes != 0 || len(p.Loading) != 0 {
		t.Errorf("sync before the checks passed: %+v", p)
	}
	hl.passed = true
	if p, a := syncOnce(t, c, w); len(p.Names(plan.Update)) != 2 || a.UnexpectedReloads != 0 || p.Pending() {
		t.Errorf("sync after the checks passed: %+v, %+v", p, a)
	}
	if in, _ := persisted(api); in != 2 {
		t.Errorf("%d servers written in service, want 2", in)
	}
	// Remembered: the next add goes through the socket without asking the
	// API to add it first.
	before := len(api.Requests())
	syncOnce(t, c, want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready), srv("node-c", "127.0.1.3", model.Ready)))
	for _, r := range api.Requests()[before:] {
		if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/servers") && strings.Contains(r.Query, "version=") {
			t.Errorf("%s %s?%s: an add through the API, which reloads", r.Method, r.Path, r.Query)
		}
	}
	if !slices.Contains(hl.calls, "be/node-c") {
		t.Errorf("node-c not gated on the socket: %v", hl.calls)
	}
}

// TestServerNotRunningYetWaitsParked: haproxy.cfg holds a server (written in
// service) that the running HAProxy does not show: the API's reload that
// loads it has not run, or failed. Before, such a server read as one whose
// checks cannot be seen and was left, or written, in service, so the reload
// loaded it UP with no check run. Now it is written parked (loading); when
// haproxy.cfg holds nothing for it but what this service writes, it is
// added through the socket at once, gated, and enters service once its
// check passed, reload or not. One with another keyword (here maxconn, which
// an add through the socket would lose) waits with nothing sent to the
// socket until the reload loaded it; then it is gated.
func TestServerNotRunningYetWaitsParked(t *testing.T) {
	for _, tt := range []struct {
		name    string
		maxconn *int64
	}{{"only what the service writes", nil}, {"another keyword", ptr(int64(100))}} {
		t.Run(tt.name, func(t *testing.T) {
			api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
			hl := &healthLog{api: api, lazy: true}
			u, _ := url.Parse(api.URL)
			c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
			port, weight := int64(30080), int64(1)
			api.AddBackend(api.Backend("be"), models.Server{Name: "node-a", Address: "127.0.1.1", Port: &port,
				ServerParams: models.ServerParams{Weight: &weight, Check: "enabled", Inter: ptr(int64(2000)), Rise: ptr(int64(2)), Fall: ptr(int64(3)), Maintenance: "disabled", Maxconn: tt.maxconn}})
			w := want(srv("node-a", "127.0.1.1", model.Ready))

			p, _ := syncOnce(t, c, w)
			if !reflect.DeepEqual(p.Loading, []string{"node-a"}) || !reflect.DeepEqual(p.Waiting, []string{"node-a"}) {
				t.Fatalf("plan %+v: want node-a waiting, loading", p)
			}
			if in, all := persisted(api); in != 0 || all != 1 {
				t.Errorf("haproxy.cfg %d/%d in service, want it parked", in, all)
			}
			if tt.maxconn == nil {
				if fmt.Sprint(hl.calls) != "[be/node-a]" || len(hl.applied) != 1 || hl.applied[0].Changes[0].Action != plan.Add {
					t.Fatalf("socket: gated %v, plans %+v; want it added there, gated", hl.calls, hl.applied)
				}
			} else {
				if len(hl.calls) != 0 || len(hl.applied) != 0 {
					t.Errorf("socket calls %v %d; want nothing on the socket", hl.calls, len(hl.applied))
				}
				if p, a := syncOnce(t, c, w); p.HasChanges() || a.Writes != 0 || len(p.Loading) != 1 {
					t.Errorf("before the reload: %+v", p)
				}
				hl.reload()
				if p, _ := syncOnce(t, c, w); len(p.Loading) != 0 || fmt.Sprint(hl.calls) != "[be/node-a]" || !reflect.DeepEqual(p.Waiting, []string{"node-a"}) {
					t.Errorf("after the reload: %+v, gated %v; want it gated", p, hl.calls)
				}
			}
			if p, a := syncOnce(t, c, w); p.HasChanges() || a.Writes != 0 || len(p.Loading) != 0 || len(p.Waiting) != 1 {
				t.Errorf("gated, before its check passed: %+v", p)
			}
			hl.passed = true
			if p, _ := syncOnce(t, c, w); !reflect.DeepEqual(p.Names(plan.Update), []string{"node-a"}) || p.Pending() {
				t.Errorf("after its check passed: %+v", p)
			}
			if in, _ := persisted(api); in != 1 {
				t.Errorf("haproxy.cfg holds %d in service, want node-a", in)
			}
		})
	}
}

// TestLoadingServerRefusedBySocket: the socket refuses to add a loading
// server (a reload loaded it between the read and the add: "already
// exists"). That is the one server's failure: the plan's other changes go.
func TestLoadingServerRefusedBySocket(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api, lazy: true, refuse: map[string]bool{"node-a": true}}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	port, weight := int64(30080), int64(1)
	params := models.ServerParams{Weight: &weight, Check: "enabled", Inter: ptr(int64(2000)), Rise: ptr(int64(2)), Fall: ptr(int64(3)), Maintenance: "disabled"}
	nodeC := models.Server{Name: "node-c", Address: "127.0.1.3", Port: &port, ServerParams: params}
	api.AddBackend(api.Backend("be"), nodeC)
	hl.reload() // node-c runs, in service
	// node-a is written in service and not running: parked by a versioned
	// PUT before the socket is asked to add it.
	api.AddBackend(api.Backend("be"), nodeC, models.Server{Name: "node-a", Address: "127.0.1.1", Port: &port, ServerParams: params})
	heavier := srv("node-c", "127.0.1.3", model.Ready)
	heavier.Weight = 2
	w := want(srv("node-a", "127.0.1.1", model.Ready), heavier)
	cur, err := c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Apply(context.Background(), plan.CalculateWith(cur, w, c.Policy()))
	var refused plan.ServerErrors
	if !errors.As(err, &refused) || len(refused) != 1 || refused[0].Server != "node-a" {
		t.Fatalf("apply: %v, want node-a's refusal alone", err)
	}
	var weight2 bool
	for _, s := range api.Servers("be") {
		weight2 = weight2 || s.Name == "node-c" && s.Weight != nil && *s.Weight == 2
	}
	if !weight2 {
		t.Errorf("node-c's weight change did not go after node-a's refusal: %+v", api.Servers("be"))
	}
	if in, _ := persisted(api); in != 1 {
		t.Errorf("haproxy.cfg holds %d in service, want node-c alone (node-a parked)", in)
	}
}

func ptr[T any](v T) *T { return &v }

// TestMoveInTrafficParkedOnTheSocketFirst: a server in service moves (a
// StatefulSet pod recreated at a new IP). The API applies the move's PUT
// at runtime address first and maintenance next, so between the two the
// server would take clients at the new address, where no check ran (found
// by the history checker's soak, seed 340110989, checked-before-traffic).
// The socket parks it where it runs before that PUT.
func TestMoveInTrafficParkedOnTheSocketFirst(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api, passed: true}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	at := func(addr string) model.Backend { return want(srv("node-a", addr, model.Ready)) }
	for i := 0; i < 3; i++ {
		syncOnce(t, c, at("127.0.1.1"))
	}
	if s := api.Servers("be"); len(s) != 1 || s[0].Maintenance == "enabled" {
		t.Fatalf("node-a not in service at A to begin with: %+v", s)
	}
	hl.applied, hl.appliedAt = nil, nil
	from := len(api.Requests())
	syncOnce(t, c, at("127.0.1.9"))

	put := slices.IndexFunc(api.Requests()[from:], func(q dataplanetest.Request) bool {
		return q.Method == http.MethodPut && strings.HasSuffix(q.Path, "/servers/node-a")
	})
	if put += from; put < from {
		t.Fatalf("no PUT of node-a: %v", api.Requests())
	}
	if len(hl.applied) == 0 {
		t.Fatal("nothing went through the socket")
	}
	first := hl.applied[0].Changes
	if len(first) != 1 || first[0].Action != plan.Maint || first[0].New.State != model.Maint || first[0].New.Address != "127.0.1.1" || hl.appliedAt[0] > put {
		t.Errorf("the socket's first change: %+v at request %d, the PUT at %d; want node-a parked at A before the PUT", first, hl.appliedAt[0], put)
	}
	if s := api.Servers("be"); len(s) != 1 || s[0].Address != "127.0.1.9" || s[0].Maintenance != "enabled" {
		t.Errorf("haproxy.cfg: %+v, want node-a parked at B until its check passes there", s)
	}
}
