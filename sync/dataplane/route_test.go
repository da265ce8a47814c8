package dataplane

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

var routeCheck = model.Check{Inter: 1500 * time.Millisecond, Rise: 2, Fall: 2}

// server is a server as the plan sees it, in state st; cfg, when set, is
// the state haproxy.cfg holds it in (its Source, as Read keeps it).
func server(name string, st model.State, cfg model.State) *model.Server {
	s := &model.Server{Name: name, Address: "192.0.2.1", Port: 30080, Weight: 1, State: st, Check: routeCheck}
	if cfg != "" {
		m, err := serverModel(model.Server{Name: name, Address: s.Address, Port: s.Port, Weight: 1, State: cfg, Check: routeCheck}, nil)
		if err != nil {
			panic(err)
		}
		b, _ := json.Marshal(m)
		s.Source = rawServer(b)
	}
	return s
}

func adds(n int) []plan.Change {
	return numbered(n, "new-", func(_ int, name string) plan.Change {
		return plan.Change{Action: plan.Add, Name: name, New: server(name, model.Ready, ""), Gate: true}
	})
}

// numbered is n changes, made by change from the names prefix0, prefix1...
func numbered(n int, prefix string, change func(i int, name string) plan.Change) []plan.Change {
	var out []plan.Change
	for i := range n {
		out = append(out, change(i, fmt.Sprint(prefix, i)))
	}
	return out
}

// entries are servers a burst wrote in maintenance, now put in service.
func entries(n int) []plan.Change {
	return numbered(n, "in-", func(_ int, name string) plan.Change {
		return plan.Change{Action: plan.Update, Name: name, Old: server(name, model.Drain, model.Maint), New: server(name, model.Ready, "")}
	})
}

// leavingChanges are n servers in service taken out of traffic: parked and
// drained in turn.
func leavingChanges(n int) []plan.Change {
	return numbered(n, "out-", func(i int, name string) plan.Change {
		a, st := plan.Maint, model.Maint
		if i%2 == 1 {
			a, st = plan.Drain, model.Drain
		}
		return plan.Change{Action: a, Name: name, Old: server(name, model.Ready, model.Ready), New: server(name, st, "")}
	})
}

// heldLeaving are n servers taken out of traffic into the state
// haproxy.cfg holds them in already (a rezone back, the parked server of
// the zone left before): the socket alone carries them.
func heldLeaving(n int) []plan.Change {
	return numbered(n, "held-", func(_ int, name string) plan.Change {
		return plan.Change{Action: plan.Maint, Name: name, Old: server(name, model.Ready, model.Maint), New: server(name, model.Maint, "")}
	})
}

// socketOnly is a server the running HAProxy holds and haproxy.cfg does
// not (a burst's), in state st.
func socketOnly(name string, st model.State) *model.Server {
	s := server(name, st, "")
	s.Runtime = &model.Runtime{Unpersisted: true, CheckRunning: true, CheckPassed: true}
	return s
}

func loadingServer(name string) *model.Server {
	s := server(name, model.Ready, model.Ready)
	s.Runtime = &model.Runtime{Loading: true}
	return s
}

// summary names each route's changes: "puts:a,b gated:c".
func (r routes) summary() string {
	var parts []string
	for _, l := range []struct {
		name string
		chs  []plan.Change
	}{{"addGated", r.addGated}, {"gated", r.gated}, {"puts", r.puts}, {"onSocket", r.onSocket}, {"burst", r.burst}, {"first", r.first}, {"structural", r.structural}} {
		if len(l.chs) == 0 {
			continue
		}
		var names []string
		for _, ch := range l.chs {
			names = append(names, ch.Name)
		}
		if len(names) > 3 {
			names = []string{fmt.Sprint(len(names))}
		}
		parts = append(parts, l.name+":"+strings.Join(names, ","))
	}
	return strings.Join(parts, " ")
}

