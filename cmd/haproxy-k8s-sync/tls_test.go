package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// TestReconcileThroughTLSAdminSocket: the command reaches a real HAProxy's
// admin socket through HAProxy's TLS listener with the files the
// HAPROXY_RUNTIME_TLS_ variables name; a wrong CA, or a client certificate
// HAProxy refuses, fails the read as a permanent failure at the first
// attempt.
func TestReconcileThroughTLSAdminSocket(t *testing.T) {
	if _, err := haproxytest.Binary(); err != nil {
		t.Skip(err)
	}
	ca := haproxytest.NewCA(t, "test CA")
	server := ca.Issue(t, "haproxy.test", false, time.Now().Add(time.Hour))
	h := haproxytest.StartWith(t, haproxytest.Options{AdminTLS: &haproxytest.AdminTLS{ServerCert: server.CertPEM, ServerKey: server.KeyPEM, ClientCA: ca.PEM}},
		haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin"}})
	dir := t.TempDir()
	haproxytest.WriteFile(t, filepath.Join(dir, "ca.crt"), ca.PEM)
	cert, key := ca.Issue(t, "haproxy-k8s-sync", true, time.Now().Add(time.Hour)).Write(t, dir, "tls")
	env := []string{"HAPROXY_RUNTIME_URL=tls://" + h.AdminTLS, "HAPROXY_RUNTIME_TLS_CA=" + filepath.Join(dir, "ca.crt"),
		"HAPROXY_RUNTIME_TLS_CERT=" + cert, "HAPROXY_RUNTIME_TLS_KEY=" + key, "HAPROXY_BACKEND_NAME=be", "ALLOWED_SERVER_CIDRS=127.0.0.0/8", "RECONCILE_TIMEOUT=5s"}

	var res struct {
		Status  string
		Targets []struct {
			Error    string
			Class    string `json:"errorClass"`
			Add      []string
			Attempts int
		}
	}
	code, stdout, stderr := runCommand(t, "reconcile --dry-run --manifests "+demoCluster, env...)
	if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil || res.Status != "planned" || len(res.Targets) != 1 ||
		strings.Join(res.Targets[0].Add, ",") != "node-a,node-b,node-c" {
		t.Fatalf("exit %d, stdout %s, stderr %s", code, stdout, stderr)
	}
	if strings.Contains(stderr, "in clear") {
		t.Errorf("tls:// warned about: %s", stderr)
	}

	other := haproxytest.NewCA(t, "another CA")
	haproxytest.WriteFile(t, filepath.Join(dir, "ca.crt"), other.PEM)
	code, stdout, _ = runCommand(t, "reconcile --dry-run --manifests "+demoCluster, env...)
	if code != 1 || json.Unmarshal([]byte(stdout), &res) != nil || len(res.Targets) != 1 ||
		!strings.Contains(res.Targets[0].Error, "unknown authority") || res.Targets[0].Class != "permanent" || res.Targets[0].Attempts != 1 {
		t.Errorf("server certificate from another CA: exit %d, stdout %s", code, stdout)
	}

	// The right CA, and a client certificate another CA issued: HAProxy
	// refuses it (an alert, at the first read under TLS 1.3).
	haproxytest.WriteFile(t, filepath.Join(dir, "ca.crt"), ca.PEM)
	other.Issue(t, "haproxy-k8s-sync", true, time.Now().Add(time.Hour)).Write(t, dir, "tls")
	code, stdout, _ = runCommand(t, "reconcile --manifests "+demoCluster, env...)
	if code != 1 || json.Unmarshal([]byte(stdout), &res) != nil || len(res.Targets) != 1 ||
		!strings.Contains(res.Targets[0].Error, "remote error") || res.Targets[0].Class != "permanent" || res.Targets[0].Attempts != 1 {
		t.Errorf("a client certificate HAProxy refuses: exit %d, stdout %s", code, stdout)
	}
}
