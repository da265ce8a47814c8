package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/pair"
)

// startView answers pid, or, when hang is set, nothing until it is closed
// (whatever the context says: a socket that hangs below it).
type startView struct {
	pid  int64
	hang chan struct{}
}

func (v startView) ProcessInfo(ctx context.Context) (pair.Process, error) {
	if v.hang != nil {
		<-v.hang
		return pair.Process{}, context.DeadlineExceeded
	}
	return pair.Process{PID: v.pid}, nil
}

// TestStartDoesNotWaitForAHungPair: one HAProxy of the pair hangs (its
// views never answer): the start goes on without it, and a mismatched pair
// that answers still stops the start (seed 971962119, serve-soak: a
// restarted service waited for the hung one before reconciling the other).
func TestStartDoesNotWaitForAHungPair(t *testing.T) {
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	for _, tc := range []struct {
		name    string
		second  pair.Reader // the second pair's runtime view
		refused bool
	}{
		{"hung", startView{hang: hang}, false},
		{"mismatched", startView{pid: 99}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pairs := map[string]*pair.Guard{
				"a": {Pair: 1, Dataplane: "http://a", Runtime: "tcp://a", RuntimeView: startView{pid: 1}, DataplaneView: startView{pid: 1}, Settle: time.Millisecond},
				"b": {Pair: 2, Dataplane: "http://b", Runtime: "tcp://b", RuntimeView: tc.second, DataplaneView: startView{pid: 2}, Settle: time.Millisecond},
			}
			done := make(chan error, 1)
			go func() { done <- checkPairs(context.Background(), pairs, 50*time.Millisecond, log) }()
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
		})
	}
	if !strings.Contains(logs.String(), "starting without it") {
		t.Errorf("no warning about the hung pair:\n%s", logs.String())
	}
}
