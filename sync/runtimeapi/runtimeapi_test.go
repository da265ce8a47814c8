package runtimeapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

const header = "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port\n"

func TestParseServersState(t *testing.T) {
	reply := header +
		"3 be 1 ready 127.0.0.1 2 0 1 1 2 6 3 4 6 0 0 0 - 8080 - 0 0 - - 0\n" +
		"3 be 2 drained 127.0.0.2 2 8 5 3 1 6 3 4 6 0 0 0 - 81 - 0 0 - - 0\n" +
		"3 be 3 weight0 127.0.0.3 2 0 0 1 1 6 3 4 6 0 0 0 - 82 - 0 0 - - 0\n" +
		"3 be 4 maint 127.0.0.4 0 1 1 1 1 6 3 4 6 0 0 0 - 83 - 0 0 - - 0\n" +
		"3 be 5 v6 ::1 0 33 1 1 1 6 3 4 6 0 0 0 - 84 - 0 0 - - 0\n" +
		"3 be 6 cfgdisabled 127.0.0.6 2 4 1 1 1 6 3 4 6 0 0 0 - 85 - 0 0 - - 0\n" +
		"4 other 1 x 127.0.0.9 2 0 1 1 2 6 3 4 6 0 0 0 - 80 - 0 0 - - 0\n\n"
	got, err := ParseServersState(reply, "be", 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i].Runtime.ID != i+1 {
			t.Errorf("%s: id %d, want %d", got[i].Name, got[i].Runtime.ID, i+1)
		}
		got[i].Runtime = nil // checked in TestParseServersStateChecks
	}
	want := []model.Server{
		{Name: "ready", Address: "127.0.0.1", Port: 8080, Weight: 1, State: model.Ready, Up: true},
		{Name: "drained", Address: "127.0.0.2", Port: 81, Weight: 5, State: model.Drain, Up: true},
		{Name: "weight0", Address: "127.0.0.3", Port: 82, Weight: 0, State: model.Drain, Up: true},
		{Name: "maint", Address: "127.0.0.4", Port: 83, Weight: 1, State: model.Maint},
		{Name: "v6", Address: "::1", Port: 84, Weight: 1, State: model.Maint},
		// Added "disabled", then set ready: only the config bit 0x04 stays.
		{Name: "cfgdisabled", Address: "127.0.0.6", Port: 85, Weight: 1, State: model.Ready, Up: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	// Field 16 says whether the id was given: from idBase, by this driver.
	ours, err := ParseServersState(header+
		"3 be 16777216 added 127.0.0.1 2 0 1 1 2 6 3 4 6 0 0 1 - 8080 - 0 0 - - 0\n"+
		"3 be 16777217 notforced 127.0.0.1 2 0 1 1 2 6 3 4 6 0 0 0 - 8080 - 0 0 - - 0\n"+
		"3 be 7 given 127.0.0.1 2 0 1 1 2 6 3 4 6 0 0 1 - 8080 - 0 0 - - 0\n", "be", 2, 2)
	if err != nil || len(ours) != 3 || !ours[0].Runtime.Ours || ours[1].Runtime.Ours || ours[2].Runtime.Ours {
		t.Errorf("ours: %v %+v, want only the first (a given id from 2^24)", err, ours)
	}
	for _, bad := range []string{"Can't find backend.\n", "", "1\n3 be 1 short\n", header + "3 be 1 s x 2 x 1 1 2 6 3 4 6 0 0 0 - 80 - 0 0 - - 0\n"} {
		if _, err := ParseServersState(bad, "be", 2, 2); err == nil {
			t.Errorf("no error for %q", bad)
		}
	}
}

// TestParseServersStateChecks reads check and timing fields as seen on
// HAProxy 2.6.12 and 3.0.11 (fields 9 to 13: seconds since the last change,
// check status — 6 L4OK, 8 L4CON, 15 L7OK, 17 L7STS —, result, health,
// check state).
func TestParseServersStateChecks(t *testing.T) {
	reply := header +
		"3 be 1 fresh 127.0.0.1 0 1 1 1 1 1 0 0 2 0 0 0 - 80 - 0 0 - - 0\n" + // added, check not enabled
		"3 be 2 inmaint 127.0.0.1 0 1 1 1 3 6 3 3 6 0 0 0 - 80 - 0 0 - - 0\n" + // in maint, check running, health reached rise
		"3 be 3 onepass 127.0.0.1 0 1 1 1 3 6 3 1 6 0 0 0 - 80 - 0 0 - - 0\n" + // one pass of two
		"3 be 4 gated 127.0.0.1 0 8 1 1 1 6 3 1 6 0 0 0 - 80 - 0 0 - - 0\n" + // drain, health forced down
		"3 be 5 earned 127.0.0.1 2 8 1 1 5 6 3 4 6 0 0 0 - 80 - 0 0 - - 0\n" + // drain, UP by checks
		"3 be 6 parked 127.0.0.1 0 1 1 1 75 6 3 4 14 0 0 0 - 80 - 0 0 - - 0\n" + // maint, check paused
		"3 be 7 dead 127.0.0.1 0 8 1 1 5 8 2 0 6 0 0 0 - 80 - 0 0 - - 0\n" + // drain, L4CON failed
		"3 be 8 http 127.0.0.1 2 0 1 1 5 15 3 4 6 0 0 0 - 80 - 0 0 - - 0\n" + // ready, L7OK (option httpchk)
		"3 be 9 http503 127.0.0.1 0 0 1 1 5 17 2 0 6 0 0 0 - 80 - 0 0 - - 0\n" + // ready, L7STS (a 503)
		"3 be 10 leftmaint 127.0.0.1 2 8 1 1 0 6 3 2 6 0 0 0 - 80 - 0 0 - - 0\n" + // drain, just out of maint: health rise, the old result
		"3 be 11 readyout 127.0.0.1 2 0 1 1 0 6 3 2 6 0 0 0 - 80 - 0 0 - - 0\n" // the same, put in service: its running check rules
	got, err := ParseServersState(reply, "be", 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	type rt struct{ running, passed, l4 bool }
	want := map[string]rt{"fresh": {false, false, false}, "inmaint": {true, true, true}, "onepass": {true, false, true},
		"gated": {true, false, true}, "earned": {true, true, true}, "parked": {false, true, true}, "dead": {true, false, false},
		"http": {true, true, false}, "http503": {true, false, false}, "leftmaint": {true, false, true}, "readyout": {true, true, true}}
	for _, s := range got {
		if w := want[s.Name]; s.Runtime == nil || s.Runtime.CheckRunning != w.running || s.Runtime.CheckPassed != w.passed || s.Runtime.CheckL4 != w.l4 {
			t.Errorf("%s: %+v, want running %v passed %v L4 %v", s.Name, s.Runtime, w.running, w.passed, w.l4)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d servers, want %d", len(got), len(want))
	}
	failed := map[string]bool{"dead": true, "http503": true}
	for _, s := range got {
		if s.Runtime.CheckStale != (s.Name == "leftmaint") {
			t.Errorf("%s: stale %v", s.Name, s.Runtime.CheckStale)
		}
		if s.Runtime.CheckFailed != failed[s.Name] {
			t.Errorf("%s: failed %v", s.Name, s.Runtime.CheckFailed)
		}
	}
	if got[5].Runtime.Since != 75*time.Second {
		t.Errorf("since = %v", got[5].Runtime.Since)
	}
}

// script is a fake runtime socket: it answers commands from a table and
// records them; unknown commands get HAProxy's "Unknown command" reply. A
// connection that starts with "prompt" is interactive, as HAProxy's: every
// answer ends with a blank line and "> ", and one command follows another
// until the client closes.
type script struct {
	mu      sync.Mutex
	replies map[string]string
	// prefixed answers the commands that begin with a key and have no
	// reply of their own.
	prefixed map[string]string
	got      []string
}

func serveScript(t *testing.T, replies map[string]string) (*script, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &script{replies: replies}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s, "unix://" + path
}

func (s *script) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	line, _ := r.ReadString('\n')
	if strings.TrimSpace(line) != "prompt" {
		_, _ = c.Write([]byte(s.answer(line) + "\n"))
		return
	}
	_, _ = c.Write([]byte("\n> "))
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		a := strings.TrimRight(s.answer(line), "\n")
		if a != "" {
			a += "\n"
		}
		if _, err := c.Write([]byte(a + "\n> ")); err != nil {
			return
		}
	}
}

func (s *script) answer(line string) string {
	cmd := strings.TrimSpace(line)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, cmd)
	reply, ok := s.replies[cmd]
	for prefix, r := range s.prefixed {
		if !ok && strings.HasPrefix(cmd, prefix) {
			reply, ok = r, true
		}
	}
	if !ok {
		reply = "Unknown command, but maybe one of the following ones is a better match:\n"
	}
	return reply
}

