package dataplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	stdsync "sync"
	"testing"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// bk is desired server name with the backup role (HAPROXY_LOCAL_ZONE: a
// server of another zone, named with desired.BackupSuffix).
func bk(name, addr string, st model.State) model.Server {
	s := srv(name, addr, st)
	s.Backup = true
	return s
}

// cfgServer is a server as haproxy.cfg holds it, written by this service.
func cfgServer(s model.Server) models.Server {
	port, weight, inter, rise, fall := int64(s.Port), int64(s.Weight), s.Check.Inter.Milliseconds(), int64(s.Check.Rise), int64(s.Check.Fall)
	m := models.Server{Name: s.Name, Address: s.Address, Port: &port, ServerParams: models.ServerParams{
		Weight: &weight, Check: "enabled", Inter: &inter, Rise: &rise, Fall: &fall, Maintenance: "disabled",
	}}
	switch s.State {
	case model.Maint:
		m.Maintenance = "enabled"
	case model.Drain:
		m.Weight = ptr(int64(0))
	}
	if s.Backup {
		m.Backup = "enabled"
	}
	return m
}

// serverWrite is one write of a server's body the API received.
type serverWrite struct {
	method, server, query string
	body                  models.Server
}

// recordServerWrites records the body of every server PUT and POST the API
// receives, versioned or in a transaction.
func recordServerWrites(t *testing.T, api *dataplanetest.Server) func() []serverWrite {
	t.Helper()
	var mu stdsync.Mutex
	var out []serverWrite
	api.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		if (r.Method != http.MethodPut && r.Method != http.MethodPost) || !strings.Contains(r.URL.Path, "/servers") {
			return false
		}
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		var m models.Server
		if err := json.Unmarshal(b, &m); err != nil {
			t.Errorf("%s %s: %v", r.Method, r.URL.Path, err)
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		out = append(out, serverWrite{r.Method, m.Name, r.URL.RawQuery, m})
		return false
	})
	return func() []serverWrite { mu.Lock(); defer mu.Unlock(); return slices.Clone(out) }
}

// TestBackupServerWritesKeepBackup: every write the Data Plane driver sends
// for a backup server carries "backup": a write without it is a change the
// API applies only by a reload, and the reload loads the server active, so
// that another zone's server takes traffic beside the local ones. Before,
// a server as read lost its role (the driver did not read backup), and the
// writes that start from it (a removed server parked, alone or in the
// delete batch; make-before-break's kept server written as it serves) sent
// "backup": "disabled".
func TestBackupServerWritesKeepBackup(t *testing.T) {
	active := srv("a", "127.0.1.1", model.Ready)
	b := bk("b_bk", "127.0.2.1", model.Ready)
	heavy := bk("b_bk", "127.0.2.1", model.Ready)
	heavy.Weight = 3
	tests := []struct {
		name    string
		cfg     []model.Server // haproxy.cfg, as written before
		desired model.Backend
		batch   int
		socket  bool // the runtime socket beside the API (make-before-break)
		writes  []string
		reloads int
	}{
		{name: "park (its endpoint not ready)", cfg: []model.Server{active, b},
			desired: want(active, bk("b_bk", "127.0.2.1", model.Maint)), writes: []string{"PUT b_bk"}},
		{name: "drain (its endpoint terminating)", cfg: []model.Server{active, b},
			desired: want(active, bk("b_bk", "127.0.2.1", model.Drain)), writes: []string{"PUT b_bk"}},
		{name: "weight", cfg: []model.Server{active, b},
			desired: want(active, heavy), writes: []string{"PUT b_bk"}},
		{name: "address", cfg: []model.Server{active, b},
			desired: want(active, bk("b_bk", "127.0.2.9", model.Ready)), writes: []string{"PUT b_bk"}},
		{name: "removed: parked, then deleted by the transaction", cfg: []model.Server{active, b},
			desired: want(active), writes: []string{"PUT b_bk"}, reloads: 1},
		{name: "removed with a delete batch: parked, deleted with the batch", cfg: []model.Server{active, b}, batch: 10,
			desired: want(active), writes: []string{"PUT b_bk"}},
		{name: "make-before-break: a kept server haproxy.cfg parks is written as it serves", socket: true,
			cfg:     []model.Server{bk("old_bk", "127.0.2.1", model.Maint)},
			desired: want(bk("new_bk", "127.0.2.2", model.Ready)), writes: []string{"POST new_bk", "PUT old_bk"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
			var cfg []models.Server
			for _, s := range tt.cfg {
				cfg = append(cfg, cfgServer(s))
			}
			api.AddBackend(api.Backend("be"), cfg...)
			var opts []dataplane.Option
			if tt.batch > 0 {
				opts = append(opts, dataplane.WithDeleteBatch(tt.batch))
			}
			if tt.socket {
				// The running HAProxy has it in service (put there
				// through the socket; the write that was to follow
				// failed): model.Runtime.Unwritten, serving.
				hl := &healthLog{api: api, passed: true, loaded: map[string]bool{}}
				for _, s := range tt.cfg {
					hl.loaded[s.Name] = true
					hl.set(model.Server{Name: s.Name, Address: s.Address, State: model.Ready})
				}
				opts = append(opts, dataplane.WithRuntime(hl))
			}
			u, _ := url.Parse(api.URL)
			c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, opts...)
			writes := recordServerWrites(t, api)
			p, _ := syncOnce(t, c, tt.desired)

			var got []string
			for _, w := range writes() {
				name := w.server
				got = append(got, w.method+" "+name)
				if strings.HasSuffix(name, "_bk") && w.body.Backup != "enabled" {
					t.Errorf("%s %s (%s): backup %q, want enabled", w.method, name, w.query, w.body.Backup)
				}
			}
			if !slices.Equal(got, tt.writes) {
				t.Errorf("server writes %v, want %v (plan %v)", got, tt.writes, p.Changes)
			}
			if api.Reloads() != tt.reloads {
				t.Errorf("%d reloads, want %d", api.Reloads(), tt.reloads)
			}
			for _, s := range api.Servers("be") {
				if strings.HasSuffix(s.Name, "_bk") != (s.Backup == "enabled") {
					t.Errorf("haproxy.cfg: %s backup %q", s.Name, s.Backup)
				}
			}
			if tt.socket && !slices.Contains(p.HandingOver, "old_bk") {
				t.Errorf("handing over %v, want old_bk kept (make-before-break)", p.HandingOver)
			}
		})
	}
}

