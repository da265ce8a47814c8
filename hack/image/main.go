// Command image builds the container image of haproxy-k8s-sync without a
// Docker daemon (make image): a static base assembled from Debian's
// ca-certificates package and a non-root user, the binary as entrypoint. It
// writes one tarball that is both an OCI image layout (skopeo's oci-archive:)
// and a `docker save` archive (docker load, crane push, skopeo's
// docker-archive:), and an SPDX 2.3 SBOM beside it. Every timestamp is
// -epoch, so the same inputs give the same image digest.
//
// With -release DIR (make release) it builds one such image per binary
// given, one per platform, on one base, and writes them as a multi-platform
// image index (an OCI image layout in a tar), with each image's SBOM and an
// in-toto provenance statement (SLSA v1) beside it.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed facts, which the test in this directory checks.
const (
	binaryPath = "/haproxy-k8s-sync"
	user       = "65532:65532" // numeric, so runAsNonRoot can verify it
	imageName  = "haproxy-k8s-sync"
	source     = "https://github.com/haproxy-k8s-sync/haproxy-k8s-sync"
)

type options struct {
	binary, deb, out, sbom  string
	version, commit, epochS string
	// The release (make release): the directory it writes to, and what its
	// provenance says of the build.
	release, repository, builderID, invocationID string
}

func main() {
	var o options
	flag.StringVar(&o.binary, "binary", "bin/haproxy-k8s-sync", "the static binary to put in the image")
	flag.StringVar(&o.deb, "deb", "", "Debian's ca-certificates .deb; empty: fetched with apt-get download")
	flag.StringVar(&o.out, "out", "bin/image.tar", "the image tarball to write")
	flag.StringVar(&o.sbom, "sbom", "bin/image.spdx.json", "the SPDX 2.3 SBOM to write")
	flag.StringVar(&o.version, "version", "", "the release (the VERSION file)")
	flag.StringVar(&o.commit, "commit", "", "the commit the binary was built from")
	flag.StringVar(&o.epochS, "epoch", os.Getenv("SOURCE_DATE_EPOCH"), "every timestamp, in seconds since 1970 (default $SOURCE_DATE_EPOCH)")
	flag.StringVar(&o.release, "release", "", "make release: write into this directory the image index of the binaries given as arguments (one per platform), with each image's SBOM and provenance; -binary, -out and -sbom are then unused")
	flag.StringVar(&o.repository, "repository", defaultRepository, "with -release: the repository the index is published to, which the provenance names")
	flag.StringVar(&o.builderID, "builder-id", localBuilder, "with -release: the provenance's runDetails.builder.id")
	flag.StringVar(&o.invocationID, "invocation-id", "", "with -release: the provenance's runDetails.metadata.invocationId (the CI run), if any")
	flag.Parse()
	start := time.Now()
	if o.release != "" {
		digest, err := buildRelease(o, flag.Args())
		if err != nil {
			fmt.Fprintln(os.Stderr, "image:", err)
			os.Exit(1)
		}
		fmt.Printf("image: %s index %s, built in %s\n", filepath.Join(o.release, layoutName(o.version)), digest, time.Since(start).Round(time.Millisecond))
		return
	}
	digest, size, err := build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("image: %s %s (%d bytes), SBOM %s, built in %s\n", o.out, digest, size, o.sbom, time.Since(start).Round(time.Millisecond))
}

// epoch checks -version and -commit and returns -epoch as a time.
func (o options) epoch() (time.Time, error) {
	if o.version == "" || o.commit == "" {
		return time.Time{}, errors.New("-version and -commit are required (make passes VERSION and git's HEAD)")
	}
	secs, err := strconv.ParseInt(o.epochS, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("-epoch / SOURCE_DATE_EPOCH %q: want seconds since 1970: %w", o.epochS, err)
	}
	return time.Unix(secs, 0).UTC(), nil
}

