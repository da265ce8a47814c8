package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestManifestsDecodedOncePerVersion: many Services' reads of unchanged
// manifests decode them once; an edit, even one that keeps the size and
// the modification time (cp -p), is read at the next call; what a caller
// does to what it read changes nothing for the next one.
func TestManifestsDecodedOncePerVersion(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "shop.yaml")
	doc := func(port int) string {
		var b strings.Builder
		for i := range 20 {
			fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Service\nmetadata: {name: web%02d, namespace: shop}\nspec: {ports: [{name: http, port: %d}]}\n", i, port)
			fmt.Fprintf(&b, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web%02d-1, namespace: shop, labels: {kubernetes.io/service-name: web%02d}}\naddressType: IPv4\nports: [{name: http, port: %d}]\nendpoints: [{addresses: [10.0.0.%d]}]\n", i, i, port, i+1)
		}
		return b.String()
	}
	if err := os.WriteFile(file, []byte(doc(8080)), 0o600); err != nil {
		t.Fatal(err)
	}
	decodes := func() int {
		decoded.Lock()
		defer decoded.Unlock()
		return decoded.decodes
	}
	read := func(i int) int32 {
		t.Helper()
		in, err := (&FileSource{Path: dir, Namespace: "shop", Service: fmt.Sprintf("web%02d", i)}).Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(in.Slices) != 1 {
			t.Fatalf("web%02d: %d slices", i, len(in.Slices))
		}
		port := *in.Slices[0].Ports[0].Port
		// A caller's edit of what it read stays its own.
		in.Service.Name, *in.Slices[0].Ports[0].Port = "changed", 1
		return port
	}
	before := decodes()
	for i := range 20 {
		if p := read(i); p != 8080 {
			t.Fatalf("web%02d: port %d", i, p)
		}
	}
	if _, err := (&FileServices{Path: dir}).ListServices(context.Background(), "", metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := decodes() - before; n != 1 {
		t.Errorf("20 Services' reads and a list decoded the manifests %d times, want 1", n)
	}
	if p := read(3); p != 8080 {
		t.Errorf("after a caller's edit: port %d", p)
	}
	// The same size, the same modification time: cp -p of an edited copy.
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // a change time of its own
	if err := os.WriteFile(file, []byte(doc(9090)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if p := read(5); p != 9090 {
		t.Errorf("after an edit that kept size and modification time: port %d, want 9090", p)
	}
	// A change the signature cannot see (a coarse clock): the watch's
	// version, a digest of the contents, drops the decoded copy.
	if _, err := ManifestsVersion(dir); err != nil {
		t.Fatal(err)
	}
	decoded.Lock()
	e := decoded.by[dir]
	e.objs = nil // what was decoded before the unseen change
	decoded.by[dir] = e
	decoded.versions[dir] = "the version before"
	decoded.Unlock()
	v1, err := ManifestsVersion(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := decodes()
	if p := read(1); p != 9090 || decodes() != n+1 {
		t.Errorf("a read after a new version: port %d, %d decodes, want 9090 and 1", p, decodes()-n)
	}
	if v2, _ := ManifestsVersion(dir); v2 != v1 {
		t.Errorf("version changed with nothing written: %s then %s", v1, v2)
	}
	n = decodes()
	read(2)
	if decodes() != n {
		t.Errorf("an unchanged version dropped the decoded copy")
	}
}
