package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// TestServiceNotFollowedIsNoFailedReconcile: a Service's lane answering
// that the Service is not followed (refused: another holds the backend it
// names; or it left the selection) logs one INFO "service not followed"
// with the reason, never "reconcile failed" (found by the serve
// many-Services history, seed 3: failures-explained counted each as a
// failed reconcile); any other error still logs "reconcile failed".
func TestServiceNotFollowedIsNoFailedReconcile(t *testing.T) {
	for _, c := range []struct {
		name    string
		err     error
		want    string
		notWant string
	}{
		{"refused", &fleet.NotSelectedError{Key: "ns/b", Reason: "backend be is held by ns/a"}, `"msg":"service not followed"`, "reconcile failed"},
		{"left the selection", fmt.Errorf("lane: %w", &fleet.NotSelectedError{Key: "ns/b"}), `"reason":"no selection matches it"`, "reconcile failed"},
		{"a failure", errors.New("dial unix: connection refused"), `"msg":"reconcile failed"`, "service not followed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			p := &fleetPokes{log: slog.New(slog.NewJSONHandler(&buf, nil))}
			p.logService("watch", "ns/b", reconcile.Result{Status: reconcile.StatusError, Error: c.err.Error()}, c.err)
			if out := buf.String(); !strings.Contains(out, c.want) || strings.Contains(out, c.notWant) {
				t.Fatalf("logged %s; want %s and no %q", out, c.want, c.notWant)
			}
		})
	}
}