// TestRoute: how each kind of change reaches HAProxy, with and without the
// runtime socket (the table of README's "How the Data Plane API driver
// applies changes").
func TestRoute(t *testing.T) {
	moved := *server("m", model.Ready, "")
	moved.Address = "192.0.2.9"
	slower := *server("c", model.Ready, "")
	slower.Check.Inter = 5 * time.Second
	for _, tt := range []struct {
		name    string
		changes []plan.Change
		socket  bool
		want    string
	}{
		{"few new servers, socket: added in maintenance, then gated", adds(2), true, "addGated:new-0,new-1"},
		{"few new servers, no socket: the transaction", adds(2), false, "structural:new-0,new-1"},
		{"a burst, socket: through the socket alone", adds(MaxRuntimeAdds + 1), true, "burst:21"},
		{"a burst, no socket: the transaction", adds(MaxRuntimeAdds + 1), false, "structural:21"},
		{"a weight change haproxy.cfg does not hold: a versioned PUT", []plan.Change{{Action: plan.Update, Name: "w",
			Old: server("w", model.Ready, model.Ready), New: func() *model.Server { s := server("w", model.Ready, ""); s.Weight = 3; return s }()}}, true, "puts:w"},
		{"drain that haproxy.cfg holds already: the socket alone", []plan.Change{{Action: plan.Drain, Name: "d",
			Old: server("d", model.Ready, model.Drain), New: server("d", model.Drain, "")}}, true, "onSocket:d"},
		{"the same without a socket: a PUT", []plan.Change{{Action: plan.Drain, Name: "d",
			Old: server("d", model.Ready, model.Drain), New: server("d", model.Drain, "")}}, false, "puts:d"},
		{"an existing server gated, socket", []plan.Change{{Action: plan.Drain, Name: "m", Old: server("m", model.Ready, model.Ready), New: &moved, Gate: true}}, true, "gated:m"},
		{"a check change: the transaction", []plan.Change{{Action: plan.Update, Name: "c", Old: server("c", model.Ready, model.Ready), New: &slower}}, true, "structural:c"},
		{"a delete, socket: parked on the socket, deleted by the transaction", []plan.Change{{Action: plan.Delete, Name: "x", Old: server("x", model.Ready, model.Ready)}}, true, "onSocket:x structural:x"},
		{"a delete, no socket: parked by a PUT, deleted by the transaction", []plan.Change{{Action: plan.Delete, Name: "x", Old: server("x", model.Ready, model.Ready)}}, false, "puts:x structural:x"},
		{"a delete of a server not running yet: the transaction alone", []plan.Change{{Action: plan.Delete, Name: "x", Old: loadingServer("x")}}, true, "structural:x"},
		{"a few servers leaving traffic: a PUT each", leavingChanges(MaxRuntimeAdds), true, "puts:20"},
		{"many servers leaving traffic, socket: the socket at once, then the transaction", leavingChanges(MaxRuntimeAdds + 1), true, "onSocket:21 structural:21"},
		{"many servers leaving traffic, no socket: a PUT each", leavingChanges(MaxRuntimeAdds + 1), false, "puts:21"},
		{"many servers leaving traffic, haproxy.cfg holding all but 20: a PUT each, the rest on the socket", append(leavingChanges(MaxRuntimeAdds), heldLeaving(5)...), true, "puts:20 onSocket:5"},
		{"21 servers leaving traffic to write beside held ones: the socket at once, then the transaction", append(leavingChanges(MaxRuntimeAdds+1), heldLeaving(2)...), true, "onSocket:23 structural:21"},
		{"a delete haproxy.cfg parks already: parked on the socket", []plan.Change{{Action: plan.Delete, Name: "x", Old: server("x", model.Ready, model.Maint)}}, true, "onSocket:x structural:x"},
		{"a parked delete: the transaction alone", []plan.Change{{Action: plan.Delete, Name: "x", Old: server("x", model.Maint, model.Maint)}}, true, "structural:x"},
		{"a few burst servers checked: a PUT each", entries(2), true, "puts:in-0,in-1"},
		{"many parked servers checked: the socket, then the transaction", entries(MaxRuntimeAdds + 1), true, "first:21 structural:21"},
		{"a burst server checked: the socket, then the transaction adds it", []plan.Change{{Action: plan.Update, Name: "b",
			Old: socketOnly("b", model.Drain), New: server("b", model.Ready, "")}}, true, "first:b structural:b"},
		{"a burst server gated again, deleted, parked: the socket alone", []plan.Change{
			{Action: plan.Drain, Name: "g", Old: socketOnly("g", model.Drain), New: server("g", model.Drain, ""), Gate: true},
			{Action: plan.Delete, Name: "x", Old: socketOnly("x", model.Maint)},
			{Action: plan.Maint, Name: "y", Old: socketOnly("y", model.Drain), New: server("y", model.Maint, "")}}, true, "onSocket:g,x,y"},
		{"a burst server checked and one leaving: the leaving one follows it", []plan.Change{
			{Action: plan.Update, Name: "b", Old: socketOnly("b", model.Drain), New: server("b", model.Ready, "")},
			{Action: plan.Delete, Name: "x", Old: server("x", model.Ready, model.Ready)},
			{Action: plan.Maint, Name: "y", Old: server("y", model.Ready, model.Ready), New: server("y", model.Maint, "")}}, true, "first:b,x,y structural:x,b,y"},
		{"servers checked and others leaving: the entries first", append(entries(2), leavingChanges(MaxRuntimeAdds+1)...), true, "puts:in-0,in-1 onSocket:21 structural:21"},
		{"many checked and others leaving: the leaving follow the entries onto the socket, before the commit", append(entries(MaxRuntimeAdds+1), plan.Change{Action: plan.Delete, Name: "x", Old: server("x", model.Ready, model.Ready)}), true, "first:22 structural:22"},
		{"many checked and a few leaving by PUT: those follow the entries too", append(entries(MaxRuntimeAdds+1), leavingChanges(3)...), true, "first:24 structural:24"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := route(plan.Plan{Backend: "be", Changes: tt.changes}, tt.socket, false, true).summary(); got != tt.want {
				t.Errorf("%s, want %s", got, tt.want)
			}
		})
	}
	r := route(plan.Plan{Changes: []plan.Change{{Action: plan.Delete, Name: "x", Old: server("x", model.Ready, model.Maint)}}}, true, false, true)
	if r.onSocket[0].Action != plan.Maint || r.onSocket[0].New.State != model.Maint {
		t.Errorf("a delete on the socket is %s to %s, want parked only", r.onSocket[0].Action, r.onSocket[0].New.State)
	}
	// A server in service deleted beside entries is written parked, and
	// deleted by a later reconcile; one parked already is deleted.
	r = route(plan.Plan{Changes: append(entries(MaxRuntimeAdds+1),
		plan.Change{Action: plan.Delete, Name: "x", Old: server("x", model.Ready, model.Ready)},
		plan.Change{Action: plan.Delete, Name: "p", Old: server("p", model.Maint, model.Maint)})}, true, false, true)
	for _, ch := range r.structural {
		if ch.Name == "x" && (ch.Action != plan.Maint || ch.New.State != model.Maint) || ch.Name == "p" && ch.Action != plan.Delete {
			t.Errorf("beside entries, %s is written as %s", ch.Name, ch.Action)
		}
	}
	if fmt.Sprint(r.deferred) != "[x]" {
		t.Errorf("deferred %v, want [x]", r.deferred)
	}
	r = route(plan.Plan{Changes: []plan.Change{{Action: plan.Update, Name: "b", Old: socketOnly("b", model.Drain), New: server("b", model.Ready, "")}}}, true, false, true)
	if tx := r.structural[0]; tx.Action != plan.Add || tx.Gate || tx.New.State != model.Ready {
		t.Errorf("a burst server checked is written as %s gate=%v %s, want added in service", tx.Action, tx.Gate, tx.New.State)
	}
	if r.first[0].Action != plan.Update {
		t.Errorf("on the socket it is %s, want the plan's update", r.first[0].Action)
	}
}

