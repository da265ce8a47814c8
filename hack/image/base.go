package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// binary is the program put in the image, with what Go recorded in it.
type binary struct {
	data []byte
	arch string
	info *buildinfo.BuildInfo
}

// readBinary reads the binary and refuses one that is not static or was
// stamped with another version than the release being built.
func readBinary(path, version string) (binary, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return binary{}, fmt.Errorf("read the binary (make build writes it): %w", err)
	}
	info, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		return binary{}, fmt.Errorf("%s: no Go build information: %w", path, err)
	}
	b := binary{data: data, info: info}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["GOOS"] != "linux" {
		return binary{}, fmt.Errorf("%s: built with CGO_ENABLED=%q GOOS=%q; the image has no libc: want CGO_ENABLED=0 GOOS=linux", path, settings["CGO_ENABLED"], settings["GOOS"])
	}
	b.arch = settings["GOARCH"]
	// -trimpath keeps -ldflags out of the build information: ask the binary
	// (when it runs here) which version it was stamped with.
	if b.arch == runtime.GOARCH {
		out, err := exec.Command(path, "version").Output()
		if err != nil || !strings.HasPrefix(string(out), "haproxy-k8s-sync "+version+" (") {
			return binary{}, fmt.Errorf("%s version: %q (%v), want release %s: rebuild it with make build", path, out, err, version)
		}
	}
	return b, nil
}

// deb is a Debian package's files the image takes, and what the SBOM says
// of it.
type deb struct {
	name, version, arch, sha256 string
	bundle, copyright           []byte
	certs                       int
}

// fetchDeb downloads the current version of pkg from the machine's apt
// sources into dir (apt checks it against Debian's signed index); a machine
// whose package lists were never fetched gets them first.
func fetchDeb(dir, pkg string) (string, error) {
	download := func() ([]byte, error) {
		cmd := exec.Command("apt-get", "download", pkg)
		cmd.Dir = dir
		return cmd.CombinedOutput()
	}
	if out, err := download(); err != nil {
		if up, uerr := exec.Command("apt-get", "update", "-qq").CombinedOutput(); uerr != nil {
			return "", fmt.Errorf("apt-get download %s: %v: %s; apt-get update: %v: %s", pkg, err, out, uerr, up)
		}
		if out, err := download(); err != nil {
			return "", fmt.Errorf("apt-get download %s: %w: %s", pkg, err, out)
		}
	}
	debs, _ := filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("apt-get download %s left %d .deb files in %s, want 1", pkg, len(debs), dir)
	}
	return debs[0], nil
}

// readCACertificates reads Debian's ca-certificates package and builds the
// bundle update-ca-certificates would with Debian's default configuration:
// every certificate of /usr/share/ca-certificates/mozilla, in name order.
func readCACertificates(path string) (deb, error) {
	fields, err := exec.Command("dpkg-deb", "--showformat=${Package}\t${Version}\t${Architecture}", "--show", path).Output()
	if err != nil {
		return deb{}, fmt.Errorf("dpkg-deb --show %s: %w", path, err)
	}
	f := strings.Split(strings.TrimSpace(string(fields)), "\t")
	if len(f) != 3 || f[0] != "ca-certificates" {
		return deb{}, fmt.Errorf("%s is %q, want Debian's ca-certificates package", path, fields)
	}
	d := deb{name: f[0], version: f[1], arch: f[2]}
	raw, err := os.ReadFile(path)
	if err != nil {
		return deb{}, fmt.Errorf("read %s: %w", path, err)
	}
	sum := sha256.Sum256(raw)
	d.sha256 = hex.EncodeToString(sum[:])

	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return deb{}, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", path, err, stderr.String())
	}
	certs := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(out))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return deb{}, fmt.Errorf("%s: read its files: %w", path, err)
		}
		name := strings.TrimPrefix(h.Name, ".")
		switch {
		case h.Typeflag == tar.TypeReg && strings.HasPrefix(name, "/usr/share/ca-certificates/mozilla/") && strings.HasSuffix(name, ".crt"):
			data, err := io.ReadAll(tr)
			if err != nil {
				return deb{}, fmt.Errorf("%s: %s: %w", path, name, err)
			}
			certs[name] = data
		case h.Typeflag == tar.TypeReg && name == "/usr/share/doc/ca-certificates/copyright":
			if d.copyright, err = io.ReadAll(tr); err != nil {
				return deb{}, fmt.Errorf("%s: %s: %w", path, name, err)
			}
		}
	}
	names := make([]string, 0, len(certs))
	for n := range certs {
		names = append(names, n)
	}
	sort.Strings(names)
	var bundle bytes.Buffer
	for _, n := range names {
		// A certificate that does not parse would be skipped by Go's
		// loader without a word: refuse the package instead.
		block, _ := pem.Decode(certs[n])
		if block == nil || block.Type != "CERTIFICATE" {
			return deb{}, fmt.Errorf("%s: %s is not a PEM certificate", path, n)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return deb{}, fmt.Errorf("%s: %s: %w", path, n, err)
		}
		bundle.Write(certs[n])
		if !bytes.HasSuffix(certs[n], []byte("\n")) {
			bundle.WriteByte('\n')
		}
	}
	if len(names) < 50 || d.copyright == nil {
		return deb{}, fmt.Errorf("%s: %d certificates and copyright file %t: not the package expected", path, len(names), d.copyright != nil)
	}
	d.bundle, d.certs = bundle.Bytes(), len(names)
	return d, nil
}

// baseFiles is the static base: what a Go program needs of a system (CA
// certificates, a user and group to run as, a /tmp) and nothing to run, not
// even a shell. The copyright file goes with the package's files.
func baseFiles(d deb) []file {
	const root = 0o755
	return []file{
		{name: "etc", mode: root, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/ssl", mode: root, dir: true},
		{name: "etc/ssl/certs", mode: root, dir: true},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: d.bundle},
		{name: "home", mode: root, dir: true},
		{name: "home/nonroot", mode: 0o700, dir: true, uid: 65532, gid: 65532},
		{name: "tmp", mode: 0o1777, dir: true},
		{name: "usr", mode: root, dir: true},
		{name: "usr/share", mode: root, dir: true},
		{name: "usr/share/doc", mode: root, dir: true},
		{name: "usr/share/doc/ca-certificates", mode: root, dir: true},
		{name: "usr/share/doc/ca-certificates/copyright", mode: 0o644, data: d.copyright},
	}
}
