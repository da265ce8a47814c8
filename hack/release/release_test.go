package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"sigs.k8s.io/yaml"
)

// releaseDir is what make release writes, which make test builds before the
// unit tests.
const releaseDir = "../../bin/release"

// The platforms of a release: Go's GOARCH, ELF's machine, OCI's platform.
var platforms = []struct {
	arch     string
	machine  elf.Machine
	platform string
}{
	{"amd64", elf.EM_X86_64, "linux/amd64"},
	{"arm64", elf.EM_AARCH64, "linux/arm64/v8"},
}

// published is the repository the release workflow pushes the index to,
// which the provenance names (make release's IMAGE_REPOSITORY).
const published = "ghcr.io/haproxy-k8s-sync/haproxy-k8s-sync"

func version(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// built returns bin/release. Only HKS_SKIP_RELEASE=1 lets its absence pass,
// as a skip.
func built(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(releaseDir, "SHA256SUMS")); err != nil {
		if os.Getenv("HKS_SKIP_RELEASE") == "1" {
			t.Skipf("no %s and HKS_SKIP_RELEASE=1: the release is not checked", releaseDir)
		}
		t.Fatalf("%v: run `make release` first (or set HKS_SKIP_RELEASE=1 to skip this check)", err)
	}
	return releaseDir
}

// readSums reads a SHA256SUMS file: file name to hex digest, in its order.
func readSums(t *testing.T, path string) (map[string]string, []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	var order []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sha256sum's text form: 64 hex digits, two spaces, the name.
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 || strings.ContainsAny(name, "/\\") {
			t.Fatalf("%s: line %q is not `HEX  NAME`", path, sc.Text())
		}
		sums[name] = sum
		order = append(order, name)
	}
	return sums, order
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestReleaseChecksums: SHA256SUMS lists every other file of the release, in
// name order, with its SHA-256, as `sha256sum -c` reads it.
func TestReleaseChecksums(t *testing.T) {
	dir := built(t)
	sums, order := readSums(t, filepath.Join(dir, "SHA256SUMS"))
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		if e.Name() != "SHA256SUMS" {
			files = append(files, e.Name())
		}
	}
	if strings.Join(files, "\n") != strings.Join(order, "\n") {
		t.Errorf("SHA256SUMS lists\n%s\nthe release holds\n%s", strings.Join(order, "\n"), strings.Join(files, "\n"))
	}
	for _, f := range files {
		if got := fileSum(t, filepath.Join(dir, f)); got != sums[f] {
			t.Errorf("%s: SHA-256 %s, SHA256SUMS says %q", f, got, sums[f])
		}
	}
	if out, err := exec.Command("sha256sum", "--version").Output(); err == nil && len(out) > 0 {
		cmd := exec.Command("sha256sum", "-c", "--quiet", "SHA256SUMS")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum -c SHA256SUMS: %v\n%s", err, out)
		}
	}
}

// TestReleaseBinaries: one static binary per platform, an ELF file for its
// machine, built with CGO_ENABLED=0 and -trimpath; the one for this machine
// runs and says the release and the commit.
func TestReleaseBinaries(t *testing.T) {
	dir := built(t)
	v := version(t)
	for _, p := range platforms {
		t.Run(p.arch, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("haproxy-k8s-sync_%s_linux_%s", v, p.arch))
			f, err := elf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Machine != p.machine || f.Class != elf.ELFCLASS64 || f.Type != elf.ET_EXEC {
				t.Errorf("%s is %v %v %v, want a 64-bit %v executable", path, f.Class, f.Machine, f.Type, p.machine)
			}
			for _, prog := range f.Progs {
				if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
					t.Errorf("%s has a %v segment: not static", path, prog.Type)
				}
			}
			info, err := buildinfo.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			settings := map[string]string{}
			for _, s := range info.Settings {
				settings[s.Key] = s.Value
			}
			for k, want := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "GOOS": "linux", "GOARCH": p.arch} {
				if settings[k] != want {
					t.Errorf("%s: built with %s=%q, want %q", path, k, settings[k], want)
				}
			}
			if p.arch != runtime.GOARCH || runtime.GOOS != "linux" {
				return
			}
			out, err := exec.Command(path, "version").Output()
			if want := "haproxy-k8s-sync " + v + " (commit " + releaseCommit(t, dir)[:7]; err != nil || !strings.HasPrefix(string(out), want) {
				t.Errorf("%s version: %q (%v), want %q...", path, out, err, want)
			}
		})
	}
}

