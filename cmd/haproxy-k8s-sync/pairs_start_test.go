package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/pair"
)

// startView answers pid after delay, or, when hang is set, nothing until it
// is closed (whatever the context says: a socket that hangs below it).
type startView struct {
	pid   int64
	delay time.Duration
	hang  chan struct{}
}

func (v startView) ProcessInfo(ctx context.Context) (pair.Process, error) {
	if v.hang != nil {
		<-v.hang
		return pair.Process{}, context.DeadlineExceeded
	}
	select {
	case <-time.After(v.delay):
		return pair.Process{PID: v.pid}, nil
	case <-ctx.Done():
		return pair.Process{}, ctx.Err()
	}
}

// TestStartDoesNotWaitForAHungPair: one HAProxy of the pair hangs (its
// views never answer): the start goes on without it (seed 971962119,
// serve-soak: a restarted service waited for the hung one before
// reconciling the other). A mismatched pair still stops serve, however
// fast it answers: at start when it answers within the wait, once its
// verdict comes otherwise.
func TestStartDoesNotWaitForAHungPair(t *testing.T) {
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	for _, tc := range []struct {
		name          string
		second        pair.Reader // the second pair's runtime view
		refused, late bool
	}{
		{"hung", startView{hang: hang}, false, false},
		{"mismatched", startView{pid: 99}, true, false},
		{"mismatched and slow", startView{pid: 99, delay: 300 * time.Millisecond}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs lockedBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			pairs := map[string]*pair.Guard{
				"a": {Pair: 1, Dataplane: "http://a", Runtime: "tcp://a", RuntimeView: startView{pid: 1}, DataplaneView: startView{pid: 1}, Settle: time.Millisecond},
				"b": {Pair: 2, Dataplane: "http://b", Runtime: "tcp://b", RuntimeView: tc.second, DataplaneView: startView{pid: 2}, Settle: time.Millisecond},
			}
			late := make(chan error, 1)
			done := make(chan error, 1)
			go func() {
				done <- checkPairs(context.Background(), pairs, 50*time.Millisecond, func(err error) { late <- err }, log)
			}()
			select {
			case err := <-done:
				if refused := err != nil; refused != tc.refused {
					t.Fatalf("refused %v (%v), want %v", refused, err, tc.refused)
				}
				if tc.refused && !strings.Contains(err.Error(), "(pair 2)") {
					t.Errorf("the refusal does not name pair 2: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the start still waits for a pair whose views never answer")
			}
			if tc.late {
				select {
				case err := <-late:
					if !strings.Contains(err.Error(), "(pair 2)") {
						t.Errorf("the late mismatch does not name pair 2: %v", err)
					}
				case <-time.After(30 * time.Second):
					t.Fatal("a mismatch found after the start was not told")
				}
			}
			if !tc.refused && !strings.Contains(logs.String(), "not every pair is checked yet: starting") {
				t.Errorf("no warning about the pair not checked yet:\n%s", logs.String())
			}
		})
	}
}
