package main

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// defaultRepository is where the release workflow publishes the index; the
// provenance names it as the images' subject.
const defaultRepository = "ghcr.io/haproxy-k8s-sync/haproxy-k8s-sync"

// layoutName is the release's image index: an OCI image layout in a tar.
func layoutName(version string) string { return imageName + "_" + version + "_image.oci.tar" }

// imageFiles is the prefix of one platform's SBOM and provenance files.
func imageFiles(version, arch string) string {
	return fmt.Sprintf("%s_%s_image_linux_%s", imageName, version, arch)
}

// buildRelease builds one image per binary (one binary per platform) on the
// same base, writes them as one multi-platform image index into
// o.release/layoutName, and beside it each image's SBOM and provenance
// statement. It returns the index's digest, the one a registry will show.
//
// The layout's index.json names the image index (annotated with the
// version), so `crane push DIR` and `skopeo copy --all oci-archive:` push the
// index, not one image of it.
func buildRelease(o options, binaries []string) (v1.Hash, error) {
	epoch, err := o.epoch()
	if err != nil {
		return v1.Hash{}, err
	}
	if len(binaries) == 0 {
		return v1.Hash{}, errors.New("-release: name the binaries, one per platform, as arguments")
	}
	d, err := loadDeb(o.deb)
	if err != nil {
		return v1.Hash{}, err
	}
	var (
		adds []mutate.IndexAddendum
		imgs []v1.Image
		seen = map[string]string{}
	)
	for _, path := range binaries {
		bin, err := readBinary(path, o.version)
		if err != nil {
			return v1.Hash{}, err
		}
		if other, dup := seen[bin.arch]; dup {
			return v1.Hash{}, fmt.Errorf("%s and %s are both %s: one binary per platform", other, path, bin.arch)
		}
		seen[bin.arch] = path
		img, err := image(bin, d, o, epoch)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("%s: %w", path, err)
		}
		digest, err := img.Digest()
		if err != nil {
			return v1.Hash{}, fmt.Errorf("%s: image digest: %w", path, err)
		}
		p := platform(bin.arch)
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
		imgs = append(imgs, img)

		files := filepath.Join(o.release, imageFiles(o.version, bin.arch))
		doc := sbom(bin, d, o.version, digest, epoch)
		doc.Name += " (" + p.String() + ")"
		if err := writeJSON(files+".spdx.json", doc); err != nil {
			return v1.Hash{}, err
		}
		st := provenance(o, bin, filepath.Base(path), d, digest, epoch)
		if err := writeJSON(files+".provenance.json", st); err != nil {
			return v1.Hash{}, err
		}
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("index digest: %w", err)
	}
	raw, err := idx.RawManifest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("index manifest: %w", err)
	}
	top, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIImageIndex, Digest: digest, Size: int64(len(raw)),
			Annotations: map[string]string{"org.opencontainers.image.ref.name": o.version},
		}},
	})
	if err != nil {
		return v1.Hash{}, err
	}
	_, err = writeTar(filepath.Join(o.release, layoutName(o.version)), epoch, func(w *layoutWriter) error {
		for _, img := range imgs {
			if err := w.image(img); err != nil {
				return err
			}
		}
		if err := w.blob(digest, raw); err != nil {
			return err
		}
		if err := w.file("index.json", top); err != nil {
			return err
		}
		return w.file("oci-layout", []byte(ociLayout))
	})
	if err != nil {
		return v1.Hash{}, fmt.Errorf("write %s: %w", layoutName(o.version), err)
	}
	return digest, nil
}

// sha256Hex is the hex SHA-256 of data.
func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return fmt.Sprintf("%x", sum[:])
}
