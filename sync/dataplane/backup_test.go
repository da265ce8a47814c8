package dataplane

import (
	"encoding/json"
	"testing"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// TestBackupIsWrittenOnTheServer: a new backup server (HAPROXY_LOCAL_ZONE)
// is written with backup enabled, a new active one without; a server that
// exists keeps backup as read, whatever the model written over it says
// (HAProxy takes it only when a server is added: the API reloads for a
// change, and a write that drops it turns a backup server active).
func TestBackupIsWrittenOnTheServer(t *testing.T) {
	s := model.Server{Name: "n1_bk", Address: "10.0.0.1", Port: 80, Weight: 1, State: model.Ready, Backup: true}
	m, err := serverModel(s, nil)
	if err != nil || m.Backup != enabled {
		t.Fatalf("new backup server: %q %v", m.Backup, err)
	}
	active := s
	active.Backup = false
	if m, _ := serverModel(active, nil); m.Backup != "" {
		t.Errorf("new active server: backup %q, want unset", m.Backup)
	}
	raw, _ := json.Marshal(m) // n1_bk as the API returns it
	for _, tt := range []struct {
		name   string
		srv    model.Server
		source any
		want   string
	}{
		{"backup as read, the model without the role (a removed server parked from a read that lost it)", active, rawServer(raw), enabled},
		{"backup as read, the model a backup", s, rawServer(raw), enabled},
		{"backup in the model just POSTed", active, &models.Server{ServerParams: models.ServerParams{Backup: enabled}}, enabled},
		{"active as read, the model a backup", s, &models.Server{}, ""},
		{"no-backup as read", s, &models.Server{ServerParams: models.ServerParams{Backup: "disabled"}}, "disabled"},
	} {
		if m, err := serverModel(tt.srv, tt.source); err != nil || m.Backup != tt.want {
			t.Errorf("%s: backup %q (%v), want %q", tt.name, m.Backup, err, tt.want)
		}
	}
}

// TestBackupIsRead: a server read from haproxy.cfg carries its role, so that
// a write starting from it (a removed server parked) keeps it.
func TestBackupIsRead(t *testing.T) {
	for raw, want := range map[string]bool{
		`{"name":"a_bk","address":"10.0.0.1","backup":"enabled"}`: true,
		`{"name":"a","address":"10.0.0.1"}`:                       false,
		`{"name":"a","address":"10.0.0.1","backup":"disabled"}`:   false,
	} {
		s, err := serverOf(json.RawMessage(raw))
		if err != nil || s.Backup != want {
			t.Errorf("%s: backup %v (%v), want %v", raw, s.Backup, err, want)
		}
		parked := s
		parked.State = model.Maint
		m, err := serverModel(parked, s.Source)
		if err != nil || (m.Backup == enabled) != want {
			t.Errorf("%s parked: backup %q (%v)", raw, m.Backup, err)
		}
	}
}