// loadDeb reads the ca-certificates package at path, or fetches it when path
// is empty; the release fetches it once for every platform (the package is
// Architecture: all).
func loadDeb(path string) (deb, error) {
	if path == "" {
		dir, err := os.MkdirTemp("", "hack-image")
		if err != nil {
			return deb{}, fmt.Errorf("temporary directory for the .deb: %w", err)
		}
		defer os.RemoveAll(dir)
		if path, err = fetchDeb(dir, "ca-certificates"); err != nil {
			return deb{}, err
		}
	}
	d, err := readCACertificates(path)
	if err != nil {
		return deb{}, err
	}
	if d.arch != "all" {
		return deb{}, fmt.Errorf("%s is for %s: the base serves every platform, want Architecture: all", path, d.arch)
	}
	return d, nil
}

// build writes the image and the SBOM and returns the manifest's digest and
// the tarball's size.
func build(o options) (v1.Hash, int64, error) {
	epoch, err := o.epoch()
	if err != nil {
		return v1.Hash{}, 0, err
	}
	bin, err := readBinary(o.binary, o.version)
	if err != nil {
		return v1.Hash{}, 0, err
	}
	d, err := loadDeb(o.deb)
	if err != nil {
		return v1.Hash{}, 0, err
	}
	img, err := image(bin, d, o, epoch)
	if err != nil {
		return v1.Hash{}, 0, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, 0, fmt.Errorf("image digest: %w", err)
	}

	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return v1.Hash{}, 0, fmt.Errorf("create %s: %w", filepath.Dir(o.out), err)
	}
	size, err := writeArchive(o.out, img, imageName+":"+o.version, o.version, epoch)
	if err != nil {
		return v1.Hash{}, 0, fmt.Errorf("write %s: %w", o.out, err)
	}
	if err := writeJSON(o.sbom, sbom(bin, d, o.version, digest, epoch)); err != nil {
		return v1.Hash{}, 0, err
	}
	return digest, size, nil
}

// image is the image of one binary: the base layer, the binary's layer, and
// a config for the binary's platform.
func image(bin binary, d deb, o options, epoch time.Time) (v1.Image, error) {
	base, err := layer(baseFiles(d), epoch)
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	app, err := layer([]file{{name: strings.TrimPrefix(binaryPath, "/"), mode: 0o755, data: bin.data}}, epoch)
	if err != nil {
		return nil, fmt.Errorf("binary layer: %w", err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	created := v1.Time{Time: epoch}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: created,
			CreatedBy: fmt.Sprintf("hack/image: Debian %s %s (CA bundle and copyright), /etc/passwd and /etc/group for nonroot 65532, /tmp", d.name, d.version)}},
		mutate.Addendum{Layer: app, MediaType: types.OCILayer, History: v1.History{Created: created,
			CreatedBy: fmt.Sprintf("hack/image: %s %s (commit %s)", binaryPath, o.version, o.commit)}},
	)
	if err != nil {
		return nil, fmt.Errorf("append layers: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.Created = created
	p := platform(bin.arch)
	cfg.OS, cfg.Architecture, cfg.Variant = p.OS, p.Architecture, p.Variant
	cfg.Config = v1.Config{
		User:         user,
		Entrypoint:   []string{binaryPath},
		Cmd:          []string{"serve"},
		WorkingDir:   "/",
		Env:          []string{"PATH=/"},
		ExposedPorts: map[string]struct{}{"8080/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":       imageName,
			"org.opencontainers.image.description": "Keeps an HAProxy backend's servers equal to a Kubernetes Service's endpoints",
			"org.opencontainers.image.version":     o.version,
			"org.opencontainers.image.revision":    o.commit,
			"org.opencontainers.image.source":      source,
			"org.opencontainers.image.licenses":    "Apache-2.0",
			"org.opencontainers.image.created":     epoch.Format(time.RFC3339),
		},
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return img, nil
}

// platform is the OCI platform of a Go architecture: arm64 carries the
// variant v8, as registries and runtimes write it.
func platform(goarch string) v1.Platform {
	p := v1.Platform{OS: "linux", Architecture: goarch}
	if goarch == "arm64" {
		p.Variant = "v8"
	}
	return p
}

// writeJSON writes v, indented, to path.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// file is one entry of a layer: a regular file, or a directory when dir.
type file struct {
	name     string
	mode     int64
	dir      bool
	uid, gid int
	data     []byte
}

// layer builds a gzip-compressed OCI layer from files, in the order given,
// every entry owned as stated and dated epoch.
func layer(files []file, epoch time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: epoch, Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag, h.Name = tar.TypeDir, f.name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar header %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("tar %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression), tarball.WithCompressedCaching)
}

// writeArchive writes img as an OCI image layout in a tar, with a `docker
// save` manifest.json beside index.json naming the same blobs, and returns
// the file's size. Entries come in a fixed order, dated epoch.
func writeArchive(path string, img v1.Image, repoTag, version string, epoch time.Time) (int64, error) {
	manifest, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	digest, err := img.Digest()
	if err != nil {
		return 0, err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return 0, err
	}
	layers, err := img.Layers()
	if err != nil {
		return 0, err
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     types.OCIImageIndex,
		"manifests": []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1, Digest: digest, Size: int64(len(manifest)),
			Annotations: map[string]string{
				"org.opencontainers.image.ref.name": version,
				"io.containerd.image.name":          repoTag,
			},
		}},
	})
	if err != nil {
		return 0, err
	}
	docker := tarball.Manifest{{Config: blobName(cfgName), RepoTags: []string{repoTag}}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return 0, err
		}
		docker[0].Layers = append(docker[0].Layers, blobName(d))
	}
	dockerJSON, err := json.Marshal(docker)
	if err != nil {
		return 0, err
	}
	return writeTar(path, epoch, func(w *layoutWriter) error {
		if err := w.image(img); err != nil {
			return err
		}
		if err := w.file("index.json", index); err != nil {
			return err
		}
		if err := w.file("oci-layout", []byte(ociLayout)); err != nil {
			return err
		}
		return w.file("manifest.json", dockerJSON)
	})
}

