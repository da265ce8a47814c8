package alarm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/alarm"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile/reconciletest"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// TestDecide: warned once when seen (or once its grace ran out), again at
// most once per every while it lasts, said once when it mends, and nothing
// of a problem that mended before it was said.
func TestDecide(t *testing.T) {
	const every = 5 * time.Minute
	seen := alarm.State{Since: t0}
	warned := alarm.State{Since: t0, Said: t0}
	for _, c := range []struct {
		name  string
		s     alarm.State
		bad   bool
		now   time.Time
		grace time.Duration
		say   alarm.Say
		next  alarm.State
	}{
		{"all well", alarm.State{}, false, t0, 0, alarm.Quiet, alarm.State{}},
		{"seen, no grace: warned at once", alarm.State{}, true, t0, 0, alarm.Warn, warned},
		{"seen, within its grace", alarm.State{}, true, t0, time.Minute, alarm.Quiet, seen},
		{"grace not yet out", seen, true, at(59 * time.Second), time.Minute, alarm.Quiet, seen},
		{"grace out", seen, true, at(time.Minute), time.Minute, alarm.Warn, alarm.State{Since: t0, Said: at(time.Minute)}},
		{"mended within its grace: never said", seen, false, at(30 * time.Second), time.Minute, alarm.Quiet, alarm.State{}},
		{"lasting, not due", warned, true, at(4*time.Minute + 59*time.Second), 0, alarm.Quiet, warned},
		{"lasting, due again", warned, true, at(every), 0, alarm.Again, alarm.State{Since: t0, Said: at(every)}},
		{"mended after a warning", warned, false, at(time.Hour), 0, alarm.Mended, alarm.State{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			say, next := alarm.Decide(c.s, c.bad, c.now, c.grace, every)
			if say != c.say || next != c.next {
				t.Errorf("Decide = %q %+v, want %q %+v", say, next, c.say, c.next)
			}
		})
	}
}

type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

// book returns a Book on a clock at t0 that logs JSON to logs and records
// the gauge's changes.
func book(logs *bytes.Buffer, gauge *[]string) (*alarm.Book, *clock) {
	c := &clock{now: t0}
	return &alarm.Book{Log: slog.New(slog.NewJSONHandler(logs, nil)), Now: c.Now,
		OnChange: func(k alarm.Kind, subject string, open bool) {
			*gauge = append(*gauge, fmt.Sprint(k, " ", subject, " ", open))
		}}, c
}

// lines returns the log lines as "LEVEL kind subject", emptying logs.
func lines(t *testing.T, logs *bytes.Buffer) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if l == "" {
			continue
		}
		var line struct{ Level, Kind, Subject string }
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatal(err)
		}
		out = append(out, line.Level+" "+line.Kind+" "+line.Subject)
	}
	logs.Reset()
	return out
}

// TestUnreachableTargetIsWarnedInItsFirstMinute: the probe (serve runs it
// whether or not a reconcile does) finds the target refusing connections:
// a WARN at once, within its first failed minute; nothing more on the
// probes of the next minutes; again after five; INFO once it answers.
func TestUnreachableTargetIsWarnedInItsFirstMinute(t *testing.T) {
	var logs bytes.Buffer
	var gauge []string
	b, c := book(&logs, &gauge)
	down := &failure.NetworkError{Err: fmt.Errorf("dial tcp 127.0.0.1:1: %w", syscall.ECONNREFUSED)}
	d := &reconciletest.Driver{ID: "http://haproxy-a:5555", ReadErr: down}
	probe := func() { b.Probe(context.Background(), []reconcile.Driver{d}, []string{"be"}, time.Second); b.Tick() }

	probe()
	if got := lines(t, &logs); len(got) != 1 || got[0] != "WARN unreachable http://haproxy-a:5555" {
		t.Fatalf("first failed probe logged %q, want one WARN", got)
	}
	for c.now = at(20 * time.Second); c.now.Before(at(5 * time.Minute)); c.now = c.now.Add(20 * time.Second) {
		probe()
	}
	if got := lines(t, &logs); len(got) != 0 {
		t.Errorf("within five minutes logged %q, want nothing more", got)
	}
	probe() // at 5 min
	if got := lines(t, &logs); len(got) != 1 || got[0] != "WARN unreachable http://haproxy-a:5555" {
		t.Errorf("after five minutes logged %q, want the WARN again", got)
	}
	d.Do(func(d *reconciletest.Driver) { d.ReadErr = nil })
	c.now = c.now.Add(20 * time.Second)
	probe()
	if got := lines(t, &logs); len(got) != 1 || got[0] != "INFO unreachable http://haproxy-a:5555" {
		t.Errorf("mended: logged %q, want one INFO", got)
	}
	if fmt.Sprint(gauge) != "[unreachable http://haproxy-a:5555 true unreachable http://haproxy-a:5555 false]" {
		t.Errorf("gauge %v", gauge)
	}
	if open := b.Open(); len(open) != 0 {
		t.Errorf("open %v", open)
	}
}

// TestCheckNotPassedForAMinute: a server a reconcile holds for its check is
// warned about once it waited a minute, though no reconcile ran since (the
// follow-up gave up on it), again five minutes later, and said to mend when
// a result shows it in service.
func TestCheckNotPassedForAMinute(t *testing.T) {
	var logs bytes.Buffer
	var gauge []string
	b, c := book(&logs, &gauge)
	waiting := reconcile.Result{Targets: []reconcile.TargetResult{{Target: "a", Backend: "be", Waiting: []string{"node-1"}}}}
	b.Result(waiting)
	c.now = at(59 * time.Second)
	b.Result(waiting)
	b.Tick()
	if got := lines(t, &logs); len(got) != 0 {
		t.Fatalf("within its first minute logged %q", got)
	}
	c.now = at(time.Minute)
	b.Tick()
	c.now = at(3 * time.Minute)
	b.Tick()
	c.now = at(6 * time.Minute)
	b.Tick()
	c.now = at(7 * time.Minute)
	b.Result(reconcile.Result{Targets: []reconcile.TargetResult{{Target: "a", Backend: "be"}}})
	want := []string{"WARN check-not-passed a be node-1", "WARN check-not-passed a be node-1", "INFO check-not-passed a be node-1"}
	if got := lines(t, &logs); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("logged %q, want %q", got, want)
	}
}

// TestBackendRefusedAndTLSPair: a backend refused (from a result) and a
// certificate pair that does not load (observed) are warned at once and
// mend on the next good word.
func TestBackendRefusedAndTLSPair(t *testing.T) {
	var logs bytes.Buffer
	var gauge []string
	b, _ := book(&logs, &gauge)
	b.Result(reconcile.Result{Targets: []reconcile.TargetResult{{Target: "a", Backend: "be", Error: "backend be: balance first", BackendRefused: true}}})
	b.Observe(alarm.TLSPair, "/etc/tls/tls.crt", true, "tls: private key does not match public key")
	if open := b.Open(); fmt.Sprint(open) != "[backend-refused a be tls-pair /etc/tls/tls.crt]" {
		t.Errorf("open %v", open)
	}
	b.Result(reconcile.Result{Targets: []reconcile.TargetResult{{Target: "a", Backend: "be"}}})
	b.Observe(alarm.TLSPair, "/etc/tls/tls.crt", false, "")
	want := []string{"WARN backend-refused a be", "WARN tls-pair /etc/tls/tls.crt", "INFO backend-refused a be", "INFO tls-pair /etc/tls/tls.crt"}
	if got := lines(t, &logs); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("logged %q, want %q", got, want)
	}
}
