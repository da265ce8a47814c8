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

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// TestBigBurstIsWrittenOnlyOnceChecked: more than MaxRuntimeAdds new
// servers are added through the socket in one plan, gated, and nothing is
// written: no versioned write or transaction per server on the way in (on
// the real API a transaction costs ~7 ms a server: 200 took 1.8 s before
// the next reconcile could put any in service), and a reload before they
// are written never loads a server no check passed for. Once their checks
// pass, the socket puts them in service, then one transaction writes them
// (one reload); the dead one stays out of haproxy.cfg, gated.
func TestBigBurstIsWrittenOnlyOnceChecked(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api, dead: map[string]bool{"node-03": true}}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	w := burst(dataplane.MaxRuntimeAdds + 5)
	n := len(w.Servers)

	p, a := syncOnce(t, c, w)
	if api.Reloads() != 0 || a.Reload || len(hl.applied) != 1 || len(hl.applied[0].Names(plan.Add)) != n {
		t.Fatalf("%d adds: %d reloads, runtime plans %d; want all added at runtime, no reload", n, api.Reloads(), len(hl.applied))
	}
	for _, r := range api.Requests() {
		if r.Method != http.MethodGet {
			t.Fatalf("%s %s: a write before any check passed", r.Method, r.Path)
		}
	}
	if len(p.Waiting) != n || len(hl.calls) != n {
		t.Errorf("waiting %v, gated %v", p.Waiting, hl.calls)
	}
	if p, a := syncOnce(t, c, w); p.HasChanges() || a.Writes != 0 || len(p.Waiting) != n {
		t.Errorf("sync before the checks passed: %+v", p)
	}
	hl.passed = true
	before := len(api.Requests())
	p, _ = syncOnce(t, c, w)
	if len(p.Names(plan.Update)) != n-1 || len(hl.applied) != 2 || len(hl.applied[1].Changes) != n-1 {
		t.Fatalf("after the checks passed: plan %+v, runtime plans %d", p, len(hl.applied))
	}
	for i, r := range api.Requests()[before:] {
		if strings.Contains(r.Path, "/servers") && strings.Contains(r.Query, "version=") {
			t.Errorf("%s %s?%s: one versioned write per server, not one transaction", r.Method, r.Path, r.Query)
		}
		if r.Method != http.MethodGet && before+i < hl.appliedAt[1] {
			t.Errorf("%s %s before the socket put them in service: traffic waited for the write", r.Method, r.Path)
		}
	}
	if api.Reloads() != 1 {
		t.Errorf("writing the checked servers: %d reloads, want one transaction", api.Reloads())
	}
	if in, all := persisted(api); in != n-1 || all != n-1 {
		t.Errorf("haproxy.cfg: %d servers, %d in service; want all but the dead one, in service", all, in)
	}
	if p, a := syncOnce(t, c, w); p.HasChanges() || a.Writes != 0 || !reflect.DeepEqual(p.Waiting, []string{"node-03"}) {
		t.Errorf("last sync: %+v", p)
	}
}