// TestBackupServerParkedAndRemovedWithoutReload: on the test API, a backup
// server parked (its endpoint not ready), then removed (parked until its
// delete batch is full), costs no reload, and haproxy.cfg still holds it
// as a backup server: a reload, whenever it comes, loads it as one.
func TestBackupServerParkedAndRemovedWithoutReload(t *testing.T) {
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithDeleteBatch(10))
	active := srv("a", "127.0.1.1", model.Ready)
	syncOnce(t, c, want(active, bk("b_bk", "127.0.2.1", model.Ready)))
	reloads := api.Reloads()
	backupLine := func() string {
		for _, l := range api.ServerLines("be") {
			if strings.HasPrefix(l, "server b_bk ") {
				return l
			}
		}
		return ""
	}
	if l := backupLine(); !strings.Contains(l, " backup") {
		t.Fatalf("set-up: %q", l)
	}
	for _, step := range []struct {
		name    string
		desired model.Backend
	}{
		{"parked", want(active, bk("b_bk", "127.0.2.1", model.Maint))},
		{"back in service", want(active, bk("b_bk", "127.0.2.1", model.Ready))},
		{"removed", want(active)},
	} {
		p, a := syncOnce(t, c, step.desired)
		if a.Reload || api.Reloads() != reloads {
			t.Errorf("%s (parked %v, deleted %v): %d reloads", step.name, p.Names(plan.Maint), p.Names(plan.Delete), api.Reloads()-reloads)
		}
		if l := backupLine(); !strings.Contains(l, " backup") || strings.Contains(l, "no-backup") {
			t.Errorf("%s: haproxy.cfg holds %q, want it a backup server", step.name, l)
		}
	}
	cur, err := c.Read(context.Background(), "be")
	if err != nil || len(cur.Servers) != 2 {
		t.Fatalf("read after removal: %d servers, %v", len(cur.Servers), err)
	}
	if s := cur.Servers[1]; s.Name != "b_bk" || !s.Backup || s.State != model.Maint {
		t.Errorf("read after removal: %s backup %v %s; want b_bk parked, read as backup", s.Name, s.Backup, s.State)
	}
}