// statement is the part of a provenance statement the test reads.
type statement struct {
	Type          string `json:"_type"`
	PredicateType string `json:"predicateType"`
	Subject       []struct {
		Name   string            `json:"name"`
		Digest map[string]string `json:"digest"`
	} `json:"subject"`
	Predicate struct {
		BuildDefinition struct {
			BuildType          string `json:"buildType"`
			ExternalParameters struct {
				Command string `json:"command"`
				Source  struct {
					URI    string            `json:"uri"`
					Digest map[string]string `json:"digest"`
				} `json:"source"`
				Version  string `json:"version"`
				Platform string `json:"platform"`
			} `json:"externalParameters"`
			InternalParameters struct {
				SourceDateEpoch string `json:"SOURCE_DATE_EPOCH"`
			} `json:"internalParameters"`
			ResolvedDependencies []struct {
				Name   string            `json:"name"`
				URI    string            `json:"uri"`
				Digest map[string]string `json:"digest"`
			} `json:"resolvedDependencies"`
		} `json:"buildDefinition"`
		RunDetails struct {
			Builder struct {
				ID string `json:"id"`
			} `json:"builder"`
			Metadata *struct {
				InvocationID string `json:"invocationId"`
			} `json:"metadata"`
		} `json:"runDetails"`
	} `json:"predicate"`
}

func readStatement(t *testing.T, dir, arch string) statement {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("haproxy-k8s-sync_%s_image_linux_%s.provenance.json", version(t), arch))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var st statement
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return st
}

// releaseCommit is the commit the amd64 image's provenance says the release
// was built from.
func releaseCommit(t *testing.T, dir string) string {
	t.Helper()
	c := readStatement(t, dir, "amd64").Predicate.BuildDefinition.ExternalParameters.Source.Digest["gitCommit"]
	if len(c) != 40 {
		t.Fatalf("the provenance names commit %q", c)
	}
	return c
}