// TestManyServersLeaveThroughTheSocket: 27 of 30 servers leave at once (a
// node pool drained). The socket takes them out of traffic in one round
// and one transaction persists what haproxy.cfg must learn, instead of a
// versioned PUT each (~40 ms apiece on the real API: 200 nodes took 8 s).
// Parked (deletions batched) they are written parked; deleted, they are
// only parked on the socket, as the transaction deletes them.
func TestManyServersLeaveThroughTheSocket(t *testing.T) {
	for _, batch := range []int{0, 100} {
		t.Run(fmt.Sprint("delete batch ", batch), func(t *testing.T) {
			api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
			hl := &healthLog{api: api, passed: true}
			u, _ := url.Parse(api.URL)
			c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl), dataplane.WithDeleteBatch(batch))
			all := burst(30)
			syncOnce(t, c, all)
			syncOnce(t, c, all)
			if in, n := persisted(api); in != 30 || n != 30 {
				t.Fatalf("set-up: %d of %d in service", in, n)
			}
			before, plans := len(api.Requests()), len(hl.applied)
			p, _ := syncOnce(t, c, want(all.Servers[:3]...))
			for _, r := range api.Requests()[before:] {
				if strings.Contains(r.Path, "/servers/") && strings.Contains(r.Query, "version=") {
					t.Fatalf("%s %s?%s: a versioned write per leaving server", r.Method, r.Path, r.Query)
				}
			}
			if len(hl.applied) != plans+1 || len(hl.applied[plans].Changes) != 27 {
				t.Fatalf("socket plans %d, want one more with 27 parks", len(hl.applied)-plans)
			}
			for _, ch := range hl.applied[plans].Changes {
				if ch.New.State != model.Maint {
					t.Errorf("%s on the socket: %s to %s, want parked", ch.Name, ch.Action, ch.New.State)
				}
			}
			in, n := persisted(api)
			switch {
			case batch == 0 && (len(p.Names(plan.Delete)) != 27 || n != 3):
				t.Errorf("deleted: plan %v, haproxy.cfg holds %d servers; want 3", p.Names(plan.Delete), n)
			case batch > 0 && (len(p.Names(plan.Maint)) != 27 || in != 3 || n != 30):
				t.Errorf("parked: plan %v, haproxy.cfg %d of %d in service; want 3 of 30", p.Names(plan.Maint), in, n)
			}
		})
	}
}

// TestReloadBeforeTheBurstIsWritten: more than MaxRuntimeAdds burst
// servers, added through the socket and not written yet, passed their
// checks; the plan puts them in service and takes out the three servers
// they replace. A reload between the read and the apply (the API's
// reload_delay after an earlier commit) dropped them: nothing is put in
// service or written, the error is a conflict, and the retry adds them
// again, gated, while the old servers keep their traffic. A reload after
// the socket put them in service and before the commit loads haproxy.cfg
// as it was: the old servers are back in service with it, and stay there
// until the new ones are checked again in the reloaded HAProxy: the backend
// is never without a server in service.
func TestReloadBeforeTheBurstIsWritten(t *testing.T) {
	// Deletions batched as shipped (HAPROXY_DELETE_BATCH=10), or not: the
	// old servers are parked in haproxy.cfg either way (a deletion beside
	// entries is deferred), the reload loads them in service again, and in
	// service and parked there, they are written back.
	for _, batch := range []int{10, 0} {
		t.Run(fmt.Sprint("delete batch ", batch), func(t *testing.T) { reloadBeforeTheBurstIsWritten(t, batch) })
	}
}

// replacingBurst sets up three old servers in service and a burst of
// more than MaxRuntimeAdds that replaces them, added through the socket
// and waiting for checks that have not passed yet (the old ones kept:
// make-before-break).
func replacingBurst(t *testing.T, batch int) (*dataplanetest.Server, *healthLog, *dataplane.Client, model.Backend) {
	t.Helper()
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api, passed: true}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl), dataplane.WithDeleteBatch(batch))
	old := want(srv("old-0", "127.0.2.1", model.Ready), srv("old-1", "127.0.2.2", model.Ready), srv("old-2", "127.0.2.3", model.Ready))
	syncOnce(t, c, old)
	syncOnce(t, c, old)
	w := burst(dataplane.MaxRuntimeAdds + 5)
	hl.dead = map[string]bool{}
	for _, s := range w.Servers {
		hl.dead[s.Name] = true
	}
	if p, _ := syncOnce(t, c, w); len(p.Waiting) != len(w.Servers) || len(p.HandingOver) != 3 {
		t.Fatalf("set-up: %+v", p)
	}
	return api, hl, c, w
}

