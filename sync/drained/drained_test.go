package drained

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// reader is a target whose backend is what read returns.
type reader struct {
	name string
	read func() (model.Backend, error)
}

func (r reader) Name() string { return r.name }
func (r reader) Read(context.Context, string) (model.Backend, error) {
	return r.read()
}

func fixed(servers ...model.Server) func() (model.Backend, error) {
	return func() (model.Backend, error) { return model.Backend{Name: "be", Servers: servers}, nil }
}

func srv(name, addr string, st model.State, sessions int) model.Server {
	return model.Server{Name: name, Address: addr, Port: 80, State: st, Runtime: &model.Runtime{Sessions: sessions}}
}

func TestCheck(t *testing.T) {
	byName := Query{Server: "node-a"}
	byIP := Query{Address: netip.MustParseAddr("10.244.0.1")}
	blind := srv("node-a", "127.0.0.1", model.Drain, 0)
	blind.Runtime = nil
	for _, tt := range []struct {
		name    string
		q       Query
		targets []func() (model.Backend, error)
		status  string
		states  []string // per target: state/sessions/drained
	}{
		{"in drain, no session: drained", byName, []func() (model.Backend, error){fixed(srv("node-a", "127.0.0.1", model.Drain, 0))},
			StatusDrained, []string{"drain 0 true"}},
		{"in maintenance, no session: drained", byName, []func() (model.Backend, error){fixed(srv("node-a", "127.0.0.1", model.Maint, 0))},
			StatusDrained, []string{"maint 0 true"}},
		{"a session left: waiting", byName, []func() (model.Backend, error){fixed(srv("node-a", "127.0.0.1", model.Drain, 1))},
			StatusWaiting, []string{"drain 1 false"}},
		{"still in rotation, no session: waiting", byName, []func() (model.Backend, error){fixed(srv("node-a", "127.0.0.1", model.Ready, 0))},
			StatusWaiting, []string{"ready 0 false"}},
		{"absent from every target: absent (a typo, or gone: the caller decides)", byName, []func() (model.Backend, error){fixed(srv("node-b", "127.0.0.2", model.Ready, 3))},
			StatusAbsent, []string{"absent 0 true"}},
		{"a pod IP in node mode: absent", byIP, []func() (model.Backend, error){fixed(srv("node-a", "127.0.1.1", model.Ready, 0))},
			StatusAbsent, []string{"absent 0 true"}},
		{"absent from one target, drained on the other: drained", byName, []func() (model.Backend, error){
			fixed(), fixed(srv("node-a", "127.0.0.1", model.Maint, 0))},
			StatusDrained, []string{"absent 0 true", "maint 0 true"}},
		{"by address (pod mode)", byIP, []func() (model.Backend, error){fixed(srv("web-1", "10.244.0.1", model.Drain, 0), srv("web-2", "10.244.0.2", model.Ready, 5))},
			StatusDrained, []string{"drain 0 true"}},
		{"every target must agree", byName, []func() (model.Backend, error){
			fixed(srv("node-a", "127.0.0.1", model.Maint, 0)), fixed(srv("node-a", "127.0.0.1", model.Drain, 2))},
			StatusWaiting, []string{"maint 0 true", "drain 2 false"}},
		{"a target that cannot be read is not drained", byName, []func() (model.Backend, error){
			fixed(), func() (model.Backend, error) { return model.Backend{}, errors.New("connection refused") }},
			StatusWaiting, []string{"absent 0 true", "unknown -1 false"}},
		{"no runtime view: sessions unknown, never drained", byName, []func() (model.Backend, error){fixed(blind)},
			StatusWaiting, []string{"drain -1 false"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &Checker{Backends: []string{"be"}}
			for i, r := range tt.targets {
				c.Targets = append(c.Targets, reader{name: string(rune('a' + i)), read: r})
			}
			a := c.Check(context.Background(), tt.q)
			if a.Status != tt.status || len(a.Targets) != len(tt.states) {
				t.Fatalf("answer %+v, want %s with %v", a, tt.status, tt.states)
			}
			for i, ts := range a.Targets {
				if got := ts.State + " " + strconv.Itoa(ts.Sessions) + " " + strconv.FormatBool(ts.Drained); got != tt.states[i] {
					t.Errorf("target %d: %s, want %s (%+v)", i, got, tt.states[i], ts)
				}
				if !ts.Drained && ts.Sessions < 0 && ts.Error == "" {
					t.Errorf("target %d: not drained, sessions unknown, and no error says why", i)
				}
			}
		})
	}
}