func (s *script) commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

var chk = model.Check{Inter: 2 * time.Second, Rise: 2, Fall: 3}

func TestApplyCommandsAndReplies(t *testing.T) {
	sc, u := serveScript(t, map[string]string{
		"show info":             "Name: HAProxy\nVersion: 3.0.11-9e587df\nRelease_date: 2025/07/01\n",
		"show servers state be": header + "3 be 7 n2 127.0.0.2 2 0 1 1 2 6 3 4 6 0 0 0 - 80 - 0 0 - - 0\n",
		"add server be/n1 127.0.0.1:80 weight 2 check inter 2000ms rise 2 fall 3 id 16777216 send-proxy-v2 check-send-proxy": "New server registered.\n",
		"add server be/n5 127.0.0.6:80 weight 1 check inter 2000ms rise 2 fall 3 id 16777217":                                "New server registered.\n",
		"enable health be/n1":                             "\n",
		"set server be/n1 state drain":                    "\n",
		"set server be/n1 health down":                    "\n",
		"enable health be/n5":                             "\n",
		"set server be/n5 state drain":                    "\n",
		"set server be/n2 addr 127.0.0.3 port 81":         "IP changed from '127.0.0.2' to '127.0.0.3', port changed from '80' to '81' by 'stats socket command'\n",
		"set server be/n2 weight 4":                       "\n",
		"set server be/n3 state maint":                    "\n",
		"wait 2000 srv-removable be/n3; del server be/n3": "Wait delay expired.\n\nServer still has connections attached to it, cannot remove it.",
		"set server be/n4 state maint":                    "\n",
		"wait 2000 srv-removable be/n4; del server be/n4": "\nServer deleted.",
	})
	c, err := New(u, model.Settings{}, chk)
	if err != nil {
		t.Fatal(err)
	}
	n1 := model.Server{Name: "n1", Address: "127.0.0.1", Port: 80, Weight: 2, State: model.Drain, Check: model.Check{Inter: 2 * time.Second, Rise: 2, Fall: 3, SendProxyV2: true}}
	n5 := model.Server{Name: "n5", Address: "127.0.0.6", Port: 80, Weight: 1, State: model.Drain, Check: chk}
	oldN2 := model.Server{Name: "n2", Address: "127.0.0.2", Port: 80, Weight: 1, State: model.Ready, Check: chk}
	newN2 := oldN2
	newN2.Address, newN2.Port, newN2.Weight = "127.0.0.3", 81, 4
	n3 := model.Server{Name: "n3", Address: "127.0.0.4", Port: 80, Weight: 1, State: model.Ready}
	n4 := model.Server{Name: "n4", Address: "127.0.0.5", Port: 80, Weight: 1, State: model.Ready}
	p := plan.Plan{Backend: "be", Changes: []plan.Change{
		{Action: plan.Add, Name: "n1", New: &n1, Gate: true},
		{Action: plan.Update, Name: "n2", Old: &oldN2, New: &newN2},
		{Action: plan.Delete, Name: "n3", Old: &n3},
		{Action: plan.Delete, Name: "n4", Old: &n4},
		{Action: plan.Add, Name: "n5", New: &n5},
	}}
	a, err := c.Apply(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Deferred, []string{"n3"}) {
		t.Errorf("deferred = %v, want n3 (still has connections)", a.Deferred)
	}
	// Adds and updates go in rounds, one step of each per round; deletes
	// follow, one by one.
	want := []string{
		"show info", "show servers state be",
		"add server be/n1 127.0.0.1:80 weight 2 check inter 2000ms rise 2 fall 3 id 16777216 send-proxy-v2 check-send-proxy",
		"set server be/n2 addr 127.0.0.3 port 81",
		"add server be/n5 127.0.0.6:80 weight 1 check inter 2000ms rise 2 fall 3 id 16777217",
		"enable health be/n1", "set server be/n2 weight 4", "enable health be/n5",
		"set server be/n1 state drain", "set server be/n5 state drain",
		"set server be/n1 health down",
		"set server be/n3 state maint", "wait 2000 srv-removable be/n3; del server be/n3",
		"set server be/n4 state maint", "wait 2000 srv-removable be/n4; del server be/n4",
	}
	if got := sc.commands(); !reflect.DeepEqual(got, want) {
		t.Errorf("commands:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if a.Writes != 13 {
		t.Errorf("writes = %d, want 13 (the refused del not counted)", a.Writes)
	}
}

// TestEntriesGoFirst: a plan that puts a server in service (with a new
// weight: two steps) and takes another out sends every step of the entry
// before the other's: in one round the entry's "state ready" would come
// after the leaving server's "state maint", an empty backend meanwhile.
func TestEntriesGoFirst(t *testing.T) {
	sc, u := serveScript(t, map[string]string{
		"set server be/b weight 3":    "\n",
		"set server be/b state ready": "\n",
		"set server be/a state maint": "\n",
	})
	c, err := New(u, model.Settings{}, chk)
	if err != nil {
		t.Fatal(err)
	}
	a := model.Server{Name: "a", Address: "127.0.0.1", Port: 80, Weight: 1, State: model.Ready, Check: chk}
	parked := a
	parked.State = model.Maint
	b := model.Server{Name: "b", Address: "127.0.0.2", Port: 80, Weight: 1, State: model.Drain, Check: chk}
	entering := b
	entering.State, entering.Weight = model.Ready, 3
	p := plan.Plan{Backend: "be", Changes: []plan.Change{
		{Action: plan.Maint, Name: "a", Old: &a, New: &parked},
		{Action: plan.Update, Name: "b", Old: &b, New: &entering},
	}}
	if _, err := c.Apply(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	want := []string{"set server be/b weight 3", "set server be/b state ready", "set server be/a state maint"}
	if got := sc.commands(); !reflect.DeepEqual(got, want) {
		t.Errorf("commands %v, want %v", got, want)
	}
}

// TestDeleteBefore30ParksFirst: before 3.0 a server is never deleted in the
// reconcile that parks it ("del server" racing a stream can crash 2.6.12),
// and a parked one is deleted without "wait", which those versions lack.
func TestDeleteBefore30ParksFirst(t *testing.T) {
	sc, u := serveScript(t, map[string]string{
		"show info":                     "Version: 2.6.12-1+deb12u4\n",
		"show servers state be":         header,
		"set server be/a state maint":   "\n",
		"del server be/b":               "Server deleted.\n",
		"shutdown sessions server be/c": "\n",
	})
	c, _ := New(u, model.Settings{}, chk)
	a := model.Server{Name: "a", State: model.Ready}
	b := model.Server{Name: "b", State: model.Maint}
	cc := model.Server{Name: "c", State: model.Maint}
	got, err := c.Apply(context.Background(), plan.Plan{Backend: "be", Changes: []plan.Change{
		{Action: plan.Delete, Name: "a", Old: &a},
		{Action: plan.Delete, Name: "b", Old: &b},
		{Action: plan.Delete, Name: "c", Old: &cc, Kill: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Deferred, []string{"a", "c"}) {
		t.Errorf("deferred = %v, want a (parked now) and c (sessions shut now)", got.Deferred)
	}
	want := []string{"show info", "set server be/a state maint", "del server be/b", "shutdown sessions server be/c"}
	if cmds := sc.commands(); !reflect.DeepEqual(cmds, want) {
		t.Errorf("commands %q, want %q", cmds, want)
	}
}

// TestStaticAlgorithmIsABackendError: HAProxy's refusal of runtime
// servers in the backend, in the words of 2.6-3.3 and of 3.4 (seen on
// 3.2.0 and 3.4.0), is the backend's error, not one server's.
func TestStaticAlgorithmIsABackendError(t *testing.T) {
	for _, reply := range []string{
		"Backend must use a dynamic load balancing to support dynamic servers.\n",
		"Backend does not support dynamic servers : backend 'be' uses a non dynamic load balancing method.\n",
	} {
		_, u := serveScript(t, map[string]string{
			"show info":             "Version: 2.6.12\n",
			"show servers state be": header,
			"add server be/a 127.0.0.1:80 weight 1 check inter 2000ms rise 2 fall 3 id 16777216": reply,
		})
		c, _ := New(u, model.Settings{}, chk)
		n := model.Server{Name: "a", Address: "127.0.0.1", Port: 80, Weight: 1, State: model.Drain, Check: chk}
		_, err := c.Apply(context.Background(), plan.Plan{Backend: "be", Changes: []plan.Change{{Action: plan.Add, Name: "a", New: &n, Gate: true}}})
		var be *failure.BackendError
		if !errors.As(err, &be) || !strings.Contains(err.Error(), "dynamic") {
			t.Fatalf("%q: err = %v, want a BackendError", reply, err)
		}
		var se plan.ServerErrors
		if errors.As(err, &se) {
			t.Errorf("%q: a backend refusal is reported as one server's", reply)
		}
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]Version{
		"2.6.12-1+deb12u4": {2, 6, 12}, " 3.0.11-9e587df": {3, 0, 11}, "3.2.0": {3, 2, 0}, "2.8-dev4": {2, 8, 0},
	} {
		if got, err := ParseVersion(in); err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "x.y", "3"} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) accepted", bad)
		}
	}
	if !(Version{3, 0, 0}).AtLeast(3, 0) || (Version{2, 9, 9}).AtLeast(3, 0) || !(Version{4, 0, 0}).AtLeast(3, 1) {
		t.Error("AtLeast")
	}
}

func TestParseStat(t *testing.T) {
	reply := "# pxname,svname,qcur,qmax,scur,smax,slim,act,bck\nbe,a,1,0,2,3,,1,0\nbe,b,0,0,0,0,,0,1\nbe,BACKEND,0,0,2,3,,1,1\nother,a,9,9,9,9,,1,0\n"
	got, err := ParseStat(reply, "be")
	if err != nil || got["a"] != (Stat{Sessions: 3}) || got["b"] != (Stat{Backup: true}) || got["x"] != (Stat{}) {
		t.Fatalf("got %v, %v", got, err)
	}
	if _, err := ParseStat("No such backend.\n", "be"); err == nil {
		t.Error("error reply accepted")
	}
}

// staticWeight is HAProxy 2.6.12's refusal of a weight in a static-rr
// backend.
const staticWeight = "Backend is using a static LB algorithm and only accepts weights '0%' and '100%'.\n"

func TestRefusedCommandIsAnError(t *testing.T) {
	_, u := serveScript(t, map[string]string{"set server be/static weight 4": staticWeight})
	c, _ := New(u, model.Settings{}, chk)
	old := model.Server{Name: "static", State: model.Ready, Weight: 1}
	newS := old
	newS.Weight = 4
	_, err := c.Apply(context.Background(), plan.Plan{Backend: "be", Changes: []plan.Change{{Action: plan.Update, Name: "static", Old: &old, New: &newS}}})
	var ce *CommandError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "static LB algorithm") {
		t.Fatalf("err = %v", err)
	}
	if failure.Retryable(err) {
		t.Error("a refused command is retried")
	}
}

func TestReadUnknownBackend(t *testing.T) {
	_, u := serveScript(t, map[string]string{"show servers state nope": "Can't find backend.\n"})
	c, _ := New(u, model.Settings{}, chk)
	_, err := c.Read(context.Background(), "nope")
	var be *failure.BackendError
	if !errors.As(err, &be) || be.Backend != "nope" || !strings.Contains(err.Error(), "Can't find backend") || failure.Of(err) != failure.Permanent {
		t.Fatalf("err = %v, want a permanent BackendError quoting HAProxy", err)
	}
}

// TestSocketDownIsUnreachable: no socket is a failure worth trying again
// later, not within the reconcile (it fails in microseconds).
func TestSocketDownIsUnreachable(t *testing.T) {
	c, _ := New("unix://"+filepath.Join(t.TempDir(), "none.sock"), model.Settings{}, chk)
	_, err := c.Read(context.Background(), "be")
	if got := failure.Of(err); got != failure.Unreachable {
		t.Fatalf("err = %v, class %q, want unreachable", err, got)
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"/var/run/haproxy.sock", "http://x", "unix://", "tcp://"} {
		if _, err := New(u, model.Settings{}, chk); err == nil {
			t.Errorf("%q accepted", u)
		}
	}
	if _, err := (Socket{Network: "unix", Address: "/x"}).Command(context.Background(), "show info; del server be/x"); err == nil {
		t.Error("';' accepted in a command")
	}
}

// TestARefusedCommandDoesNotStopTheOthers: HAProxy refuses one server's
// change; the next server's change is still sent, and the error names the
// refused server and is not temporary.
func TestARefusedCommandDoesNotStopTheOthers(t *testing.T) {
	sc, u := serveScript(t, map[string]string{
		"set server be/refused weight 4": staticWeight,
		"set server be/ok state maint":   "\n",
	})
	c, _ := New(u, model.Settings{}, chk)
	refused, ok := model.Server{Name: "refused", State: model.Ready, Weight: 1}, model.Server{Name: "ok", State: model.Ready}
	refusedW, okM := refused, ok
	refusedW.Weight, okM.State = 4, model.Maint
	_, err := c.Apply(context.Background(), plan.Plan{Backend: "be", Changes: []plan.Change{
		{Action: plan.Update, Name: "refused", Old: &refused, New: &refusedW},
		{Action: plan.Maint, Name: "ok", Old: &ok, New: &okM},
	}})
	var se plan.ServerErrors
	if !errors.As(err, &se) || len(se) != 1 || se[0].Server != "refused" {
		t.Fatalf("err = %v", err)
	}
	if got := sc.commands(); len(got) != 2 || got[1] != "set server be/ok state maint" {
		t.Errorf("commands %q", got)
	}
}

// TestNoSuchServerAfterReadIsAConflict: "No such server" to a command for a
// server the read just saw means a reload (another writer's) came between
// the read and the command; CI saw "set server be/lb06-a state ready: No
// such server." fail a reconcile as a permanent refusal. It is a conflict:
// the reconcile reads again at once. The plan's other changes still go,
// and a refusal of another server's change does not hide the conflict.
func TestNoSuchServerAfterReadIsAConflict(t *testing.T) {
	sc, u := serveScript(t, map[string]string{
		"show info":                        "Version: 3.0.11-9e587df\n",
		"set server be/lb06-a state ready": "No such server.\n",
		"set server be/refused weight 4":   staticWeight,
		"set server be/ok state maint":     "\n",
		"set server be/gone state maint":   "No such server.\n",
	})
	c, _ := New(u, model.Settings{}, chk)
	drained := model.Server{Name: "lb06-a", Address: "10.0.0.6", Port: 80, Weight: 1, State: model.Drain, Check: chk}
	ready := drained
	ready.State = model.Ready
	refused, ok, gone := model.Server{Name: "refused", State: model.Ready, Weight: 1}, model.Server{Name: "ok", State: model.Ready}, model.Server{Name: "gone", State: model.Ready}
	refusedW, okM := refused, ok
	refusedW.Weight, okM.State = 4, model.Maint
	_, err := c.Apply(context.Background(), plan.Plan{Backend: "be", Changes: []plan.Change{
		{Action: plan.Delete, Name: "gone", Old: &gone},
		{Action: plan.Update, Name: "lb06-a", Old: &drained, New: &ready},
		{Action: plan.Maint, Name: "ok", Old: &ok, New: &okM},
		{Action: plan.Update, Name: "refused", Old: &refused, New: &refusedW},
	}})
	if got := failure.Of(err); got != failure.Temporary || !errors.As(err, new(*failure.ConflictError)) {
		t.Fatalf("err = %v, class %q; want a conflict (temporary)", err, got)
	}
	if !strings.Contains(err.Error(), "lb06-a") {
		t.Errorf("err = %v, want it to name lb06-a", err)
	}
	if got := sc.commands(); !slices.Contains(got, "set server be/ok state maint") || !slices.Contains(got, "set server be/gone state maint") {
		t.Errorf("commands %q: the other changes were not sent", got)
	}
}

// TestARefusedStepStopsItsChange: HAProxy runs every command of a ';' line
// even after one failed, so a gate sent as one line knocked out a server
// with no check configured (drained, health down, for good), and a refused
// add gated the server that already had the name. Each step now runs only
// after the one before passed; the other changes go on.
func TestARefusedStepStopsItsChange(t *testing.T) {
	sc, u := serveScript(t, map[string]string{
		"show servers state be":   header,
		"enable health be/static": "Health check was not configured on this server, cannot enable.\n",
		"add server be/taken 127.0.0.1:81 weight 1 check inter 2000ms rise 2 fall 3 id 16777216": "'server be/taken' : unknown keyword 'bogus'.\n",
		"add server be/new 127.0.0.1:82 weight 1 check inter 2000ms rise 2 fall 3 id 16777217":   "New server registered.\n",
		"enable health be/new":          "\n",
		"set server be/new state drain": "\n",
		"set server be/new health down": "\n",
	})
	c, _ := New(u, model.Settings{}, chk)
	static := model.Server{Name: "static", Address: "127.0.0.1", Port: 80, Weight: 1, State: model.Ready, Check: chk}
	held := static
	held.State = model.Drain
	taken := model.Server{Name: "taken", Address: "127.0.0.1", Port: 81, Weight: 1, State: model.Drain, Check: chk}
	fresh := model.Server{Name: "new", Address: "127.0.0.1", Port: 82, Weight: 1, State: model.Drain, Check: chk}
	a, err := c.Apply(context.Background(), plan.Plan{Backend: "be", Changes: []plan.Change{
		{Action: plan.Drain, Name: "static", Old: &static, New: &held, Gate: true},
		{Action: plan.Add, Name: "taken", New: &taken, Gate: true},
		{Action: plan.Add, Name: "new", New: &fresh, Gate: true},
	}})
	var se plan.ServerErrors
	if !errors.As(err, &se) || len(se) != 2 || se[0].Server != "static" || se[1].Server != "taken" {
		t.Fatalf("err = %v, want static and taken refused", err)
	}
	for _, cmd := range sc.commands() {
		if strings.Contains(cmd, "be/static") && cmd != "enable health be/static" || strings.Contains(cmd, "be/taken") && !strings.HasPrefix(cmd, "add server") {
			t.Errorf("%q sent after its change's first step was refused", cmd)
		}
	}
	if a.Writes != 4 {
		t.Errorf("writes = %d, want the 4 steps of new", a.Writes)
	}
}

// TestAddOfANameAnotherWriterAddedIsAConflict: two replicas add the same
// pod's server at once; HAProxy refuses the second add ("Already exists a
// server with the same name"). That is no refusal of the server: the apply
// ends in a conflict, which the reconcile retries from a fresh read that
// shows the server (history checker, seed 4, two replicas).
func TestAddOfANameAnotherWriterAddedIsAConflict(t *testing.T) {
	sc, u := serveScript(t, map[string]string{
		"show servers state be": header,
		"add server be/twin 127.0.0.1:81 weight 1 check inter 2000ms rise 2 fall 3 id 16777216": "Already exists a server with the same name in backend.\n",
		"add server be/new 127.0.0.1:82 weight 1 check inter 2000ms rise 2 fall 3 id 16777217":  "New server registered.\n",
		"enable health be/new":          "\n",
		"set server be/new state drain": "\n",
		"set server be/new health down": "\n",
	})
	c, _ := New(u, model.Settings{}, chk)
	twin := model.Server{Name: "twin", Address: "127.0.0.1", Port: 81, Weight: 1, State: model.Drain, Check: chk}
	fresh := model.Server{Name: "new", Address: "127.0.0.1", Port: 82, Weight: 1, State: model.Drain, Check: chk}
	_, err := c.Apply(context.Background(), plan.Plan{Backend: "be", Changes: []plan.Change{
		{Action: plan.Add, Name: "twin", New: &twin, Gate: true},
		{Action: plan.Add, Name: "new", New: &fresh, Gate: true},
	}})
	if got := failure.Of(err); got != failure.Temporary || !errors.As(err, new(*failure.ConflictError)) || !strings.Contains(err.Error(), "twin") {
		t.Fatalf("err = %v, class %q; want a conflict naming twin", err, got)
	}
	if !slices.Contains(sc.commands(), "set server be/new health down") {
		t.Errorf("commands %q: the other add did not go on", sc.commands())
	}
}

// TestDeleteOfAServerAnotherWriterUnparkedIsAConflict: the read showed the
// server parked; another replica put it back in service before the delete,
// which HAProxy refuses ("Only servers in maintenance mode can be
// deleted"). A conflict, retried from a fresh read, not the server's
// refusal (history checker, seed 132, two replicas).
func TestDeleteOfAServerAnotherWriterUnparkedIsAConflict(t *testing.T) {
	_, u := serveScript(t, map[string]string{
		"show info":          "Version: 2.6.12\n",
		"del server be/back": "Only servers in maintenance mode can be deleted.\n",
	})
	c, _ := New(u, model.Settings{}, chk)
	parked := model.Server{Name: "back", Address: "127.0.0.1", Port: 81, Weight: 1, State: model.Maint, Check: chk}
	_, err := c.Apply(context.Background(), plan.Plan{Backend: "be", Changes: []plan.Change{{Action: plan.Delete, Name: "back", Old: &parked}}})
	if got := failure.Of(err); got != failure.Temporary || !errors.As(err, new(*failure.ConflictError)) {
		t.Fatalf("err = %v, class %q; want a conflict", err, got)
	}
}

// TestADisabledProxyAfterAReloadIsAConflict: during a reload the old
// process, stopping, may answer the socket "Proxy is disabled": a conflict,
// retried from a fresh read, not the server's refusal (history checker,
// seed 466823445 on 3.0.11, the Data Plane API reloading for each write).
func TestADisabledProxyAfterAReloadIsAConflict(t *testing.T) {
	_, u := serveScript(t, map[string]string{
		"show info":              "Version: 3.0.11\n",
		"enable health be/web-1": "Proxy is disabled.\n",
	})
	c, _ := New(u, model.Settings{}, chk)
	cur := model.Server{Name: "web-1", Address: "127.0.0.1", Port: 81, Weight: 1, State: model.Ready, Check: chk}
	gated := cur
	gated.State = model.Drain
	_, err := c.Apply(context.Background(), plan.Plan{Backend: "be", Changes: []plan.Change{{Action: plan.Drain, Name: "web-1", Old: &cur, New: &gated, Gate: true}}})
	if got := failure.Of(err); got != failure.Temporary || !errors.As(err, new(*failure.ConflictError)) {
		t.Fatalf("err = %v, class %q; want a conflict", err, got)
	}
}

// serveRaw is a socket that reads a connection's first line, answers reply
// whatever it was, then closes the connection.
func serveRaw(t *testing.T, reply []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "raw.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = bufio.NewReader(c).ReadString('\n')
				_, _ = c.Write(reply)
			}()
		}
	}()
	return path
}