func reloadBeforeTheBurstIsWritten(t *testing.T, batch int) {
	api, hl, c, w := replacingBurst(t, batch)
	inService := func() (names []string) {
		rs, _ := hl.ReadRuntime(context.Background(), "be")
		for _, s := range rs {
			if s.State == model.Ready && s.Up {
				names = append(names, s.Name)
			}
		}
		return names
	}
	hl.dead = nil
	plan1 := func() plan.Plan {
		cur, err := c.Read(context.Background(), "be")
		if err != nil {
			t.Fatal(err)
		}
		return plan.CalculateWith(cur, w, c.Policy())
	}

	p := plan1()
	hl.reload() // what haproxy.cfg holds: the old servers alone
	before := len(api.Requests())
	if _, err := c.Apply(context.Background(), p); failure.Of(err) != failure.Temporary || !strings.Contains(err.Error(), "no longer in the running HAProxy") {
		t.Fatalf("apply after a reload: %v, want a conflict", err)
	}
	for _, r := range api.Requests()[before:] {
		if r.Method != http.MethodGet {
			t.Errorf("%s %s: a write after the reload", r.Method, r.Path)
		}
	}
	if p, _ := syncOnce(t, c, w); len(p.Waiting) != len(w.Servers) || len(p.Names(plan.Add)) != len(w.Servers) {
		t.Errorf("retry: waiting %v, adds %v; want all added again, gated", p.Waiting, p.Names(plan.Add))
	}
	if got := inService(); len(got) != 3 {
		t.Fatalf("in service after the retry: %v, want the old servers", got)
	}

	// From here the running HAProxy loads haproxy.cfg only at a reload.
	hl.lazy = true
	p = plan1()
	api.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/transactions/") {
			hl.reload()
		}
		return false
	})
	applied, err := c.Apply(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	api.Intercept(nil)
	if want := map[int]string{0: "[old-0 old-1 old-2]", 10: "[]"}[batch]; fmt.Sprint(applied.Deferred) != want {
		t.Errorf("deferred %v, want %s: deleted beside entries, written parked", applied.Deferred, want)
	}
	if got := inService(); len(got) != 3 {
		t.Fatalf("in service after the reload: %v, want the old servers back", got)
	}
	for i := 0; i < 6 && len(inService()) != len(w.Servers); i++ {
		p, _ := syncOnce(t, c, w)
		if got := inService(); len(got) == 0 {
			t.Fatalf("sync %d emptied the backend: %+v", i, p)
		}
		if len(p.Loading) > 0 {
			hl.reload() // the one the commit asked for, which loads them parked
		}
	}
	if got := inService(); len(got) != len(w.Servers) || slices.ContainsFunc(got, func(n string) bool { return strings.HasPrefix(n, "old-") }) {
		t.Errorf("in the end in service: %v, want the burst alone", got)
	}
	wantAll := len(w.Servers) + 3 // the old ones parked, deleted with a batch
	if batch == 0 {
		syncOnce(t, c, w) // what the follow-up does for the deferred deletions
		wantAll = len(w.Servers)
	}
	if in, all := persisted(api); in != len(w.Servers) || all != wantAll {
		t.Errorf("haproxy.cfg: %d servers, %d in service; want %d, the burst in service", all, in, wantAll)
	}
}

// TestLeavingServersWaitForAnEntry: a plan puts 25 checked burst servers
// in service and takes out the three old ones they replace; the running
// HAProxy refuses every entry (a reload came between: their names are
// gone). The old servers are then neither taken out nor written out, and
// are reported as not done (parked or deleted: the result must not list
// them): the backend keeps them in service, and the next reconcile starts
// again.
func TestLeavingServersWaitForAnEntry(t *testing.T) {
	for _, batch := range []int{10, 0} {
		t.Run(fmt.Sprint("delete batch ", batch), func(t *testing.T) { leavingServersWaitForAnEntry(t, batch) })
	}
}

