package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile/reconciletest"
)

// TestDrainWritesOneStateLine: a removed server that still has connections
// is parked once and then waits; the follow-up reconciles every second while
// it waits (sixty here: a 60-second drain, simulated by calls). Those
// reconciles write nothing, so they are "unchanged" and logged at debug: at
// info, the drain writes one state line and one reconcile line, not sixty.
func TestDrainWritesOneStateLine(t *testing.T) {
	src := &desiredtest.Source{In: cluster("10.244.0.1", "10.244.0.2")}
	d := &reconciletest.Driver{}
	r := reconciler(src, d)
	if _, err := r.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil)) // info, as shipped
	r.Log = log
	src.In = cluster("10.244.0.1")
	d.Do(func(d *reconciletest.Driver) { d.Busy = map[string]bool{"10-244-0-2": true} })
	statuses := map[string]int{}
	for range 60 {
		res, err := r.Reconcile(context.Background(), false)
		if err != nil {
			t.Fatal(err)
		}
		statuses[res.Status]++
		// as serve logs a poked reconcile
		log.Log(context.Background(), reconcile.Level(res.Status), "reconcile", "status", res.Status)
	}
	if statuses[reconcile.StatusApplied] != 1 || statuses[reconcile.StatusUnchanged] != 59 {
		t.Errorf("statuses %v, want one applied (the server parked) and 59 unchanged", statuses)
	}
	lines := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var line struct{ Msg, Status, To string }
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		lines[line.Msg+" "+line.To+line.Status]++
	}
	want := map[string]int{"server transition maint": 1, "reconcile applied": 1}
	if len(lines) != len(want) || lines["server transition maint"] != 1 || lines["reconcile applied"] != 1 {
		t.Errorf("info lines %v, want %v", lines, want)
	}
	if _, _, writes := d.Counts(); writes != 2+1 {
		t.Errorf("writes %d, want 3: two adds, one park", writes)
	}
}

func TestLevel(t *testing.T) {
	for _, c := range []struct {
		status string
		want   slog.Level
	}{
		{reconcile.StatusApplied, slog.LevelInfo},
		{reconcile.StatusUnchanged, slog.LevelDebug},
		{reconcile.StatusPlanned, slog.LevelDebug},
	} {
		if got := reconcile.Level(c.status); got != c.want {
			t.Errorf("Level(%s) = %v, want %v", c.status, got, c.want)
		}
	}
}

// TestFailedResultCarriesTheDesiredCount: every target fails before it
// reads Kubernetes (HAProxy is read first); the result still says how many
// servers are desired, not 0.
func TestFailedResultCarriesTheDesiredCount(t *testing.T) {
	down := &failure.NetworkError{Err: fmt.Errorf("dial tcp 127.0.0.1:1: %w", syscall.ECONNREFUSED)}
	r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1", "10.244.0.2", "10.244.0.3", "10.244.0.4", "10.244.0.5", "10.244.0.6")},
		&reconciletest.Driver{ID: "a", ReadErr: down}, &reconciletest.Driver{ID: "b", ReadErr: down})
	res, err := r.Reconcile(context.Background(), false)
	if !errors.Is(err, reconcile.ErrTargets) || res.Status != reconcile.StatusError {
		t.Fatalf("err %v status %s", err, res.Status)
	}
	if res.Desired != 6 {
		t.Errorf("desired %d, want 6", res.Desired)
	}
}

// TestLastingWarningIsSaidAtItsRate: an endpoint Kubernetes gives with an
// invalid address is skipped by every reconcile, and the follow-up
// reconciles every second while a server drains: the warning is said at
// the first, not at the next 59 (a fake clock a second apart), again once
// LastingEvery has passed, not while the endpoint is mended, and at once
// when it comes back.
func TestLastingWarningIsSaidAtItsRate(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	src := &desiredtest.Source{In: cluster("10.244.0.1", "10.244.0.2", "0177.0.0.1")}
	d := &reconciletest.Driver{}
	r := reconciler(src, d)
	var logs bytes.Buffer
	r.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	r.Now = func() time.Time { return now }
	skippedLines := func() int {
		n := 0
		for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var line struct{ Level, Msg string }
			if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "endpoints skipped" && line.Level == "WARN" {
				n++
			}
		}
		logs.Reset()
		return n
	}
	reconcileAt := func(at time.Time) {
		t.Helper()
		now = at
		if _, err := r.Reconcile(context.Background(), false); err != nil {
			t.Fatal(err)
		}
	}
	t0 := now
	reconcileAt(t0)
	src.In = cluster("10.244.0.1", "0177.0.0.1") // 10.244.0.2 drains
	d.Do(func(d *reconciletest.Driver) { d.Busy = map[string]bool{"10-244-0-2": true} })
	for i := 1; i < 60; i++ {
		reconcileAt(t0.Add(time.Duration(i) * time.Second))
	}
	if n := skippedLines(); n != 1 {
		t.Errorf("60 reconciles in a minute said the skipped endpoint %d times, want 1", n)
	}
	reconcileAt(t0.Add(reconcile.LastingEvery))
	if n := skippedLines(); n != 1 {
		t.Errorf("after %s: said %d times, want once more", reconcile.LastingEvery, n)
	}
	src.In = cluster("10.244.0.1")
	reconcileAt(t0.Add(reconcile.LastingEvery + time.Second))
	src.In = cluster("10.244.0.1", "0177.0.0.1")
	reconcileAt(t0.Add(reconcile.LastingEvery + 2*time.Second))
	if n := skippedLines(); n != 1 {
		t.Errorf("mended, then back: said %d times, want once, at its return", n)
	}
}