// openIndex unpacks the release's OCI image layout, checking that each
// blob's content has the digest it is named by, and returns its image index
// and the layout's directory, checking the layout's index.json names the
// index, tagged with the release.
func openIndex(t *testing.T, dir string) (v1.ImageIndex, string) {
	t.Helper()
	v := version(t)
	name := filepath.Join(dir, "haproxy-k8s-sync_"+v+"_image.oci.tar")
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	root := t.TempDir()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p := filepath.Join(root, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, root+string(filepath.Separator)) {
			t.Fatalf("%s: entry %q leaves the layout", name, h.Name)
		}
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		// A blob's name is its digest: the layout is whole when each is.
		if hex, ok := strings.CutPrefix(h.Name, "blobs/sha256/"); ok {
			if sum := fmt.Sprintf("%x", sha256.Sum256(data)); sum != hex {
				t.Errorf("%s: blob %s holds sha256:%s", name, h.Name, sum)
			}
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	top, err := layout.ImageIndexFromPath(root)
	if err != nil {
		t.Fatalf("%s is not an OCI image layout: %v", name, err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() || m.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != v {
		t.Fatalf("index.json: %+v, want one image index named %s (what crane push and skopeo copy --all push)", m.Manifests, v)
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx, root
}

// layerFile returns the content of the file name in layer l.
func layerFile(t *testing.T, l v1.Layer, name string) []byte {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("no %s in the layer", name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

// TestReleaseImageIndex: the release's image index lists exactly
// linux/amd64 and linux/arm64, each blob is whole (digest and size), each
// image's config says the platform the index gives it, the release and the
// commit, both share one base layer, and each holds the release's binary
// for its platform, byte for byte.
func TestReleaseImageIndex(t *testing.T) {
	dir := built(t)
	v := version(t)
	commit := releaseCommit(t, dir)
	idx, root := openIndex(t, dir)
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != len(platforms) {
		t.Fatalf("the index lists %d images, want %d", len(m.Manifests), len(platforms))
	}
	var bases []v1.Hash
	for i, p := range platforms {
		d := m.Manifests[i]
		if d.Platform == nil || d.Platform.String() != p.platform {
			t.Errorf("image %d is for %v, want %s", i, d.Platform, p.platform)
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Platform().String(); got != p.platform {
			t.Errorf("%s: the config says %s", p.platform, got)
		}
		if cfg.Config.Labels["org.opencontainers.image.version"] != v || cfg.Config.Labels["org.opencontainers.image.revision"] != commit {
			t.Errorf("%s: labels %v, want version %s, revision %s", p.platform, cfg.Config.Labels, v, commit)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 2 {
			t.Fatalf("%s: %d layers (%v), want the base and the binary", p.platform, len(layers), err)
		}
		im, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range append([]v1.Descriptor{d, im.Config}, im.Layers...) {
			st, err := os.Stat(filepath.Join(root, "blobs", b.Digest.Algorithm, b.Digest.Hex))
			if err != nil || st.Size() != b.Size {
				t.Errorf("%s: blob %s: %v, want %d bytes", p.platform, b.Digest, err, b.Size)
			}
		}
		base, _ := layers[0].Digest()
		bases = append(bases, base)
		inImage := layerFile(t, layers[1], "haproxy-k8s-sync")
		release, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("haproxy-k8s-sync_%s_linux_%s", v, p.arch)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(inImage, release) {
			t.Errorf("%s: the image's binary is not the release's haproxy-k8s-sync_%s_linux_%s", p.platform, v, p.arch)
		}
	}
	if len(bases) == 2 && bases[0] != bases[1] {
		t.Errorf("the images have two bases, %s and %s: the CA package is Architecture: all, one base serves both", bases[0], bases[1])
	}
}

// TestReleaseProvenance: each image has an in-toto statement with a SLSA v1
// provenance predicate whose subjects are the image (by the digest the index
// lists, under the published repository) and the release's binary, built by
// make release from the commit the image says, on the Debian package its
// SBOM names; and an SPDX SBOM of that image.
func TestReleaseProvenance(t *testing.T) {
	dir := built(t)
	v := version(t)
	idx, _ := openIndex(t, dir)
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range platforms {
		t.Run(p.arch, func(t *testing.T) {
			st := readStatement(t, dir, p.arch)
			if st.Type != "https://in-toto.io/Statement/v1" || st.PredicateType != "https://slsa.dev/provenance/v1" {
				t.Errorf("_type %q, predicateType %q", st.Type, st.PredicateType)
			}
			img := m.Manifests[i].Digest
			subjects := map[string]string{}
			for _, s := range st.Subject {
				subjects[s.Name] = s.Digest["sha256"]
			}
			binary := fmt.Sprintf("haproxy-k8s-sync_%s_linux_%s", v, p.arch)
			if subjects[published] != img.Hex || subjects[binary] != fileSum(t, filepath.Join(dir, binary)) || len(subjects) != 2 {
				t.Errorf("subjects %v, want %s %s and %s with its SHA-256", subjects, published, img, binary)
			}
			bd := st.Predicate.BuildDefinition
			ep := bd.ExternalParameters
			if ep.Command != "make release" || ep.Version != v || ep.Platform != p.platform || ep.Source.URI != "git+https://github.com/haproxy-k8s-sync/haproxy-k8s-sync" {
				t.Errorf("externalParameters %+v", ep)
			}
			cfg, err := idx.Image(img)
			if err != nil {
				t.Fatal(err)
			}
			c, err := cfg.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			commit := ep.Source.Digest["gitCommit"]
			if commit == "" || commit != c.Config.Labels["org.opencontainers.image.revision"] {
				t.Errorf("the provenance names commit %q, the image %q", commit, c.Config.Labels["org.opencontainers.image.revision"])
			}
			if st.Predicate.RunDetails.Builder.ID == "" || bd.BuildType == "" || bd.InternalParameters.SourceDateEpoch == "" {
				t.Errorf("builder.id %q, buildType %q, SOURCE_DATE_EPOCH %q: all are needed", st.Predicate.RunDetails.Builder.ID, bd.BuildType, bd.InternalParameters.SourceDateEpoch)
			}
			deps := map[string]map[string]string{}
			for _, d := range bd.ResolvedDependencies {
				deps[d.Name+" "+d.URI] = d.Digest
			}
			if deps[" git+https://github.com/haproxy-k8s-sync/haproxy-k8s-sync"]["gitCommit"] != commit {
				t.Errorf("resolvedDependencies lack the source at %s: %v", commit, deps)
			}

			var sbom struct {
				SPDXVersion string `json:"spdxVersion"`
				Packages    []struct {
					Name        string `json:"name"`
					VersionInfo string `json:"versionInfo"`
					Checksums   []struct {
						ChecksumValue string `json:"checksumValue"`
					} `json:"checksums"`
				} `json:"packages"`
			}
			data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("haproxy-k8s-sync_%s_image_linux_%s.spdx.json", v, p.arch)))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &sbom); err != nil || sbom.SPDXVersion != "SPDX-2.3" {
				t.Fatalf("the SBOM: %v, version %q", err, sbom.SPDXVersion)
			}
			found := 0
			for _, pkg := range sbom.Packages {
				switch {
				case pkg.Name == "haproxy-k8s-sync" && len(pkg.Checksums) == 1 && pkg.Checksums[0].ChecksumValue == img.Hex:
					found++
				case pkg.Name == "ca-certificates" && len(pkg.Checksums) == 1:
					uri := "pkg:deb/debian/ca-certificates@" + url.PathEscape(pkg.VersionInfo) + "?arch=all"
					if deps["ca-certificates "+uri]["sha256"] != pkg.Checksums[0].ChecksumValue {
						t.Errorf("the SBOM's ca-certificates %s (%s) is not among the provenance's dependencies: %v", pkg.VersionInfo, pkg.Checksums[0].ChecksumValue, deps)
					}
					found++
				}
			}
			if found != 2 {
				t.Errorf("the SBOM does not name the image %s and its ca-certificates package", img)
			}
		})
	}
}

// TestReleaseChart: the chart is packaged as haproxy-k8s-sync-VERSION.tgz,
// every entry dated the commit's time; index.yaml names it at VERSION with
// its digest; helm renders it from the packaged file, with the published
// image by default, and refuses a placeholder image.
func TestReleaseChart(t *testing.T) {
	dir := built(t)
	v := version(t)
	helm, err := filepath.Abs("../../bin/helm")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("%v: make deps builds it", err)
	}
	pkg := filepath.Join(dir, "haproxy-k8s-sync-"+v+".tgz")
	data, err := os.ReadFile(pkg)
	if err != nil {
		t.Fatal(err)
	}
	epoch := readStatement(t, dir, "amd64").Predicate.BuildDefinition.InternalParameters.SourceDateEpoch
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	entries := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries++
		if fmt.Sprint(h.ModTime.Unix()) != epoch {
			t.Errorf("%s is dated %s, not the commit's time (%s)", h.Name, h.ModTime.UTC(), epoch)
		}
	}
	if entries < 5 {
		t.Errorf("the package holds %d files", entries)
	}

	var index struct {
		APIVersion string `json:"apiVersion"`
		Entries    map[string][]struct {
			Version    string    `json:"version"`
			AppVersion string    `json:"appVersion"`
			Digest     string    `json:"digest"`
			URLs       []string  `json:"urls"`
			Created    time.Time `json:"created"`
		} `json:"entries"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "index.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &index); err != nil {
		t.Fatal(err)
	}
	charts := index.Entries["haproxy-k8s-sync"]
	if index.APIVersion != "v1" || len(index.Entries) != 1 || len(charts) != 1 {
		t.Fatalf("index.yaml: %s", raw)
	}
	c := charts[0]
	if c.Version != v || c.AppVersion != v || c.Digest != fileSum(t, pkg) || len(c.URLs) != 1 || c.URLs[0] != filepath.Base(pkg) ||
		fmt.Sprint(c.Created.Unix()) != epoch {
		t.Errorf("index.yaml names %+v; want version and appVersion %s, digest %s, url %s, created at %s", c, v, fileSum(t, pkg), filepath.Base(pkg), epoch)
	}

	out, err := exec.Command(helm, "template", "rel", pkg, "--set", "haproxy.dataplaneURL=http://haproxy:5555").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "image: "+published+":"+v+"\n") || !strings.Contains(string(out), "kind: Deployment") {
		t.Errorf("helm template %s: %v, want a Deployment of %s:%s\n%.500s", pkg, err, published, v, out)
	}
	out, err = exec.Command(helm, "template", "rel", pkg, "--set", "haproxy.dataplaneURL=http://haproxy:5555",
		"--set", "image.repository=registry.example/haproxy-k8s-sync").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "set image.repository") {
		t.Errorf("the packaged chart renders a placeholder image (%v):\n%.300s", err, out)
	}
}

// TestReleaseDebs: with hack/deb in the tree, one .deb per platform, an ar
// archive as dpkg reads it (what is inside is hack/deb's tests' business).
func TestReleaseDebs(t *testing.T) {
	dir := built(t)
	if _, err := os.Stat("../deb"); err != nil {
		t.Skip("no hack/deb in this tree: make release builds no .deb")
	}
	for _, p := range platforms {
		debs, _ := filepath.Glob(filepath.Join(dir, "*_"+p.arch+".deb"))
		if len(debs) != 1 {
			t.Errorf("%d .deb files for %s, want 1: %v", len(debs), p.arch, debs)
			continue
		}
		head := make([]byte, 21)
		f, err := os.Open(debs[0])
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadFull(f, head)
		f.Close()
		if err != nil || !bytes.HasPrefix(head, []byte("!<arch>\ndebian-binary")) {
			t.Errorf("%s: starts %q (%v), want an ar archive whose first member is debian-binary", debs[0], head, err)
		}
	}
}

// TestReleaseReproducible builds the release again, from the same commit
// with the same inputs, into a directory of its own, and finds every file
// the same, byte for byte (their SHA256SUMS are equal). About 10 s once the
// first build is cached.
func TestReleaseReproducible(t *testing.T) {
	dir := built(t)
	if testing.Short() {
		t.Skip("-short: the release is not built again")
	}
	st := readStatement(t, dir, "amd64")
	commit := releaseCommit(t, dir)
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("git rev-parse HEAD: %v: no commit to build again", err)
	}
	if strings.TrimSpace(string(head)) != commit {
		t.Fatalf("bin/release was built from %s, HEAD is %s: run make release again", commit, strings.TrimSpace(string(head)))
	}
	again := t.TempDir()
	vars := []string{
		"RELEASE_DIR=" + again,
		"COMMIT=" + commit,
		"SOURCE_DATE_EPOCH=" + st.Predicate.BuildDefinition.InternalParameters.SourceDateEpoch,
		"BUILDER_ID=" + st.Predicate.RunDetails.Builder.ID,
		"IMAGE_REPOSITORY=" + published,
	}
	if md := st.Predicate.RunDetails.Metadata; md != nil {
		vars = append(vars, "INVOCATION_ID="+md.InvocationID)
	}
	start := time.Now()
	cmd := exec.Command("make", append([]string{"-C", "../..", "--no-print-directory", "release"}, vars...)...)
	cmd.Env = append(os.Environ(), "MAKEFLAGS=") // not the outer make's flags
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release again: %v\n%s", err, out)
	}
	t.Logf("built again in %s", time.Since(start).Round(time.Second))
	first, names := readSums(t, filepath.Join(dir, "SHA256SUMS"))
	second, names2 := readSums(t, filepath.Join(again, "SHA256SUMS"))
	if strings.Join(names, " ") != strings.Join(names2, " ") {
		t.Errorf("the builds hold other files:\n%s\n%s", names, names2)
	}
	for _, n := range names {
		if first[n] != second[n] {
			t.Errorf("%s differs between two builds of %s", n, commit)
		}
	}
}