func leavingServersWaitForAnEntry(t *testing.T, batch int) {
	api, hl, c, w := replacingBurst(t, batch)
	hl.dead, hl.refuse = nil, map[string]bool{}
	for _, s := range w.Servers {
		hl.refuse[s.Name] = true
	}
	cur, err := c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	p := plan.CalculateWith(cur, w, c.Policy())
	if len(p.Names(plan.Maint))+len(p.Names(plan.Delete)) != 3 {
		t.Fatalf("plan %+v: want the old servers parked or deleted", p)
	}
	applied, err := c.Apply(context.Background(), p)
	var refused plan.ServerErrors
	if !errors.As(err, &refused) || len(refused) != len(w.Servers)+3 || len(applied.Deferred) != 0 {
		t.Fatalf("apply: %v, deferred %v; want the entries refused and the old servers reported not done", err, applied.Deferred)
	}
	for _, f := range refused {
		if strings.HasPrefix(f.Server, "old-") && !strings.Contains(f.Error, "kept as it was") {
			t.Errorf("%s: %s", f.Server, f.Error)
		}
	}
	rs, _ := hl.ReadRuntime(context.Background(), "be")
	for _, s := range rs {
		if strings.HasPrefix(s.Name, "old-") && s.State != model.Ready {
			t.Errorf("%s taken out (%s) though no server entered", s.Name, s.State)
		}
	}
	if in, all := persisted(api); in != 3 || all != 3 {
		t.Errorf("haproxy.cfg: %d servers, %d in service; want the old ones alone, in service", all, in)
	}
}

// TestServersOthersAddedAreLeftAlone: the running HAProxy holds a server
// haproxy.cfg lacks that this service did not add (a server-template's
// slot, which the API lists apart, or one added by hand): Read does not
// list it, and no plan touches it.
func TestServersOthersAddedAreLeftAlone(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api, passed: true}
	hl.set(model.Server{Name: "srv1", Address: "127.0.3.1", State: model.Ready})
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
	w := want(srv("node-a", "127.0.1.1", model.Ready))
	for range 3 {
		p, _ := syncOnce(t, c, w)
		for _, ch := range p.Changes {
			if ch.Name == "srv1" {
				t.Errorf("a plan changes srv1: %s", ch.Action)
			}
		}
	}
	cur, err := c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.Servers) != 1 || cur.Servers[0].Name != "node-a" {
		t.Errorf("read %+v, want node-a alone", cur.Servers)
	}
	if r := hl.running["srv1"]; r.State != model.Ready {
		t.Errorf("srv1 is %s, want left in service", r.State)
	}
	// Wanted under that name in a burst: refused, named, not changed.
	w = burst(dataplane.MaxRuntimeAdds + 5)
	hl.set(model.Server{Name: "node-05", Address: "127.0.3.5", State: model.Ready})
	cur, err = c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Apply(context.Background(), plan.CalculateWith(cur, w, c.Policy()))
	var refused plan.ServerErrors
	if !errors.As(err, &refused) || len(refused) != 1 || refused[0].Server != "node-05" {
		t.Errorf("apply: %v, want node-05 named as someone else's", err)
	}
	if r := hl.running["node-05"]; r.Address != "127.0.3.5" || r.State != model.Ready {
		t.Errorf("node-05 runs %+v, want left as it was", r.Server)
	}
}

// TestLeavingServersWhoseTransactionFailed: the socket took 27 servers
// out of traffic, then the transaction that was to persist them failed. The
// retry finds haproxy.cfg holding them in service while the running HAProxy
// does not, and writes them out again: a reload must not bring them back.
func TestLeavingServersWhoseTransactionFailed(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api, passed: true}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl), dataplane.WithDeleteBatch(100))
	all := burst(30)
	syncOnce(t, c, all)
	syncOnce(t, c, all)
	w := want(all.Servers[:3]...)
	cur, err := c.Read(context.Background(), "be")
	if err != nil {
		t.Fatal(err)
	}
	api.InjectFault(dataplanetest.Fault{PathPrefix: "/v3/services/haproxy/transactions/", Writes: true, Status: http.StatusInternalServerError, Times: 1})
	if _, err := c.Apply(context.Background(), plan.CalculateWith(cur, w, c.Policy())); failure.Of(err) != failure.Temporary {
		t.Fatalf("apply: %v, want the conflict", err)
	}
	if in, _ := persisted(api); in != 30 {
		t.Fatalf("set-up: haproxy.cfg holds %d in service, want all 30 (the transaction failed)", in)
	}
	if p, _ := syncOnce(t, c, w); len(p.Names(plan.Maint)) != 27 {
		t.Errorf("retry: %v, want the 27 written out again", p.Names(plan.Maint))
	}
	if in, n := persisted(api); in != 3 || n != 30 {
		t.Errorf("after the retry haproxy.cfg holds %d of %d in service, want 3", in, n)
	}
}