// TestWaitUntilDrainedOrBound: Wait returns as soon as the sessions end,
// and with the last answer when the caller's bound comes first.
func TestWaitUntilDrainedOrBound(t *testing.T) {
	var sessions atomic.Int64
	sessions.Store(2)
	c := &Checker{Backends: []string{"be"}, Poll: 5 * time.Millisecond, Targets: []Reader{reader{name: "a", read: func() (model.Backend, error) {
		return fixed(srv("node-a", "127.0.0.1", model.Drain, int(sessions.Load())))()
	}}}}
	if a := c.Wait(context.Background(), Query{Server: "node-a"}, 0); a.Drained() || a.Targets[0].Sessions != 2 {
		t.Fatalf("no bound, one check: %+v, want waiting with 2 sessions", a)
	}
	if a := c.Wait(context.Background(), Query{Server: "node-a"}, 50*time.Millisecond); a.Drained() || a.Targets[0].Sessions != 2 {
		t.Fatalf("bound reached: %+v, want waiting with 2 sessions", a)
	}
	go func() { time.Sleep(20 * time.Millisecond); sessions.Store(0) }()
	if a := c.Wait(context.Background(), Query{Server: "node-a"}, time.Minute); !a.Drained() {
		t.Fatalf("after the sessions ended: %+v", a)
	}
}

// TestWaitAbsentThenGone: a server no target has at the first check is
// answered absent at once (no wait); one that was there and then went
// (deleted once drained) is drained.
func TestWaitAbsentThenGone(t *testing.T) {
	var gone atomic.Bool
	c := &Checker{Backends: []string{"be"}, Poll: 5 * time.Millisecond, Targets: []Reader{reader{name: "a", read: func() (model.Backend, error) {
		if gone.Load() {
			return fixed()()
		}
		return fixed(srv("node-a", "127.0.0.1", model.Drain, 1))()
	}}}}
	start := time.Now()
	if a := c.Wait(context.Background(), Query{Server: "nodee-a"}, time.Minute); a.Status != StatusAbsent || time.Since(start) > 10*time.Second {
		t.Fatalf("a name no target has: %+v after %s, want absent at once", a, time.Since(start))
	}
	go func() { time.Sleep(20 * time.Millisecond); gone.Store(true) }()
	if a := c.Wait(context.Background(), Query{Server: "node-a"}, time.Minute); a.Status != StatusDrained {
		t.Fatalf("deleted while waited for: %+v, want drained", a)
	}
}

// TestReadErrorIsWrappedOnce: the driver's error names the backend; the
// entry does not repeat it.
func TestReadErrorIsWrappedOnce(t *testing.T) {
	c := &Checker{Backends: []string{"ingress-nginx"}, Targets: []Reader{reader{name: "a", read: func() (model.Backend, error) {
		return model.Backend{}, errors.New("read backend ingress-nginx: connection refused")
	}}}}
	a := c.Check(context.Background(), Query{Server: "node-a"})
	if got := a.Targets[0].Error; got != "read backend ingress-nginx: connection refused" {
		t.Errorf("error %q", got)
	}
}

// TestCheckOwnServersOnly: with CLUSTER_NAME a Node's server is named with
// the prefix (and, a backup, the suffix); another cluster's server, even
// at the same address, is not the one asked for.
func TestCheckOwnServersOnly(t *testing.T) {
	c := &Checker{Backends: []string{"be"}, Owner: "blue-",
		Names: func(node string) []string { return []string{"blue-" + node, "blue-" + node + "_bk"} },
		Targets: []Reader{reader{name: "t", read: fixed(
			srv("green-node-a", "10.0.0.1", model.Ready, 4), srv("blue-node-a", "10.0.0.1", model.Maint, 0),
			srv("blue-node-b_bk", "10.0.0.2", model.Ready, 1))}}}
	for _, tt := range []struct {
		q      Query
		server string
		status string
	}{
		{Query{Server: "node-a"}, "blue-node-a", StatusDrained},
		{Query{Address: netip.MustParseAddr("10.0.0.1")}, "blue-node-a", StatusDrained},
		{Query{Server: "node-b"}, "blue-node-b_bk", StatusWaiting},
		{Query{Server: "green-node-a"}, "", StatusAbsent},
	} {
		a := c.Check(context.Background(), tt.q)
		if a.Status != tt.status || len(a.Targets) != 1 || a.Targets[0].Server != tt.server {
			t.Errorf("%+v: %+v, want %s on %q", tt.q, a, tt.status, tt.server)
		}
	}
}

// TestTextLogLine: GET /drained's log line with LOG_FORMAT=text names each
// target's state in words, not as a Go struct.
func TestTextLogLine(t *testing.T) {
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("drained", "targets", []TargetState{
		{Target: "http://127.0.0.1:5555", Backend: "be", Server: "node-a", State: "drain", Sessions: 2},
		{Target: "unix:///admin.sock", Backend: "be", State: Unknown, Sessions: -1, Error: "connection refused"},
	})
	want := `targets="[http://127.0.0.1:5555 be node-a drain, 2 sessions unix:///admin.sock be - unknown, -1 sessions (connection refused)]"`
	if !strings.Contains(buf.String(), want) {
		t.Errorf("line %s\nwant %s", buf.String(), want)
	}
}