// TestRenewable: a returning server is deleted and added again through the
// socket only when nothing of it would be lost: parked with no sessions,
// its id known, running, and haproxy.cfg holding only what this service
// writes.
func TestRenewable(t *testing.T) {
	parked := func(mut func(*model.Server)) plan.Change {
		old := server("r", model.Maint, model.Maint)
		old.Runtime = &model.Runtime{ID: 7}
		if mut != nil {
			mut(old)
		}
		return plan.Change{Action: plan.Drain, Name: "r", Old: old, New: server("r", model.Drain, ""), Gate: true}
	}
	withField := func(k, v string) func(*model.Server) {
		return func(s *model.Server) {
			var m map[string]any
			_ = json.Unmarshal(s.Source.(rawServer), &m)
			m[k] = v
			b, _ := json.Marshal(m)
			s.Source = rawServer(b)
		}
	}
	for _, tt := range []struct {
		name string
		ch   plan.Change
		want bool
	}{
		{"parked, written by this service", parked(nil), true},
		{"with sessions", parked(func(s *model.Server) { s.Runtime.Sessions = 1 }), false},
		{"id unknown", parked(func(s *model.Server) { s.Runtime.ID = 0 }), false},
		{"not running yet", parked(func(s *model.Server) { s.Runtime.Loading = true }), false},
		{"in service", parked(func(s *model.Server) { s.State = model.Ready }), false},
		{"haproxy.cfg gives it ssl", parked(withField("ssl", "enabled")), false},
		{"haproxy.cfg gives it an id", parked(withField("id", "7")), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := renewable(tt.ch); got != tt.want {
				t.Errorf("renewable = %v, want %v", got, tt.want)
			}
		})
	}
}