// TestEntriesWhoseCommitFailed: the socket put more than MaxRuntimeAdds
// servers in service, then the transaction that was to write them failed:
// haproxy.cfg lacks them (a burst) or parks them (servers back from
// maintenance), and a reload would take them out. The retry finds them in
// service and not written (model.Runtime.Unwritten), sends nothing to the
// socket again, and writes them in service.
func TestEntriesWhoseCommitFailed(t *testing.T) {
	txFault := dataplanetest.Fault{PathPrefix: "/v3/services/haproxy/transactions/", Writes: true, Status: http.StatusInternalServerError, Times: 1}
	for _, tt := range []struct {
		name  string
		setUp func(*testing.T, *dataplane.Client, *healthLog, model.Backend)
		// failing: a server whose check fails once the socket put it in
		// service: its running check rules it, and it holds up no write
		failing string
	}{
		{"a burst", func(t *testing.T, c *dataplane.Client, hl *healthLog, w model.Backend) {
			syncOnce(t, c, w)
		}, ""},
		{"a burst, one of them failing its check since", func(t *testing.T, c *dataplane.Client, hl *healthLog, w model.Backend) {
			syncOnce(t, c, w)
		}, "node-00"},
		{"back from maintenance", func(t *testing.T, c *dataplane.Client, hl *healthLog, w model.Backend) {
			hl.passed = true
			syncOnce(t, c, w)
			syncOnce(t, c, w)
			parked := want()
			for _, s := range w.Servers {
				s.State = model.Maint
				parked.Servers = append(parked.Servers, s)
			}
			syncOnce(t, c, parked)
			hl.passed = false
			syncOnce(t, c, w)
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
			hl := &healthLog{api: api}
			u, _ := url.Parse(api.URL)
			c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl))
			w := burst(dataplane.MaxRuntimeAdds + 5)
			tt.setUp(t, c, hl, w)
			if in, _ := persisted(api); in != 0 {
				t.Fatalf("set-up: haproxy.cfg holds %d in service", in)
			}
			hl.passed = true
			api.InjectFault(txFault)
			cur, err := c.Read(context.Background(), "be")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Apply(context.Background(), plan.CalculateWith(cur, w, c.Policy())); err == nil {
				t.Fatal("the failed commit was not reported")
			}
			if in, _ := persisted(api); in != 0 {
				t.Fatalf("haproxy.cfg holds %d in service after the failed commit", in)
			}
			if tt.failing != "" {
				hl.dead = map[string]bool{tt.failing: true}
			}
			socket := len(hl.applied)
			p, _ := syncOnce(t, c, w)
			if len(p.Names(plan.Update)) != len(w.Servers) {
				t.Errorf("retry: %+v, want every server written again", p)
			}
			for _, rp := range hl.applied[socket:] {
				for _, ch := range rp.Changes {
					if ch.Action == plan.Add || ch.Gate {
						t.Errorf("retry sent %s gate=%v %s to the socket; it serves already", ch.Action, ch.Gate, ch.Name)
					}
				}
			}
			if in, all := persisted(api); in != len(w.Servers) || all != len(w.Servers) {
				t.Errorf("haproxy.cfg: %d servers, %d in service; want all, in service", all, in)
			}
			if p, a := syncOnce(t, c, w); p.HasChanges() || a.Writes != 0 {
				t.Errorf("last sync: %+v", p)
			}
		})
	}
}

func burst(n int) model.Backend {
	var servers []model.Server
	for i := range n {
		servers = append(servers, srv(fmt.Sprintf("node-%02d", i), fmt.Sprintf("127.0.1.%d", i+1), model.Ready))
	}
	return want(servers...)
}

// persisted counts the servers of "be" in haproxy.cfg and those written in
// service: what the reload a commit causes will load.
func persisted(api *dataplanetest.Server) (in, all int) {
	for _, s := range api.Servers("be") {
		all++
		if s.Maintenance != "enabled" && s.Weight != nil && *s.Weight > 0 {
			in++
		}
	}
	return in, all
}
