package dataplane

import (
	"testing"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// TestBackupIsWrittenOnTheServer: a backup server (HAPROXY_LOCAL_ZONE)
// is written with backup enabled; an active one leaves the field as read,
// unless it says enabled.
func TestBackupIsWrittenOnTheServer(t *testing.T) {
	s := model.Server{Name: "n1_bk", Address: "10.0.0.1", Port: 80, Weight: 1, State: model.Ready, Backup: true}
	m, err := serverModel(s, nil)
	if err != nil || m.Backup != enabled {
		t.Fatalf("backup server: %q %v", m.Backup, err)
	}
	s.Backup = false
	if m, _ := serverModel(s, nil); m.Backup != "" {
		t.Errorf("active server: backup %q, want unset", m.Backup)
	}
	if m, _ := serverModel(s, &models.Server{ServerParams: models.ServerParams{Backup: enabled}}); m.Backup != "disabled" {
		t.Errorf("active server read as backup: %q, want disabled", m.Backup)
	}
}