// TestNoReplyIsAFailure: a connection closed without a byte (a tcp relay
// whose HAProxy is down does that) ran nothing, though a command with
// nothing to say answers "\n": it is a temporary error, not success.
func TestNoReplyIsAFailure(t *testing.T) {
	path := serveRaw(t, nil)
	sock := Socket{Network: "unix", Address: path}
	if _, err := sock.Command(context.Background(), "set server be/a state drain"); !failure.Retryable(err) {
		t.Errorf("Command: err = %v, want a temporary error", err)
	}
	c, _ := New("unix://"+path, model.Settings{}, chk)
	if err := c.Gate(context.Background(), "be", "a"); !failure.Retryable(err) {
		t.Errorf("Gate: err = %v, want a temporary error", err)
	}
	old := model.Server{Name: "a", State: model.Ready}
	parked := old
	parked.State = model.Maint
	if _, err := c.Apply(context.Background(), plan.Plan{Backend: "be", Changes: []plan.Change{{Action: plan.Maint, Name: "a", Old: &old, New: &parked}}}); err == nil {
		t.Error("Apply: no error though nothing reached HAProxy")
	}
}

// TestLongReplyIsAFailure: a reply past the read limit (show stat of ~60k
// servers) is an error; cut, it would read as servers without sessions.
func TestLongReplyIsAFailure(t *testing.T) {
	path := serveRaw(t, []byte(strings.Repeat("be,s,0,0,0,0,\n", maxReply/14+1)))
	_, err := Socket{Network: "unix", Address: path}.Command(context.Background(), "show stat")
	if err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("err = %v, want a reply too long", err)
	}
}

