// Command release does the steps of `make release` that are neither a Go
// build nor an image (hack/image does those):
//
//	release chart -helm bin/helm -out DIR CHART   # helm package + helm repo index, reproducibly
//	release sums DIR                              # DIR/SHA256SUMS over every file of DIR
//
// helm package and helm repo index date what they write with the current
// time; chart rewrites those dates to $SOURCE_DATE_EPOCH (the commit's time),
// so a release built twice from one commit is the same, byte for byte.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: release chart -helm HELM -out DIR CHART | release sums DIR")
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "chart":
		fs := flag.NewFlagSet("chart", flag.ExitOnError)
		helm := fs.String("helm", "bin/helm", "the helm binary (make deps builds it)")
		out := fs.String("out", "bin/release", "the directory to write the packaged chart and index.yaml to")
		epochS := fs.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "every timestamp, in seconds since 1970 (default $SOURCE_DATE_EPOCH)")
		_ = fs.Parse(args)
		if fs.NArg() != 1 {
			err = errors.New("chart: name the chart's directory")
			break
		}
		var secs int64
		if secs, err = strconv.ParseInt(*epochS, 10, 64); err != nil {
			err = fmt.Errorf("-epoch / SOURCE_DATE_EPOCH %q: want seconds since 1970: %w", *epochS, err)
			break
		}
		var name string
		if name, err = chart(*helm, fs.Arg(0), *out, time.Unix(secs, 0).UTC()); err == nil {
			fmt.Printf("release: %s and index.yaml in %s\n", name, *out)
		}
	case "sums":
		if len(args) != 1 {
			err = errors.New("sums: name the directory")
			break
		}
		var n int
		if n, err = sums(args[0]); err == nil {
			fmt.Printf("release: %s/SHA256SUMS over %d files\n", args[0], n)
		}
	default:
		err = fmt.Errorf("unknown command %q: chart or sums", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// chart packages the chart in dir with helm into out, dated epoch, and
// writes out/index.yaml for it with helm repo index, dated epoch too. It
// returns the package's file name.
func chart(helm, dir, out string, epoch time.Time) (string, error) {
	tmp, err := os.MkdirTemp("", "hack-release")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if b, err := exec.Command(helm, "package", dir, "-d", tmp).CombinedOutput(); err != nil {
		return "", fmt.Errorf("helm package %s: %w: %s", dir, err, b)
	}
	pkgs, _ := filepath.Glob(filepath.Join(tmp, "*.tgz"))
	if len(pkgs) != 1 {
		return "", fmt.Errorf("helm package %s wrote %d .tgz files, want 1", dir, len(pkgs))
	}
	name := filepath.Base(pkgs[0])
	data, err := os.ReadFile(pkgs[0])
	if err != nil {
		return "", err
	}
	if data, err = redate(data, epoch); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	// helm repo index indexes every .tgz of a directory: index the package
	// alone, then move both.
	index := filepath.Join(tmp, "repo")
	if err := os.Mkdir(index, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(index, name), data, 0o644); err != nil {
		return "", err
	}
	if b, err := exec.Command(helm, "repo", "index", index).CombinedOutput(); err != nil {
		return "", fmt.Errorf("helm repo index: %w: %s", err, b)
	}
	yaml, err := os.ReadFile(filepath.Join(index, "index.yaml"))
	if err != nil {
		return "", err
	}
	yaml, err = redateIndex(yaml, epoch)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
		return "", err
	}
	return name, os.WriteFile(filepath.Join(out, "index.yaml"), yaml, 0o644)
}

// redate rewrites a gzipped tar with every entry dated epoch and a gzip
// header without time or name; names, modes and contents stay as helm wrote
// them, in its order.
func redate(tgz []byte, epoch time.Time) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		h.ModTime, h.AccessTime, h.ChangeTime = epoch, time.Time{}, time.Time{}
		h.Uname, h.Gname = "", ""
		h.PAXRecords = nil
		h.Format = tar.FormatUnknown // the smallest format that holds it, as helm's
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// indexTime is a timestamp line of helm's index.yaml: the chart's created
// and the file's generated.
var indexTime = regexp.MustCompile(`(?m)^(\s*(?:created|generated): )"[^"]*"$`)

// redateIndex dates index.yaml's timestamps epoch.
func redateIndex(yaml []byte, epoch time.Time) ([]byte, error) {
	if n := len(indexTime.FindAll(yaml, -1)); n < 2 {
		return nil, fmt.Errorf("index.yaml: %d created/generated lines, want one per chart and the file's: has helm's format changed?\n%s", n, yaml)
	}
	return indexTime.ReplaceAll(yaml, []byte(`${1}"`+epoch.Format(time.RFC3339Nano)+`"`)), nil
}

// sums writes dir/SHA256SUMS, in sha256sum's format (`sha256sum -c` reads
// it), over every file of dir in name order, and returns how many. Anything
// but a regular file in dir is refused: every artefact is covered.
func sums(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var names []string
	for _, e := range entries {
		if e.Name() == "SHA256SUMS" {
			continue
		}
		if !e.Type().IsRegular() {
			return 0, fmt.Errorf("%s is not a regular file: SHA256SUMS covers files only", filepath.Join(dir, e.Name()))
		}
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			return 0, err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", n, err)
		}
		fmt.Fprintf(&b, "%x  %s\n", h.Sum(nil), n)
	}
	return len(names), os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(b.String()), 0o644)
}
