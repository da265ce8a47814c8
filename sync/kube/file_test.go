package kube

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

func TestFileSourceReadsAKubectlDump(t *testing.T) {
	src := &FileSource{Path: "../../testdata/manifests", Namespace: "shop", Service: "web", Nodes: true}
	in, err := src.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if in.Service.Namespace != "shop" || len(in.Slices) != 1 || in.Slices[0].Name != "web-x1" || len(in.Nodes) != 2 {
		t.Fatalf("service %s/%s, %d slices, %d nodes", in.Service.Namespace, in.Service.Name, len(in.Slices), len(in.Nodes))
	}
	backends, _, err := desired.Compute(in, desired.Options{Mode: desired.NodeMode, Backends: []desired.PortBackend{{Backend: "be"}}})
	if err != nil {
		t.Fatal(err)
	}
	// (Replaces: the name it would have had as a zone's backup, see desired.)
	want := []model.Server{{Name: "worker-1", Address: "192.0.2.11", Port: 31000, Weight: 1, State: model.Ready, Reason: "endpoints", Replaces: []string{"worker-1_bk"}}}
	if !reflect.DeepEqual(backends[0].Servers, want) {
		t.Errorf("servers %+v", backends[0].Servers)
	}
}

func TestFileSourceDemoCluster(t *testing.T) {
	src := &FileSource{Path: "../../testdata/demo/cluster.yaml", Namespace: "ingress-nginx", Service: "ingress-nginx", Nodes: true}
	in, err := src.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	chk := model.Check{Inter: time.Second, Rise: 1, Fall: 1}
	// The demo's Nodes are on loopback, as the demo allows (ALLOWED_SERVER_CIDRS).
	loopback := desired.AddressPolicy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	backends, report, err := desired.Compute(in, desired.Options{Mode: desired.NodeMode, Backends: []desired.PortBackend{{Backend: "ingress-nginx"}},
		WeightByEndpoints: true, Check: chk, Addresses: loopback})
	if err != nil || report.Total() > 0 {
		t.Fatal(err, report)
	}
	want := []model.Server{
		{Name: "node-a", Replaces: []string{"node-a_bk"}, Address: "127.0.1.1", Port: 30080, Weight: 2, State: model.Ready, Reason: "endpoints", Check: chk},
		{Name: "node-b", Replaces: []string{"node-b_bk"}, Address: "127.0.1.2", Port: 30080, Weight: 1, State: model.Ready, Reason: "endpoints", Check: chk},
		{Name: "node-c", Replaces: []string{"node-c_bk"}, Address: "127.0.1.3", Port: 30080, Weight: 1, State: model.Drain, Reason: "endpoints", Check: chk},
	}
	if !reflect.DeepEqual(backends[0].Servers, want) {
		t.Errorf("servers %+v", backends[0].Servers)
	}
}

func TestFileSourceErrors(t *testing.T) {
	dir := t.TempDir()
	src := &FileSource{Path: dir, Namespace: "ns", Service: "web"}
	if _, err := src.Read(context.Background()); !errors.Is(err, ErrServiceNotFound) {
		t.Errorf("empty dir: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("kind: Service\napiVersion: v1\nmetadata: {name: [}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Read(context.Background()); err == nil || errors.Is(err, ErrServiceNotFound) {
		t.Errorf("malformed file: %v", err)
	}
	src.Path = filepath.Join(dir, "missing")
	if _, err := src.Read(context.Background()); err == nil {
		t.Error("missing path accepted")
	}
}

// TestManifestsVersion: the version changes with what a read would see (an
// edit, a file added to or removed from the directory, even one written
// with its old modification time) and not with a touch, nor with a file of
// another extension.
func TestManifestsVersion(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	write("a.yaml", "kind: Service\n")
	for _, tt := range []struct {
		step    string
		do      func()
		changes bool
	}{
		{"nothing", func() {}, false},
		{"a touch", func() { _ = os.Chtimes(filepath.Join(dir, "a.yaml"), time.Now(), time.Now()) }, false},
		{"a file of another kind", func() { write("notes.txt", "x") }, false},
		{"an edit", func() { write("a.yaml", "kind: Node\n") }, true},
		{"an edit of the same size, its old time kept", func() {
			write("a.yaml", "kind: Nope\n")
			_ = os.Chtimes(filepath.Join(dir, "a.yaml"), old, old)
		}, true},
		{"a file added", func() { write("b.json", "{}") }, true},
		{"a file removed", func() { _ = os.Remove(filepath.Join(dir, "b.json")) }, true},
	} {
		before, err := ManifestsVersion(dir)
		if err != nil {
			t.Fatal(err)
		}
		tt.do()
		after, err := ManifestsVersion(dir)
		if err != nil {
			t.Fatal(err)
		}
		if (before != after) != tt.changes {
			t.Errorf("%s: changed %v, want %v", tt.step, before != after, tt.changes)
		}
	}
	if _, err := ManifestsVersion(filepath.Join(dir, "gone.yaml")); err == nil {
		t.Error("a path that is not there has a version")
	}
}

// TestFileServicesListsAsTheAPIWould: the many-Services modes' lister over
// manifests gives every Service of the files, or one namespace's, sorted,
// one page; a Service without a namespace is left out (FileSource does not
// see it either), and of two with one key the last read counts.
func TestFileServicesListsAsTheAPIWould(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dump, err := os.ReadFile("../../testdata/manifests/dump.yaml")
	if err != nil {
		t.Fatal(err)
	}
	write("a-dump.yaml", string(dump))
	write("b-more.yaml", `apiVersion: v1
kind: Service
metadata: {name: nowhere}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: other, annotations: {read: last}}
`)
	for _, tt := range []struct {
		namespace string
		want      []string
	}{
		{"", []string{"other/web", "shop/web"}},
		{"shop", []string{"shop/web"}},
		{"none", nil},
	} {
		l, err := (&FileServices{Path: dir}).ListServices(context.Background(), tt.namespace, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range l.Items {
			got = append(got, s.Namespace+"/"+s.Name)
			if s.Namespace == "other" && s.Annotations["read"] != "last" {
				t.Errorf("%s: the first of two Services other/web counted", tt.namespace)
			}
		}
		if !reflect.DeepEqual(got, tt.want) || l.Continue != "" {
			t.Errorf("namespace %q: %v (continue %q), want %v", tt.namespace, got, l.Continue, tt.want)
		}
	}
	if _, err := (&FileServices{Path: filepath.Join(dir, "missing")}).ListServices(context.Background(), "", metav1.ListOptions{}); err == nil {
		t.Error("a missing path lists no error")
	}
}
