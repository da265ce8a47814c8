package lb_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/lb"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// TestDocumentedClassSections: the sections docs/haproxy.md shows for a
// LoadBalancer Service's port are those the Manager has the API write (the
// test API writes them as the real one does: its conformance table).
func TestDocumentedClassSections(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "haproxy.md"))
	if err != nil {
		t.Fatal(err)
	}
	const marker = "gets these sections:\n\n```haproxy\n"
	_, rest, ok := strings.Cut(string(page), marker)
	block, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatalf("docs/haproxy.md has no haproxy block after %q", marker)
	}
	api := dataplanetest.New(t, dataplanetest.Options{})
	m := &lb.Manager{Targets: []lb.Target{clientOf(t, api)}, VIPs: []string{"127.0.0.73"}, Class: "haproxy-k8s-sync.io/haproxy"}
	web := services.Selected{Namespace: "default", Name: "web", Class: true, Ports: []services.Port{{Port: 443}}}
	if _, err := m.Sync(context.Background(), []services.Selected{web}, nil); err != nil {
		t.Fatal(err)
	}
	want := dataplanetest.NormalizeSections(strings.ReplaceAll(block, "192.0.2.10", "127.0.0.73"))
	got := dataplanetest.NormalizeSections(api.Sections(dataplanetest.ClassSection))
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("docs/haproxy.md shows\n%q\nthe API is asked to write\n%q", want, got)
	}
}
