package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
)

// TestServeManifestsReconcilesAtStartAndOnEdit: `serve --manifests`, with
// nobody posting, reconciles once at start and again when the file is
// edited: the backend follows the file by itself.
func TestServeManifestsReconcilesAtStartAndOnEdit(t *testing.T) {
	api := dataplanetest.New(t, dataplanetest.Options{})
	rr := "roundrobin"
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "web", Mode: "tcp", AdvCheck: "tcp-check", Balance: &models.Balance{Algorithm: &rr}}})
	manifests := filepath.Join(t.TempDir(), "cluster.json")
	writeManifests(t, manifests, "127.0.0.51")
	logs := &lockedBuffer{} // read while the process writes it
	cmd := command(t, "serve --manifests "+manifests, "HAPROXY_DATAPLANE_URL="+api.URL, "TARGET_ADDRESS=pod",
		"INGRESS_NAMESPACE=shop", "INGRESS_SERVICE_NAME=web", "HAPROXY_BACKEND_NAME=web", "ALLOWED_SERVER_CIDRS=127.0.0.0/8",
		"WEBHOOK_AUTH=none", "LOG_LEVEL=info", fmt.Sprintf("PORT=%d", freePort(t)))
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addresses := func() string {
		var out []string
		for _, s := range api.Servers("web") {
			out = append(out, s.Address)
		}
		return strings.Join(out, ",")
	}
	until := func(what, want string, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for addresses() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: servers at %q after %s, want %q\n%s", what, addresses(), within, want, logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	until("at start", "127.0.0.51", 5*time.Second)
	start := time.Now()
	writeManifests(t, manifests, "127.0.0.51", "127.0.0.52")
	until("after an edit", "127.0.0.51,127.0.0.52", 10*time.Second)
	t.Logf("the edit reached the backend in %s", time.Since(start))
	if !strings.Contains(logs.String(), `"msg":"manifests changed: reconciling"`) {
		t.Errorf("the change was not said:\n%s", logs.String())
	}
}