const ociLayout = `{"imageLayoutVersion":"1.0.0"}`

// blobName is where an OCI image layout keeps the blob of digest h.
func blobName(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// layoutWriter writes the entries of an OCI image layout into a tar, each
// blob once (the release's images share their base layer), every entry
// dated epoch.
type layoutWriter struct {
	tw    *tar.Writer
	epoch time.Time
	blobs map[v1.Hash]bool
}

// writeTar creates path, writes the blobs directories and lets fill write
// the rest, and returns the file's size.
func writeTar(path string, epoch time.Time, fill func(*layoutWriter) error) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	w := &layoutWriter{tw: tar.NewWriter(f), epoch: epoch, blobs: map[v1.Hash]bool{}}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := w.tw.WriteHeader(&tar.Header{Name: d, Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
			return 0, err
		}
	}
	if err := fill(w); err != nil {
		return 0, err
	}
	if err := w.tw.Close(); err != nil {
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// put writes one regular file of size bytes read from r.
func (w *layoutWriter) put(name string, size int64, r io.Reader) error {
	h := &tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: w.epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := w.tw.WriteHeader(h); err != nil {
		return err
	}
	if _, err := io.Copy(w.tw, r); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func (w *layoutWriter) file(name string, data []byte) error {
	return w.put(name, int64(len(data)), bytes.NewReader(data))
}

// blob writes data as the blob of its digest h, unless written already.
func (w *layoutWriter) blob(h v1.Hash, data []byte) error {
	if w.blobs[h] {
		return nil
	}
	w.blobs[h] = true
	return w.file(blobName(h), data)
}

// image writes an image's blobs: its layers, its config, its manifest.
func (w *layoutWriter) image(img v1.Image) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		if w.blobs[d] {
			continue
		}
		n, err := l.Size()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		err = w.put(blobName(d), n, rc)
		rc.Close()
		if err != nil {
			return err
		}
		w.blobs[d] = true
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	if err := w.blob(cfgName, cfg); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	return w.blob(digest, manifest)
}
