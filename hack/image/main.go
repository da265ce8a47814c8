// Command image builds the container image of haproxy-k8s-sync without a
// Docker daemon (make image): a static base assembled from Debian's
// ca-certificates package and a non-root user, the binary as entrypoint. It
// writes one tarball that is both an OCI image layout (skopeo's oci-archive:)
// and a `docker save` archive (docker load, crane push, skopeo's
// docker-archive:), and an SPDX 2.3 SBOM beside it. Every timestamp is
// -epoch, so the same inputs give the same image digest.
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
	flag.Parse()
	start := time.Now()
	digest, size, err := build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("image: %s %s (%d bytes), SBOM %s, built in %s\n", o.out, digest, size, o.sbom, time.Since(start).Round(time.Millisecond))
}

// build writes the image and the SBOM and returns the manifest's digest and
// the tarball's size.
func build(o options) (v1.Hash, int64, error) {
	if o.version == "" || o.commit == "" {
		return v1.Hash{}, 0, errors.New("-version and -commit are required (make image passes VERSION and git's HEAD)")
	}
	secs, err := strconv.ParseInt(o.epochS, 10, 64)
	if err != nil {
		return v1.Hash{}, 0, fmt.Errorf("-epoch / SOURCE_DATE_EPOCH %q: want seconds since 1970: %w", o.epochS, err)
	}
	epoch := time.Unix(secs, 0).UTC()

	bin, err := readBinary(o.binary, o.version)
	if err != nil {
		return v1.Hash{}, 0, err
	}
	debPath := o.deb
	if debPath == "" {
		dir, err := os.MkdirTemp("", "hack-image")
		if err != nil {
			return v1.Hash{}, 0, fmt.Errorf("temporary directory for the .deb: %w", err)
		}
		defer os.RemoveAll(dir)
		if debPath, err = fetchDeb(dir, "ca-certificates"); err != nil {
			return v1.Hash{}, 0, err
		}
	}
	deb, err := readCACertificates(debPath)
	if err != nil {
		return v1.Hash{}, 0, err
	}

	base, err := layer(baseFiles(deb), epoch)
	if err != nil {
		return v1.Hash{}, 0, fmt.Errorf("base layer: %w", err)
	}
	app, err := layer([]file{{name: strings.TrimPrefix(binaryPath, "/"), mode: 0o755, data: bin.data}}, epoch)
	if err != nil {
		return v1.Hash{}, 0, fmt.Errorf("binary layer: %w", err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	created := v1.Time{Time: epoch}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: created,
			CreatedBy: fmt.Sprintf("hack/image: Debian %s %s (CA bundle and copyright), /etc/passwd and /etc/group for nonroot 65532, /tmp", deb.name, deb.version)}},
		mutate.Addendum{Layer: app, MediaType: types.OCILayer, History: v1.History{Created: created,
			CreatedBy: fmt.Sprintf("hack/image: %s %s (commit %s)", binaryPath, o.version, o.commit)}},
	)
	if err != nil {
		return v1.Hash{}, 0, fmt.Errorf("append layers: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, 0, fmt.Errorf("read config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.Created = created
	cfg.OS, cfg.Architecture = "linux", bin.arch
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
		return v1.Hash{}, 0, fmt.Errorf("set config: %w", err)
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
	doc := sbom(bin, deb, o.version, digest, epoch)
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return v1.Hash{}, 0, fmt.Errorf("encode the SBOM: %w", err)
	}
	if err := os.WriteFile(o.sbom, append(data, '\n'), 0o644); err != nil {
		return v1.Hash{}, 0, fmt.Errorf("write %s: %w", o.sbom, err)
	}
	return digest, size, nil
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
	cfg, err := img.RawConfigFile()
	if err != nil {
		return 0, err
	}
	layers, err := img.Layers()
	if err != nil {
		return 0, err
	}
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
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
	docker := tarball.Manifest{{Config: blob(cfgName), RepoTags: []string{repoTag}}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return 0, err
		}
		docker[0].Layers = append(docker[0].Layers, blob(d))
	}
	dockerJSON, err := json.Marshal(docker)
	if err != nil {
		return 0, err
	}

	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	put := func(name string, size int64, r io.Reader) error {
		h := &tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, r); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
			return 0, err
		}
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return 0, err
		}
		n, err := l.Size()
		if err != nil {
			return 0, err
		}
		rc, err := l.Compressed()
		if err != nil {
			return 0, err
		}
		err = put(blob(d), n, rc)
		rc.Close()
		if err != nil {
			return 0, err
		}
	}
	for _, e := range []struct {
		name string
		data []byte
	}{
		{blob(cfgName), cfg},
		{blob(digest), manifest},
		{"index.json", index},
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"manifest.json", dockerJSON},
	} {
		if err := put(e.name, int64(len(e.data)), bytes.NewReader(e.data)); err != nil {
			return 0, err
		}
	}
	if err := tw.Close(); err != nil {
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
