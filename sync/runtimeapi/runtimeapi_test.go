package runtimeapi

import (
	"bufio"
	"context"
	"errors"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

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
	got, err := ParseServersState(reply, "be")
	if err != nil {
		t.Fatal(err)
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
	for _, bad := range []string{"Can't find backend.\n", "", "1\n3 be 1 short\n", header + "3 be 1 s x 2 x 1 1 2 6 3 4 6 0 0 0 - 80 - 0 0 - - 0\n"} {
		if _, err := ParseServersState(bad, "be"); err == nil {
			t.Errorf("no error for %q", bad)
		}
	}
}

// script is a fake runtime socket: it answers commands from a table and
// records them; unknown commands get HAProxy's "Unknown command" reply.
type script struct {
	mu      sync.Mutex
	replies map[string]string
	got     []string
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
			line, _ := bufio.NewReader(c).ReadString('\n')
			cmd := strings.TrimSpace(line)
			s.mu.Lock()
			s.got = append(s.got, cmd)
			reply, ok := s.replies[cmd]
			s.mu.Unlock()
			if !ok {
				reply = "Unknown command, but maybe one of the following ones is a better match:\n"
			}
			_, _ = c.Write([]byte(reply + "\n"))
			c.Close()
		}
	}()
	return s, "unix://" + path
}

func (s *script) commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

var chk = model.Check{Inter: 2 * time.Second, Rise: 2, Fall: 3}

func TestApplyCommandsAndReplies(t *testing.T) {
	sc, u := serveScript(t, map[string]string{
		"add server be/n1 127.0.0.1:80 weight 2 check inter 2000ms rise 2 fall 3 send-proxy-v2 check-send-proxy": "New server registered.\n",
		"enable health be/n1":                     "\n",
		"set server be/n1 state drain":            "\n",
		"set server be/n2 addr 127.0.0.3 port 81": "IP changed from '127.0.0.2' to '127.0.0.3', port changed from '80' to '81' by 'stats socket command'\n",
		"set server be/n2 weight 4":               "\n",
		"set server be/n3 state maint":            "\n",
		"del server be/n3":                        "Server still has connections attached to it, cannot remove it.",
		"set server be/n4 state maint":            "\n",
		"del server be/n4":                        "Server deleted.",
	})
	c, err := New(u, model.Settings{}, chk)
	if err != nil {
		t.Fatal(err)
	}
	n1 := model.Server{Name: "n1", Address: "127.0.0.1", Port: 80, Weight: 2, State: model.Drain, Check: model.Check{Inter: 2 * time.Second, Rise: 2, Fall: 3, SendProxyV2: true}}
	oldN2 := model.Server{Name: "n2", Address: "127.0.0.2", Port: 80, Weight: 1, State: model.Ready, Check: chk}
	newN2 := oldN2
	newN2.Address, newN2.Port, newN2.Weight = "127.0.0.3", 81, 4
	n3 := model.Server{Name: "n3", Address: "127.0.0.4", Port: 80, Weight: 1, State: model.Ready}
	n4 := model.Server{Name: "n4", Address: "127.0.0.5", Port: 80, Weight: 1, State: model.Ready}
	p := plan.Plan{Backend: "be", Changes: []plan.Change{
		{Action: plan.Add, Name: "n1", New: &n1},
		{Action: plan.Update, Name: "n2", Old: &oldN2, New: &newN2},
		{Action: plan.Delete, Name: "n3", Old: &n3},
		{Action: plan.Delete, Name: "n4", Old: &n4},
	}}
	a, err := c.Apply(context.Background(), p)
	if !errors.Is(err, ErrServerBusy) || !strings.Contains(err.Error(), "n3") {
		t.Fatalf("err = %v, want ErrServerBusy naming n3", err)
	}
	want := []string{
		"add server be/n1 127.0.0.1:80 weight 2 check inter 2000ms rise 2 fall 3 send-proxy-v2 check-send-proxy",
		"enable health be/n1", "set server be/n1 state drain",
		"set server be/n2 addr 127.0.0.3 port 81", "set server be/n2 weight 4",
		"set server be/n3 state maint", "del server be/n3",
		"set server be/n4 state maint", "del server be/n4",
	}
	if got := sc.commands(); !reflect.DeepEqual(got, want) {
		t.Errorf("commands:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if a.Writes != 8 {
		t.Errorf("writes = %d, want 8 (the refused del not counted)", a.Writes)
	}
}

func TestRefusedCommandIsAnError(t *testing.T) {
	_, u := serveScript(t, map[string]string{"set server be/gone state maint": "No such server.\n"})
	c, _ := New(u, model.Settings{}, chk)
	old := model.Server{Name: "gone", State: model.Ready}
	newS := old
	newS.State = model.Maint
	_, err := c.Apply(context.Background(), plan.Plan{Backend: "be", Changes: []plan.Change{{Action: plan.Maint, Name: "gone", Old: &old, New: &newS}}})
	var ce *CommandError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "No such server.") {
		t.Fatalf("err = %v", err)
	}
	var tmp interface{ Temporary() bool }
	if errors.As(err, &tmp) && tmp.Temporary() {
		t.Error("a refused command is retried")
	}
}

func TestReadUnknownBackend(t *testing.T) {
	_, u := serveScript(t, map[string]string{"show servers state nope": "Can't find backend.\n"})
	c, _ := New(u, model.Settings{}, chk)
	if _, err := c.Read(context.Background(), "nope"); err == nil || !strings.Contains(err.Error(), "Can't find backend") {
		t.Fatalf("err = %v", err)
	}
}

func TestSocketDownIsTemporary(t *testing.T) {
	c, _ := New("unix://"+filepath.Join(t.TempDir(), "none.sock"), model.Settings{}, chk)
	_, err := c.Read(context.Background(), "be")
	var tmp interface{ Temporary() bool }
	if !errors.As(err, &tmp) || !tmp.Temporary() {
		t.Fatalf("err = %v, want temporary", err)
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
		"set server be/gone state maint": "No such server.\n",
		"set server be/ok state maint":   "\n",
	})
	c, _ := New(u, model.Settings{}, chk)
	gone, ok := model.Server{Name: "gone", State: model.Ready}, model.Server{Name: "ok", State: model.Ready}
	goneM, okM := gone, ok
	goneM.State, okM.State = model.Maint, model.Maint
	_, err := c.Apply(context.Background(), plan.Plan{Backend: "be", Changes: []plan.Change{
		{Action: plan.Maint, Name: "gone", Old: &gone, New: &goneM},
		{Action: plan.Maint, Name: "ok", Old: &ok, New: &okM},
	}})
	var se plan.ServerErrors
	if !errors.As(err, &se) || len(se) != 1 || se[0].Server != "gone" {
		t.Fatalf("err = %v", err)
	}
	if got := sc.commands(); len(got) != 2 || got[1] != "set server be/ok state maint" {
		t.Errorf("commands %q", got)
	}
}
