package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"encoding/pem"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/mod/modfile"
)

const (
	imageTar  = "../../bin/image.tar"
	imageSBOM = "../../bin/image.spdx.json"
)

// release is the VERSION file.
func release(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// builtImage opens bin/image.tar, which make test builds (make image) before
// the unit tests. Only HKS_SKIP_IMAGE=1 lets its absence pass, as a skip.
func builtImage(t *testing.T) v1.Image {
	t.Helper()
	if _, err := os.Stat(imageTar); err != nil {
		if os.Getenv("HKS_SKIP_IMAGE") == "1" {
			t.Skipf("no %s and HKS_SKIP_IMAGE=1: the image is not checked", imageTar)
		}
		t.Fatalf("%v: run `make image` first (or set HKS_SKIP_IMAGE=1 to skip this check)", err)
	}
	img, err := tarball.ImageFromPath(imageTar, nil)
	if err != nil {
		t.Fatalf("open %s as a docker save archive: %v", imageTar, err)
	}
	return img
}

// TestImage checks the image make image built: how it runs (user,
// entrypoint, command), its labels, its files (CA bundle, users, /tmp,
// one executable and no shell), and the binary inside it, run with version.
func TestImage(t *testing.T) {
	img := builtImage(t)
	v := release(t)
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	if c.User != "65532:65532" && c.User != "65532" {
		t.Errorf("User %q, want 65532 (numeric: runAsNonRoot can check it)", c.User)
	}
	if len(c.Entrypoint) != 1 || c.Entrypoint[0] != binaryPath {
		t.Errorf("Entrypoint %q, want [%s]", c.Entrypoint, binaryPath)
	}
	if len(c.Cmd) != 1 || c.Cmd[0] != "serve" {
		t.Errorf("Cmd %q, want [serve]", c.Cmd)
	}
	if cfg.OS != "linux" || cfg.Architecture == "" {
		t.Errorf("platform %s/%s", cfg.OS, cfg.Architecture)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  v,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.title":    "haproxy-k8s-sync",
		"org.opencontainers.image.source":   source,
	} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	revision := c.Labels["org.opencontainers.image.revision"]
	if len(revision) < 7 {
		t.Errorf("label org.opencontainers.image.revision = %q, want the commit", revision)
	}

	files := map[string]*tar.Header{}
	data := map[string][]byte{}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read the image's files: %v", err)
		}
		name := "/" + strings.Trim(h.Name, "/")
		files[name] = h
		if h.Typeflag == tar.TypeReg {
			if data[name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, h := range files {
		if h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink {
			t.Errorf("%s is a link to %s: the base has none", name, h.Linkname)
		}
		if h.Typeflag == tar.TypeReg && h.Mode&0o111 != 0 && name != binaryPath {
			t.Errorf("%s is executable: the image holds one program, %s", name, binaryPath)
		}
		switch filepath.Base(name) {
		case "sh", "bash", "dash", "ash", "busybox":
			t.Errorf("%s: the image has no shell", name)
		}
	}
	if h := files["/tmp"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode&0o7777 != 0o1777 {
		t.Errorf("/tmp: %+v, want a directory with mode 1777", h)
	}
	if !strings.Contains(string(data["/etc/passwd"]), "\nnonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot 65532:\n%s", data["/etc/passwd"])
	}
	if !strings.Contains(string(data["/etc/group"]), "\nnonroot:x:65532:") {
		t.Errorf("/etc/group has no nonroot 65532:\n%s", data["/etc/group"])
	}
	certs, rest := 0, data["/etc/ssl/certs/ca-certificates.crt"]
	for {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		certs++
	}
	if certs < 50 {
		t.Errorf("/etc/ssl/certs/ca-certificates.crt holds %d certificates, want Debian's bundle", certs)
	}
	if len(data["/usr/share/doc/ca-certificates/copyright"]) == 0 {
		t.Error("the ca-certificates package's copyright file is missing")
	}

	bin := data[binaryPath]
	if files[binaryPath] == nil || files[binaryPath].Mode&0o111 == 0 {
		t.Fatalf("%s is missing or not executable", binaryPath)
	}
	if cfg.Architecture != runtime.GOARCH {
		t.Skipf("the image is %s, this machine %s: the binary is not run", cfg.Architecture, runtime.GOARCH)
	}
	p := filepath.Join(t.TempDir(), "haproxy-k8s-sync")
	if err := os.WriteFile(p, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(p, "version").Output()
	if want := "haproxy-k8s-sync " + v + " (commit " + revision[:min(7, len(revision))] + ", "; err != nil || !strings.HasPrefix(string(out), want) {
		t.Errorf("the image's binary says %q (%v), want %q...", out, err, want)
	}
}

// TestImageIsAnOCILayoutToo: the tarball's OCI side (index.json, blobs)
// names the same config and layers as its docker save side, so skopeo's
// oci-archive: and crane push / docker load read one image.
func TestImageIsAnOCILayoutToo(t *testing.T) {
	img := builtImage(t)
	entries := map[string][]byte{}
	f, err := os.Open(imageTar)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg && h.Size < 1<<20 {
			if entries[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		} else {
			entries[h.Name] = nil
		}
	}
	if !bytes.Contains(entries["oci-layout"], []byte(`"imageLayoutVersion":"1.0.0"`)) {
		t.Errorf("oci-layout: %q", entries["oci-layout"])
	}
	var index v1.IndexManifest
	if err := json.Unmarshal(entries["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, entries["index.json"])
	}
	if got := index.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got != release(t) {
		t.Errorf("index.json ref.name %q, want %s", got, release(t))
	}
	var m v1.Manifest
	if err := json.Unmarshal(entries["blobs/sha256/"+index.Manifests[0].Digest.Hex], &m); err != nil {
		t.Fatalf("the OCI manifest: %v", err)
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.Digest != cfgName {
		t.Errorf("OCI config %s, docker save config %s", m.Config.Digest, cfgName)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != len(m.Layers) {
		t.Fatalf("%d OCI layers, %d docker save layers", len(m.Layers), len(layers))
	}
	for i, l := range layers {
		d, _ := l.Digest()
		if m.Layers[i].Digest != d {
			t.Errorf("layer %d: OCI %s, docker save %s", i, m.Layers[i].Digest, d)
		}
		if _, ok := entries["blobs/sha256/"+d.Hex]; !ok {
			t.Errorf("layer %d: no blob %s", i, d)
		}
	}
}

// TestSBOM: bin/image.spdx.json is SPDX 2.3 JSON naming the image by its
// digest, Debian's ca-certificates with its version, and the Go modules of
// the binary at the versions go.mod requires (client-go checked).
func TestSBOM(t *testing.T) {
	builtImage(t)
	raw, err := os.ReadFile(imageSBOM)
	if err != nil {
		t.Fatal(err)
	}
	var doc spdxDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", imageSBOM, err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" || doc.DocumentNamespace == "" {
		t.Errorf("document header: %+v", doc)
	}
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	mf, err := modfile.Parse("go.mod", gomod, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, r := range mf.Require {
		if r.Mod.Path == "k8s.io/client-go" {
			want = r.Mod.Version
		}
	}
	got := map[string]string{}
	ids := map[string]bool{}
	for _, p := range doc.Packages {
		got[p.Name] = p.VersionInfo
		if ids[p.SPDXID] {
			t.Errorf("SPDXID %s used twice", p.SPDXID)
		}
		ids[p.SPDXID] = true
	}
	if want == "" || got["k8s.io/client-go"] != want {
		t.Errorf("k8s.io/client-go %q in the SBOM, go.mod requires %q", got["k8s.io/client-go"], want)
	}
	if got["ca-certificates"] == "" || got["haproxy-k8s-sync"] != release(t) || got["stdlib"] == "" {
		t.Errorf("the SBOM has ca-certificates %q, image haproxy-k8s-sync %q (want %s), stdlib %q", got["ca-certificates"], got["haproxy-k8s-sync"], release(t), got["stdlib"])
	}
	for _, r := range doc.Relationships {
		if !ids[r.Related] || (r.Element != "SPDXRef-DOCUMENT" && !ids[r.Element]) {
			t.Errorf("relationship %+v names an unknown element", r)
		}
	}
	img := builtImage(t)
	cfg, _ := img.ConfigFile()
	history := ""
	for _, h := range cfg.History {
		history += h.CreatedBy + "\n"
	}
	if !strings.Contains(history, "ca-certificates "+got["ca-certificates"]+" ") {
		t.Errorf("the SBOM's ca-certificates %s is not the one the image's history names:\n%s", got["ca-certificates"], history)
	}
}
