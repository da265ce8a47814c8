package reconcile

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// TestTextLogsAreReadable: the reconcile line as the handler logs it, with
// LOG_FORMAT=text, names each target's changes in words, not as a Go
// struct; the JSON line keeps the result's fields.
func TestTextLogsAreReadable(t *testing.T) {
	targets := []TargetResult{
		{Target: "http://127.0.0.1:5555", Backend: "be", Add: []string{"node-a", "node-b"}, Update: []string{}, Delete: []string{"old"},
			Waiting: []string{"node-a"}, Attempts: 1},
		{Target: "unix:///run/haproxy/admin.sock", Backend: "be", Attempts: 3, Failed: []plan.ServerError{{Server: "node-c", Error: "refused"}},
			Error: "connection refused", ErrorClass: failure.Unreachable},
	}
	var text bytes.Buffer
	slog.New(slog.NewTextHandler(&text, nil)).Info("reconcile", "status", "applied", "desired", 2, "targets", targets)
	line := text.String()
	want := `targets="[http://127.0.0.1:5555 be: add=node-a,node-b delete=old waiting=node-a attempts=1 ` +
		`unix:///run/haproxy/admin.sock be: attempts=3 failed=node-c (refused) error=connection refused (unreachable)]"`
	if strings.Contains(line, "{Target:") || !strings.Contains(line, want) {
		t.Errorf("text line %s\nwant %s", line, want)
	}

	var js bytes.Buffer
	slog.New(slog.NewJSONHandler(&js, nil)).Info("reconcile", "targets", targets)
	var got struct{ Targets []map[string]any }
	if err := json.Unmarshal(js.Bytes(), &got); err != nil || len(got.Targets) != 2 || got.Targets[0]["target"] != "http://127.0.0.1:5555" {
		t.Errorf("json line %s: %v", js.String(), err)
	}
}