// TestSequencesKeepAFewCommandsInFlight: a burst of 300 steps on one
// interactive connection never has more than window commands sent and not
// yet answered (a client pipelining hundreds is what made HAProxy 3.2.0's
// CLI spin until its watchdog aborted the worker), and every answer still
// reaches its step.
func TestSequencesKeepAFewCommandsInFlight(t *testing.T) {
	path := filepath.Join(t.TempDir(), "slow.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var maxAhead atomic.Int64
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		lines := make(chan string, 1000)
		var received atomic.Int64
		go func() {
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				received.Add(1)
				lines <- sc.Text()
			}
			close(lines)
		}()
		answered := int64(0)
		for l := range lines {
			time.Sleep(200 * time.Microsecond) // HAProxy takes its time
			if ahead := received.Load() - answered; ahead > maxAhead.Load() {
				maxAhead.Store(ahead)
			}
			answered++
			if _, err := io.WriteString(c, "ok "+l+"\n\n> "); err != nil {
				return
			}
		}
	}()
	seqs := make([][]Step, 300)
	for i := range seqs {
		cmd := fmt.Sprintf("set server be/s%d state ready", i)
		seqs[i] = []Step{{cmd, func(a string) bool { return strings.TrimSpace(a) == "ok "+cmd }}}
	}
	out, err := Socket{Network: "unix", Address: path}.Sequences(context.Background(), seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range out {
		if o.Done != 1 {
			t.Fatalf("step %d: %+v", i, o)
		}
	}
	if got := maxAhead.Load(); got > 17 || got < 2 { // window is 16
		t.Errorf("%d commands in flight at most, want 2 to 17", got)
	}
}

