package dataplane

import (
	"fmt"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// TestMovesOnSocket: a gated server the running HAProxy holds elsewhere
// than the plan wants it is moved through the socket (gate, then "set
// server addr"), whatever the API did with the PUT; one it holds where
// wanted is gated where it runs; one it does not hold yet is left to the
// add through the socket or the reload.
func TestMovesOnSocket(t *testing.T) {
	at := func(s *model.Server, addr string, port, checkPort int) *model.Server {
		c := *s
		c.Address, c.Port, c.Check.Port = addr, port, checkPort
		return &c
	}
	inService := server("s", model.Ready, model.Ready)
	parked := server("s", model.Maint, model.Maint)
	gated := server("s", model.Drain, "")
	for _, tt := range []struct {
		name     string
		old, new *model.Server
		want     bool
	}{
		{"in service, same address: gated where it runs", inService, gated, false},
		{"in service, new address (a pod recreated at a new IP)", inService, at(gated, "192.0.2.9", 30080, 0), true},
		{"in service, new port", inService, at(gated, "192.0.2.1", 30081, 0), true},
		{"in service, new check port", inService, at(gated, "192.0.2.1", 30080, 8080), true},
		{"parked where it runs, new address", parked, at(gated, "192.0.2.9", 30080, 0), true},
		{"parked, same address (back from maintenance)", parked, gated, false},
		{"not running yet (loading): the socket adds it at its address", loadingServer("s"), at(gated, "192.0.2.9", 30080, 0), false},
		{"no old server (an add)", nil, gated, false},
	} {
		ch := plan.Change{Action: plan.Drain, Name: "s", Old: tt.old, New: tt.new, Gate: true}
		if got := movesOnSocket(ch); got != tt.want {
			t.Errorf("%s: movesOnSocket = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestRunningAt: Read reports a server at the address it runs at when
// haproxy.cfg holds a move the running HAProxy has not made (a reload the
// API asked for is still to run), so that a check passed at the old
// address never counts for the new one.
func TestRunningAt(t *testing.T) {
	srv := func(addr string, port int) model.Server { return model.Server{Name: "s", Address: addr, Port: port} }
	for _, tt := range []struct {
		name         string
		cfg, running model.Server
		want         string
	}{
		{"the same", srv("10.0.0.1", 80), srv("10.0.0.1", 80), "10.0.0.1:80"},
		{"moved in haproxy.cfg, not yet running there", srv("10.0.0.2", 80), srv("10.0.0.1", 80), "10.0.0.1:80"},
		{"new port in haproxy.cfg", srv("10.0.0.1", 81), srv("10.0.0.1", 80), "10.0.0.1:80"},
		{"IPv6 written two ways", srv("2001:db8::1", 80), srv("2001:db8:0::1", 80), "2001:db8::1:80"},
		{"IPv4-mapped IPv6 in HAProxy's view", srv("10.0.0.1", 80), srv("::ffff:10.0.0.1", 80), "10.0.0.1:80"},
		{"a host name in haproxy.cfg: HAProxy resolved it", srv("db.example", 80), srv("10.0.0.1", 80), "db.example:80"},
		{"no running address", srv("10.0.0.1", 80), srv("", 0), "10.0.0.1:80"},
	} {
		addr, port := runningAt(tt.cfg, tt.running)
		if got := fmt.Sprintf("%s:%d", addr, port); got != tt.want {
			t.Errorf("%s: runningAt = %s, want %s", tt.name, got, tt.want)
		}
	}
}
