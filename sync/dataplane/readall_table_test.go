package dataplane

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// TestServerReadFieldsAreManagedFields: the conformance table keeps of a
// server what this package reads of it (managedFields), no less.
func TestServerReadFieldsAreManagedFields(t *testing.T) {
	var tags []string
	ty := reflect.TypeFor[managedFields]()
	for i := range ty.NumField() {
		tags = append(tags, strings.Split(ty.Field(i).Tag.Get("json"), ",")[0])
	}
	slices.Sort(tags)
	kept := slices.Sorted(slices.Values(dataplanetest.ServerReadFields))
	if !slices.Equal(tags, kept) {
		t.Errorf("managedFields' JSON fields %q, dataplanetest.ServerReadFields %q", tags, kept)
	}
}

// TestReadAllReadsTheRecordedBody reads what the real dataplaneapi answered
// to GET .../backends?full_section=true (the conformance table's case
// "class: read back with servers") as ReadAll does: the servers of "be" are
// what the read of its servers alone gives (GET .../backends/be/servers),
// and what was written; the class backend, which has none, has no
// "servers" key (ReadAll reads it alone).
func TestReadAllReadsTheRecordedBody(t *testing.T) {
	paths, err := filepath.Glob("../../testdata/dataplaneapi/*.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no conformance table: %v", err)
	}
	check := model.Check{Inter: 2 * time.Second, Rise: 2, Fall: 3}
	want := []model.Server{
		{Name: "s1", Address: "127.44.0.1", Port: 18401, Weight: 100, State: model.Ready, Check: check},
		{Name: "s2", Address: "127.44.0.2", Port: 18401, Weight: 100, State: model.Ready, Check: check},
		{Name: "s3", Address: "127.44.0.3", Port: 18401, Weight: 100, State: model.Ready, Check: check},
		{Name: "s4", Address: "127.44.0.4", Port: 18401, Weight: 50, State: model.Maint, Check: check},
		{Name: "s5", Address: "127.44.0.5", Port: 18401, Weight: 100, State: model.Ready, Check: check, Backup: true},
	}
	found := 0
	for _, p := range paths {
		table, err := dataplanetest.LoadConformanceTable(p)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(table.Cases, func(c dataplanetest.Case) bool { return c.Name == "class: read back with servers" })
		if i < 0 {
			// A table recorded before the case (until it is recorded again).
			t.Logf("%s: no case \"class: read back with servers\"", filepath.Base(p))
			continue
		}
		found++
		var all, alone json.RawMessage
		for _, s := range table.Cases[i].Steps {
			switch {
			case s.Path == "/services/haproxy/configuration/backends?full_section=true":
				all = s.Read
			case s.Path == "/services/haproxy/configuration/backends/be/servers":
				alone = s.Read
			}
		}
		var backends []struct {
			Name    string                     `json:"name"`
			Servers map[string]json.RawMessage `json:"servers"`
		}
		if err := json.Unmarshal(all, &backends); err != nil {
			t.Fatalf("%s: the read of all backends: %v", filepath.Base(p), err)
		}
		got := map[string][]model.Server{}
		for _, be := range backends {
			if be.Servers == nil {
				got[be.Name] = nil
				continue
			}
			raws, err := namedServers(be.Servers)
			if err != nil {
				t.Fatal(err)
			}
			got[be.Name] = serversOf(t, raws)
		}
		var list []json.RawMessage
		if err := json.Unmarshal(alone, &list); err != nil {
			t.Fatalf("%s: the read of be's servers: %v", filepath.Base(p), err)
		}
		wantAll := map[string][]model.Server{"be": want, "be_k8s_default_web_80": nil}
		if !reflect.DeepEqual(got, wantAll) {
			t.Errorf("%s: servers read of all backends:\n got %+v\nwant %+v", filepath.Base(p), got, wantAll)
		}
		if read := serversOf(t, list); !reflect.DeepEqual(read, got["be"]) {
			t.Errorf("%s: be's servers read alone:\n got %+v\nread of all %+v", filepath.Base(p), read, got["be"])
		}
	}
	if found == 0 {
		t.Error("no table has the case \"class: read back with servers\"")
	}
}

// serversOf reads servers as Read does, by name, without their Source.
func serversOf(t *testing.T, raws []json.RawMessage) []model.Server {
	t.Helper()
	var out []model.Server
	for _, raw := range raws {
		s, err := serverOf(raw)
		if err != nil {
			t.Fatal(err)
		}
		s.Source = nil
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b model.Server) int { return strings.Compare(a.Name, b.Name) })
	return out
}