// TestIDTakenOverAndOverIsAConflict: an add whose id other writers take
// each time it is sent with a fresh one is sent idRetries+1 times at most,
// then the apply is a conflict, which the reconcile retries from a fresh
// read: not a refusal of the server.
func TestIDTakenOverAndOverIsAConflict(t *testing.T) {
	sc, u := serveScript(t, map[string]string{"show servers state be": header})
	sc.prefixed = map[string]string{"add server be/mine ": "'id' : custom id 16777216 already used at (null):0 ('server theirs').\n"}
	c, _ := New(u, model.Settings{}, chk)
	mine := model.Server{Name: "mine", Address: "127.0.0.1", Port: 80, Weight: 1, State: model.Drain, Check: chk}
	_, err := c.Apply(context.Background(), plan.Plan{Backend: "be", Changes: []plan.Change{{Action: plan.Add, Name: "mine", New: &mine, Gate: true}}})
	if got := failure.Of(err); got != failure.Temporary || !errors.As(err, new(*failure.ConflictError)) {
		t.Fatalf("err = %v, class %q; want a conflict (temporary)", err, got)
	}
	adds, reads := 0, 0
	for _, cmd := range sc.commands() {
		switch {
		case strings.HasPrefix(cmd, "add server be/mine "):
			adds++
		case cmd == "show servers state be":
			reads++
		}
	}
	if adds != idRetries+1 || reads != idRetries+1 {
		t.Errorf("%d adds after %d reads of the next id, want %d of each", adds, reads, idRetries+1)
	}
}
